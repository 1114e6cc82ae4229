// combine.cuh — the local step of the all-gather + reduce-scatter DCP combine (docs/contract.md 6):
// this rank's partial output scaled by its share of the global softmax, ready to be summed
// over the ranks by a reduce-scatter (or an all-reduce).
//
// PARAMETERS: the merge's block, dcpattn_merge_kparams, read this way:
//     n        W: the states whose LSE make the global LSE (1 .. 64)
//     lse[0]   this rank's LSE; lse[1 .. n-1] the other ranks' (any order); common strides
//     o[0]     this rank's partial output (o[1 ..] are not read)
//     out      o[0] * exp(lse[0] - LSE),  LSE = log(sum_n exp(lse[n]))
//     lse_out  LSE (optional), in the base lse_base2_out asks for
// Non-finite LSE counts as empty (docs/contract.md 5): an empty own state, or all states empty,
// gives out = 0 (o[0] is then never read) and LSE = -inf. The weight is the merge's weight
// w_0 = 2^((l_0 - M) c) / sum_n 2^((l_n - M) c), so summing the outputs of all ranks equals
// the merge of their states.
//
// LAUNCH CONTRACT: exactly the merge's (merge.cuh): THREADS threads, one 16-byte input vector
// of one (row, head) per item, ITEMS items per thread (gen/dcpattn/combine.lua), rows >=
// *rows_limit untouched.
#pragma once

namespace dcpattn {

template <class IN_T, class OUT_T, int THREADS, int UNROLL = kMergeUnroll, int ITEMS = kMergeItems>
__device__ __forceinline__ void rescale_state(const dcpattn_merge_kparams &p) {
    using namespace merge_detail;
    using Block = block_items<IN_T, THREADS, ITEMS>;
    const Block blk(p);
    constexpr int VEC = Block::VEC, U = UNROLL;
    const float sc = blk.sc;

#pragma unroll 1
    for (int k = 0; k < ITEMS; ++k) {
        const item it = blk.at(p, k);
        if (!it.ok) continue;
        // Online (max, sum) over the W LSE values, U loads in flight at a time.
        float m = neg_inf(), s = 0.0f, l0 = neg_inf();
        for (int c = 0; c < p.n; c += U) {
            float l[U];
            load_lse<U>(p, it, c, l);
            if (c == 0) l0 = l[0];
            float cm = m;
#pragma unroll
            for (int i = 0; i < U; ++i) cm = fmaxf(cm, l[i]);
            if (!is_finite(cm)) continue;  // nothing non-empty yet
            float add = 0.0f;
#pragma unroll
            for (int i = 0; i < U; ++i) add += fast_exp2((l[i] - cm) * sc);  // empty: 0
            s = fmaf(s, fast_exp2((m - cm) * sc), add);                       // m = -inf: s = 0
            m = cm;
        }
        float w = 0.0f, lse_out = neg_inf();
        if (is_finite(m)) {
            w = fast_exp2((l0 - m) * sc) / s;  // own state empty: 0
            const float lg = fast_log2(s);
            lse_out = p.lse_base2_in ? m + lg : fmaf(lg, kLn2, m);
            if (p.lse_base2_in != p.lse_base2_out) lse_out *= p.lse_base2_in ? kLn2 : kLog2e;
        }
        const u32x4 r = ld_stream16_if(static_cast<const IN_T *>(p.o[0]) + it.o_off, w != 0.0f);
        float f[VEC];
        vec_traits<IN_T>::unpack(r, f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f[j] *= w;
        storer<OUT_T, VEC>::store(static_cast<OUT_T *>(p.out) + it.out_off, f);
        if (p.lse_out != nullptr && it.first) p.lse_out[it.lse_out_off] = lse_out;
    }
}

}  // namespace dcpattn
