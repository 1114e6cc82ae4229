-- limits.lua — the family limits of the spec as C, for include/dcpattn.h. The header checks a
-- descriptor with no context and no generator at hand (dcpattn_attn_desc_validate), so it
-- carries these numbers in a block written from this module: `make limits` (the CLI's
-- --limits) rewrites it, and tests/test_gen.lua fails while the block and the spec disagree.
-- The numbers themselves are written once, in gqa.lua, mla.lua and tiling.lua.
local M = {}

local format, find, sub = string.format, string.find, string.sub
local concat = table.concat
local gqa = require "dcpattn.gqa"
local mla = require "dcpattn.mla"
local tiling = require "dcpattn.tiling"
local sparse = require "dcpattn.sparse"

M.BEGIN = "/* ---- BEGIN family limits: generated from gen/dcpattn/ by `make limits`, do not edit ---- */"
M.END = "/* ---- END family limits ---- */"

-- "a, b or c", for messages.
local function or_list(t)
    if #t == 1 then return format("%d", t[1]) end
    return concat(t, ", ", 1, #t - 1) .. " or " .. t[#t]
end

-- The block, markers included, each line ending in a newline.
function M.c_block()
    local lines = { M.BEGIN }
    local function def(name, value, from)
        lines[#lines + 1] = format("#define DCPATTN__%s %s /* %s */", name, value, from)
    end
    local function list(name, t, from)
        def(name, concat(t, ", "), from)
        def(name .. "_TEXT", '"' .. or_list(t) .. '"', from)
    end
    list("GQA_HEAD_DIMS", gqa.head_dims, "gqa.lua HEAD_DIMS")
    def("GQA_MAX_GROUP", gqa.max_group, "gqa.lua MAX_GROUP")
    def("MLA_HEAD_DIM", mla.DQK, "mla.lua DQK")
    def("MLA_HEAD_DIM_V", mla.DV, "mla.lua DV")
    def("MLA_MAX_HEADS", mla.max_hq, "mla.lua MAX_HQ")
    list("MLA_PAGE_SIZES", mla.page_sizes, "mla.lua PAGE_SIZES")
    def("MAX_PAGE_SIZE", tiling.MAX_PAGE_SIZE, "tiling.lua MAX_PAGE_SIZE")
    def("SPARSE_MAX_TOPK", sparse.max_topk, "sparse.lua MAX_TOPK")
    def("SPARSE_FP8DS_ROW_BYTES", sparse.fp8ds_row_bytes, "sparse.lua FP8DS_ROW_BYTES")
    lines[#lines + 1] = M.END
    return concat(lines, "\n") .. "\n"
end

-- `text` (a header) with its block replaced by c_block(), or nil, err when the block's
-- markers are not there exactly once, in order, each on a line of its own.
function M.splice(text, where)
    where = where or "dcpattn.h"
    local function line_at(marker)
        local s, e = find(text, marker, 1, true)
        if not s then return nil, format("%s: error: no line %s", where, marker) end
        if find(text, marker, e + 1, true) then return nil, format("%s: error: %s stands twice", where, marker) end
        if (s > 1 and sub(text, s - 1, s - 1) ~= "\n") or sub(text, e + 1, e + 1) ~= "\n" then
            return nil, format("%s: error: %s is not a line of its own", where, marker)
        end
        return s, e
    end
    local b, err = line_at(M.BEGIN)
    if not b then return nil, err end
    local _, e = line_at(M.END)
    if not _ then return nil, e end
    if e < b then return nil, format("%s: error: %s comes before %s", where, M.END, M.BEGIN) end
    return sub(text, 1, b - 1) .. M.c_block() .. sub(text, e + 2)
end

return M
