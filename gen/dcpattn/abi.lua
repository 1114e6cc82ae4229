-- abi.lua — the kernel ABI text, taken from the body of DCPATTN_KERNEL_ABI in dcpattn.h.
-- It must be byte-identical to what the C code's own stringization of the macro gives
-- (#__VA_ARGS__ through one level of expansion), because the cache key is a hash of the
-- rendered source: continuation lines joined, comments gone, each whitespace run between
-- tokens one space, nothing leading or trailing.
local M = {}

local format, find, gsub, match, sub = string.format, string.find, string.gsub, string.match, string.sub

M.MACRO = "DCPATTN_KERNEL_ABI"

function M.from_header(text, where)
    if type(text) ~= "string" then
        return nil, format("%s: error: header text expected, got %s", where or "dcpattn.h", type(text))
    end
    where = where or "dcpattn.h"
    -- Translation phase 2: a backslash ending a line splices it to the next one.
    local src = gsub(gsub(text, "\r\n", "\n"), "\\[ \t]*\n", "")
    local pos = 1
    while true do
        local s, e = find(src, "[^\n]*", pos)
        local line = sub(src, s, e)
        local body = match(line, "^%s*#%s*define%s+" .. M.MACRO .. "%f[^%w_](.*)$")
        if body then
            if sub(body, 1, 1) == "(" then
                return nil, format("%s: error: %s is a function-like macro", where, M.MACRO)
            end
            body = gsub(body, "/%*.-%*/", " ")
            body = gsub(body, "//.*$", "")
            body = gsub(body, "%s+", " ")
            body = match(body, "^ ?(.-) ?$")
            if body == "" then return nil, format("%s: error: %s is empty", where, M.MACRO) end
            return body
        end
        if e >= #src then break end
        pos = e + 2
    end
    return nil, format("%s: error: no #define %s found", where, M.MACRO)
end

return M
