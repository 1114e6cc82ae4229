-- util.lua — compiler-style error messages and C literals, shared by every generator module;
-- the name, parse and validation machinery shared by the family modules.
local M = {}

local type, tostring, pairs, ipairs = type, tostring, pairs, ipairs
local format, pack, unpack = string.format, string.pack, string.unpack
local find, match = string.find, string.match
local tointeger, mtype = math.tointeger, math.type
local huge = math.huge
local concat, sort = table.concat, table.sort
local types = require "dcpattn.types"

-- The source position a spec came from when its caller names none.
M.DEFAULT_WHERE = "spec:1"

-- "file:line: error: message", the form compilers use, so editors and CI jump to the spot.
function M.err(where, fmt, ...)
    return format("%s: error: %s", where or M.DEFAULT_WHERE, format(fmt, ...))
end

-- An integer from a Lua integer, an integral float or a decimal string; nil otherwise, also
-- for digits past the integer range (tonumber without a base reads those as a float, where
-- tonumber(v, 10) would wrap them around).
function M.int(v)
    if mtype(v) == "integer" then return v end
    if mtype(v) == "float" then return tointeger(v) end
    if type(v) == "string" and find(v, "^%d+$") then return tointeger(tonumber(v)) end
    return nil
end

-- The shortest decimal that reads back as the same float32, with an `f` suffix.
-- Non-finite values have no C literal; the caller must not bind them.
function M.float_literal(x)
    assert(type(x) == "number", "float_literal: number expected")
    if x ~= x then return nil, "NaN has no C float literal" end
    if x == huge or x == -huge then return nil, "infinity has no C float literal" end
    local target = unpack("<f", pack("<f", x))
    local s
    for digits = 1, 9 do -- 9 significant digits round-trip every float32
        s = format("%." .. digits .. "g", target)
        if unpack("<f", pack("<f", tonumber(s))) == target then break end
    end
    if not find(s, "[.eE]") then s = s .. ".0" end
    return s .. "f"
end

-- Sorted keys of a table, so anything emitted from it is deterministic.
function M.sorted_keys(t)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    return keys
end

-- Sorted integer keys of a table, as an array.
function M.sorted_numbers(t)
    local ks = {}
    for k in pairs(t) do ks[#ks + 1] = k end
    sort(ks)
    return ks
end

-- The smallest key of `tiles` (a table keyed by tile size) that holds `rows`, else the
-- largest (the rows then span several tiles).
function M.tile_for(tiles, rows)
    local best, largest
    for m in pairs(tiles) do
        if m >= rows and (not best or m < best) then best = m end
        if not largest or m > largest then largest = m end
    end
    return best or largest
end

-- ---- family modules (gen/dcpattn/<family>.lua) ----

-- A field value for a message; absent fields say so.
function M.show(v)
    if v == nil then return "(missing)" end
    return tostring(v)
end

-- The canonical dtype of `v` if it is one of `allowed`, else nil and a message;
-- `what` qualifies the dtype in the message ("", "input ", "output ").
function M.dtype(v, allowed, what)
    local c = types.canonical(v, allowed)
    if not c then
        return nil, format("unknown %sdtype '%s' (expected %s)", what, M.show(v), concat(allowed, ", "))
    end
    return c
end

-- The query dtype and KV-cache dtype of an attention spec (spec.dtype, spec.kv_dtype): the
-- cache has the query's 16-bit dtype (kv_dtype absent or equal) or is e4m3; or nil, message.
function M.attn_dtypes(spec, dtypes, kv_dtypes)
    local dtype, err = M.dtype(spec.dtype, dtypes, "")
    if not dtype then return nil, err end
    if spec.kv_dtype == nil then return dtype, dtype end
    local kv_dtype
    kv_dtype, err = M.dtype(spec.kv_dtype, kv_dtypes, "KV ")
    if not kv_dtype then return nil, err end
    if kv_dtype ~= dtype and kv_dtype ~= "e4m3" then
        return nil, format("KV dtype '%s' with dtype '%s' (a 16-bit cache has the query's dtype; or e4m3)",
            kv_dtype, dtype)
    end
    return dtype, kv_dtype
end

-- Installs the name machinery of family module F from its name layout: an array of
-- { field } (a dtype, e.g. bf16), { field, letter } (an integer after a letter, e.g. d128)
-- and { field, prefix, optional = field2 } (a value after a prefix, e.g. kve4m3, left out of
-- the name when it equals field2's value and then taken as it; optional = true: left out when
-- absent, e.g. the arch of sparse_bf16_kvfp8ds_m64_sm90), in name order. F has
-- .family and .form; check(spec) validates the known fields and returns the normalized spec
-- or nil, message. Sets F.validate, F.parse and F.name.
function M.family(F, layout, check)
    assert(type(F.family) == "string" and type(F.form) == "string", "family: F.family and F.form expected")
    local known, required = { family = true }, 0
    for _, f in ipairs(layout) do
        known[f[1]] = true
        if not f.optional then required = required + 1 end
    end

    function F.validate(spec)
        for k in pairs(spec) do
            if not known[k] then return nil, format("unknown field '%s'", tostring(k)) end
        end
        return check(spec)
    end

    -- `fields` are the name's '_'-separated parts after the family.
    function F.parse(fields)
        local n, taken = #fields, 0 -- taken: optional fields present
        local function count_err()
            local opt = taken > 0 and format(" and %d optional", taken) or ""
            return nil, format("%s variant names have %d fields after the family (%s), got %d%s",
                F.family, required, F.form, n - taken, opt)
        end
        if n < required or n > #layout then return count_err() end
        local spec = { family = F.family }
        local i = 1
        for _, f in ipairs(layout) do
            local v = fields[i]
            if f.optional then
                local t = v and match(v, "^" .. f[2] .. "(%w+)$")
                if t then
                    spec[f[1]] = t
                    i, taken = i + 1, taken + 1
                end
            else
                if v == nil then return count_err() end
                if f[2] then
                    local digits = match(v, "^" .. f[2] .. "(%d+)$")
                    if not digits then return nil, format("malformed field '%s' (expected %s)", v, F.form) end
                    v = M.int(digits) or digits -- too large: the family's check names it as written
                end
                spec[f[1]] = v
                i = i + 1
            end
        end
        if i <= n then return count_err() end
        return F.validate(spec)
    end

    function F.name(spec)
        local parts = { F.family }
        for _, f in ipairs(layout) do
            local v = spec[f[1]]
            if not (f.optional and (v == nil or v == spec[f.optional])) then
                parts[#parts + 1] = (f[2] or "") .. v
            end
        end
        return concat(parts, "_")
    end
end

-- Bindings of an attention instance template (gqa, mla): NAME, the element type T and the
-- THREADS of traits t, and the family's `extra` bindings.
function M.attn_bindings(spec, name, t, extra)
    local b = { NAME = name, T = types.info[spec.dtype].ctype, THREADS = t.threads }
    for k, v in pairs(extra) do b[k] = v end
    return b
end

-- meta of an attention variant (gqa, mla): the launch numbers of its traits t (threads, smem,
-- kv_tile, stages), its rows per CTA and dtype, and the family's `extra` fields.
function M.attn_meta(spec, t, extra)
    local meta = {
        threads = t.threads, smem = t.smem, rows = spec.m_tile,
        kv_tile = t.kv_tile, stages = t.stages, dtype = spec.dtype,
    }
    for k, v in pairs(extra) do meta[k] = v end
    return meta
end

-- A family of one kernel over (input dtype, output dtype) pairs: merge and combine.
-- o: family, template, dtypes (allowed), defaults (the AOT pairs), threads, items (optional:
-- bound as ITEMS and reported in meta). Name: <family>_<in>_<out>.
function M.dtype_pair_family(o)
    local F = { family = o.family, template = o.template, form = o.family .. "_<in>_<out>" }
    M.family(F, { { "in_dtype" }, { "out_dtype" } }, function(spec)
        local i, err = M.dtype(spec.in_dtype, o.dtypes, "input ")
        if not i then return nil, err end
        local out = i
        if spec.out_dtype ~= nil then
            out, err = M.dtype(spec.out_dtype, o.dtypes, "output ")
            if not out then return nil, err end
        end
        return { family = o.family, in_dtype = i, out_dtype = out }
    end)

    function F.bindings(spec, name)
        return {
            NAME = name,
            IN_T = types.info[spec.in_dtype].ctype,
            OUT_T = types.info[spec.out_dtype].ctype,
            THREADS = o.threads,
            ITEMS = o.items,
        }
    end

    function F.meta(spec)
        return { threads = o.threads, items = o.items, smem = 0, in_dtype = spec.in_dtype, out_dtype = spec.out_dtype }
    end

    function F.defaults()
        local specs = {}
        for i, d in ipairs(o.defaults) do
            specs[i] = { family = o.family, in_dtype = d[1], out_dtype = d[2] }
        end
        return specs
    end
    return F
end

return M
