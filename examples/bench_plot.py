#!/usr/bin/env python3
"""bench_plot.py BENCH_JSON OUTDIR - PNG plots of one benchmark run (the JSON that bench writes),
next to each other in OUTDIR, named after the JSON file (bench.json -> bench-G1.png ...):

  -G1, -G2   GB/s (left axis) and % of the run's read ceiling (right axis) against q_len, one line
             per kernel: dcpattn (and its per-sequence-split twin G1P, G2P where measured) and every
             peer with a time; a hollow marker: the peer ran a plain causal mask, not the DCP mask;
  -G1F, -G2F the same with an e4m3 cache (GB/s of the FP8 bytes);
  -M1        TFLOP/s per kernel, with the run's bf16 GEMM ceiling and FlashMLA's published 660,
             and M1F (an e4m3 cache) beside it;
  -M2        GB/s per kernel, with the run's read ceiling, and M2F beside it (GB/s of the FP8 bytes);
  -skewed    GB/s per kernel for the skewed batches of the run (S1..S4 and their even twins),
             grouped by case;
  -timeline  (a run of build/bench_timeline) SM cycles per KV tile of each stage, one stacked bar
             per case and warpgroup.
A peer's GB/s and TFLOP/s use dcpattn's bytes and FLOPs of the same row, so the bars stand in
the ratio of the table's peer columns. Without matplotlib it says so and writes nothing (exit 0)."""
import json
import os
import sys

STANDARD = ("G1", "G2", "M1", "M2")
PEER_ORDER = ("flashinfer", "flashmla", "flex", "sdpa")


def base_case(cid):
    """G1P, S3P -> G1, S3: the same data under another plan"""
    if len(cid) > 2 and cid[-1] in "PB" and cid[-2].isdigit():
        return cid[:-1]
    return cid


def load(path):
    with open(path) as f:
        d = json.load(f)
    rows = [r for r in d.get("cases", []) if r.get("q_len", 0) > 0]
    peers = {}
    for p in d.get("peers", []):
        if p.get("status") == "ok" and p.get("peer") not in (None, "*") and p.get("us"):
            peers[(p["case"], p["peer"])] = p
    ceil = d.get("ceilings", {})
    return d, rows, peers, ceil.get("hbm_read_gbps"), ceil.get("gemm_bf16_tflops")


def series(rows, peers, cid, metric):
    """{label: [(q_len, value, causal_not_dcp)]} of one case: dcpattn rows and the peers"""
    out = {}
    mine = [r for r in rows if base_case(r["case"]) == cid and r.get("status") == "PASS" and r.get("median_us")]
    for r in sorted(mine, key=lambda r: (r["case"], r["q_len"])):
        lab = "dcpattn" if r["case"] == cid else "dcpattn (%s)" % r["case"]
        v = r.get(metric)
        if v is not None:
            out.setdefault(lab, []).append((r["q_len"], v, False))
    ref = {r["key"]: r for r in rows if r["case"] == cid}
    for peer in PEER_ORDER:
        for (key, name), p in sorted(peers.items()):
            if name != peer or key.split("/")[0] != cid or "/q" not in key:
                continue
            q = int(key.split("/q")[1])
            r = ref.get(key)
            if metric == "gbps":
                v = r["bytes"] / (p["us"] * 1e-6) * 1e-9 if r and r.get("bytes") else p.get("gbps")
            else:
                v = r["flops"] / (p["us"] * 1e-6) * 1e-12 if r and r.get("flops") else p.get("tflops")
            if v is not None:
                out.setdefault(peer, []).append((q, v, str(p.get("mask", "")).startswith("causal")))
    return out


