-- mla.lua — the MLA family (DeepSeek absorbed decode, docs/contract.md 8): Dqk = 576 (512 latent +
-- 64 rope), Dv = 512, one latent KV head whose first 512 channels are V, Hq query heads per
-- rank; the q_len x Hq query rows of a sequence are packed into tiles of 64 rows per CTA, or of
-- 16 or 32 (the narrow tiles, templates/mla.cuh: S and O computed transposed so that the 64 keys
-- of a KV tile fill the MMA's 64 rows). Hopper only (wgmma, sm_90a). Name:
-- mla_<dtype>[_kv<kv_dtype>]_h<Hq>_m<M>, e.g. mla_bf16_h128_m64, mla_bf16_h16_m16,
-- mla_bf16_kve4m3_h128_m64 (an e4m3 cache: rows of 576 bytes, computed in fp16).
local M = {}

local ipairs = ipairs
local format = string.format
local concat = table.concat
local util = require "dcpattn.util"
local types = require "dcpattn.types"

M.family = "mla"
M.template = "templates/mla_inst.cu"
M.form = "mla_<dtype>[_kv<kv_dtype>]_h<Hq>_m<M>"

-- ---- tuning tables: the kernel author edits these, nothing else in gen/ knows the numbers ----

M.DQK, M.DV = 576, 512
-- 2 warpgroups; TMA issued by one thread of each warp
local M_TILES = { [16] = { threads = 256 }, [32] = { threads = 256 }, [64] = { threads = 256 } }
local KV_TILE = 64
local STAGES = 2
local MAX_HQ = 128
local DTYPES = { "bf16", "fp16" }
local KV_DTYPES = { "bf16", "fp16", "e4m3" } -- a 16-bit cache has the query's dtype
-- Page sizes a descriptor may have: the 64-token tiles come in by TMA, in boxes of
-- min(page_size, 64) tokens that never cross a page.
local PAGE_SIZES = { 16, 32, 64, 128, 192, 256 }

-- The AOT set, and its e4m3-cache variants (those of the benchmark shapes, M1F and M2F); Hq 16
-- also on the narrow tiles: q_len 1 (M2, M2F) and 2 (multi-token prediction).
local DEFAULT_DTYPES = { "bf16" }
local DEFAULT_HQ = { 16, 32, 64, 128 }
local DEFAULT_FP8 = { dtype = "bf16", hq = { 16, 128 } }
local DEFAULT_NARROW = { { m = 16 }, { m = 16, kv = "e4m3" }, { m = 32 } } -- Hq 16

-- ---------------------------------------------------------------------------------------------

M.max_hq = MAX_HQ
M.m_tiles = util.sorted_numbers(M_TILES)
M.page_sizes = PAGE_SIZES

-- The M tile for `rows` packed query rows.
function M.m_tile_for(rows)
    return util.tile_for(M_TILES, rows)
end

local show = util.show

util.family(M, { { "dtype" }, { "kv_dtype", "kv", optional = "dtype" }, { "hq", "h" }, { "m_tile", "m" } }, function(spec)
    local dtype, kv_dtype = util.attn_dtypes(spec, DTYPES, KV_DTYPES)
    if not dtype then return nil, kv_dtype end
    local hq = util.int(spec.hq)
    if not hq or hq < 1 or hq > MAX_HQ then
        return nil, format("query heads %s not supported (expected 1..%d)", show(spec.hq), MAX_HQ)
    end
    local m = util.int(spec.m_tile)
    if not m or not M_TILES[m] then
        return nil, format("M tile %s not allowed (expected %s)", show(spec.m_tile), concat(M.m_tiles, ", "))
    end
    return { family = "mla", dtype = dtype, kv_dtype = kv_dtype, hq = hq, m_tile = m }
end)

-- Everything the instance template and the launcher need, derived in one place
-- (templates/mla.cuh, MlaTraits, computes the same shared-memory size; every instance
-- asserts that the two agree).
function M.traits(spec)
    local esize = types.info[spec.dtype].size
    local tile = KV_TILE * M.DQK * esize
    local m = spec.m_tile
    -- P of warpgroup 0 (m64: a 64 x 64 tile; narrow: both warpgroups' m x 64 and the warps' row
    -- maxima, 2 x 2 x 4 x m floats)
    local p_block = math.max(64 * 64 * esize, m < 64 and 2 * m * 64 * esize + 64 * m or 0)
    -- the swizzle (bytes) of the TMA map that brings K tiles: 128 for a 16-bit cache; e4m3 on the
    -- narrow tiles 64 (the tile stays e4m3 in shared memory, read by wgmma and ldmatrix), on the
    -- 64-row tile none (the kernel converts it into a swizzled 16-bit tile)
    local kv_swizzle = spec.kv_dtype ~= "e4m3" and 128 or m < 64 and 64 or 0
    -- slots of the K stages (a raw e4m3 tile on a narrow tile takes half a stage: two a stage),
    -- each with an mbarrier per 64-channel column block
    local slots = kv_swizzle == 64 and 2 * STAGES or STAGES
    return {
        threads = M_TILES[spec.m_tile].threads,
        kv_tile = KV_TILE,
        kv_swizzle = kv_swizzle,
        stages = STAGES,
        -- Q tile + K stages + P + row max/sum + flags + mbarriers (one per column block of each
        -- slot) + 1024-byte alignment slack
        smem = m * M.DQK * esize + STAGES * tile + p_block + 2 * 64 * 4 + 16
            + slots * (M.DQK // 64) * 8 + 1024,
    }
end

function M.bindings(spec, name)
    local t = M.traits(spec)
    return util.attn_bindings(spec, name, t, {
        KV_T = types.info[spec.kv_dtype].ctype,
        GROUP = spec.hq,
        M_TILE = spec.m_tile,
        SMEM = t.smem, -- checked against the kernel's own layout (MlaTraits::SMEM_BYTES)
        KV_SWIZZLE = t.kv_swizzle, -- and against MlaTraits::KV_SWIZZLE
    })
end

function M.meta(spec)
    local t = M.traits(spec)
    return util.attn_meta(spec, t,
        { head_dim = M.DQK, head_dim_v = M.DV, group = spec.hq, kv_dtype = spec.kv_dtype, kv_swizzle = t.kv_swizzle })
end

function M.defaults()
    local specs = {}
    for _, dtype in ipairs(DEFAULT_DTYPES) do
        for _, hq in ipairs(DEFAULT_HQ) do
            specs[#specs + 1] = { family = "mla", dtype = dtype, hq = hq, m_tile = 64 }
        end
    end
    for _, hq in ipairs(DEFAULT_FP8.hq) do
        specs[#specs + 1] = { family = "mla", dtype = DEFAULT_FP8.dtype, kv_dtype = "e4m3", hq = hq, m_tile = 64 }
    end
    for _, n in ipairs(DEFAULT_NARROW) do
        specs[#specs + 1] = { family = "mla", dtype = "bf16", kv_dtype = n.kv, hq = 16, m_tile = n.m }
    end
    return specs -- the caller sorts by name
end

return M
