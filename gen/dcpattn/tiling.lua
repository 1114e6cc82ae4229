-- tiling.lua — which attention variant serves a descriptor (the tiling heuristic).
-- The query rows of one KV head, max_q_len x group of them, go into one M tile when they
-- fit, so each KV byte is read once for all of them (docs/contract.md 8).
local M = {}

local type, tostring, pairs, ipairs = type, tostring, pairs, ipairs
local format, lower = string.format, string.lower
local concat = table.concat
local util = require "dcpattn.util"
local types = require "dcpattn.types"
local spec = require "dcpattn.spec"
local gqa = require "dcpattn.gqa"
local mla = require "dcpattn.mla"
local sparse = require "dcpattn.sparse"

M.DEFAULT_WHERE = "desc:1"

-- Largest page of a paged KV cache, in tokens, for every family (MLA allows fewer sizes:
-- mla.page_sizes).
M.MAX_PAGE_SIZE = 256

local FIELDS = {
    dtype = true, kv_dtype = true, hq = true, hkv = true, dqk = true, dv = true, page_size = true,
    max_q_len = true, arch = true, sparse_topk = true,
}

-- desc.<key> as an integer >= lo; `default` when nil or 0 and a default exists.
local function field(desc, key, lo, default)
    local v = desc[key]
    if (v == nil or v == 0) and default then return default end
    local n = util.int(v)
    if not n or n < lo then
        return nil, format("%s = %s: expected an integer >= %d", key, tostring(v), lo)
    end
    return n
end

-- The page sizes MLA takes (those of its TMA tiles; sparse MLA keeps the same set).
local function mla_page(v, where)
    for _, p in ipairs(mla.page_sizes) do
        if p == v.page_size then return true end
    end
    return nil, util.err(where, "page_size = %d: MLA takes %s", v.page_size, concat(mla.page_sizes, ", "))
end

-- Canonical name of the variant for `desc` = { dtype = "bf16"|"fp16" [, kv_dtype = dtype or
-- "e4m3" or (sparse) "fp8ds"], hq, hkv, dqk, dv, page_size, max_q_len [, arch]
-- [, sparse_topk] }, or nil, err.
-- arch: the compute capability as 10 * major + minor (90 for sm_90a); 0 or absent: any.
-- sparse_topk > 0: sparse MLA (the ids of each query token instead of a causal prefix).
function M.attn(desc, where)
    where = where or M.DEFAULT_WHERE
    if type(desc) ~= "table" then
        return nil, util.err(where, "attention descriptor must be a table, got %s", type(desc))
    end
    for k in pairs(desc) do
        if not FIELDS[k] then return nil, util.err(where, "unknown descriptor field '%s'", tostring(k)) end
    end
    local v = {}
    local checks = {
        { "hq", 1 }, { "hkv", 1 }, { "dqk", 1 }, { "dv", 1, "dqk" }, { "page_size", 1, 16 },
        { "max_q_len", 1, 1 }, { "arch", 0, 0 }, { "sparse_topk", 0, 0 },
    }
    for _, c in ipairs(checks) do
        local default = c[3]
        if type(default) == "string" then default = v[default] end
        local n, err = field(desc, c[1], c[2], default)
        if not n then return nil, util.err(where, "%s", err) end
        v[c[1]] = n
    end
    if v.page_size > M.MAX_PAGE_SIZE then
        return nil, util.err(where, "page_size = %d: expected 1..%d", v.page_size, M.MAX_PAGE_SIZE)
    end
    local dtype = desc.dtype == nil and "bf16" or desc.dtype
    if v.sparse_topk > 0 then return M.sparse(desc, v, dtype, where) end
    if v.dqk == mla.DQK and v.dv == mla.DV then
        local fp8 = desc.kv_dtype ~= nil and types.canonical(desc.kv_dtype, { "e4m3" })
        local same = { "bf16", "fp16" }
        if desc.kv_dtype ~= nil and not fp8 and types.canonical(desc.kv_dtype, same) ~= types.canonical(dtype, same) then
            return nil, util.err(where, "kv_dtype = %s with dtype = %s: MLA's cache has the query's dtype, or e4m3",
                tostring(desc.kv_dtype), tostring(dtype))
        end
        if v.hkv ~= 1 then
            return nil, util.err(where, "hkv = %d: MLA has one latent KV head", v.hkv)
        end
        if v.hq > mla.max_hq then
            return nil, util.err(where, "hq = %d: MLA supports at most %d query heads per rank", v.hq, mla.max_hq)
        end
        local ok, err = mla_page(v, where)
        if not ok then return nil, err end
        return spec.name({
            family = "mla",
            dtype = dtype,
            kv_dtype = fp8 and "e4m3" or nil,
            hq = v.hq,
            m_tile = mla.m_tile_for(v.max_q_len * v.hq),
        }, where)
    end
    if v.dqk ~= v.dv then
        return nil, util.err(where, "dqk = %d, dv = %d: GQA needs equal head dims (MLA: 576 and 512)",
            v.dqk, v.dv)
    end
    if v.hq % v.hkv ~= 0 then
        return nil, util.err(where, "hq = %d is not a multiple of hkv = %d", v.hq, v.hkv)
    end
    local group = v.hq // v.hkv
    local rows = v.max_q_len * group
    return spec.name({
        family = "gqa",
        dtype = dtype,
        kv_dtype = desc.kv_dtype,
        head_dim = v.dqk,
        group = group,
        m_tile = gqa.m_tile_for(rows, v.dqk, v.arch),
    }, where)
end

-- Sparse MLA (desc.sparse_topk > 0, fields checked as integers in `v`): the MLA shape, a top-k
-- list of at most sparse.max_topk ids, a cache of the query's dtype or fp8ds.
function M.sparse(desc, v, dtype, where)
    if v.dqk ~= sparse.DQK or v.dv ~= sparse.DV or v.hkv ~= 1 then
        return nil, util.err(where, "sparse_topk = %d: sparse attention is MLA's (dqk %d, dv %d, hkv 1), got %d, %d, %d",
            v.sparse_topk, sparse.DQK, sparse.DV, v.dqk, v.dv, v.hkv)
    end
    if v.sparse_topk > sparse.max_topk then
        return nil, util.err(where, "sparse_topk = %d: at most %d", v.sparse_topk, sparse.max_topk)
    end
    if v.hq > sparse.max_hq then
        return nil, util.err(where, "hq = %d: sparse MLA supports at most %d query heads per rank", v.hq, sparse.max_hq)
    end
    local ok, err = mla_page(v, where)
    if not ok then return nil, err end
    -- an FP8 cache (fp8ds, e4m3) on sm_90a: the MLA kernel's wgmma pipeline (sparse.lua)
    local fp8 = type(desc.kv_dtype) == "string" and lower(desc.kv_dtype) == sparse.fp8ds or
        types.canonical(desc.kv_dtype, { sparse.e4m3 }) ~= nil
    local arch = fp8 and v.arch >= sparse.sm90_arch and v.arch < 100 and sparse.sm90_arch or nil
    -- (the sm_90a kernel: at most 16 heads take the narrow tile)
    local m = arch and v.hq <= sparse.sm90_narrow and sparse.sm90_narrow or 64
    return spec.name({ family = "sparse", dtype = dtype, kv_dtype = desc.kv_dtype, m_tile = m, arch = arch }, where)
end

return M
