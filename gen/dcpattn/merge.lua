-- merge.lua — the merge family: N partial attention states -> one (docs/contract.md 5).
-- Name: merge_<in>_<out>, e.g. merge_fp32_bf16 (fp32 split-KV partials into a bf16 output).
local util = require "dcpattn.util"

return util.dtype_pair_family {
    family = "merge",
    template = "templates/merge_inst.cu",
    dtypes = { "bf16", "fp16", "fp32" },
    threads = 256,
    items = 1, -- 16-byte vectors per thread (templates/merge.cuh kMergeItems); the grid divides by THREADS * ITEMS
    -- The AOT set: same-type merges and the fp32 partials of split-KV attention.
    defaults = {
        { "bf16", "bf16" }, { "fp16", "fp16" }, { "fp32", "fp32" },
        { "fp32", "bf16" }, { "fp32", "fp16" },
    },
}
