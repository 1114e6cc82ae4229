# gpu_env.sh — source it on a GPU host that has no package registry: Lua 5.4 from the
# packages in .deb/ (untracked, copied there with the tree), unpacked into /tmp, never into /.
if ! command -v lua5.4 >/dev/null 2>&1; then
    mkdir -p /tmp/dcpattn-lua
    for f in .deb/*.deb; do dpkg -x "$f" /tmp/dcpattn-lua; done
    L=/tmp/dcpattn-lua/usr
    export PATH="$L/bin:$PATH"
    export CPATH="$L/include/lua5.4:$L/include/x86_64-linux-gnu:${CPATH:-}"
    export LIBRARY_PATH="$L/lib/x86_64-linux-gnu:${LIBRARY_PATH:-}"
    export LD_LIBRARY_PATH="$L/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi
