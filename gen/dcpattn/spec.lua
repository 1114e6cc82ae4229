-- spec.lua — variant specs: the family registry, parsing and building canonical names,
-- validation, the default (AOT) set. One canonical name per variant is the kernel symbol,
-- the in-memory key and the file stem (docs/contract.md 9; the grammar: docs/architecture.md).
local M = {}

local type, tostring, ipairs = type, tostring, ipairs
local format, lower, match, gmatch = string.format, string.lower, string.match, string.gmatch
local concat, sort = table.concat, table.sort
local util = require "dcpattn.util"

local FAMILIES = {
    combine = require "dcpattn.combine",
    gqa = require "dcpattn.gqa",
    merge = require "dcpattn.merge",
    mla = require "dcpattn.mla",
    sparse = require "dcpattn.sparse",
}
local KNOWN = concat(util.sorted_keys(FAMILIES), ", ")

-- The family module of a spec table or a family name, or nil.
function M.family(x)
    if type(x) == "table" then x = x.family end
    return type(x) == "string" and FAMILIES[x] or nil
end

-- Normalized copy of `spec` (aliases resolved, numbers as integers), or nil, err.
-- `where` is the spec's source position ("file:line"), spec:1 when absent.
function M.validate(spec, where)
    if type(spec) ~= "table" then
        return nil, util.err(where, "variant spec must be a table, got %s", type(spec))
    end
    local fam = M.family(spec)
    if not fam then
        return nil, util.err(where, "unknown variant family '%s' (known: %s)",
            tostring(spec.family), KNOWN)
    end
    local s, msg = fam.validate(spec)
    if not s then return nil, util.err(where, "%s: %s", fam.family, msg) end
    return s
end

-- Spec of a variant name; case and dtype spellings are forgiven (GQA_BF16_D128_G8_M16,
-- gqa_bfloat16_d0128_g8_m16), the canonical name is what name() gives back.
function M.parse(name, where)
    if type(name) ~= "string" then
        return nil, util.err(where, "variant name must be a string, got %s", type(name))
    end
    local s = lower(match(name, "^%s*(.-)%s*$"))
    if s == "" then return nil, util.err(where, "empty variant name") end
    if not match(s, "^[%w_]+$") then
        return nil, util.err(where, "variant name '%s' has characters other than letters, digits and '_'", name)
    end
    local parts = {}
    for p in gmatch(s .. "_", "([^_]*)_") do parts[#parts + 1] = p end
    for _, p in ipairs(parts) do
        if p == "" then return nil, util.err(where, "variant name '%s' has an empty field", name) end
    end
    local fam = FAMILIES[parts[1]]
    if not fam then
        return nil, util.err(where, "unknown variant family '%s' in '%s' (known: %s)", parts[1], name, KNOWN)
    end
    local fields = {}
    for i = 2, #parts do fields[i - 1] = parts[i] end
    local spec, msg = fam.parse(fields)
    if not spec then return nil, util.err(where, "'%s': %s", name, msg) end
    return spec
end

-- The canonical name of a spec, or nil, err if the spec is invalid.
function M.name(spec, where)
    local s, err = M.validate(spec, where)
    if not s then return nil, err end
    return M.family(s).name(s)
end

-- Spec and canonical name from either a name or a spec table.
function M.resolve(x, where)
    local s, err
    if type(x) == "string" then s, err = M.parse(x, where) else s, err = M.validate(x, where) end
    if not s then return nil, err end
    return s, M.family(s).name(s)
end

-- Sorted canonical names of the default (AOT) variant set.
function M.default_set()
    local names = {}
    for _, fname in ipairs(util.sorted_keys(FAMILIES)) do
        for _, spec in ipairs(FAMILIES[fname].defaults()) do
            names[#names + 1] = assert(M.name(spec))
        end
    end
    sort(names)
    return names
end

return M
