-- mla.lua — the MLA family (DeepSeek absorbed decode, DESIGN.md 6): the name is reserved,
-- mla_<dtype>_h<Hq>_..., and every spec is refused until the kernel exists.
local M = {}

M.family = "mla"
M.template = "templates/mla_inst.cu"
M.form = "mla_<dtype>_h<Hq>_..."

local NOT_YET = "MLA variants are not implemented yet"

function M.validate() return nil, NOT_YET end
function M.parse() return nil, NOT_YET end
function M.defaults() return {} end

return M
