#!/bin/sh
# test_install.sh BUILD — make install into a temporary prefix, then build an outside
# program with `pkg-config --cflags --libs dcpattn` alone and let it find its generator,
# templates and AOT cache there (compile-only: no GPU needed).
set -u
build=${1:-build}
prefix=$(mktemp -d /tmp/dcpattn-install-XXXXXX)
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
if make -s install PREFIX="$prefix" >"$prefix.log" 2>&1; then ok; else bad "make install"; tail -n 20 "$prefix.log"; fi
for f in include/dcpattn.h share/dcpattn/gen/dcpattn/init.lua share/dcpattn/templates/merge.cuh \
         share/dcpattn/gen/dcpattn-gen lib/pkgconfig/dcpattn.pc bin/dcpattn-gen; do
    [ -e "$prefix/$f" ] && ok || bad "missing $f"
done
"$prefix/bin/dcpattn-gen" --list | grep -q '^merge_bf16_bf16$' && ok || bad "installed CLI --list"
cat > "$prefix/outside.c" <<'C'
#define DCPATTN_IMPLEMENTATION
#include <dcpattn.h>
int main(void) {
    dcpattn_context *ctx;
    dcpattn_context_desc cd = {0};
    const char *names[] = {"merge_fp32_fp16"};
    char *src = NULL;
    cd.compile_only = 1;
    if (dcpattn_context_create(&cd, &ctx) || dcpattn_variant_source(ctx, names[0], &src) ||
        dcpattn_precompile(ctx, names, 1, NULL, NULL)) {
        fprintf(stderr, "outside: %s\n", dcpattn_last_error());
        return 1;
    }
    free(src);
    dcpattn_context_destroy(ctx);
    puts("outside: ok");
    return 0;
}
C
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
# eval: as make does, the shell parses the quoting in pkg-config's output
if eval cc -std=c99 -Wall -Wextra -Werror "$prefix/outside.c" -o "$prefix/outside" "$(pkg-config --cflags --libs dcpattn)" 2>"$prefix/cc.log"; then
    ok
    DCPATTN_CACHE_DIR= "$prefix/outside" && ok || bad "outside program"
else
    bad "outside program does not compile with pkg-config's flags"; cat "$prefix/cc.log"
fi
rm -rf "$prefix" "$prefix.log"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
