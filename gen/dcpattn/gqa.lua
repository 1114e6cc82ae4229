-- gqa.lua — the GQA/MQA attention family (docs/contract.md 8): Dqk = Dv, `group` query heads per
-- KV head, their q_len x group query rows packed into tiles of `m_tile` rows per CTA.
-- The KV cache is <dtype> too, or FP8 e4m3 (kv<kv_dtype> in the name, absent when the same).
-- Name: gqa_<dtype>[_kv<kv_dtype>]_d<D>_g<G>_m<M>, e.g. gqa_bf16_d128_g8_m16, gqa_bf16_kve4m3_d128_g8_m16.
local M = {}

local pairs, ipairs = pairs, ipairs
local format = string.format
local concat = table.concat
local util = require "dcpattn.util"
local types = require "dcpattn.types"

M.family = "gqa"
M.template = "templates/gqa_inst.cu"
M.form = "gqa_<dtype>[_kv<kv_dtype>]_d<D>_g<G>_m<M>"

-- ---- tuning tables: the kernel author edits these, nothing else in gen/ knows the numbers ----

-- Query rows per CTA tile -> CTA size; `wide_threads` for head dims over 128, where four
-- warps of 16 rows would not leave registers for the O accumulators (measured on the H200:
-- M64 at 128 threads 4.13 TB/s against 3.64 at 256, D = 128, q_len 4).
local M_TILES = {
    [16] = { threads = 128, wide_threads = 128 },
    [32] = { threads = 128, wide_threads = 128 },
    [64] = { threads = 128, wide_threads = 256 },
}

-- Head dim -> keys per pipeline stage. templates/gqa.cuh needs KV_TILE % (16 * WARPS_N) == 0
-- and reuses the K/V stages for the WARPS_N partial O tiles of its epilogue
-- (WARPS_N * M_TILE <= STAGES * KV_TILE), so 32 fits only M_TILE = 32; 64 fits every M tile
-- and keeps D = 256, M = 64 at 160 KiB of shared memory.
local HEAD_DIMS = {
    [64] = { kv_tile = 64 },
    [96] = { kv_tile = 64 },
    [128] = { kv_tile = 64 },
    [192] = { kv_tile = 64 },
    [256] = { kv_tile = 64 },
}

-- K/V pipeline depth: three stages where registers and shared memory allow (M16, D <= 128:
-- 4.33 TB/s against 3.77 with two, G1 q_len 1 without splits), else two.
-- M64 at D = 128 runs on wgmma on sm_90a (templates/gqa.cuh): one warpgroup, 113 KiB with
-- three stages, two CTAs per SM; its swizzle atoms need 1024 bytes of alignment slack. An
-- e4m3 cache takes it too, with a producer warpgroup that gathers each tile and converts its
-- V into fp16 while S reads K as it landed (256 threads, four e4m3 stages and two fp16 V
-- tiles: 113 KiB, two CTAs per SM in the H200's 228 KiB with the 1 KiB each CTA reserves).
local function wgmma_path(m, d)
    return m == 64 and d == 128
end
-- Query rows from which the wgmma tile serves a KV head on sm_90+ even when a smaller
-- mma.sync tile would hold them (measured on the H200, docs/performance.md): G1 at q_len 4,
-- 32 rows, takes it with a 16-bit cache, and G1F with an e4m3 cache (429 us against 435 on
-- the 32-row mma.sync tile, whose fragments convert in registers).
local WGMMA_FROM_ROWS = 17
local function stages_for(m, d, kvsize)
    if kvsize == 1 and wgmma_path(m, d) then return 4 end
    if (m == 16 and d <= 128) or wgmma_path(m, d) then return 3 end
    return 2
end
-- Most split-KV CTAs of one row tile that the kernel merges inside a thread-block cluster
-- through distributed shared memory (sm_90+; the portable cluster size limit).
local CLUSTER_SPLITS = 8
local MAX_GROUP = 64  -- query heads per KV head
local DTYPES = { "bf16", "fp16" }
local KV_DTYPES = { "bf16", "fp16", "e4m3" } -- a 16-bit cache must be of the query's dtype

-- The AOT set (keep it near 40: NVRTC compiles each one), and its FP8-cache variants: those
-- of the benchmark shapes (examples/bench.cu, G1F and G2F).
local DEFAULT_DTYPES = { "bf16" }
local DEFAULT_GROUPS = { 1, 4, 8, 16 }
local DEFAULT_M_TILES = { 16, 64 }
local DEFAULT_FP8 = { dtype = "bf16", head_dim = 128, group = 8, m_tiles = { 16, 64 } }

-- ---------------------------------------------------------------------------------------------

M.head_dims = util.sorted_numbers(HEAD_DIMS)
M.m_tiles = util.sorted_numbers(M_TILES)
M.max_group = MAX_GROUP

-- Smallest M tile that holds `rows` query rows, else the largest (rows then span tiles);
-- on sm_90+ (`arch` >= 90) the wgmma tile from WGMMA_FROM_ROWS rows on, where it exists.
function M.m_tile_for(rows, head_dim, arch)
    if arch and arch >= 90 and rows >= WGMMA_FROM_ROWS and wgmma_path(64, head_dim) then return 64 end
    return util.tile_for(M_TILES, rows)
end

local show = util.show

local LAYOUT = {
    { "dtype" }, { "kv_dtype", "kv", optional = "dtype" }, { "head_dim", "d" }, { "group", "g" }, { "m_tile", "m" },
}
util.family(M, LAYOUT, function(spec)
    local dtype, kv_dtype = util.attn_dtypes(spec, DTYPES, KV_DTYPES)
    if not dtype then return nil, kv_dtype end
    local d = util.int(spec.head_dim)
    if not d or not HEAD_DIMS[d] then
        return nil, format("head dim %s not supported (expected %s)", show(spec.head_dim), concat(M.head_dims, ", "))
    end
    local g = util.int(spec.group)
    if not g or g < 1 or g > MAX_GROUP then
        return nil, format("group (query heads per KV head) %s not supported (expected 1..%d)",
            show(spec.group), MAX_GROUP)
    end
    local m = util.int(spec.m_tile)
    if not m or not M_TILES[m] then
        return nil, format("M tile %s not allowed (expected %s)", show(spec.m_tile), concat(M.m_tiles, ", "))
    end
    return { family = "gqa", dtype = dtype, kv_dtype = kv_dtype, head_dim = d, group = g, m_tile = m }
end)

-- Everything the instance template and the launcher need, derived in one place.
local function traits(spec)
    local esize, kvsize = types.info[spec.dtype].size, types.info[spec.kv_dtype].size
    local d, m = spec.head_dim, spec.m_tile
    local kv_tile = HEAD_DIMS[d].kv_tile
    local stages, wgmma = stages_for(m, d, kvsize), wgmma_path(m, d)
    local producer = kvsize == 1 and wgmma
    local threads = (d > 128 or producer) and M_TILES[m].wide_threads or M_TILES[m].threads
    -- An FP8 cache is read from shared memory straight into mma.sync fragments (templates/
    -- gqa.cuh, GqaTraits::FRAG8) where rows of d bytes take the ldmatrix swizzle and the
    -- epilogue's partial O tiles fit in the e4m3 stages; else (wgmma) it is converted first.
    local warps_n = threads // 32 // (m // 16)
    local g_chunks = d // 16
    local frag8 = kvsize == 1 and not wgmma and (g_chunks % 8 == 0 or g_chunks % 8 == 4)
        and warps_n * m * d * 4 <= 2 * stages * kv_tile * d
    -- K and V tiles for every stage as they come from the cache, plus the Q tile (+ alignment
    -- slack for the wgmma tiles); an FP8 cache converted in shared memory adds two tiles of
    -- the query's type: the K and V of a tile, or the producer's two V tiles.
    local smem = stages * kv_tile * (2 * d) * kvsize + m * d * esize + (wgmma and 1024 or 0)
    if kvsize ~= esize and not frag8 then smem = smem + kv_tile * (2 * d) * esize end
    return {
        wgmma = wgmma,
        producer = producer,
        threads = threads,
        kv_tile = kv_tile,
        stages = stages,
        smem = smem,
    }
end

function M.bindings(spec, name)
    local t = traits(spec)
    return util.attn_bindings(spec, name, t, {
        KV_T = types.info[spec.kv_dtype].ctype,
        HEAD_DIM = spec.head_dim,
        GROUP = spec.group,
        M_TILE = spec.m_tile,
        KV_TILE = t.kv_tile,
        STAGES = t.stages,
        WGMMA = t.wgmma and "true" or "false",
        -- the FP8 producer tile's kernel NAME_balanced_stacked (templates/gqa.cuh)
        STACKED_KERNEL = t.producer and 1 or 0,
        SMEM = t.smem,
    })
end

function M.meta(spec)
    return util.attn_meta(spec, traits(spec),
        { head_dim = spec.head_dim, group = spec.group, cluster_splits = CLUSTER_SPLITS, kv_dtype = spec.kv_dtype })
end

function M.defaults()
    local specs = {}
    for _, dtype in ipairs(DEFAULT_DTYPES) do
        for d in pairs(HEAD_DIMS) do
            for _, g in ipairs(DEFAULT_GROUPS) do
                for _, m in ipairs(DEFAULT_M_TILES) do
                    specs[#specs + 1] = { family = "gqa", dtype = dtype, head_dim = d, group = g, m_tile = m }
                end
            end
        end
    end
    local f = DEFAULT_FP8
    for _, m in ipairs(f.m_tiles) do
        specs[#specs + 1] = { family = "gqa", dtype = f.dtype, kv_dtype = "e4m3", head_dim = f.head_dim,
            group = f.group, m_tile = m }
    end
    return specs -- the caller sorts by name
end

return M
