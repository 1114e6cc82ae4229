-- util.lua — compiler-style error messages and C literals, shared by every generator module.
local M = {}

local format, pack, unpack = string.format, string.pack, string.unpack
local find = string.find
local tointeger, mtype = math.tointeger, math.type
local huge = math.huge
local sort = table.sort

-- The source position a spec came from when its caller names none.
M.DEFAULT_WHERE = "spec:1"

-- "file:line: error: message", the form compilers use, so editors and CI jump to the spot.
function M.err(where, fmt, ...)
    return format("%s: error: %s", where or M.DEFAULT_WHERE, format(fmt, ...))
end

-- An integer from a Lua integer, an integral float or a decimal string; nil otherwise.
function M.int(v)
    if mtype(v) == "integer" then return v end
    if mtype(v) == "float" then return tointeger(v) end
    if type(v) == "string" and find(v, "^%d+$") then return tointeger(tonumber(v, 10)) end
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

return M
