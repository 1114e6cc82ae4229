/* test_cache — the kernel cache and JIT path on the CPU (compile-only contexts, NVRTC):
   cold compile and warm hit, corrupt entries (truncated, empty, bit-flipped), unwritable
   and missing directories (the warning names each and why), the ':' list, the context's
   cache_dir, memory-only, injected write failure, NO_JIT, eight processes racing on one
   key, a process killed mid-compile, a process stopped mid-compile (the others give up
   waiting and compile), lock files removed, a template edit changing the key, generator
   errors surfacing as a status, dlopen failures naming the library, and the plans of a
   compile-only context. */
#define DCPATTN_TESTING /* DCPATTN_TEST_FAIL_WRITE */
#define DCPATTN_IMPLEMENTATION
#include "dcpattn.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include "check.h"

static const char *VARIANT = "merge_fp32_fp32";
static const char *SLOW_VARIANT = "gqa_bf16_d64_g1_m16"; /* a compile long enough to be stopped in */
static const char *ARCH = NULL;       /* the context's arch; NULL = default */
static const char *CACHE_DESC = NULL; /* the context's cache_dir; NULL = the environment */
static int LOCK_MS;                   /* the context's lock_timeout_ms; 0 = the environment */
static int warnings;
static char last_source[32], last_warning[2048];

static void on_log(void *user, int level, const char *msg) {
    (void)user;
    if (level == DCPATTN_LOG_WARN) {
        warnings++;
        snprintf(last_warning, sizeof last_warning, "%s", msg);
    }
}
static void on_progress(void *user, const dcpattn_compile_info *i) {
    (void)user;
    snprintf(last_source, sizeof last_source, "%s", i->source);
}

/* compile VARIANT in a fresh compile-only context with the given cache env; returns status */
static dcpattn_status compile_with(const char *cache_env, const char *data_dir) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    dcpattn_status s;
    const char *names[1];
    names[0] = VARIANT;
    if (cache_env)
        setenv("DCPATTN_CACHE_DIR", cache_env, 1);
    else
        unsetenv("DCPATTN_CACHE_DIR");
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.aot_dir = "";
    cd.arch = ARCH;
    cd.data_dir = data_dir;
    cd.log = on_log;
    cd.log_level = DCPATTN_LOG_WARN;
    cd.cache_dir = CACHE_DESC;
    cd.lock_timeout_ms = LOCK_MS;
    last_source[0] = 0;
    s = dcpattn_context_create(&cd, &ctx);
    if (s)
        return s;
    s = dcpattn_precompile(ctx, names, 1, on_progress, NULL);
    dcpattn_context_destroy(ctx);
    return s;
}

/* counts files in dir whose name contains `part`; stores the first match's path */
static int count_files(const char *dir, const char *part, char *first, size_t n) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int c = 0;
    if (!d)
        return 0;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, part)) {
            if (c++ == 0 && first)
                snprintf(first, n, "%s/%s", dir, e->d_name);
        }
    closedir(d);
    return c;
}

static void mutate(const char *path, int how) {
    FILE *f;
    long size;
    if (how == 0) { /* truncate to half */
        struct stat st;
        stat(path, &st);
        if (truncate(path, st.st_size / 2)) perror("truncate");
        return;
    }
    if (how == 1) { /* empty */
        f = fopen(path, "wb");
        if (f) fclose(f);
        return;
    }
    f = fopen(path, "r+b"); /* flip one bit in the middle of the payload */
    if (!f) return;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, size / 2, SEEK_SET);
    {
        int c = fgetc(f);
        fseek(f, size / 2, SEEK_SET);
        fputc(c ^ 0x10, f);
    }
    fclose(f);
}

/* many host threads, one context each, compiling and rendering at once */
typedef struct thread_job {
    const char *dir;
    int ok;
} thread_job;

