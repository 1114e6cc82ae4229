#!/bin/sh
# sass_loops.sh [--timeline] [--rev REV] NAME... — what a kernel change does to the tile loops,
# without a GPU: renders and compiles the named variants with NVRTC (build/aot_build, sm_90a, as
# the library does; --timeline: as timeline builds, by build/aot_build_timeline, see
# templates/timeline.cuh) from the working tree, and with --rev from REV's gen/, templates/ and
# include/ as well,
# disassembles them (cuobjdump -sass) and prints, for every kernel function, its registers and
# stack and, for its tile loop (of the innermost loops with tensor-core instructions, the one
# with the most, the shortest of those), its static instruction count, the MMAs in it, and the
# register moves, shuffles, cp.async copies and local-memory (spill) accesses among them; where
# a producer warpgroup copies in a loop of its own, that gather loop's instructions, copies,
# e4m3 conversions and spill accesses. A GQA kernel issues about as many instructions per
# tile as the loop holds (the mask and rescale branches aside), but a shorter loop is not
# always a faster tile (the FP8 m16 tile lost a tenth of its instructions and no time,
# docs/performance.md); the benchmark decides. Needs build/aot_build (make aot) and cuobjdump
# ($CUOBJDUMP, $CUDA/bin or PATH).
set -e
. "$(dirname "$0")/sass_lib.sh"
REV=
if [ "${1:-}" = "--timeline" ]; then AOT_BUILD=build/aot_build_timeline; shift; fi
if [ "${1:-}" = "--rev" ]; then REV=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: tests/sass_loops.sh [--timeline] [--rev REV] NAME..."; exit 2; }
sass_setup sass_loops
SIDES=tree
if [ -n "$REV" ]; then
    SIDES="rev tree"
    sass_compile sass_loops rev "$REV" "$@"
fi
sass_compile sass_loops tree "" "$@"
for side in $SIDES; do
    for f in "$T/elf-$side"/*.elf; do
        n=$(basename "$f" .elf)
        "$CUO" -res-usage "$f" > "$T/$side-$n.res" 2>/dev/null
        "$CUO" -sass "$f" > "$T/$side-$n.sass" 2>/dev/null
    done
done
python3 - "$T" "$SIDES" "$@" <<'EOF'
import re, sys
from collections import Counter

tmp, sides, names = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
INSN = re.compile(r'^\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;')

def functions(path):
    """{function: [(address, instruction text)]} of one disassembly."""
    out, cur = {}, None
    for line in open(path):
        m = re.search(r'Function : (\S+)', line)
        if m:
            cur = out.setdefault(m.group(1), [])
            continue
        m = INSN.match(line)
        if m and cur is not None:
            cur.append((int(m.group(1), 16), m.group(2)))
    return out

def opcode(text):
    return re.sub(r'^@!?U?P\w+\s+', '', text).split()[0]

def inner_loop(code, weight, predicated=False):
    """Of the backward-branch loops with weight(body) > 0 that hold no other such loop, the one
    of the largest weight, the shortest of those: (start, end, instructions), or None.
    predicated: only loops closed by a predicated branch (not the jumps back from the
    divergence handlers that ptxas puts at a function's end)."""
    index = {a: i for i, (a, _) in enumerate(code)}
    found = []
    for i, (a, text) in enumerate(code):
        m = re.search(r'\bBRA (0x[0-9a-f]+)', text)
        if predicated and not text.startswith('@'):
            continue
        if m and int(m.group(1), 16) <= a and int(m.group(1), 16) in index:
            body = code[index[int(m.group(1), 16)]:i + 1]
            w = weight(body)
            if w:
                found.append((body[0][0], a, body, w))
    inner = [l for l in found if not any(o is not l and l[0] <= o[0] and o[1] <= l[1] for o in found)]
    if not inner:
        return None
    start, end, body, _ = min(inner, key=lambda l: (-l[3], len(l[2])))
    return start, end, body

def resources(path):
    out = {}
    text = open(path).read()
    for fn, regs, stack in re.findall(r'Function (\S+):\s+REG:(\d+) STACK:(\d+)', text):
        out[fn] = (int(regs), int(stack))
    return out

def ops_in(body, *prefixes):
    return sum(any(opcode(t).startswith(p) for p in prefixes) for _, t in body)

def tile_loop(code):
    """The loop with the MMAs (the tile loop)."""
    return inner_loop(code, lambda body: ops_in(body, 'HMMA', 'HGMMA'))

def gather_loop(code):
    """A loop of its own with the copies and no MMA (a producer warpgroup's)."""
    return inner_loop(code, lambda body: 0 if ops_in(body, 'HMMA', 'HGMMA') else ops_in(body, 'LDGSTS'), True)

for name in names:
    for side in sides:
        try:
            fns, res = functions(f'{tmp}/{side}-{name}.sass'), resources(f'{tmp}/{side}-{name}.res')
        except OSError:
            print(f'{name}: not compiled on the {side} side')
            continue
        for fn, code in sorted(fns.items()):
            regs, stack = res.get(fn, (0, 0))
            line = f'{fn} ({side}): {regs} registers, stack {stack}'
            loop = tile_loop(code)
            if loop:
                start, end, body = loop
                ops = Counter(opcode(t) for _, t in body)
                def count(pred):
                    return sum(v for k, v in ops.items() if pred(k))
                line += (f'; tile loop {start:#x}-{end:#x}: {len(body)} instructions, '
                         f'{count(lambda k: "MMA" in k)} MMA, {count(lambda k: k == "MOV" or k.startswith("IMAD.MOV"))} moves, '
                         f'{count(lambda k: k.startswith("SHFL"))} shuffles, {count(lambda k: k.startswith("LDGSTS"))} cp.async, '
                         f'{count(lambda k: k.startswith(("LDL", "STL")))} spill accesses')
                g = gather_loop(code) if not ops_in(body, 'LDGSTS') else None
                if g:
                    gs, ge, gbody = g
                    line += (f'; gather loop {gs:#x}-{ge:#x}: {len(gbody)} instructions, {ops_in(gbody, "LDGSTS")} cp.async, '
                             f'{ops_in(gbody, "F2FP")} conversions, {ops_in(gbody, "LDL", "STL")} spill accesses')
            print(line)
EOF