def plot_lines(plt, path, title, data, ceiling):
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for lab, pts in data.items():
        pts.sort()
        x = [p[0] for p in pts]
        y = [p[1] for p in pts]
        line, = ax.plot(x, y, "-", label=lab)
        for q, v, causal in pts:
            ax.plot([q], [v], "o", color=line.get_color(), markerfacecolor="none" if causal else line.get_color())
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8])
    ax.get_xaxis().set_major_formatter(plt.matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("q_len (query tokens per sequence)")
    ax.set_ylabel("GB/s (same bytes for every kernel)")
    ax.set_ylim(bottom=0)
    if ceiling:
        ax.axhline(ceiling, color="gray", ls="--", lw=1)
        ax.set_ylim(top=ceiling * 1.08)
        sec = ax.secondary_yaxis("right", functions=(lambda g: g / ceiling * 100.0, lambda p: p * ceiling / 100.0))
        sec.set_ylabel("%% of the read ceiling (%.0f GB/s)" % ceiling)
    ax.set_title(title + "\n(hollow marker: the peer ran a plain causal mask, not the DCP mask)", fontsize=9)
    ax.legend(fontsize=8, loc="lower left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bars(plt, path, title, groups, ylabel, lines):
    """groups: [(group label, {kernel: (value, causal)})]"""
    kernels = []
    for _, vals in groups:
        for k in vals:
            if k not in kernels:
                kernels.append(k)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) + 3), 4.5))
    width = 0.8 / max(1, len(kernels))
    for i, k in enumerate(kernels):
        xs = [g + (i - (len(kernels) - 1) / 2) * width for g in range(len(groups))]
        ys = [vals.get(k, (0, False))[0] for _, vals in groups]
        bars = ax.bar(xs, ys, width, label=k)
        for b, (_, vals) in zip(bars, groups):
            if vals.get(k, (0, False))[1]:
                b.set_hatch("//")
    for y, lab in lines:
        ax.axhline(y, color="gray", ls="--", lw=1)
        ax.text(len(groups) - 0.5, y, " " + lab, va="bottom", ha="right", fontsize=8, color="gray")
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels([g for g, _ in groups], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title + "\n(hatched: the peer ran a plain causal mask, not the DCP mask)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(plt, path, title, rows):
    """one stacked horizontal bar per (case, warpgroup) of a timeline run: cycles a KV tile by stage"""
    bars = []
    for r in rows:
        for wg in r.get("timeline") or []:
            stages = dict(wg.get("per_tile", {}))
            stages["after the last mark"] = wg.get("after_last_mark", 0)
            bars.append(("%s wg%d" % (r["key"], wg["warpgroup"]), stages))
    if not bars:
        return False
    names = []
    for _, st in bars:
        for k, v in st.items():
            if v > 0 and k not in names:
                names.append(k)
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(bars) + 2.4))
    left = [0.0] * len(bars)
    cmap = plt.get_cmap("tab20")
    for i, k in enumerate(names):
        vals = [max(0.0, st.get(k, 0)) for _, st in bars]
        ax.barh(range(len(bars)), vals, left=left, color=cmap(i % 20), label=k)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_yticks(range(len(bars)))
    ax.set_yticklabels([b for b, _ in bars], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("SM cycles per KV tile")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.22 - 0.4 / len(bars)))
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def bar_groups(rows, peers, cids, metric):
    groups = []
    for cid in cids:
        qs = sorted({r["q_len"] for r in rows if base_case(r["case"]) == cid})
        for q in qs:
            vals = {}
            for lab, pts in series(rows, peers, cid, metric).items():
                for pq, v, causal in pts:
                    if pq == q:
                        vals[lab] = (v, causal)
            if vals:
                groups.append(("%s/q%d" % (cid, q), vals))
    return groups


def main(argv):
    if len(argv) != 3:
        print("usage: bench_plot.py BENCH_JSON OUTDIR", file=sys.stderr)
        return 2
    src, outdir = argv[1], argv[2]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.matplotlib = matplotlib
        import matplotlib.ticker  # noqa: F401
    except Exception as e:  # noqa: BLE001
        print("bench_plot: skipped: matplotlib is not importable (%s)" % e)
        return 0
    try:
        d, rows, peers, read, gemm = load(src)
    except (OSError, ValueError) as e:
        print("bench_plot: cannot read %s: %s" % (src, e), file=sys.stderr)
        return 1
    os.makedirs(outdir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(src))[0]
    dev = d.get("device", "").split(",")[0]
    written = []

    def out(name):
        p = os.path.join(outdir, "%s-%s.png" % (stem, name))
        written.append(p)
        return p

    for cid in ("G1", "G2", "G1F", "G2F"):
        data = series(rows, peers, cid, "gbps")
        if data:
            kind = "GQA, e4m3 cache: GB/s of the FP8 bytes" if cid.endswith("F") else "GQA: GB/s"
            plot_lines(plt, out(cid), "%s (%s) against q_len; %s" % (cid, kind, dev), data, read)
    g = bar_groups(rows, peers, ["M1", "M1F"], "tflops")
    if g:
        plot_bars(plt, out("M1"), "M1 (MLA, q_len 2; M1F: e4m3 cache): TFLOP/s; %s" % dev, g, "TFLOP/s",
                  ([(gemm, "bf16 GEMM ceiling %.0f" % gemm)] if gemm else []) +
                  [(660.0, "FlashMLA's published dense decode, H800: 660")])
    g = bar_groups(rows, peers, ["M2", "M2F"], "gbps")
    if g:
        plot_bars(plt, out("M2"), "M2 (MLA, q_len 1 and 2; M2F: e4m3 cache, GB/s of its bytes): GB/s; %s" % dev, g, "GB/s",
                  [(read, "read ceiling %.0f" % read)] if read else [])
    others = []
    for r in rows:
        cid = base_case(r["case"])
        if cid[:1] == "S" and cid[1:2].isdigit() and cid not in others:  # S1, S1E, S3M ... (not SP)
            others.append(cid)
    g = bar_groups(rows, peers, others, "gbps")
    if g:
        plot_bars(plt, out("skewed"), "skewed batches and their even twins: GB/s; %s" % dev, g, "GB/s",
                  [(read, "read ceiling %.0f" % read)] if read else [])
    if any(r.get("timeline") for r in rows):
        path = out("timeline")
        if not plot_timeline(plt, path, "stage timeline (a timeline build: compare it only with another); %s" % dev,
                             rows):
            written.remove(path)
    for p in written:
        print("wrote %s" % p)
    if not written:
        print("bench_plot: no measured case in %s" % src)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