static void *thread_main(void *arg) {
    thread_job *j = (thread_job *)arg;
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    const char *names[] = {"merge_fp16_fp16", "merge_fp32_fp16"};
    char *src = NULL;
    int k;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.aot_dir = "";
    j->ok = 0;
    if (dcpattn_context_create(&cd, &ctx))
        return NULL;
    for (k = 0; k < 3; k++)
        if (dcpattn_precompile(ctx, names, 2, NULL, NULL) || dcpattn_variant_source(ctx, names[k & 1], &src) ||
            !strstr(src, names[k & 1])) {
            dcpattn_context_destroy(ctx);
            return NULL;
        } else {
            free(src);
            src = NULL;
        }
    j->ok = dcpattn_variant_loaded(ctx, names[0]) && dcpattn_variant_loaded(ctx, names[1]);
    dcpattn_context_destroy(ctx);
    return NULL;
}

/* A child run with NVRTC unloadable: cache hits still work (the key's NVRTC version comes
   from the directory's nvrtc.version), a miss is NO_NVRTC. */
static int no_nvrtc_child(const char *dir) {
    const char *names[] = {VARIANT}, *other[] = {"merge_fp16_fp32"};
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    cd.aot_dir = "";
    setenv("DCPATTN_CACHE_DIR", dir, 1);
    if (dcpattn_context_create(&cd, &ctx))
        return 10;
    if (dcpattn_precompile(ctx, names, 1, on_progress, NULL) || strcmp(last_source, "cache"))
        return 11;
    if (dcpattn_precompile(ctx, other, 1, NULL, NULL) != DCPATTN_STATUS_NO_NVRTC)
        return 12;
    if (!strstr(dcpattn_last_error(), "/nonexistent/libnvrtc.so") || !strstr(dcpattn_last_error(), "DCPATTN_NVRTC_LIBRARY"))
        return 13;
    dcpattn_context_destroy(ctx);
    return 0;
}

/* The pid written in a lock file (0 if none). */
static long lock_pid(const char *path) {
    char buf[32] = "";
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    return atol(buf);
}

/* A child's exit code, or -1 if it had not ended after `seconds` (then it is killed). */
static int wait_child(pid_t pid, double seconds) {
    const double t0 = dcpattn__now();
    int st = 0;
    for (;;) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        if (dcpattn__now() - t0 > seconds) {
            kill(pid, SIGCONT);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(10000);
    }
}

typedef struct stalled_job {
    dcpattn_context *ctx;
    dcpattn_status s;
} stalled_job;
static void *stalled_thread(void *arg) {
    stalled_job *j = (stalled_job *)arg;
    j->s = dcpattn_precompile(j->ctx, &SLOW_VARIANT, 1, NULL, NULL);
    return NULL;
}

/* A process that wants the key a stopped process holds, in its own directory `dir`. Mode 0
   and 1 (timeout from the descriptor or $DCPATTN_LOCK_TIMEOUT_MS): it compiles into memory
   after the timeout, with one warning naming the key and the holder's pid. Mode 2: while one
   thread waits for the lock, another thread of the same context is not held up. Exit code 0
   when all that holds. */
static int stalled_waiter(int mode, const char *dir, const char *key, long holder) {
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", holder);
    VARIANT = SLOW_VARIANT;
    if (mode < 2) {
        if (mode == 1)
            setenv("DCPATTN_LOCK_TIMEOUT_MS", "400", 1);
        else
            LOCK_MS = 400;
        warnings = 0;
        if (compile_with(dir, DCPATTN_DATA_DIR) != DCPATTN_STATUS_SUCCESS)
            return 10;
        if (strcmp(last_source, "nvrtc") || warnings != 1)
            return 11;
        return strstr(last_warning, key) && strstr(last_warning, pid) ? 0 : 12;
    } else {
        dcpattn_context_desc cd;
        stalled_job job;
        pthread_t th;
        char *src = NULL;
        double t0;
        memset(&cd, 0, sizeof cd);
        cd.compile_only = 1;
        cd.aot_dir = "";
        cd.cache_dir = dir;
        cd.lock_timeout_ms = 3000;
        if (dcpattn_context_create(&cd, &job.ctx))
            return 20;
        pthread_create(&th, NULL, stalled_thread, &job);
        usleep(300000); /* the thread is waiting for the lock by now */
        t0 = dcpattn__now();
        if (dcpattn_variant_source(job.ctx, VARIANT, &src) || dcpattn_variant_loaded(job.ctx, "merge_fp32_fp32"))
            return 21;
        free(src);
        if (dcpattn__now() - t0 > 1.5)
            return 22; /* held up by the waiting thread */
        pthread_join(th, NULL);
        dcpattn_context_destroy(job.ctx);
        return job.s == DCPATTN_STATUS_SUCCESS ? 0 : 23;
    }
}

