/* check.h — the tiny test harness every dcpattn test program uses.
   CHECK(cond, fmt, ...) counts a pass or prints the failure with file:line;
   check_summary() prints "N passed, N failed" and returns the exit code;
   check_line_buffered() makes stdout line-buffered (the GPU tests call it first: a run cut off by
   a time limit keeps every line it printed). */
#ifndef DCPATTN_TEST_CHECK_H
#define DCPATTN_TEST_CHECK_H

#include <stdio.h>

static int check_passed_, check_failed_;

#define CHECK(cond, ...)                                                  \
    do {                                                                  \
        if (cond) {                                                       \
            check_passed_++;                                              \
        } else {                                                          \
            check_failed_++;                                              \
            fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);         \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
        }                                                                 \
    } while (0)

static inline void check_line_buffered(void) { setvbuf(stdout, NULL, _IOLBF, 0); }

static int check_summary(void) {
    printf("%d passed, %d failed\n", check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif
