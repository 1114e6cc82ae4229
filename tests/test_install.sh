#!/bin/sh
# test_install.sh BUILD — make install into a temporary prefix, then build outside programs
# with `cc ... $(pkg-config --cflags --libs dcpattn)` exactly as a user types it (the shell
# splits pkg-config's output into words and parses nothing else in it): the README's host
# program as C99 and as C++ with -Wall -Wextra -Werror, and a compile-only program that must
# find the installed generator, templates and AOT cache (no GPU needed) and that, being a
# production build, ignores the test suite's fault injection. Then make uninstall must
# remove exactly what install put.
set -u
build=${1:-build}
cuda=${CUDA:-/usr/local/cuda}
prefix=$(mktemp -d /tmp/dcpattn-install-XXXXXX)
work=$(mktemp -d /tmp/dcpattn-install-work-XXXXXX)
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# files of others in the prefix: uninstall leaves them
mkdir -p "$prefix/include" "$prefix/share/other"
echo '/* not dcpattn */' > "$prefix/include/other.h"
echo other > "$prefix/share/other/data"

if make -s install PREFIX="$prefix" >"$work/install.log" 2>&1; then ok; else bad "make install"; tail -n 20 "$work/install.log"; fi
for f in include/dcpattn.h include/dcpattn_config.h share/dcpattn/gen/dcpattn/init.lua share/dcpattn/templates/merge.cuh \
         share/dcpattn/gen/dcpattn-gen lib/pkgconfig/dcpattn.pc bin/dcpattn-gen; do
    [ -e "$prefix/$f" ] && ok || bad "missing $f"
done
"$prefix/bin/dcpattn-gen" --list | grep -q '^merge_bf16_bf16$' && ok || bad "installed CLI --list"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
flags=$(pkg-config --cflags --libs dcpattn)
case "$flags" in
*'"'* | *\\*) bad "pkg-config's flags need a shell to parse them again: $flags" ;;
*) ok ;;
esac

# the README's program, as the README shows it
sed -n '/^## A minimal host program/,/^```$/p' README.md | sed '1,/^```c$/d; /^```$/d' >"$work/app.c"
[ -s "$work/app.c" ] && grep -q 'int main' "$work/app.c" && ok || bad "no program under README's 'A minimal host program'"
cudaflags="-I$cuda/include -L$cuda/lib64 -Wl,-rpath,$cuda/lib64 -lcudart"
# shellcheck disable=SC2086 # word splitting of the flags is the point
if cc -std=c99 -Wall -Wextra -Werror "$work/app.c" -o "$work/app_c" $(pkg-config --cflags --libs dcpattn) $cudaflags \
    2>"$work/cc.log"; then
    ok
    out=$("$work/app_c" 2>&1)
    case "$out" in
    merged | "no GPU") ok ;;
    *) bad "README program: $out" ;;
    esac
else
    bad "the README's program does not build as C99 with pkg-config's flags"; cat "$work/cc.log"
fi
# shellcheck disable=SC2086
if c++ -x c++ -std=c++11 -Wall -Wextra -Werror "$work/app.c" -o "$work/app_cpp" $(pkg-config --cflags --libs dcpattn) \
    $cudaflags 2>"$work/cxx.log"; then
    ok
else
    bad "the README's program does not build as C++ with pkg-config's flags"; cat "$work/cxx.log"
fi

# a compile-only program: one variant from the installed AOT cache, one compiled and cached
cat >"$work/outside.c" <<'C'
#define DCPATTN_IMPLEMENTATION
#include <dcpattn.h>
static char sources[2][16];
static int seen;
static void on_compile(void *user, const dcpattn_compile_info *info) {
    (void)user;
    if (seen < 2)
        snprintf(sources[seen++], sizeof sources[0], "%s", info->source);
}
int main(void) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd;
    const char *names[] = {"merge_fp32_fp16", "merge_fp16_fp32"};
    char *src = NULL;
    memset(&cd, 0, sizeof cd);
    cd.compile_only = 1;
    if (dcpattn_context_create(&cd, &ctx) || dcpattn_variant_source(ctx, names[0], &src) ||
        dcpattn_precompile(ctx, names, 2, on_compile, NULL)) {
        fprintf(stderr, "outside: %s\n", dcpattn_last_error());
        return 1;
    }
    free(src);
    dcpattn_context_destroy(ctx);
    printf("outside: %s %s\n", sources[0], sources[1]);
    return 0;
}
C
# shellcheck disable=SC2086
if cc -std=c99 -Wall -Wextra -Werror "$work/outside.c" -o "$work/outside" $(pkg-config --cflags --libs dcpattn) \
    2>"$work/cc.log"; then
    ok
    out=$(DCPATTN_CACHE_DIR="$work/cache" DCPATTN_TEST_FAIL_WRITE=1 "$work/outside" 2>&1)
    [ "$out" = "outside: aot nvrtc" ] && ok || bad "outside program (want the AOT hit, then a compile): $out"
    n=$(find "$work/cache" -name '*.cubin' 2>/dev/null | wc -l)
    [ "$n" -eq 1 ] && ok || bad "a production build honoured DCPATTN_TEST_FAIL_WRITE: $n cache entries, want 1"
else
    bad "outside program does not compile with pkg-config's flags"; cat "$work/cc.log"
fi

# uninstall: nothing of dcpattn left, everything else kept
if make -s uninstall PREFIX="$prefix" >"$work/uninstall.log" 2>&1; then ok; else bad "make uninstall"; cat "$work/uninstall.log"; fi
left=$(cd "$prefix" && find . ! -type d | sort | tr '\n' ' ')
[ "$left" = "./include/other.h ./share/other/data " ] && ok || bad "after uninstall the prefix holds: $left"
[ ! -e "$prefix/share/dcpattn" ] && ok || bad "share/dcpattn is still there"
rm -rf "$prefix" "$work"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