/* A child with the CUDA driver library unloadable: the message names what was tried. */
static int no_driver_child(const char *path) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    const char *msg;
    dcpattn_status s;
    memset(&cd, 0, sizeof cd);
    s = dcpattn_context_create(&cd, &ctx);
    msg = dcpattn_last_error();
    if (s != DCPATTN_STATUS_NO_DRIVER)
        return s == DCPATTN_STATUS_NO_CONTEXT && !*path ? 0 : 30; /* a machine with a driver */
    if (*path)
        return strstr(msg, path) && strstr(msg, "DCPATTN_CUDA_LIBRARY") && !strstr(msg, "libcuda.so.1") ? 0 : 31;
    return strstr(msg, "dlopen(libcuda.so.1)") && strstr(msg, "libcuda.so.1: ") && strstr(msg, "libcuda.so ") ? 0 : 32;
}

int main(int argc, char **argv) {
    char tmpl[] = "/tmp/dcpattn-cache-XXXXXX", dir[600], dir2[600], entry[1200], env[1400];
    const char *root = DCPATTN_DATA_DIR;
    int how, i;
    if (argc == 3 && !strcmp(argv[1], "--no-nvrtc-child"))
        return no_nvrtc_child(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--no-driver-child"))
        return no_driver_child(argv[2]);
    if (!mkdtemp(tmpl)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(dir, sizeof dir, "%s/a", tmpl);
    snprintf(dir2, sizeof dir2, "%s/b/nested", tmpl);

    /* cold, then warm */
    CHECK(compile_with(dir, root) == DCPATTN_STATUS_SUCCESS, "cold compile: %s", dcpattn_last_error());
    CHECK(!strcmp(last_source, "nvrtc"), "cold compile came from %s", last_source);
    CHECK(count_files(dir, ".cubin", entry, sizeof entry) == 1, "one entry after a cold compile");
    CHECK(compile_with(dir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "cache"),
          "warm load came from %s", last_source);
    CHECK(count_files(dir, ".lock", NULL, 0) == 0, "a compile left its lock file behind");

    /* truncated, empty and bit-flipped entries: one warning, recompiled, valid again */
    for (how = 0; how < 3; how++) {
        static const char *what[] = {"truncated", "empty", "bit-flipped"};
        mutate(entry, how);
        warnings = 0;
        CHECK(compile_with(dir, root) == DCPATTN_STATUS_SUCCESS, "%s entry: %s", what[how], dcpattn_last_error());
        CHECK(!strcmp(last_source, "nvrtc"), "%s entry was loaded (source %s)", what[how], last_source);
        CHECK(warnings == 1, "%s entry gave %d warnings", what[how], warnings);
        CHECK(compile_with(dir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "cache"),
              "%s entry not republished (source %s)", what[how], last_source);
    }

    /* unwritable first dir falls through the ':' list to a missing one that is created */
    snprintf(env, sizeof env, "/proc/dcpattn-no-such-dir:%s", dir2);
    warnings = 0;
    CHECK(compile_with(env, root) == DCPATTN_STATUS_SUCCESS, "list fallback: %s", dcpattn_last_error());
    CHECK(count_files(dir2, ".cubin", NULL, 0) == 1, "entry published in the second directory");
    CHECK(warnings == 0, "list fallback warned %d times", warnings);

    /* nothing writable: memory only, one warning naming the directory and why, success */
    warnings = 0;
    CHECK(compile_with("/proc/dcpattn-no-such-dir", root) == DCPATTN_STATUS_SUCCESS, "unwritable dir: %s",
          dcpattn_last_error());
    CHECK(warnings == 1, "unwritable dir warned %d times", warnings);
    {
        int e = mkdir("/proc/dcpattn-no-such-dir", 0755) == 0 ? 0 : errno;
        CHECK(e && strstr(last_warning, "/proc/dcpattn-no-such-dir") && strstr(last_warning, strerror(e)),
              "the memory-only warning names neither the directory nor why: %s", last_warning);
    }
    if (geteuid() != 0) { /* root writes through mode bits; /proc covers that case above */
        char ro[700];
        snprintf(ro, sizeof ro, "%s/ro", tmpl);
        mkdir(ro, 0555);
        warnings = 0;
        CHECK(compile_with(ro, root) == DCPATTN_STATUS_SUCCESS && warnings == 1, "read-only dir: %s",
              dcpattn_last_error());
        CHECK(strstr(last_warning, ro) && strstr(last_warning, strerror(EACCES)), "read-only dir warning: %s",
              last_warning);
        CHECK(count_files(ro, "", NULL, 0) == 2, "read-only dir was written"); /* . and .. */
    }
    warnings = 0;
    CHECK(compile_with("", root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "nvrtc"),
          "empty DCPATTN_CACHE_DIR: %s", dcpattn_last_error());
    CHECK(warnings == 1, "memory-only warned %d times", warnings);

    /* disk full while publishing (injected): runs from memory, leaves nothing behind */
    {
        char full[700];
        snprintf(full, sizeof full, "%s/full", tmpl);
        setenv("DCPATTN_TEST_FAIL_WRITE", "1", 1);
        warnings = 0;
        CHECK(compile_with(full, root) == DCPATTN_STATUS_SUCCESS, "write failure: %s", dcpattn_last_error());
        CHECK(warnings == 1, "write failure warned %d times", warnings);
        CHECK(count_files(full, ".cubin", NULL, 0) == 0 && count_files(full, ".tmp", NULL, 0) == 0,
              "a failed publish left files behind");
        unsetenv("DCPATTN_TEST_FAIL_WRITE");
    }

    /* NO_JIT and a miss: a clear status naming the variant */
    {
        char empty[700];
        snprintf(empty, sizeof empty, "%s/empty", tmpl);
        setenv("DCPATTN_NO_JIT", "1", 1);
        CHECK(compile_with(empty, root) == DCPATTN_STATUS_NOT_COMPILED && strstr(dcpattn_last_error(), VARIANT),
              "NO_JIT miss: %s", dcpattn_last_error());
        CHECK(compile_with(dir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "cache"),
              "NO_JIT hit: %s", dcpattn_last_error());
        unsetenv("DCPATTN_NO_JIT");
    }

    /* eight processes cold-compile one key at once: one entry, no temp file, all succeed */
    {
        char race[700];
        int ok = 1;
        snprintf(race, sizeof race, "%s/race", tmpl);
        for (i = 0; i < 8; i++)
            if (fork() == 0)
                _exit(compile_with(race, root) == DCPATTN_STATUS_SUCCESS ? 0 : 1);
        for (i = 0; i < 8; i++) {
            int st = 0;
            wait(&st);
            ok &= WIFEXITED(st) && WEXITSTATUS(st) == 0;
        }
        CHECK(ok, "a racing process failed");
        CHECK(count_files(race, ".cubin", NULL, 0) == 1 && count_files(race, ".tmp", NULL, 0) == 0 &&
                  count_files(race, ".lock", NULL, 0) == 0,
              "racing processes left %d entries, %d temp files and %d lock files", count_files(race, ".cubin", NULL, 0),
              count_files(race, ".tmp", NULL, 0), count_files(race, ".lock", NULL, 0));
    }

    /* a process killed mid-compile leaves no lock that blocks and no entry that loads */
    {
        char killed[700];
        pid_t pid;
        snprintf(killed, sizeof killed, "%s/killed", tmpl);
        pid = fork();
        if (pid == 0)
            _exit(compile_with(killed, root) ? 1 : 0);
        usleep(30000);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        CHECK(compile_with(killed, root) == DCPATTN_STATUS_SUCCESS, "after a killed compile: %s",
              dcpattn_last_error());
        CHECK(count_files(killed, ".cubin", NULL, 0) == 1, "no entry after the killed compile");
        CHECK(count_files(killed, ".lock", NULL, 0) == 0, "the killed compile's lock file was left");
    }

    /* the context's cache_dir takes the place of $DCPATTN_CACHE_DIR; "" is memory only */
    {
        char mine[700], env_dir[700];
        snprintf(mine, sizeof mine, "%s/desc", tmpl);
        snprintf(env_dir, sizeof env_dir, "%s/env", tmpl);
        CACHE_DESC = mine;
        CHECK(compile_with(env_dir, root) == DCPATTN_STATUS_SUCCESS, "cache_dir: %s", dcpattn_last_error());
        CHECK(count_files(mine, ".cubin", NULL, 0) == 1 && count_files(env_dir, ".cubin", NULL, 0) == 0,
              "cache_dir: %d entries there, %d in $DCPATTN_CACHE_DIR", count_files(mine, ".cubin", NULL, 0),
              count_files(env_dir, ".cubin", NULL, 0));
        CHECK(compile_with(env_dir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "cache"),
              "cache_dir warm: %s", last_source);
        CACHE_DESC = "";
        warnings = 0;
        CHECK(compile_with(env_dir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "nvrtc") && warnings == 1 &&
                  count_files(env_dir, ".cubin", NULL, 0) == 0,
              "cache_dir \"\": source %s, %d warnings", last_source, warnings);
        CACHE_DESC = NULL;
    }

    /* a lock file whose holder died (nobody holds its flock) is removed by the next publish
       into its directory */
    {
        char stale[700], path[900];
        FILE *f;
        snprintf(stale, sizeof stale, "%s/stale", tmpl);
        mkdir(stale, 0755);
        snprintf(path, sizeof path, "%s/merge_fp16_fp16.0123456789abcdef0123456789abcdef.lock", stale);
        if ((f = fopen(path, "w")) != NULL) {
            fputs("999999999\n", f);
            fclose(f);
        }
        CHECK(compile_with(stale, root) == DCPATTN_STATUS_SUCCESS, "stale lock: %s", dcpattn_last_error());
        CHECK(count_files(stale, ".lock", NULL, 0) == 0, "a dead process's lock file was not swept");
    }

    /* a process stopped (SIGSTOP) while it compiles holds that key's lock: the others wait at
       most lock_timeout_ms, then compile into memory with one warning naming the key and the
       pid; once resumed, the stopped process publishes and removes its lock file */
    {
        char sdir[700], lockp[1200], key[40] = "";
        pid_t holder, waiters[3];
        int found = 0, rc;
        double t0 = dcpattn__now();
        snprintf(sdir, sizeof sdir, "%s/stopped", tmpl);
        holder = fork();
        if (holder == 0) {
            VARIANT = SLOW_VARIANT;
            _exit(compile_with(sdir, root) ? 1 : 0);
        }
        while (!found && dcpattn__now() - t0 < 60) {
            if (count_files(sdir, ".lock", lockp, sizeof lockp) == 1 && lock_pid(lockp) == (long)holder)
                found = kill(holder, SIGSTOP) == 0;
            else
                usleep(1000);
        }
        CHECK(found, "the compiling process wrote no pid into a lock file");
        if (found) {
            const char *dot = strstr(lockp, ".lock");
            if (dot && dot - lockp > 32)
                snprintf(key, sizeof key, "%.32s", dot - 32);
            CHECK(count_files(sdir, ".cubin", NULL, 0) == 0, "stopped only after it published");
            for (i = 0; i < 3; i++)
                if ((waiters[i] = fork()) == 0)
                    _exit(stalled_waiter(i, sdir, key, (long)holder));
            for (i = 0; i < 3; i++) {
                rc = wait_child(waiters[i], 60);
                CHECK(rc == 0, "waiter %d on a stopped compile: %s (exit %d)", i,
                      rc < 0 ? "still waiting after 60 s" : "failed", rc);
            }
            kill(holder, SIGCONT);
        }
        rc = wait_child(holder, 120);
        CHECK(rc == 0, "the stopped compile, resumed: exit %d", rc);
        CHECK(count_files(sdir, ".cubin", NULL, 0) == 1 && count_files(sdir, ".lock", NULL, 0) == 0,
              "after the stopped compile: %d entries, %d lock files", count_files(sdir, ".cubin", NULL, 0),
              count_files(sdir, ".lock", NULL, 0));
    }

    /* a template edited without a version change gets a new key */
    {
        char copy[700], cmd[2400], path[800];
        FILE *f;
        snprintf(copy, sizeof copy, "%s/data", tmpl);
        snprintf(cmd, sizeof cmd, "mkdir -p '%s' && cp -r '%s/gen' '%s/templates' '%s/'", copy, root, root, copy);
        CHECK(system(cmd) == 0, "copying the data dir");
        snprintf(path, sizeof path, "%s/templates/merge.cuh", copy);
        f = fopen(path, "a");
        if (f) {
            fputs("// an edit\n", f);
            fclose(f);
        }
        CHECK(compile_with(dir, copy) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "nvrtc"),
              "edited template was served from %s", last_source);
        CHECK(count_files(dir, ".cubin", NULL, 0) == 2, "edited template shares a key");
    }

    /* eight threads, one context each, on one cache directory */
    {
        char tdir[700];
        pthread_t th[8];
        thread_job jobs[8];
        int all = 1;
        snprintf(tdir, sizeof tdir, "%s/threads", tmpl);
        setenv("DCPATTN_CACHE_DIR", tdir, 1);
        for (i = 0; i < 8; i++) {
            jobs[i].dir = tdir;
            pthread_create(&th[i], NULL, thread_main, &jobs[i]);
        }
        for (i = 0; i < 8; i++) {
            pthread_join(th[i], NULL);
            all &= jobs[i].ok;
        }
        CHECK(all, "a thread failed: %s", dcpattn_last_error());
        CHECK(count_files(tdir, ".cubin", NULL, 0) == 2 && count_files(tdir, ".tmp", NULL, 0) == 0,
              "threads left %d entries", count_files(tdir, ".cubin", NULL, 0));
    }

    /* the CUDA driver library cannot be opened: the message names the path that was tried,
       or the fallback names */
    {
        char cmd[1600];
        snprintf(cmd, sizeof cmd, "DCPATTN_CUDA_LIBRARY=/nonexistent/libcuda-test.so '%s' --no-driver-child "
                 "/nonexistent/libcuda-test.so", argv[0]);
        CHECK(system(cmd) == 0, "DCPATTN_CUDA_LIBRARY unloadable: %s failed", cmd);
        snprintf(cmd, sizeof cmd, "env -u DCPATTN_CUDA_LIBRARY '%s' --no-driver-child ''", argv[0]);
        CHECK(system(cmd) == 0, "no CUDA driver: %s failed", cmd);
    }

    /* plans of a compile-only context: never sized for a GPU nobody named */
    {
        dcpattn_context *ctx;
        dcpattn_context_desc cd;
        dcpattn_attn_desc ad;
        dcpattn_attn_plan *plan = NULL;
        setenv("DCPATTN_CACHE_DIR", dir, 1);
        memset(&ad, 0, sizeof ad);
        ad.num_q_heads = 32;
        ad.num_kv_heads = 8;
        ad.head_dim = 128;
        ad.page_size = 16;
        ad.max_batch = 4;
        ad.max_q_len = 1;
        ad.max_seqlen_k = 4096;
        memset(&cd, 0, sizeof cd);
        cd.compile_only = 1;
        cd.num_sms = -4;
        CHECK(dcpattn_context_create(&cd, &ctx) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "num_sms = -4"),
              "context num_sms -4: %s", dcpattn_last_error());
        cd.num_sms = 0;
        CHECK(dcpattn_context_create(&cd, &ctx) == DCPATTN_STATUS_SUCCESS, "context: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_plan_create(ctx, &ad, &plan) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "arch") && strstr(dcpattn_last_error(), "num_sms = 0") && !plan,
              "a compile-only plan with neither arch nor num_sms: %s", dcpattn_last_error());
        ad.num_sms = 132;
        CHECK(dcpattn_attn_plan_create(ctx, &ad, &plan) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "arch is not given"),
              "a compile-only plan without arch: %s", dcpattn_last_error());
        dcpattn_context_destroy(ctx);
        cd.arch = "sm_90a";
        CHECK(dcpattn_context_create(&cd, &ctx) == DCPATTN_STATUS_SUCCESS, "context: %s", dcpattn_last_error());
        ad.num_sms = 0;
        CHECK(dcpattn_attn_plan_create(ctx, &ad, &plan) == DCPATTN_STATUS_INVALID_ARGUMENT &&
                  strstr(dcpattn_last_error(), "num_sms = 0"),
              "a compile-only plan without num_sms: %s", dcpattn_last_error());
        ad.num_sms = 132;
        CHECK(dcpattn_attn_plan_create(ctx, &ad, &plan) == DCPATTN_STATUS_SUCCESS && plan, "plan: %s",
              dcpattn_last_error());
        dcpattn_attn_plan_destroy(plan);
        dcpattn_context_destroy(ctx);
        cd.num_sms = 132; /* the context's count serves every plan */
        ad.num_sms = 0;
        plan = NULL;
        CHECK(dcpattn_context_create(&cd, &ctx) == DCPATTN_STATUS_SUCCESS, "context: %s", dcpattn_last_error());
        CHECK(dcpattn_attn_plan_create(ctx, &ad, &plan) == DCPATTN_STATUS_SUCCESS && plan, "plan: %s",
              dcpattn_last_error());
        dcpattn_attn_plan_destroy(plan);
        dcpattn_context_destroy(ctx);
    }

    /* AOT only: no NVRTC on the machine, the cache still serves what it holds */
    {
        char cmd[1600];
        snprintf(cmd, sizeof cmd, "DCPATTN_NVRTC_LIBRARY=/nonexistent/libnvrtc.so '%s' --no-nvrtc-child '%s'", argv[0],
                 dir);
        CHECK(system(cmd) == 0, "a machine without NVRTC: %s failed", cmd);
    }

    /* an entry built for another arch is never looked up: the key differs */
    {
        char adir[700];
        snprintf(adir, sizeof adir, "%s/arch", tmpl);
        ARCH = "sm_90a";
        CHECK(compile_with(adir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "nvrtc"), "sm_90a cold");
        ARCH = "sm_80";
        CHECK(compile_with(adir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "nvrtc"),
              "an sm_80 context was served the sm_90a entry (source %s)", last_source);
        CHECK(count_files(adir, ".cubin", NULL, 0) == 2, "one entry per arch");
        ARCH = "sm_90a";
        CHECK(compile_with(adir, root) == DCPATTN_STATUS_SUCCESS && !strcmp(last_source, "cache"), "sm_90a warm");
        ARCH = "sm_99z";
        CHECK(compile_with(adir, root) == DCPATTN_STATUS_UNSUPPORTED && strstr(dcpattn_last_error(), "sm_99z") &&
                  strstr(dcpattn_last_error(), "NVRTC"),
              "an arch NVRTC cannot build: %s", dcpattn_last_error());
        ARCH = NULL;
    }

    /* a spec the generator cannot build: its file:line: error: text as a status */
    {
        dcpattn_context *ctx;
        dcpattn_context_desc cd;
        const char *bad[] = {"gqa_bf16_d100_g8_m16"};
        memset(&cd, 0, sizeof cd);
        cd.compile_only = 1;
        setenv("DCPATTN_CACHE_DIR", dir, 1);
        CHECK(dcpattn_context_create(&cd, &ctx) == DCPATTN_STATUS_SUCCESS, "context: %s", dcpattn_last_error());
        CHECK(dcpattn_precompile(ctx, bad, 1, NULL, NULL) == DCPATTN_STATUS_GENERATOR &&
                  strstr(dcpattn_last_error(), ": error: ") && strstr(dcpattn_last_error(), "100"),
              "bad spec: %s", dcpattn_last_error());
        CHECK(dcpattn_variant_loaded(ctx, VARIANT) == 0, "variant_loaded before any load");
        dcpattn_context_destroy(ctx);
    }
    {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "chmod -R u+w '%s' 2>/dev/null; rm -rf '%s'", tmpl, tmpl);
        if (system(cmd)) fprintf(stderr, "cleanup of %s failed\n", tmpl);
    }
    return check_summary();
}
