-- dcpattn — the kernel generator: variant specs and canonical names, the tiling heuristic,
-- template rendering. Used by the C header at run time (one lua_State per context, base,
-- string, table, math and package libraries only) and by the CLI gen/dcpattn-gen.
-- No io, no os: files arrive through opts.read. Expected failures return nil and a
-- "file:line: error: message" string; only bugs raise.
local M = {}

local type = type
local spec = require "dcpattn.spec"
local tiling = require "dcpattn.tiling"
local render = require "dcpattn.render"
local abi = require "dcpattn.abi"
local limits = require "dcpattn.limits"

-- parse(name [, where]) -> spec | nil, err. `where` ("file:line") defaults to spec:1.
M.parse = spec.parse

-- name(spec) -> canonical name | nil, err.
M.name = spec.name

-- validate(spec [, where]) -> normalized spec | nil, err.
M.validate = spec.validate

-- default_set() -> sorted array of the canonical names of the AOT set.
M.default_set = spec.default_set

-- select_attn(desc [, where]) -> canonical name | nil, err.
M.select_attn = tiling.attn

-- render(name_or_spec, opts) -> source, meta | nil, err.
-- opts.read(path) gives the text of a data-root-relative file ("templates/x.cuh") or nil, err;
-- opts.abi is the kernel ABI text (see abi_from_header); opts.where the name's position.
-- meta: kernel (= name), family, template, threads, smem (dynamic shared bytes), rows (query
-- rows per CTA, attention only), includes (files inlined), and family details.
function M.render(name, opts)
    assert(type(opts) == "table" and type(opts.read) == "function", "render: opts.read expected")
    local s, canonical = spec.resolve(name, opts.where)
    if not s then return nil, canonical end
    local fam = spec.family(s)
    local template = fam.template_for and fam.template_for(s) or fam.template
    local src, info = render.render(template, fam.bindings(s, canonical), canonical, opts)
    if not src then return nil, info end
    local meta = fam.meta(s)
    meta.kernel = canonical
    meta.family = fam.family
    meta.template = template
    meta.includes = info.includes
    return src, meta
end

-- abi_from_header(text of include/dcpattn.h) -> the DCPATTN_KERNEL_ABI body as one line,
-- as the C preprocessor's stringization gives it | nil, err.
M.abi_from_header = function(text) return abi.from_header(text) end

-- c_limits() -> the block of family limits include/dcpattn.h carries, as C.
M.c_limits = limits.c_block

-- splice_limits(text of include/dcpattn.h [, where]) -> the text with that block rewritten
-- | nil, err.
M.splice_limits = limits.splice

return M
