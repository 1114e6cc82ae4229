-- combine.lua — the combine family: the local step of the all-gather + reduce-scatter DCP
-- combine (DESIGN.md 3.6): this rank's partial output times its share of the global softmax,
-- o_r * exp(lse_r - LSE), written in the dtype the reduce-scatter sums in.
-- Name: combine_<in>_<out>, e.g. combine_bf16_fp32 (bf16 partials, fp32 reduce-scatter).
-- Kernel parameters: the merge's block (dcpattn_merge_kparams); see templates/combine.cuh.
local M = {}

local pairs, ipairs, tostring = pairs, ipairs, tostring
local format, concat = string.format, table.concat
local types = require "dcpattn.types"

M.family = "combine"
M.template = "templates/combine_inst.cu"
M.form = "combine_<in>_<out>"

local DTYPES = { "bf16", "fp16", "fp32" }
local THREADS = 256

-- The AOT set: reduce in the input type (vLLM's way, half the bytes) or in fp32.
local DEFAULTS = {
    { "bf16", "bf16" }, { "fp16", "fp16" }, { "fp32", "fp32" },
    { "bf16", "fp32" }, { "fp16", "fp32" },
}

local function show(v)
    if v == nil then return "(missing)" end
    return tostring(v)
end

local FIELDS = { family = true, in_dtype = true, out_dtype = true }

function M.validate(spec)
    for k in pairs(spec) do
        if not FIELDS[k] then return nil, format("unknown field '%s'", tostring(k)) end
    end
    local i = types.canonical(spec.in_dtype, DTYPES)
    if not i then
        return nil, format("unknown input dtype '%s' (expected %s)", show(spec.in_dtype), concat(DTYPES, ", "))
    end
    local o = spec.out_dtype == nil and i or types.canonical(spec.out_dtype, DTYPES)
    if not o then
        return nil, format("unknown output dtype '%s' (expected %s)", show(spec.out_dtype), concat(DTYPES, ", "))
    end
    return { family = "combine", in_dtype = i, out_dtype = o }
end

-- `fields` are the name's '_'-separated parts after the family.
function M.parse(fields)
    if #fields ~= 2 then
        return nil, format("combine variant names have 2 fields after the family (%s), got %d", M.form, #fields)
    end
    return M.validate { family = "combine", in_dtype = fields[1], out_dtype = fields[2] }
end

function M.name(spec)
    return format("combine_%s_%s", spec.in_dtype, spec.out_dtype)
end

function M.bindings(spec, name)
    return {
        NAME = name,
        IN_T = types.info[spec.in_dtype].ctype,
        OUT_T = types.info[spec.out_dtype].ctype,
        THREADS = THREADS,
    }
end

function M.meta(spec)
    return { threads = THREADS, smem = 0, in_dtype = spec.in_dtype, out_dtype = spec.out_dtype }
end

function M.defaults()
    local specs = {}
    for i, d in ipairs(DEFAULTS) do
        specs[i] = { family = "combine", in_dtype = d[1], out_dtype = d[2] }
    end
    return specs
end

return M
