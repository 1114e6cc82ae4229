-- sparse.lua — the sparse MLA family (DeepSeek V3.2 / GLM-5 top-k attention, docs/contract.md
-- "Sparse MLA"): Dqk = 576, Dv = 512, one latent KV head; each query token attends to the keys
-- of its own top-k list of global positions, those this rank owns, gathered through the block
-- table. One CTA per (query token, M query heads). Two kernels: mma.sync (templates/sparse.cuh,
-- sm_80 and newer, every cache), and for the FP8 caches on sm_90a the MLA kernel's wgmma pipeline
-- with a gather (templates/mla.cuh, "Sparse"; name suffix _sm90).
-- The cache holds the query's dtype (576 elements per token), or 576 e4m3 bytes per token with
-- per-tensor k_scale and v_scale (the dense FP8 cache of mla.lua), or DeepSeek's FP8 layout,
-- fp8ds: 656 bytes per token (512 e4m3 values, 4 fp32 scales, 64 bf16 RoPE values).
-- Name: sparse_<dtype>[_kv<kv_dtype>]_m<M>[_sm90], e.g. sparse_bf16_m64, sparse_bf16_kve4m3_m64,
-- sparse_bf16_kvfp8ds_m64, sparse_bf16_kvfp8ds_m64_sm90, sparse_bf16_kve4m3_m64_sm90.
local M = {}

local type, ipairs = type, ipairs
local format, lower = string.format, string.lower
local concat = table.concat
local util = require "dcpattn.util"
local types = require "dcpattn.types"
local mla = require "dcpattn.mla"

M.family = "sparse"
M.template = "templates/sparse_inst.cu"
M.form = "sparse_<dtype>[_kv<kv_dtype>]_m<M>[_sm90]"
local TEMPLATE_SM90 = "templates/sparse_sm90_inst.cu"

-- ---- tuning tables: the kernel author edits these, nothing else in gen/ knows the numbers ----

M.DQK, M.DV = mla.DQK, mla.DV  -- the MLA row: 512 latent + 64 RoPE channels, V the first 512
-- Query heads per CTA -> CTA size: 8 warps, 4 row groups of 16 heads x 2 halves of the 512
-- V columns (templates/sparse.cuh).
local M_TILES = { [64] = { threads = 256 } }
local KV_TILE = 32      -- keys per pipeline stage
local MAX_TOPK = 2048   -- ids per query token (mma.sync: the compacted list lives in shared memory)
-- sm_90a, FP8 cache (name suffix _sm90): MLA's CTA of 64 heads x 64-key tiles plus a producer
-- warpgroup that gathers them; the compacted list lives in the workspace (8 bytes per id of each
-- CTA), and shared memory is MLA's plus the scales of stage 0's tile (64 rows x 16 bytes). At
-- most 16 heads a rank take MLA's narrow tile of 16 (m16, templates/mla.cuh "Narrow tiles").
local SM90_ARCH = 90
local SM90_PRODUCER = 128
local SM90_SCALES = 64 * 16
local SM90_NARROW = 16  -- the narrow tile, for Hq <= 16
local MAX_HQ = 128
local DTYPES = { "bf16", "fp16" }
-- The FP8 layout: 512 e4m3 values, 4 fp32 scales (one per 128 values), 64 bf16 RoPE values.
local FP8DS = "fp8ds"
local FP8DS_ROW_BYTES = 512 + 4 * 4 + 64 * 2
local E4M3 = "e4m3"  -- per-tensor scales: rows of 576 e4m3 bytes

-- The AOT set: the benchmark's shapes (examples/bench.cu SP1-SP4).
local DEFAULTS = { { dtype = "bf16" }, { dtype = "bf16", kv_dtype = FP8DS },
    { dtype = "bf16", kv_dtype = FP8DS, arch = SM90_ARCH }, { dtype = "bf16", kv_dtype = E4M3 },
    { dtype = "bf16", kv_dtype = E4M3, arch = SM90_ARCH }, { dtype = "bf16", kv_dtype = FP8DS, arch = SM90_ARCH, m = 16 } }

-- ---------------------------------------------------------------------------------------------

M.max_topk = MAX_TOPK
M.max_hq = MAX_HQ
M.fp8ds = FP8DS
M.e4m3 = E4M3
M.fp8ds_row_bytes = FP8DS_ROW_BYTES
M.sm90_arch = SM90_ARCH
M.sm90_narrow = SM90_NARROW

local show = util.show

