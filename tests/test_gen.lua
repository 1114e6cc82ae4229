-- test_gen.lua — the kernel generator (gen/): names, specs, the tiling heuristic, the template
-- engine, the ABI text, the CLI. Needs no GPU. Run from the repository root:
--     lua5.4 tests/test_gen.lua
-- Ends with "N passed, N failed"; the exit status is 1 on any failure.
-- The repository root, absolute (the CLI tests run from other directories): tests/..
local ROOT
do
    local dir = arg and arg[0] and arg[0]:match("^(.*)/[^/]*$") or "."
    local p = io.popen("cd '" .. (dir .. "/.."):gsub("'", "'\\''") .. "' && pwd")
    ROOT = p and p:read("l") or ".."
    if p then p:close() end
end
package.path = ROOT .. "/gen/?.lua;" .. ROOT .. "/gen/?/init.lua"
package.cpath = ""

local dcpattn = require "dcpattn"
local render = require "dcpattn.render"
local util = require "dcpattn.util"

local format, find, match, gsub, gmatch = string.format, string.find, string.match, string.gsub, string.gmatch

local passed, failed = 0, 0
local function check(cond, fmt, ...)
    if cond then
        passed = passed + 1
    else
        failed = failed + 1
        local line = debug.getinfo(2, "l").currentline
        io.stderr:write(format("tests/test_gen.lua:%d: FAIL: ", line), format(fmt or "", ...), "\n")
    end
    return cond
end
local function note(fmt, ...) print(format("note: " .. fmt, ...)) end

local function read_file(path)
    local f = io.open(path, "rb")
    if not f then return nil, path .. ": cannot open" end
    local s = f:read("a")
    f:close()
    return s
end
local function write_file(path, s)
    local f = assert(io.open(path, "wb"))
    f:write(s)
    f:close()
end
local function sh_quote(s) return "'" .. gsub(s, "'", "'\\''") .. "'" end

-- Runs a shell command; returns stdout, stderr, exit code.
local TMP = assert(io.popen("mktemp -d"):read("l"))
local function run(cmd)
    local errf = TMP .. "/stderr.txt"
    local p = assert(io.popen("{ " .. cmd .. "\n} 2>" .. sh_quote(errf)))
    local out = p:read("a")
    local _, _, code = p:close()
    return out, read_file(errf) or "", code
end

