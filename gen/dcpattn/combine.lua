-- combine.lua — the combine family: the local step of the all-gather + reduce-scatter DCP
-- combine (docs/contract.md 6): this rank's partial output times its share of the global softmax,
-- o_r * exp(lse_r - LSE), written in the dtype the reduce-scatter sums in.
-- Name: combine_<in>_<out>, e.g. combine_bf16_fp32 (bf16 partials, fp32 reduce-scatter).
-- Kernel parameters: the merge's block (dcpattn_merge_kparams); see templates/combine.cuh.
local util = require "dcpattn.util"

return util.dtype_pair_family {
    family = "combine",
    template = "templates/combine_inst.cu",
    dtypes = { "bf16", "fp16", "fp32" },
    threads = 256,
    items = 2, -- 16-byte vectors per thread; the host's grid divides by THREADS * ITEMS
    -- The AOT set: reduce in the input type (vLLM's way, half the bytes) or in fp32.
    defaults = {
        { "bf16", "bf16" }, { "fp16", "fp16" }, { "fp32", "fp32" },
        { "bf16", "fp32" }, { "fp16", "fp32" },
    },
}