local LAYOUT = { { "dtype" }, { "kv_dtype", "kv", optional = "dtype" }, { "m_tile", "m" }, { "arch", "sm", optional = true } }
util.family(M, LAYOUT, function(spec)
    local dtype, err = util.dtype(spec.dtype, DTYPES, "")
    if not dtype then return nil, err end
    local kv_dtype = dtype
    if spec.kv_dtype ~= nil then
        if type(spec.kv_dtype) == "string" and lower(spec.kv_dtype) == FP8DS then
            if dtype ~= "bf16" then
                return nil, format("KV dtype '%s' needs dtype bf16 (its RoPE part is bf16), got '%s'", FP8DS, dtype)
            end
            kv_dtype = FP8DS
        else
            kv_dtype = types.canonical(spec.kv_dtype, { "bf16", "fp16", E4M3 })
            if kv_dtype ~= dtype and kv_dtype ~= E4M3 then
                return nil, format("KV dtype '%s' with dtype '%s' (a 16-bit cache has the query's dtype; or %s, %s)",
                    show(spec.kv_dtype), dtype, E4M3, FP8DS)
            end
        end
    end
    local m = util.int(spec.m_tile)
    if not m or not (M_TILES[m] or m == SM90_NARROW and spec.arch ~= nil) then
        return nil, format("M tile %s not allowed (expected %s; %d: the sm_%d kernel only)", show(spec.m_tile),
            concat(util.sorted_numbers(M_TILES), ", "), SM90_NARROW, SM90_ARCH)
    end
    local arch
    if spec.arch ~= nil then
        arch = util.int(spec.arch)
        if arch ~= SM90_ARCH then
            return nil, format("arch %s not allowed (expected %d, or none)", show(spec.arch), SM90_ARCH)
        end
        if kv_dtype ~= FP8DS and kv_dtype ~= E4M3 then
            return nil, format("the sm_%d kernel reads an FP8 cache (%s or %s), got KV dtype '%s'", SM90_ARCH, FP8DS,
                E4M3, kv_dtype)
        end
    end
    return { family = "sparse", dtype = dtype, kv_dtype = kv_dtype, m_tile = m, arch = arch }
end)

function M.template_for(spec)
    return spec.arch and TEMPLATE_SM90 or M.template
end

-- Everything the instance template and the launcher need, derived in one place
-- (templates/sparse.cuh, SparseTraits, computes the same shared-memory size; every instance
-- asserts that the two agree).
local function traits(spec)
    local raw_row = spec.kv_dtype == FP8DS and FP8DS_ROW_BYTES or spec.kv_dtype == E4M3 and M.DQK or nil
    if spec.arch then
        local t = mla.traits({ dtype = spec.dtype, m_tile = spec.m_tile })
        return { threads = t.threads + SM90_PRODUCER, kv_tile = t.kv_tile, stages = t.stages, smem = t.smem + SM90_SCALES,
            row_list = true, raw_row = raw_row }
    end
    local esize = types.info[spec.dtype].size
    local tile = KV_TILE * M.DQK * esize
    local warps = M_TILES[spec.m_tile].threads // 32
    -- Q tile + K tiles (two stages; an FP8 cache: one converted tile and two stages of raw rows)
    -- + the compacted list (8 bytes per id) + the S exchange (16 x 16 fp32 per warp)
    local kv = raw_row and (tile + 2 * KV_TILE * raw_row) or 2 * tile
    return {
        raw_row = raw_row,
        threads = M_TILES[spec.m_tile].threads,
        kv_tile = KV_TILE,
        stages = 2,
        smem = spec.m_tile * M.DQK * esize + kv + MAX_TOPK * 8 + warps * 256 * 4,
    }
end

function M.bindings(spec, name)
    local t = traits(spec)
    if spec.arch then
        return util.attn_bindings(spec, name, t,
            { MAX_TOPK = MAX_TOPK, RAW_ROW = t.raw_row, SMEM = t.smem, M_TILE = spec.m_tile })
    end
    return util.attn_bindings(spec, name, t, {
        M_TILE = spec.m_tile,
        KV_TILE = t.kv_tile,
        MAX_TOPK = MAX_TOPK,
        RAW_ROW = t.raw_row or 0, -- the cache's byte rows (0: rows of the query's dtype)
        SMEM = t.smem, -- checked against the kernel's own layout (SparseTraits::SMEM_BYTES)
    })
end

function M.meta(spec)
    local t = traits(spec)
    -- row_list: the kernel keeps each CTA's kept rows in the workspace (8 bytes per id)
    return util.attn_meta(spec, t,
        { head_dim = M.DQK, head_dim_v = M.DV, kv_dtype = spec.kv_dtype, row_list = t.row_list and 1 or 0 })
end

function M.defaults()
    local specs = {}
    for i, d in ipairs(DEFAULTS) do
        specs[i] = { family = "sparse", dtype = d.dtype, kv_dtype = d.kv_dtype, m_tile = d.m or 64, arch = d.arch }
    end
    return specs -- the caller sorts by name
end

return M
