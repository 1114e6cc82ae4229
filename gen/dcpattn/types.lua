-- types.lua — element types: canonical short names, accepted spellings, C++ types, sizes.
local M = {}

local lower = string.lower

-- Canonical name -> what templates need. The C++ names are those of templates/common.cuh.
M.info = {
    bf16 = { ctype = "dcpattn::bf16", size = 2 },
    fp16 = { ctype = "dcpattn::fp16", size = 2 },
    fp32 = { ctype = "float", size = 4 },
    e4m3 = { ctype = "dcpattn::e4m3", size = 1 }, -- OCP FP8 e4m3fn: KV caches only
}

-- Other spellings people type; parse and validate map them to the canonical name.
local ALIASES = {
    bf16 = "bf16", bfloat16 = "bf16",
    fp16 = "fp16", f16 = "fp16", float16 = "fp16", half = "fp16",
    fp32 = "fp32", f32 = "fp32", float32 = "fp32", float = "fp32",
    e4m3 = "e4m3", fp8 = "e4m3", fp8e4m3 = "e4m3", float8e4m3 = "e4m3", float8e4m3fn = "e4m3",
}
M.aliases = ALIASES -- read only: spelling -> canonical name, the canonical names included

-- Canonical dtype name of `s` if it is one of `allowed` (an array of canonical names).
function M.canonical(s, allowed)
    if type(s) ~= "string" then return nil end
    local c = ALIASES[lower(s)]
    if not c then return nil end
    for i = 1, #allowed do
        if allowed[i] == c then return c end
    end
    return nil
end

return M