-- Splits text into lines (no trailing empty line).
local function lines_of(s)
    local t = {}
    for l in (s .. (s:sub(-1) == "\n" and "" or "\n")):gmatch("([^\n]*)\n") do t[#t + 1] = l end
    return t
end

-- Walks rendered source honouring #line and checks that each ordinary line equals the line
-- of the file it claims to come from (placeholder lines and pragma-once lines excepted).
-- Returns the number of lines verified, or nil, message.
local function verify_lines(src, read)
    local ls = lines_of(src)
    local file, lineno, verified = nil, nil, 0
    local cache = {}
    for i = 2, #ls do
        local n, f = match(ls[i], '^#line (%d+) "([^"]+)"$')
        if n then
            file, lineno = f, tonumber(n)
        else
            if not file then return nil, format("line %d before any #line", i) end
            local text = cache[file]
            if text == nil then
                if file == "dcpattn_abi.h" then text = false else text = lines_of(assert(read(file))) end
                cache[file] = text
            end
            if text then
                local orig = text[lineno]
                if orig == nil then return nil, format("%s:%d does not exist (output line %d)", file, lineno, i) end
                local exempt = find(orig, "${", 1, true) or match(orig, "^%s*#%s*pragma%s+once")
                    or match(orig, '^%s*#%s*include%s*"')
                if not exempt then
                    if orig ~= ls[i] then
                        return nil, format("output line %d claims %s:%d but differs:\n  %s\n  %s", i, file,
                            lineno, ls[i], orig)
                    end
                    verified = verified + 1
                end
            end
            lineno = lineno + 1
        end
    end
    return verified
end

local function is_error(msg, where)
    return type(msg) == "string" and find(msg, "^" .. gsub(where, "%p", "%%%0") .. ": error: ") ~= nil
end

-- ===================================== the public table =====================================
do
    local want = { "parse", "name", "validate", "default_set", "select_attn", "render", "abi_from_header",
        "c_limits", "splice_limits" }
    local have = {}
    for k, v in pairs(dcpattn) do have[k] = type(v) end
    for _, k in ipairs(want) do
        check(have[k] == "function", "dcpattn.%s missing", k)
        have[k] = nil
    end
    check(next(have) == nil, "dcpattn has extra field %s", tostring(next(have)))
end

-- ===================================== names and specs ======================================
local defaults = dcpattn.default_set()
do
    check(#defaults > 0 and #defaults <= 72, "default set has %d variants", #defaults)
    local seen, ngqa = {}, 0
    for i, n in ipairs(defaults) do
        check(not seen[n], "duplicate default name %s", n)
        seen[n] = true
        if i > 1 then check(defaults[i - 1] < n, "default set not sorted at %s", n) end
        local spec, err = dcpattn.parse(n)
        if check(spec, "default %s does not parse: %s", n, err) then
            check(dcpattn.name(spec) == n, "name(parse(%s)) = %s", n, tostring(dcpattn.name(spec)))
            check(match(n, "^[%l%d_]+$"), "%s is not a C identifier of lower case", n)
        end
        if match(n, "^gqa_") then ngqa = ngqa + 1 end
    end
    check(ngqa >= 1 and ngqa <= 44, "%d gqa variants in the default set", ngqa)
    for _, n in ipairs { "merge_bf16_bf16", "merge_fp16_fp16", "merge_fp32_fp32", "merge_fp32_bf16",
        "merge_fp32_fp16", "gqa_bf16_d128_g8_m16", "gqa_bf16_d64_g1_m64", "gqa_bf16_d256_g16_m16",
        "gqa_bf16_kve4m3_d128_g8_m16", "gqa_bf16_kve4m3_d128_g8_m64" } do
        check(seen[n], "default set lacks %s", n)
    end
    local again = dcpattn.default_set()
    check(table.concat(again, " ") == table.concat(defaults, " "), "default_set not deterministic")
end

do -- parse(name(spec)) round-trips over the whole space
    local count, names = 0, {}
    for _, dt in ipairs { "bf16", "fp16" } do
        for _, d in ipairs { 64, 96, 128, 192, 256 } do
            for g = 1, 64 do
                for _, m in ipairs { 16, 32, 64 } do
                    local spec = { family = "gqa", dtype = dt, head_dim = d, group = g, m_tile = m }
                    local n = dcpattn.name(spec)
                    local back = n and dcpattn.parse(n)
                    local ok = back and back.dtype == dt and back.head_dim == d and back.group == g
                        and back.m_tile == m and back.family == "gqa"
                    if not ok then check(false, "round trip of gqa %s d%d g%d m%d", dt, d, g, m) end
                    if n then
                        if names[n] then check(false, "name %s not unique", n) end
                        names[n] = true
                    end
                    count = count + 1
                end
            end
        end
    end
    for _, i in ipairs { "bf16", "fp16", "fp32" } do
        for _, o in ipairs { "bf16", "fp16", "fp32" } do
            local n = dcpattn.name { family = "merge", in_dtype = i, out_dtype = o }
            check(n == format("merge_%s_%s", i, o), "merge name %s", tostring(n))
            local back = dcpattn.parse(n)
            check(back and back.in_dtype == i and back.out_dtype == o, "merge round trip %s", n)
            check(not names[n], "name %s not unique", n)
            names[n] = true
        end
    end
    check(count == 2 * 5 * 64 * 3, "round trips ran")
    -- the FP8 cache: a field of its own, absent when the cache has the query's dtype
    for _, dt in ipairs { "bf16", "fp16" } do
        for _, d in ipairs { 64, 96, 128, 192, 256 } do
            for _, g in ipairs { 1, 7, 64 } do
                local spec = { family = "gqa", dtype = dt, kv_dtype = "e4m3", head_dim = d, group = g, m_tile = 32 }
                local n = dcpattn.name(spec)
                local back = n and dcpattn.parse(n)
                check(n == format("gqa_%s_kve4m3_d%d_g%d_m32", dt, d, g) and back and back.kv_dtype == "e4m3"
                    and back.dtype == dt and back.head_dim == d and back.group == g, "FP8 round trip %s", tostring(n))
                check(n and not names[n], "name %s not unique", tostring(n))
                if n then names[n] = true end
                spec.kv_dtype = dt
                check(dcpattn.name(spec) == format("gqa_%s_d%d_g%d_m32", dt, d, g), "same-dtype cache named without kv")
            end
        end
    end
    check(dcpattn.name { family = "gqa", dtype = "bf16", head_dim = 128, group = 6, m_tile = 32 }
        == "gqa_bf16_d128_g6_m32", "non power of two group")
end

do -- forgiving input, canonical output
    local cases = {
        { "GQA_BF16_D128_G8_M16", "gqa_bf16_d128_g8_m16" },
        { "  gqa_bfloat16_d0128_g08_m16 ", "gqa_bf16_d128_g8_m16" },
        { "gqa_half_d64_g1_m64", "gqa_fp16_d64_g1_m64" },
        { "gqa_bf16_kvfp8_d128_g8_m16", "gqa_bf16_kve4m3_d128_g8_m16" },
        { "GQA_HALF_KVE4M3_D64_G1_M64", "gqa_fp16_kve4m3_d64_g1_m64" },
        { "gqa_bf16_kvbfloat16_d128_g8_m16", "gqa_bf16_d128_g8_m16" },
        { "merge_float_half", "merge_fp32_fp16" },
        { "SPARSE_BF16_KVFP8DS_M64_SM90", "sparse_bf16_kvfp8ds_m64_sm90" },
        { "sparse_bfloat16_kvfp8ds_m64", "sparse_bf16_kvfp8ds_m64" },
        { "sparse_half_kvfp8_m64", "sparse_fp16_kve4m3_m64" },
        { "sparse_half_kvfp8_m64_sm90", "sparse_fp16_kve4m3_m64_sm90" },
    }
    for _, c in ipairs(cases) do
        local spec, err = dcpattn.parse(c[1])
        check(spec and dcpattn.name(spec) == c[2], "parse %q -> %s (%s)", c[1], spec and dcpattn.name(spec) or "nil", tostring(err))
    end
    local v = dcpattn.validate { family = "gqa", dtype = "half", head_dim = 128.0, group = "8", m_tile = 16 }
    check(v and v.dtype == "fp16" and math.type(v.head_dim) == "integer" and v.group == 8, "validate normalizes")
    local m = dcpattn.validate { family = "merge", in_dtype = "fp32" }
    check(m and m.out_dtype == "fp32", "merge out_dtype defaults to in_dtype")
end

do -- bad specs: compiler-style messages naming the problem
    local bad = {
        { "attn_bf16_d128", "unknown variant family 'attn'" },
        { "gqa_bf16_d100_g8_m16", "head dim 100" },
        { "gqa_int8_d128_g8_m16", "unknown dtype 'int8'" },
        { "gqa_fp32_d128_g8_m16", "unknown dtype 'fp32'" },
        { "gqa_bf16_d128_g0_m16", "group" },
        { "gqa_bf16_d128_g65_m16", "group" },
        { "gqa_bf16_d128_g8_m48", "M tile 48" },
        { "gqa_bf16_d128_g8", "4 fields" },
        { "gqa_bf16_d128_g8_m16_x", "4 fields" },
        { "gqa_bf16_kve4m3_d128_g8", "got 3 and 1 optional" },
        { "gqa_bf16_kve4m3_kve4m3_d128_g8_m16", "4 fields" },
        { "gqa_bf16_kvfp16_d128_g8_m16", "KV dtype 'fp16' with dtype 'bf16'" },
        { "gqa_bf16_kvint8_d128_g8_m16", "unknown KV dtype 'int8'" },
        { "gqa_bf16_kv_d128_g8_m16", "malformed field 'kv'" },
        { "mla_bf16_kve4m3_h16", "got 2 and 1 optional" },
        { "mla_bf16_kvfp16_h16_m64", "KV dtype 'fp16' with dtype 'bf16'" },
        { "sparse_bf16_m64_sm90", "the sm_90 kernel reads an FP8 cache (fp8ds or e4m3), got KV dtype 'bf16'" },
        { "sparse_bf16_kvfp8ds_m64_sm80", "arch 80 not allowed" },
        { "sparse_bf16_kvfp8ds_m16", "the sm_90 kernel only" },
        { "sparse_bf16_kvfp8ds_sm90", "malformed field 'sm90'" },
        { "sparse_fp16_m64_sm90", "the sm_90 kernel reads an FP8 cache (fp8ds or e4m3), got KV dtype 'fp16'" },
        { "sparse_bf16_kvfp16_m64", "KV dtype 'fp16' with dtype 'bf16'" },
        { "gqa_bf16_x128_g8_m16", "malformed field 'x128'" },
        { "gqa_bf16_d128__g8_m16", "empty field" },
        { "gqa-bf16", "characters" },
        { "", "empty variant name" },
        { "merge_bf16", "2 fields" },
        { "merge_bf16_int4", "unknown output dtype 'int4'" },
        { "mla_bf16_h256_m64", "256" },
    }
    for _, c in ipairs(bad) do
        local spec, err = dcpattn.parse(c[1])
        check(spec == nil and is_error(err, "spec:1") and find(err, c[2], 1, true),
            "parse %q: got %s", c[1], tostring(err))
    end
    local spec, err = dcpattn.parse("gqa_bf16_d100_g8_m16", "variants.txt:12")
    check(not spec and is_error(err, "variants.txt:12"), "caller's where: %s", tostring(err))
    spec, err = dcpattn.parse(42)
    check(not spec and is_error(err, "spec:1"), "non-string name: %s", tostring(err))

    local vbad = {
        { { family = "gqa", dtype = "bf16", head_dim = 128, group = 8 }, "M tile (missing)" },
        { { family = "gqa", dtype = "bf16", head_dim = 128, group = 8, m_tile = 16, page = 1 }, "unknown field 'page'" },
        { { family = "nope" }, "unknown variant family 'nope'" },
        { { family = "gqa", dtype = "bf16", head_dim = 128, group = 2.5, m_tile = 16 }, "group" },
    }
    for _, c in ipairs(vbad) do
        local s, e = dcpattn.validate(c[1])
        check(s == nil and is_error(e, "spec:1") and find(e, c[2], 1, true), "validate: %s", tostring(e))
    end
    local n, e = dcpattn.name { family = "gqa", dtype = "bf16", head_dim = 100, group = 8, m_tile = 16 }
    check(n == nil and is_error(e, "spec:1"), "name of a bad spec: %s", tostring(e))
end

-- ===================================== tiling heuristic =====================================
do
    local function desc(t)
        local d = { dtype = "bf16", hq = 64, hkv = 8, dqk = 128, dv = 128, page_size = 16, max_q_len = 1 }
        for k, v in pairs(t) do d[k] = v end
        return d
    end
    local cases = {
        { {}, "gqa_bf16_d128_g8_m16" },
        { { max_q_len = 2 }, "gqa_bf16_d128_g8_m16" },
        { { max_q_len = 3 }, "gqa_bf16_d128_g8_m32" },
        { { max_q_len = 4 }, "gqa_bf16_d128_g8_m32" },
        { { max_q_len = 8 }, "gqa_bf16_d128_g8_m64" },
        { { max_q_len = 300 }, "gqa_bf16_d128_g8_m64" },
        { { hq = 8, max_q_len = 1 }, "gqa_bf16_d128_g1_m16" },
        { { hq = 48, max_q_len = 3 }, "gqa_bf16_d128_g6_m32" },
        { { hq = 64, hkv = 1, dqk = 64, dv = 64 }, "gqa_bf16_d64_g64_m64" },
        { { dtype = "fp16", dqk = 256, dv = 256 }, "gqa_fp16_d256_g8_m16" },
        { { dv = 0 }, "gqa_bf16_d128_g8_m16" },
        { { max_q_len = 0, page_size = 0 }, "gqa_bf16_d128_g8_m16" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, max_q_len = 2 }, "mla_bf16_h16_m32" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, max_q_len = 3 }, "mla_bf16_h16_m64" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 128, kv_dtype = "e4m3" }, "mla_bf16_kve4m3_h128_m64" },
        -- at most 16 or 32 query rows: the narrow tiles
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, kv_dtype = "bf16" }, "mla_bf16_h16_m16" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, kv_dtype = "e4m3" }, "mla_bf16_kve4m3_h16_m16" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 8, max_q_len = 2 }, "mla_bf16_h8_m16" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 8, max_q_len = 3 }, "mla_bf16_h8_m32" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 32, kv_dtype = "e4m3" }, "mla_bf16_kve4m3_h32_m32" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 8, max_q_len = 5 }, "mla_bf16_h8_m64" },
        -- sm_90+: the wgmma tile (D 128) from 17 rows on; elsewhere the mma.sync tiles
        { { arch = 90, max_q_len = 2 }, "gqa_bf16_d128_g8_m16" },
        { { arch = 90, max_q_len = 4 }, "gqa_bf16_d128_g8_m64" },
        { { arch = 80, max_q_len = 4 }, "gqa_bf16_d128_g8_m32" },
        { { arch = 90, max_q_len = 3, dqk = 64, dv = 64 }, "gqa_bf16_d64_g8_m32" },
        -- an FP8 cache: the same tiles, the KV dtype in the name
        { { kv_dtype = "e4m3" }, "gqa_bf16_kve4m3_d128_g8_m16" },
        { { kv_dtype = "bf16" }, "gqa_bf16_d128_g8_m16" },
        { { arch = 90, max_q_len = 3, kv_dtype = "e4m3" }, "gqa_bf16_kve4m3_d128_g8_m64" },
        { { arch = 80, max_q_len = 4, kv_dtype = "e4m3" }, "gqa_bf16_kve4m3_d128_g8_m32" },
        { { dtype = "fp16", kv_dtype = "e4m3", dqk = 96, dv = 96 }, "gqa_fp16_kve4m3_d96_g8_m16" },
        -- sparse MLA: the FP8 (fp8ds) cache on sm_90a takes the wgmma kernel
        { { dqk = 576, dv = 512, hkv = 1, hq = 128, page_size = 64, sparse_topk = 2048, kv_dtype = "fp8ds", arch = 90 },
            "sparse_bf16_kvfp8ds_m64_sm90" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 128, page_size = 64, sparse_topk = 2048, kv_dtype = "fp8ds", arch = 80 },
            "sparse_bf16_kvfp8ds_m64" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, sparse_topk = 64, kv_dtype = "fp8ds" },
            "sparse_bf16_kvfp8ds_m64" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, sparse_topk = 64, arch = 90 }, "sparse_bf16_m64" },
        -- the e4m3 cache with per-tensor scales: the wgmma kernel on sm_90a too, mma.sync elsewhere
        { { dqk = 576, dv = 512, hkv = 1, hq = 128, page_size = 64, sparse_topk = 2048, kv_dtype = "e4m3", arch = 90 },
            "sparse_bf16_kve4m3_m64_sm90" },
        { { dtype = "fp16", dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, sparse_topk = 64, kv_dtype = "fp8",
            arch = 90 }, "sparse_fp16_kve4m3_m16_sm90" },
        { { dtype = "fp16", dqk = 576, dv = 512, hkv = 1, hq = 17, page_size = 64, sparse_topk = 64, kv_dtype = "fp8",
            arch = 90 }, "sparse_fp16_kve4m3_m64_sm90" },
        -- at most 16 heads on sm_90a: the narrow tile (m16), the sm_90a kernel's only
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, sparse_topk = 2048, kv_dtype = "fp8ds", arch = 90 },
            "sparse_bf16_kvfp8ds_m16_sm90" },
        { { dtype = "fp16", dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 64, sparse_topk = 64, kv_dtype = "e4m3" },
            "sparse_fp16_kve4m3_m64" },
    }
    for _, c in ipairs(cases) do
        local n, err = dcpattn.select_attn(desc(c[1]))
        check(n == c[2], "select_attn -> %s, want %s (%s)", tostring(n), c[2], tostring(err))
    end
    local bad = {
        { { hq = 60 }, "not a multiple" },
        { { hkv = 0 }, "hkv" },
        { { dv = 64 }, "equal head dims" },
        { { dqk = 100, dv = 100 }, "head dim 100" },
        { { dqk = 576, dv = 512, hkv = 2, hq = 128 }, "hkv" },
        { { hq = 128, hkv = 1 }, "group" },
        { { page_size = 512 }, "page_size" },
        { { page_size = 257 }, "expected 1..256" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, page_size = 48 }, "page_size = 48: MLA takes 16, 32, 64" },
        { { max_batch = 4 }, "unknown descriptor field 'max_batch'" },
        { { max_q_len = -1 }, "max_q_len" },
        { { arch = -90 }, "arch" },
        { { dtype = "fp32" }, "unknown dtype 'fp32'" },
        { { heads = 4 }, "unknown descriptor field 'heads'" },

        { { kv_dtype = "fp16" }, "KV dtype 'fp16' with dtype 'bf16'" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, kv_dtype = "int8" }, "kv_dtype = int8 with dtype = bf16: MLA's cache has the query's dtype, or e4m3" },
        { { dqk = 576, dv = 512, hkv = 1, hq = 16, kv_dtype = "fp16" }, "MLA's cache has the query's dtype" },
        { { kv_dtype = "int8" }, "unknown KV dtype 'int8'" },
    }
    for _, c in ipairs(bad) do
        local n, err = dcpattn.select_attn(desc(c[1]))
        check(n == nil and is_error(err, "desc:1") and find(err, c[2], 1, true), "select_attn bad: %s", tostring(err))
    end
