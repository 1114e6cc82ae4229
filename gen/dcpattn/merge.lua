-- merge.lua — the merge family: N partial attention states -> one (DESIGN.md 3.5).
-- Name: merge_<in>_<out>, e.g. merge_fp32_bf16 (fp32 split-KV partials into a bf16 output).
local M = {}

local pairs, ipairs, tostring = pairs, ipairs, tostring
local format, concat = string.format, table.concat
local types = require "dcpattn.types"

M.family = "merge"
M.template = "templates/merge_inst.cu"
M.form = "merge_<in>_<out>"

local DTYPES = { "bf16", "fp16", "fp32" }
local THREADS = 256
local ITEMS = 2 -- 16-byte vectors per thread; the host's grid divides by THREADS * ITEMS

-- The AOT set: same-type merges and the fp32 partials of split-KV attention.
local DEFAULTS = {
    { "bf16", "bf16" }, { "fp16", "fp16" }, { "fp32", "fp32" },
    { "fp32", "bf16" }, { "fp32", "fp16" },
}

-- A field value for a message; absent fields say so.
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
        return nil, format("unknown input dtype '%s' (expected %s)",
            show(spec.in_dtype), concat(DTYPES, ", "))
    end
    local o = spec.out_dtype == nil and i or types.canonical(spec.out_dtype, DTYPES)
    if not o then
        return nil, format("unknown output dtype '%s' (expected %s)",
            show(spec.out_dtype), concat(DTYPES, ", "))
    end
    return { family = "merge", in_dtype = i, out_dtype = o }
end

-- `fields` are the name's '_'-separated parts after the family.
function M.parse(fields)
    if #fields ~= 2 then
        return nil, format("merge variant names have 2 fields after the family (%s), got %d",
            M.form, #fields)
    end
    return M.validate { family = "merge", in_dtype = fields[1], out_dtype = fields[2] }
end

function M.name(spec)
    return format("merge_%s_%s", spec.in_dtype, spec.out_dtype)
end

function M.bindings(spec, name)
    return {
        NAME = name,
        IN_T = types.info[spec.in_dtype].ctype,
        OUT_T = types.info[spec.out_dtype].ctype,
        THREADS = THREADS,
        ITEMS = ITEMS,
    }
end

function M.meta(spec)
    return { threads = THREADS, items = ITEMS, smem = 0, in_dtype = spec.in_dtype, out_dtype = spec.out_dtype }
end

function M.defaults()
    local specs = {}
    for i, d in ipairs(DEFAULTS) do
        specs[i] = { family = "merge", in_dtype = d[1], out_dtype = d[2] }
    end
    return specs
end

return M
