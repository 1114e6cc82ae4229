-- mla.lua — the MLA family (DeepSeek absorbed decode, DESIGN.md 6): Dqk = 576 (512 latent +
-- 64 rope), Dv = 512, one latent KV head whose first 512 channels are V, Hq query heads per
-- rank; the q_len x Hq query rows of a sequence are packed into tiles of 64 rows per CTA.
-- Hopper only (wgmma, sm_90a). Name: mla_<dtype>_h<Hq>_m64, e.g. mla_bf16_h128_m64.
local M = {}

local pairs, ipairs, tostring = pairs, ipairs, tostring
local format, match = string.format, string.match
local concat = table.concat
local util = require "dcpattn.util"
local types = require "dcpattn.types"

M.family = "mla"
M.template = "templates/mla_inst.cu"
M.form = "mla_<dtype>_h<Hq>_m<M>"

-- ---- tuning tables: the kernel author edits these, nothing else in gen/ knows the numbers ----

M.DQK, M.DV = 576, 512
local M_TILES = { [64] = { threads = 384 } }  -- 2 consumer warpgroups + 1 producer warpgroup
local KV_TILE = 64
local STAGES = 2
local MAX_HQ = 128
local DTYPES = { "bf16", "fp16" }

-- The AOT set.
local DEFAULT_DTYPES = { "bf16" }
local DEFAULT_HQ = { 16, 32, 64, 128 }

-- ---------------------------------------------------------------------------------------------

M.max_hq = MAX_HQ

-- The M tile for `rows` packed query rows (one size today).
function M.m_tile_for(rows)
    return 64
end

local function show(v)
    if v == nil then return "(missing)" end
    return tostring(v)
end

local FIELDS = { family = true, dtype = true, hq = true, m_tile = true }

function M.validate(spec)
    for k in pairs(spec) do
        if not FIELDS[k] then return nil, format("unknown field '%s'", tostring(k)) end
    end
    local dtype = types.canonical(spec.dtype, DTYPES)
    if not dtype then
        return nil, format("unknown dtype '%s' (expected %s)", show(spec.dtype), concat(DTYPES, ", "))
    end
    local hq = util.int(spec.hq)
    if not hq or hq < 1 or hq > MAX_HQ then
        return nil, format("query heads %s not supported (expected 1..%d)", show(spec.hq), MAX_HQ)
    end
    local m = util.int(spec.m_tile)
    if not m or not M_TILES[m] then
        return nil, format("M tile %s not allowed (expected 64)", show(spec.m_tile))
    end
    return { family = "mla", dtype = dtype, hq = hq, m_tile = m }
end

local function number_field(s, letter)
    local digits = match(s, "^" .. letter .. "(%d+)$")
    return digits and util.int(digits)
end

function M.parse(fields)
    if #fields ~= 3 then
        return nil, format("mla variant names have 3 fields after the family (%s), got %d", M.form, #fields)
    end
    local hq = number_field(fields[2], "h")
    local m = number_field(fields[3], "m")
    local bad = (not hq and fields[2]) or (not m and fields[3])
    if bad then return nil, format("malformed field '%s' (expected %s)", bad, M.form) end
    return M.validate { family = "mla", dtype = fields[1], hq = hq, m_tile = m }
end

function M.name(spec)
    return format("mla_%s_h%d_m%d", spec.dtype, spec.hq, spec.m_tile)
end

-- Everything the instance template and the launcher need, derived in one place
-- (templates/mla.cuh, MlaTraits, computes the same shared-memory size).
local function traits(spec)
    local esize = types.info[spec.dtype].size
    local tile = KV_TILE * M.DQK * esize
    return {
        threads = M_TILES[spec.m_tile].threads,
        kv_tile = KV_TILE,
        stages = STAGES,
        -- Q tile + K stages + P fragments + row max/sum + mbarriers + 1024-byte alignment slack
        smem = spec.m_tile * M.DQK * esize + STAGES * tile + 2 * 8 * 128 * 4 + 2 * 64 * 4 + 64 + 1024,
    }
end

function M.bindings(spec, name)
    local t = traits(spec)
    return {
        NAME = name,
        T = types.info[spec.dtype].ctype,
        GROUP = spec.hq,
        THREADS = t.threads,
    }
end

function M.meta(spec)
    local t = traits(spec)
    return {
        threads = t.threads, smem = t.smem, rows = spec.m_tile,
        kv_tile = t.kv_tile, stages = t.stages,
        dtype = spec.dtype, head_dim = M.DQK, head_dim_v = M.DV, group = spec.hq,
    }
end

function M.defaults()
    local specs = {}
    for _, dtype in ipairs(DEFAULT_DTYPES) do
        for _, hq in ipairs(DEFAULT_HQ) do
            specs[#specs + 1] = { family = "mla", dtype = dtype, hq = hq, m_tile = 64 }
        end
    end
    return specs -- the caller sorts by name
end

return M