end

-- ===================================== the template engine ==================================
local FAKE = {
    ["templates/t_inst.cu"] = table.concat({
        '#include "dcpattn_abi.h"',          -- 1
        '#include "a.cuh"',                  -- 2
        '#include <cuda/std/cstdint>',       -- 3
        '#include "b.cuh"',                  -- 4
        'constexpr int kN = ${N};  // $x and $(y) and a lone $ stay',  -- 5
        'constexpr float kS = ${S};',        -- 6
        'extern "C" __global__ void ${NAME}() { ${BODY} }',  -- 7
        '// ${N} twice is fine',             -- 8
    }, "\n") .. "\n",
    ["templates/a.cuh"] = "#pragma once\n// a line 2\n#include \"sub/c.cuh\"\n// a line 4\n",
    ["templates/b.cuh"] = "#pragma once\n// b line 2\n",
    ["templates/sub/c.cuh"] = "// c line 1\n#include \"b.cuh\"\n#include \"../b.cuh\"\n// c line 4",
    ["templates/missing_binding.cu"] = "// 1\n// 2\nint x = ${NOPE};\n",
    ["templates/malformed.cu"] = "int y = ${1x};\n",
    ["templates/bad_include.cu"] = "// 1\n#include \"nothere.cuh\"\n",
    ["templates/abi_only.cu"] = "#include \"dcpattn_abi.h\"\n",
}
local function fake_read(path)
    local s = FAKE[path]
    if s then return s end
    return nil, path .. ": no such file"
end
local ABI = "typedef struct X { int a; } X;"

do
    local b = { NAME = "k_test", N = 7, S = 0.1, BODY = "return;" }
    local src, info = render.render("templates/t_inst.cu", b, "k_test", { read = fake_read, abi = ABI })
    if check(src, "fake render: %s", tostring(info)) then
        local ls = lines_of(src)
        check(ls[1] == "// DO NOT EDIT: generated by dcpattn-gen from templates/t_inst.cu for k_test", "first line: %s", ls[1])
        check(ls[2] == '#line 1 "templates/t_inst.cu"', "second line: %s", ls[2])
        check(ls[3] == '#line 1 "dcpattn_abi.h"' and ls[4] == ABI and ls[5] == '#line 2 "templates/t_inst.cu"',
            "abi inlined with #line: %s | %s | %s", ls[3], ls[4], ls[5])
        check(ls[6] == '#line 1 "templates/a.cuh"', "a.cuh opened: %s", ls[6])
        check(not find(src, "pragma once", 1, true), "#pragma once dropped")
        local _, nb = gsub(src, "// b line 2", "")
        check(nb == 1, "b.cuh inlined %d times", nb)
        check(find(src, '#line 1 "templates/sub/c.cuh"\n// c line 1\n#line 1 "templates/b.cuh"\n', 1, true),
            "c.cuh includes b.cuh relative to templates/")
        check(find(src, "\n#include <cuda/std/cstdint>\n", 1, true), "angle include left alone")
        check(find(src, "constexpr int kN = 7;  // $x and $(y) and a lone $ stay\n", 1, true), "int binding; $ alone")
        check(find(src, "constexpr float kS = 0.1f;\n", 1, true), "float binding")
        check(find(src, 'extern "C" __global__ void k_test() { return; }', 1, true), "string bindings")
        check(find(src, '// c line 4\n#line 4 "templates/a.cuh"\n// a line 4\n#line 3 "templates/t_inst.cu"\n', 1, true),
            "#line back in each parent after an include")
        check(find(src, '\n// templates/b.cuh: already included\nconstexpr int kN', 1, true),
            "a second include of b.cuh keeps its line")
        check(not find(src, "${", 1, true), "no placeholder left")
        check(src:sub(-1) == "\n", "ends with a newline")
        local v, err = verify_lines(src, fake_read)
        check(v and v >= 6, "#line bookkeeping: %s", tostring(err or v))
        check(info.includes[1] == "templates/a.cuh" and info.includes[2] == "templates/sub/c.cuh"
            and info.includes[3] == "templates/b.cuh" and #info.includes == 3, "include order")
        local again = render.render("templates/t_inst.cu", b, "k_test", { read = fake_read, abi = ABI })
        check(again == src, "render is deterministic")
    end

    -- a binding that expands to several lines keeps #line right for what follows
    local b2 = { NAME = "k2", N = 1, S = 2.0, BODY = "int i;\n  return;" }
    src = render.render("templates/t_inst.cu", b2, "k2", { read = fake_read, abi = ABI })
    check(src and find(src, 'return; }\n#line 8 "templates/t_inst.cu"\n// 1 twice', 1, true),
        "multi-line binding resyncs #line")
    check(src and find(src, "kS = 2.0f;", 1, true), "2.0 -> 2.0f")

    local function rerr(path, bindings, opts)
        local s, e = render.render(path, bindings, "k", opts or { read = fake_read, abi = ABI })
        check(s == nil, "render of %s should fail", path)
        return e or ""
    end
    local e = rerr("templates/missing_binding.cu", {})
    check(is_error(e, "templates/missing_binding.cu:3") and find(e, "${NOPE} is not bound", 1, true),
        "missing binding: %s", e)
    e = rerr("templates/t_inst.cu", { NAME = "k", N = 1, S = 1.0, BODY = "", EXTRA = 3 })
    check(is_error(e, "templates/t_inst.cu:1") and find(e, "binding EXTRA is not used", 1, true),
        "unused binding: %s", e)
    e = rerr("templates/malformed.cu", {})
    check(is_error(e, "templates/malformed.cu:1") and find(e, "malformed placeholder", 1, true), "malformed: %s", e)
    e = rerr("templates/bad_include.cu", {})
    check(is_error(e, "templates/bad_include.cu:2") and find(e, "nothere.cuh", 1, true), "bad include: %s", e)
    e = rerr("templates/abi_only.cu", {}, { read = fake_read })
    check(is_error(e, "templates/abi_only.cu:1") and find(e, "opts.abi", 1, true), "no abi: %s", e)
    e = rerr("templates/none.cu", {}, { read = fake_read, where = "v.txt:4" })
    check(is_error(e, "v.txt:4") and find(e, "templates/none.cu", 1, true), "missing template: %s", e)
    e = rerr("templates/t_inst.cu", { NAME = "k", N = 1, S = 0 / 0, BODY = "" })
    check(is_error(e, "templates/t_inst.cu:1") and find(e, "NaN", 1, true), "NaN binding: %s", e)
    e = rerr("templates/t_inst.cu", { NAME = "k", N = {}, S = 1.0, BODY = "" })
    check(find(e, "binding N has a table value", 1, true), "table binding: %s", e)
end

do -- float literals round-trip through float32 and carry an f
    local cases = { { 0.1, "0.1f" }, { 1, "1.0f" }, { -0.5, "-0.5f" }, { 1e-10, "1e-10f" },
        { 1.4426950408889634, "1.442695f" }, { 1 / 3, "0.33333334f" }, { 3.4028234663852886e38, "3.4028235e+38f" } }
    for _, c in ipairs(cases) do
        local s = util.float_literal(c[1])
        check(s == c[2], "float_literal(%.17g) = %s, want %s", c[1], tostring(s), c[2])
        local back = s and tonumber(s:sub(1, -2))
        check(back and string.unpack("<f", string.pack("<f", back)) == string.unpack("<f", string.pack("<f", c[1])),
            "%s round-trips", tostring(s))
    end
    check(util.float_literal(math.huge) == nil, "inf has no literal")
end

do -- families through dcpattn.render, on fake instance templates that use every binding
    local fake = {
        ["templates/merge_inst.cu"] = "#include \"dcpattn_abi.h\"\n${NAME} ${IN_T} ${OUT_T} ${THREADS} ${ITEMS}\n",
        ["templates/gqa_inst.cu"] = "#include \"dcpattn_abi.h\"\n"
            .. "${NAME} ${T} ${KV_T} ${HEAD_DIM} ${GROUP} ${M_TILE} ${THREADS} ${KV_TILE} ${STAGES} ${WGMMA} ${STACKED_KERNEL} ${SMEM}\n",
    }
    local function read(p) return fake[p], fake[p] == nil and (p .. ": no such file") or nil end
    local src, meta = dcpattn.render("merge_fp32_bf16", { read = read, abi = ABI })
    if check(src, "merge render: %s", tostring(meta)) then
        check(find(src, "\nmerge_fp32_bf16 float dcpattn::bf16 256 1\n", 1, true), "merge bindings")
        check(meta.kernel == "merge_fp32_bf16" and meta.family == "merge" and meta.threads == 256
            and meta.items == 1 and meta.smem == 0 and meta.template == "templates/merge_inst.cu", "merge meta")
    end
    src, meta = dcpattn.render("gqa_fp16_d128_g8_m16", { read = read, abi = ABI })
    if check(src, "gqa render: %s", tostring(meta)) then
        check(find(src, "\ngqa_fp16_d128_g8_m16 dcpattn::fp16 dcpattn::fp16 128 8 16 128 64 3 false 0 102400\n", 1, true),
            "gqa bindings")
        check(meta.kernel == "gqa_fp16_d128_g8_m16" and meta.family == "gqa" and meta.rows == 16
            and meta.threads == 128 and meta.template == "templates/gqa_inst.cu", "gqa meta")
        check(meta.smem == 3 * 64 * 256 * 2 + 16 * 128 * 2, "gqa smem %s", tostring(meta.smem))
    end
    src, meta = dcpattn.render("gqa_bf16_d256_g4_m64", { read = read, abi = ABI })
    check(src and meta.threads == 256 and meta.kv_tile == 64 and meta.smem == 2 * 64 * 512 * 2 + 64 * 256 * 2,
        "gqa d256 m64 meta")
    -- the wgmma tile (M64, D 128): bound true, three stages, 1024 bytes of alignment slack
    src, meta = dcpattn.render("gqa_bf16_d128_g8_m64", { read = read, abi = ABI })
    check(src and find(src, "\ngqa_bf16_d128_g8_m64 dcpattn::bf16 dcpattn::bf16 128 8 64 128 64 3 true 0 115712\n", 1, true)
        and meta.smem == 3 * 64 * 256 * 2 + 64 * 128 * 2 + 1024, "gqa wgmma bindings and smem %s", tostring(meta and meta.smem))
    -- FP8 cache on the wgmma tile: 256 threads (the producer warpgroup), four e4m3 stages (1 byte
    -- per element) and two converted V tiles, and the stacked balanced kernel (STACKED_KERNEL 1,
    -- that tile's alone); on mma.sync tiles the fragments come from the e4m3 stages, nothing
    -- converted
    src, meta = dcpattn.render("gqa_bf16_kve4m3_d128_g8_m64", { read = read, abi = ABI })
    check(src and find(src, "\ngqa_bf16_kve4m3_d128_g8_m64 dcpattn::bf16 dcpattn::e4m3 128 8 64 256 64 4 true 1 115712\n", 1, true)
        and meta.smem == 4 * 64 * 256 + 2 * 64 * 128 * 2 + 64 * 128 * 2 + 1024 and meta.kv_dtype == "e4m3"
        and meta.threads == 256, "gqa FP8 bindings and smem %s", tostring(meta and meta.smem))
    src, meta = dcpattn.render("gqa_bf16_kve4m3_d128_g8_m16", { read = read, abi = ABI })
    check(src and meta.smem == 3 * 64 * 256 + 16 * 128 * 2, "gqa FP8 mma.sync smem %s", tostring(meta and meta.smem))
    src, meta = dcpattn.render("gqa_bf16_kve4m3_d96_g8_m16", { read = read, abi = ABI })
    check(src and meta.smem == 3 * 64 * 192 + 64 * 192 * 2 + 16 * 96 * 2, "gqa FP8 d96 (converted) smem %s",
        tostring(meta and meta.smem))
    -- a spec table works as well as a name
    src, meta = dcpattn.render({ family = "merge", in_dtype = "bf16", out_dtype = "bf16" }, { read = read, abi = ABI })
    check(src and meta.kernel == "merge_bf16_bf16", "render a spec table")

    -- an instance template that forgets a binding
    fake["templates/gqa_inst.cu"] = "${NAME} ${T} ${KV_T} ${HEAD_DIM} ${GROUP} ${M_TILE} ${THREADS} ${KV_TILE} ${WGMMA} ${STACKED_KERNEL} ${SMEM}\n"
    src, meta = dcpattn.render("gqa_bf16_d128_g8_m16", { read = read, abi = ABI })
    check(not src and is_error(meta, "templates/gqa_inst.cu:1") and find(meta, "STAGES", 1, true),
        "unused binding through render: %s", tostring(meta))
    for _, c in ipairs {
        { "mystery_bf16", "unknown variant family" },
        { "gqa_bf16_d80_g8_m16", "head dim 80" },
        { "gqa_e4m3_d128_g8_m16", "unknown dtype" },
        { "gqa_bf16_d128_g0_m16", "group" },
        { "gqa_bf16_d128_g8_m128", "M tile" },
    } do
        src, meta = dcpattn.render(c[1], { read = read, abi = ABI })
        check(not src and is_error(meta, "spec:1") and find(meta, c[2], 1, true), "render %s: %s", c[1], tostring(meta))
        src, meta = dcpattn.render(c[1], { read = read, abi = ABI, where = "my.spec:9" })
        check(not src and is_error(meta, "my.spec:9"), "render %s with where: %s", c[1], tostring(meta))
    end
end

-- ===================================== the ABI text =========================================
local header = read_file(ROOT .. "/include/dcpattn.h")
local abi_text
do
    check(header, "include/dcpattn.h readable")
    local err
    abi_text, err = dcpattn.abi_from_header(header or "")
    if check(abi_text, "abi_from_header: %s", tostring(err)) then
        check(abi_text:sub(1, #"typedef struct dcpattn_merge_kparams {") == "typedef struct dcpattn_merge_kparams {",
            "ABI starts with the merge params: %s", abi_text:sub(1, 60))
        check(abi_text:sub(-#"} dcpattn_attn_kparams;") == "} dcpattn_attn_kparams;", "ABI ends with the attn params")
        check(not find(abi_text, "[\n\r\t\\]") and not find(abi_text, "  ", 1, true), "ABI is one line, single spaces")
        check(not find(abi_text, "^ ") and not find(abi_text, " $"), "ABI trimmed")
    end
    local synthetic = "#define DCPATTN_KERNEL_ABI_V 3\n#  define   DCPATTN_KERNEL_ABI \\\n"
        .. "\ttypedef struct a { /* c */ int x;\t\\\r\n    int  y; \\ \n} a;\nint z;\n"
    check(dcpattn.abi_from_header(synthetic) == "typedef struct a { int x; int y; } a;",
        "synthetic header: %s", tostring(dcpattn.abi_from_header(synthetic)))
    local none, e = dcpattn.abi_from_header("#define DCPATTN_KERNEL_ABIX 1\n")
    check(none == nil and find(e, ": error: no #define DCPATTN_KERNEL_ABI", 1, true), "no macro: %s", tostring(e))

    -- byte-identical to the C preprocessor's stringization, where a compiler is at hand (the
    -- ABI is in the implementation half: its includes need Lua's headers)
    local cc = os.getenv("CC") or "cc"
    local _, _, has_cc = run("command -v " .. cc .. " >/dev/null")
    if has_cc == 0 and abi_text then
        write_file(TMP .. "/abi.c", '#define DCPATTN_IMPLEMENTATION\n#include "' .. ROOT .. '/include/dcpattn.h"\n'
            .. "#define S2(...) #__VA_ARGS__\n#define S(...) S2(__VA_ARGS__)\n"
            .. "ABI_PROBE S(DCPATTN_KERNEL_ABI) ABI_PROBE\n")
        local out, err2, code = run(format("%s -E -P $(pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4) %s",
            cc, sh_quote(TMP .. "/abi.c")))
        if code == 0 then
            out = match(out, 'ABI_PROBE "(.-)" ABI_PROBE') or out
            check(out == abi_text, "ABI differs from the C stringization:\n  C:   %s\n  Lua: %s", out, abi_text)
        else
            note("could not build the stringization probe (%s); skipped", err2:match("[^\n]*"))
        end
    else
        note("no C compiler: ABI not compared with the C stringization")
    end
end

-- ===================================== the family limits in C ==============================
-- include/dcpattn.h validates descriptors without the generator, from a block written from the
-- spec (make limits): it must be the generator's block, and the generator's numbers must be
-- what its own parsing and selection accept.
do
    local block = dcpattn.c_limits()
    local s, e = find(header or "", block, 1, true)
    check(s and not find(header, block, e + 1, true),
        "include/dcpattn.h does not carry the generator's family limits once (run make limits); they are:\n%s", block)
    check(dcpattn.splice_limits(header or "") == header, "splice_limits changes the current header")
    local stale = gsub(header or "", "(#define DCPATTN__GQA_MAX_GROUP )%d+", "%165", 1)
    check(stale ~= header and dcpattn.splice_limits(stale) == header, "splice_limits restores a stale block")
    for _, c in ipairs {
        { "int x;\n", "no line" },
        { block .. block, "stands twice" },
        { "x " .. block, "not a line of its own" },
        { (gsub(block, "^(.-\n)(.*\n)(/%* %-%-%-%- END[^\n]*\n)$", "%3%2%1")), "comes before" },
    } do
        local out, err = dcpattn.splice_limits(c[1], "h.h")
        check(not out and is_error(err, "h.h") and find(err, c[2], 1, true), "splice_limits: %s", tostring(err))
    end

    -- the numbers of a #define of the block
    local function numbers(name)
        local v = match(block, "\n#define DCPATTN__" .. name .. " ([%d, ]+) /%*")
        local t = {}
        for n in gmatch(v or "", "%d+") do t[tonumber(n)] = true end
        return t, v ~= nil
    end
    local function accepted(lo, hi, ok)
        local t = {}
        for x = lo, hi do if ok(x) then t[x] = true end end
        return t
    end
    local function same(a, b)
        for k in pairs(a) do if not b[k] then return false end end
        for k in pairs(b) do if not a[k] then return false end end
        return true
    end
    local function one(name) local t = numbers(name); return next(t) end
    local dims, has = numbers("GQA_HEAD_DIMS")
    check(has and same(dims, accepted(0, 1100, function(d) return dcpattn.parse(format("gqa_bf16_d%d_g1_m16", d)) end)),
        "DCPATTN__GQA_HEAD_DIMS is not the set of head dims the generator accepts")
    local max_group = one("GQA_MAX_GROUP")
    check(max_group and same(accepted(1, max_group, function() return true end),
        accepted(0, 1000, function(g) return dcpattn.parse(format("gqa_bf16_d128_g%d_m16", g)) end)),
        "DCPATTN__GQA_MAX_GROUP is not the generator's largest group")
    local max_hq = one("MLA_MAX_HEADS")
    check(max_hq and same(accepted(1, max_hq, function() return true end),
        accepted(0, 1000, function(h) return dcpattn.parse(format("mla_bf16_h%d_m64", h)) end)),
        "DCPATTN__MLA_MAX_HEADS is not the generator's largest MLA head count")
    local dqk, dv = one("MLA_HEAD_DIM"), one("MLA_HEAD_DIM_V")
    local function desc(t)
        local d = { dtype = "bf16", hq = 8, hkv = 1, dqk = 128, dv = 128, page_size = 16, max_q_len = 1 }
        for k, v in pairs(t) do d[k] = v end
        return d
    end
    check(dqk and dv and match(dcpattn.select_attn(desc { dqk = dqk, dv = dv }) or "", "^mla_"),
        "DCPATTN__MLA_HEAD_DIM/_V %s/%s are not what selects MLA", tostring(dqk), tostring(dv))
    local max_page = one("MAX_PAGE_SIZE")
    check(max_page and same(accepted(1, max_page, function() return true end),
        accepted(1, 2000, function(p) return dcpattn.select_attn(desc { page_size = p }) end)),
        "DCPATTN__MAX_PAGE_SIZE is not the largest GQA page the generator accepts")
    check(same(numbers("MLA_PAGE_SIZES"),
        accepted(1, 2000, function(p) return dcpattn.select_attn(desc { dqk = dqk, dv = dv, page_size = p }) end)),
        "DCPATTN__MLA_PAGE_SIZES is not the set of MLA pages the generator accepts")
    for _, name in ipairs { "GQA_HEAD_DIMS", "MLA_PAGE_SIZES" } do
        local list = match(block, "\n#define DCPATTN__" .. name .. " ([%d, ]+) /%*") or ""
        local text = match(block, "\n#define DCPATTN__" .. name .. '_TEXT "([^"]*)"') or ""
        check(gsub(text, " or ", ", ") == list, "%s_TEXT '%s' is not the list %s", name, text, list)
    end

    -- the CLI rewrites a stale block, and only a stale one
    local lua = os.getenv("LUA") or "lua5.4"
    local copy = TMP .. "/dcpattn.h"
    write_file(copy, stale)
    local gen = lua .. " " .. sh_quote(ROOT .. "/gen/dcpattn-gen") .. " -v --limits " .. sh_quote(copy)
    local _, err, code = run(gen)
    check(code == 0 and find(err, "wrote " .. copy, 1, true) and read_file(copy) == header,
        "--limits rewrites a stale block: %s", err)
    _, err, code = run(gen)
    check(code == 0 and find(err, "unchanged " .. copy, 1, true), "--limits leaves a current block: %s", err)
    write_file(copy, "int x;\n")
    _, err, code = run(gen)
    check(code == 1 and find(err, copy .. ": error: no line", 1, true) and read_file(copy) == "int x;\n",
        "--limits on a file without the block: %s", err)
end

-- ================================ the grammar in docs/architecture.md ========================
-- What the docs say a variant name is must be what the CLI accepts: the families, the element
-- types of each field, the values of each numeric field, optional fields, the spellings of the
-- element types. Notation: "x" a literal, [ ... ] optional, a | b alternatives; an alternative
-- that names a field of the same name (kvdtype = e4m3 | adtype) repeats that field's value.
do
    local types = require "dcpattn.types"
    local doc = read_file(ROOT .. "/docs/architecture.md") or ""
    local section = match(doc, "\n## Canonical variant names\n(.-)\n## ") or ""
    local grammar = match(section, "\n```\n(.-)```") or ""
    check(grammar ~= "", "docs/architecture.md: no grammar block under 'Canonical variant names'")
    local rules = {}
    for lhs, rhs in gmatch(grammar, "([%w_]+)%s*=%s*([^\n]*)") do
        rules[lhs] = match(gsub(rhs, "%s*%b()%s*$", ""), "^(.-)%s*$")
    end
    local function alternatives(rhs)
        local t = {}
        for w in gmatch(rhs or "", "[^|%s]+") do t[#t + 1] = w end
        return t
    end
    -- the table of numeric fields: `X` -> { [family or "*"] = set }
    local fields = {}
    for sym, values in gmatch(section, "\n| `([%w_]+)`[^|]*| ([^|\n]+) |") do
        local per = {}
        for part in gmatch(values .. ";", "([^;]+);") do
            local fam, rest = match(part, "^%s*(%u+)%s+(.*)$")
            local set = {}
            local lo, hi = match(rest or part, "^%s*(%d+)%s*%.%.%s*(%d+)%s*$")
            if lo then
                for x = tonumber(lo), tonumber(hi) do set[x] = true end
            else
                for n in gmatch(rest or part, "%d+") do set[tonumber(n)] = true end
            end
            per[fam and fam:lower() or "*"] = set
        end
        fields[sym] = per
    end
    for lhs in pairs(rules) do -- every rule but the start is used
        local used = lhs == "name"
        for _, rhs in pairs(rules) do used = used or find(rhs, "%f[%w_]" .. lhs .. "%f[^%w_]") ~= nil end
        check(used, "docs/architecture.md: rule %s is used by no other rule", lhs)
    end
    local families = {}
    for _, n in ipairs(defaults) do families[match(n, "^(%l+)_")] = true end
    local listed = {}
    for _, f in ipairs(alternatives(rules.name)) do listed[f] = true end
    for f in pairs(families) do check(listed[f] and rules[f], "docs/architecture.md: family %s missing", f) end
    for f in pairs(listed) do check(families[f], "docs/architecture.md: family %s does not exist", f) end

    local good, bad, spell = {}, {}, {}
    local function canonical(n) local sp = dcpattn.parse(n); return sp and dcpattn.name(sp) end
    for fam in pairs(families) do
        -- parts: { lit = "..." } or { sym = "X" }, each with opt = the optional group it is in
        local parts, group, direct = {}, 0, {}
        local rhs, pos, toks = rules[fam] or "", 1, {}
        while true do
            local _, e, tok = find(rhs, '^%s*("[^"]*")', pos)
            if not tok then _, e, tok = find(rhs, "^%s*([%w_]+)", pos) end
            if not tok then _, e, tok = find(rhs, "^%s*([%[%]])", pos) end
            if not tok then break end
            toks[#toks + 1], pos = tok, e + 1
        end
        check(match(rhs, "^%s*$", pos), "docs/architecture.md: cannot read the rule of %s from '%s'", fam, rhs:sub(pos))
        for _, tok in ipairs(toks) do
            if tok == "[" then
                group = group + 1
            elseif tok == "]" then
                group = 0 -- (not nested)
            elseif tok:sub(1, 1) == '"' then
                parts[#parts + 1] = { lit = tok:sub(2, -2), opt = group > 0 and group or nil }
            else
                parts[#parts + 1] = { sym = tok, opt = group > 0 and group or nil }
                direct[tok] = #parts
            end
        end
        -- the values of each symbol: a set of numbers, or element types (terminal words and
        -- back references to another part)
        local firsts = {}
        for k, p in ipairs(parts) do
            if p.sym and rules[p.sym] then
                p.words, p.backref = {}, nil
                local function expand(rhs)
                    for _, w in ipairs(alternatives(rhs)) do
                        if rules[w] and direct[w] and direct[w] ~= k then
                            p.backref = direct[w]
                        elseif rules[w] then
                            expand(rules[w])
                        else
                            p.words[#p.words + 1] = w
                        end
                    end
                end
                expand(rules[p.sym])
                p.values = p.words
            elseif p.sym then
                local per = fields[p.sym] or {}
                p.set = per[fam] or per["*"] or {}
                p.values = util.sorted_keys(p.set)
                table.sort(p.values)
            end
            if p.sym then
                check(#p.values > 0, "docs/architecture.md: no values for %s of %s", p.sym, fam)
                firsts[k] = tostring(p.values[1])
            end
        end
        -- the name with value v in part k, the first value elsewhere; optional groups only
        -- where k is (a back reference takes the value of the part it names)
        local function name_with(k, v)
            local out, val = {}, {}
            for i, p in ipairs(parts) do
                if p.sym then val[i] = i == k and tostring(v) or firsts[i] end
            end
            for i, p in ipairs(parts) do
                if p.backref and i ~= k then val[i] = val[p.backref] end
            end
            for i, p in ipairs(parts) do
                if not p.opt or (k and parts[k].opt == p.opt) then out[#out + 1] = p.lit or val[i] end
            end
            return table.concat(out)
        end
        good[#good + 1] = name_with(nil)
        for k, p in ipairs(parts) do
            if p.set then -- a number: accepted exactly for the documented values
                local hi = p.values[#p.values] or 0
                for x = 0, 2 * hi + 64 do
                    local ok = dcpattn.parse(name_with(k, x)) ~= nil
                    if ok ~= (p.set[x] == true) then
                        check(false, "docs/architecture.md says %s %s %d for %s; the generator %s it", p.sym,
                            p.set[x] and "allows" or "does not allow", x, fam, ok and "accepts" or "rejects")
                    end
                end
                good[#good + 1] = name_with(k, p.values[#p.values])
                bad[#bad + 1] = name_with(k, hi + 1)
            elseif p.words then -- an element type: accepted exactly for the documented ones
                local doc_set = {}
                for _, t in ipairs(p.words) do doc_set[t] = true end
                if p.backref then doc_set[firsts[p.backref]] = true end
                for _, t in ipairs(util.sorted_keys(types.info)) do
                    local ok = dcpattn.parse(name_with(k, t)) ~= nil
                    check(ok == (doc_set[t] == true), "docs/architecture.md: %s of %s %s %s; the generator %s it",
                        p.sym, fam, doc_set[t] and "includes" or "excludes", t, ok and "accepts" or "rejects")
                    if doc_set[t] then
                        good[#good + 1] = name_with(k, t)
                        spell[t] = spell[t] or function(alias) return name_with(k, alias), name_with(k, t) end
                    else
                        bad[#bad + 1] = name_with(k, t)
                    end
                end
            end
        end
    end
    local function unique(t)
        local seen, u = {}, {}
        for _, n in ipairs(t) do
            if not seen[n] then seen[n], u[#u + 1] = true, n end
        end
        return u
    end
    good, bad = unique(good), unique(bad)
    local want = {}
    for i, n in ipairs(good) do want[i] = canonical(n) or ("(" .. n .. " rejected)") end
    local gen = sh_quote(ROOT .. "/gen/dcpattn-gen")
    local out, err, code = run(gen .. " " .. table.concat(good, " "))
    check(code == 0 and out == table.concat(unique(want), "\n") .. "\n", "the CLI rejects names the docs allow: %s", err)
    out, err, code = run(gen .. " " .. table.concat(bad, " "))
    local _, nerr = gsub(err, "<command line>:%d+: error: ", "")
    check(code == 1 and out == "" and nerr == #bad, "the CLI accepts names the docs do not allow (%d errors for %d): %s",
        nerr, #bad, err)

    -- the spellings of the element types
    local bullet = match(section, "\n%- Element types may be spelled (.-)\n%- ") or ""
    local spelled, pending = {}, {}
    for tok in gmatch(bullet, "[`(][%w]+[`)]") do
        local w = tok:sub(2, -2)
        if tok:sub(1, 1) == "`" then
            pending[#pending + 1] = w
        else
            for _, a in ipairs(pending) do spelled[a] = w end
            pending = {}
        end
    end
    check(next(spelled) ~= nil, "docs/architecture.md: no element type spellings found")
    for a, c in pairs(types.aliases) do
        if a ~= c then check(spelled[a] == c, "docs/architecture.md: spelling %s (%s) not documented", a, c) end
    end
    for a, c in pairs(spelled) do
        check(types.aliases[a] == c, "docs/architecture.md: spelling %s of %s, the generator: %s", a, c,
            tostring(types.aliases[a]))
        local with_alias, with_c = (spell[c] or function() return "", "?" end)(a)
        check(canonical(with_alias) and canonical(with_alias) == canonical(with_c),
            "spelling %s of %s: '%s' does not name '%s' (no documented field takes %s?)", a, c, with_alias, with_c, c)
    end
end

-- ===================================== the real templates ===================================
local function real_read(path) return read_file(ROOT .. "/" .. path) end
local renderable = {} -- default names whose template exists
do
    local missing = {}
    for _, n in ipairs(defaults) do
        local fam = n:match("^(%l+)_")
        local tpath = "templates/" .. fam .. (n:match("_sm90$") and "_sm90" or "") .. "_inst.cu"
        if not real_read(tpath) then
            missing[tpath] = true
        else
            renderable[#renderable + 1] = n
            local src, meta = dcpattn.render(n, { read = real_read, abi = abi_text })
            if check(src, "render %s: %s", n, tostring(meta)) then
                check(meta.kernel == n and meta.family == fam and meta.template == tpath, "%s meta names", n)
                check(math.type(meta.threads) == "integer" and meta.threads > 0 and meta.threads % 32 == 0,
                    "%s threads %s", n, tostring(meta.threads))
                check(math.type(meta.smem) == "integer" and meta.smem >= 0 and meta.smem <= 227 * 1024,
                    "%s smem %s", n, tostring(meta.smem))
                if fam == "gqa" then check(math.type(meta.rows) == "integer" and meta.rows > 0, "%s rows", n) end
                check(lines_of(src)[1] == "// DO NOT EDIT: generated by dcpattn-gen from " .. tpath .. " for " .. n,
                    "%s DO-NOT-EDIT line", n)
                check(find(src, '\n#line 1 "' .. tpath .. '"\n', 1, true), "%s #line to its template", n)
                check(find(src, abi_text, 1, true), "%s carries the ABI", n)
                check(find(src, n .. "(", 1, true) and find(src, 'extern "C"', 1, true), "%s defines its kernel", n)
                check(not find(src, "${", 1, true), "%s has no placeholder left", n)
                local v, err = verify_lines(src, real_read)
                check(v, "%s #line bookkeeping: %s", n, tostring(err))
                local again = dcpattn.render(n, { read = real_read, abi = abi_text })
                check(again == src, "%s renders deterministically", n)
            end
        end
    end
    for _, t in ipairs(util.sorted_keys(missing)) do
        note("%s does not exist yet: its default variants were not rendered", t)
    end
end

-- ===================================== the CLI ==============================================
do
    local lua = os.getenv("LUA") or "lua5.4"
    local gen = ROOT .. "/gen/dcpattn-gen"
    local abs_root = ROOT
    local abs_gen = abs_root .. "/gen/dcpattn-gen"

    local out, err, code = run(lua .. " " .. sh_quote(gen) .. " --list")
    check(code == 0 and out == table.concat(defaults, "\n") .. "\n", "--list (%s)", err)
    out, err, code = run("cd / && " .. sh_quote(abs_gen) .. " --list")
    check(code == 0 and out == table.concat(defaults, "\n") .. "\n", "--list from / by its shebang (%s)", err)
    out, err, code = run("cd " .. sh_quote(abs_root .. "/gen") .. " && ./dcpattn-gen --list")
    check(code == 0 and out == table.concat(defaults, "\n") .. "\n", "--list from gen/ (%s)", err)

    out, err, code = run(sh_quote(abs_gen) .. " --help")
    check(code == 0 and find(out, "usage: dcpattn-gen", 1, true), "--help")
    out, err, code = run(sh_quote(abs_gen) .. " --bogus")
    check(code == 1 and find(err, "unknown option --bogus", 1, true), "unknown option: %s", err)
    out, err, code = run(sh_quote(abs_gen))
    check(code == 1 and find(err, "no variants named", 1, true), "nothing to do: %s", err)

    out, err, code = run(sh_quote(abs_gen) .. " --name GQA_half_d128_g6_m32")
    check(code == 0 and out == "gqa_fp16_d128_g6_m32\n", "--name canonical: %s %s", out, err)
    out, err, code = run(sh_quote(abs_gen) .. " --name GQA_bf16_kvFP8_d128_g8_m16 gqa_fp16_kvfp16_d64_g1_m16")
    check(code == 0 and out == "gqa_bf16_kve4m3_d128_g8_m16\ngqa_fp16_d64_g1_m16\n", "--name FP8 canonical: %s %s", out, err)
    out, err, code = run(sh_quote(abs_gen) .. " --name gqa_fp16_kvbf16_d64_g1_m16")
    check(code == 1 and out == "" and find(err, "KV dtype 'bf16' with dtype 'fp16'", 1, true), "--name bad KV dtype: %s", err)
    out, err, code = run(sh_quote(abs_gen) .. " --name gqa_bf16_d100_g8_m16")
    check(code == 1 and out == "" and find(err, ": error: ", 1, true) and find(err, "head dim 100", 1, true),
        "--name invalid: %s", err)

    local spec = TMP .. "/variants.txt"
    write_file(spec, "# variants\nmerge_fp32_bf16  # split-KV merge\n\ngqa_bf16_d128_g8_m16\ngqa_bf16_d77_g8_m16\nnot_a_family\n")
    out, err, code = run(sh_quote(abs_gen) .. " --spec " .. sh_quote(spec))
    check(code == 1, "--spec with errors exits 1")
    check(find(err, spec .. ":5: error: ", 1, true) and find(err, spec .. ":6: error: ", 1, true),
        "--spec errors name FILE:LINE: %s", err)
    write_file(spec, "merge_fp32_bf16 # ok\ngqa_bf16_d128_g8_m16\nmerge_fp32_bf16\n")
    out, err, code = run(sh_quote(abs_gen) .. " --spec " .. sh_quote(spec))
    check(code == 0 and out == "merge_fp32_bf16\ngqa_bf16_d128_g8_m16\n", "--spec ok: %s %s", out, err)
    out, err, code = run(sh_quote(abs_gen) .. " --spec " .. sh_quote(TMP .. "/absent.txt"))
    check(code == 1 and find(err, "absent.txt", 1, true), "--spec missing file: %s", err)
    -- a directory opens like a file and fails only when read: the reason, never "nil"
    out, err, code = run(sh_quote(abs_gen) .. " --spec " .. sh_quote(TMP))
    check(code == 1 and find(err, TMP .. ": error: cannot read spec file: ", 1, true)
        and find(err, "Is a directory", 1, true) and not find(err, "nil", 1, true), "--spec DIR: %s", err)
    -- a number past the integer range is named as written, not wrapped around
    for _, n in ipairs { "gqa_bf16_d128_g99999999999999999999_m16", "gqa_bf16_d128_g9223372036854775808_m16",
                         "gqa_bf16_d18446744073709551744_g8_m16" } do
        local digits = match(n, "_[dg](%d%d%d%d%d%d%d%d%d%d+)_")
        out, err, code = run(sh_quote(abs_gen) .. " --name " .. n)
        check(code == 1 and find(err, ": error: ", 1, true) and find(err, " " .. digits .. " not supported", 1, true),
            "--name %s: %s", n, err)
        local spec, perr = dcpattn.parse(n)
        check(not spec and find(perr, " " .. digits .. " ", 1, true), "parse %s: %s", n, tostring(perr))
    end

    -- rendering to files, only what changed
    if #renderable == 0 then
        note("no instance template exists yet: CLI rendering not tested")
    else
        local dir = TMP .. "/out"
        assert(os.execute("mkdir -p " .. sh_quote(dir)))
        local names = table.concat(renderable, " ")
        out, err, code = run(sh_quote(abs_gen) .. " -o " .. sh_quote(dir) .. " " .. names)
        check(code == 0 and out == "" and err == "", "-o DIR is quiet: %s %s", out, err)
        for _, n in ipairs(renderable) do
            local got = read_file(dir .. "/" .. n .. ".cu")
            local want = dcpattn.render(n, { read = real_read, abi = abi_text })
            check(got and got == want, "%s.cu equals the runtime's rendering", n)
        end
        out, err, code = run(sh_quote(abs_gen) .. " -v -o " .. sh_quote(dir) .. " " .. names)
        local _, unchanged = gsub(err, "unchanged ", "")
        check(code == 0 and unchanged == #renderable and not find(err, "wrote", 1, true),
            "second run rewrites nothing: %s", err)
        local victim = dir .. "/" .. renderable[1] .. ".cu"
        write_file(victim, "stale\n")
        out, err, code = run(sh_quote(abs_gen) .. " -v -o " .. sh_quote(dir) .. " " .. names)
        local _, wrote = gsub(err, "wrote ", "")
        check(code == 0 and wrote == 1 and find(err, "wrote " .. victim, 1, true), "a changed file is rewritten: %s", err)
        out, err, code = run(sh_quote(abs_gen) .. " -o - " .. renderable[1])
        check(code == 0 and out == read_file(victim), "-o - writes the source to stdout")
        out, err, code = run(sh_quote(abs_gen) .. " -o " .. sh_quote(TMP .. "/no/such/dir") .. " " .. renderable[1])
        check(code == 1 and find(err, "cannot write", 1, true), "unwritable -o: %s", err)
        out, err, code = run("cd / && " .. sh_quote(abs_gen) .. " --header /nonexistent.h -o - " .. renderable[1])
        check(code == 1 and find(err, "nonexistent.h", 1, true), "--header missing: %s", err)
        out, err, code = run(sh_quote(abs_gen) .. " --header " .. sh_quote(abs_root .. "/include/dcpattn.h")
            .. " -o - " .. renderable[1])
        check(code == 0 and out == read_file(victim), "--header PATH")
    end
end

os.execute("rm -rf " .. sh_quote(TMP))
print(format("%d passed, %d failed", passed, failed))
os.exit(failed == 0 and 0 or 1)
