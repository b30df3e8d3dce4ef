-- Shared helpers of the busted specs: where the build and the test data are, temporary
-- files, and running the host as a subprocess.
local lfs = require("lfs")

local M = {}

M.root = lfs.currentdir() -- ctest and the README run busted from the project root
M.build = os.getenv("ANELUA_BUILD_DIR") or (M.root .. "/build")
-- the host as ctest starts it (under qemu-user in the aarch64 row's cross build), else the build's
M.anelua = os.getenv("ANELUA_TEST_HOST") or (M.build .. "/anelua")

-- The data sets the reference specs run on: the repository's own fixtures (spec/data and
-- the shipped tokenizers in data/tokenizers; always there) and, as an extra check where it
-- is present, the shared data ($ANELUA_TEST_DATA or ../shared/data beside the project),
-- whose models have full-size vocabularies. Each set:
--   set.label                      "spec/data" or the shared directory
--   set:reference(name)            dir, expected tensors (PyTorch), and the vocabulary size
--   set:tokenizer(name)            the directory of a tokenizer's files ("gpt2", "llama2", "qwen3")
--   set:golden(name)               that tokenizer's golden.jsonl
local DataSet = {}
DataSet.__index = DataSet

function DataSet:reference(name)
  local dir = self.reference_root .. "/" .. name
  local ane = require("ane")
  local expected = assert(ane.io.load_safetensors(dir .. "/expected.safetensors"))
  local shape = expected.logits:shape()
  return dir, expected, shape[#shape]
end

function DataSet:tokenizer(name) return self.tokenizer_root .. "/" .. name end
function DataSet:golden(name) return self.golden_root .. "/" .. name .. "/golden.jsonl" end

function M.shared_data_dir()
  for _, dir in ipairs({ os.getenv("ANELUA_TEST_DATA") or "", M.root .. "/../shared/data" }) do
    if dir ~= "" and lfs.attributes(dir .. "/reference", "mode") == "directory" then return dir end
  end
  return nil
end

function M.data_sets()
  local sets = { setmetatable({ label = "spec/data", reference_root = M.root .. "/spec/data/reference",
    tokenizer_root = M.root .. "/data/tokenizers", golden_root = M.root .. "/spec/data/tokenizers" }, DataSet) }
  local shared = M.shared_data_dir()
  if shared then
    sets[2] = setmetatable({ label = "shared data", reference_root = shared .. "/reference",
      tokenizer_root = shared .. "/tokenizers", golden_root = shared .. "/tokenizers" }, DataSet)
  end
  return sets
end

-- The repository's own set alone (for specs whose checks do not depend on vocabulary size).
function M.repo_data() return M.data_sets()[1] end

-- Checks every "grad.<name>" tensor of the PyTorch expectations against grads[name]: present,
-- same shape, max |difference| below tolerance. Returns how many were checked.
function M.assert_gradients(grads, expected, tolerance)
  local checked = 0
  for name, want in pairs(expected) do
    local field = name:match("^grad%.(.+)$")
    if field then
      local got = grads[field]
      assert(got ~= nil, "missing gradient " .. field)
      assert(table.concat(want:shape(), "x") == table.concat(got:shape(), "x"), field .. ": shape differs")
      local difference = got:max_abs_diff(want)
      assert(difference < tolerance, field .. ": max |difference| " .. difference)
      checked = checked + 1
    end
  end
  return checked
end

-- Greedy decoding with the KV cache against full prefills: generates `count` tokens after
-- `prompt` and checks each is the argmax of the logits a full prefill of everything before it
-- gives. Returns the produced ids.
function M.assert_decode_matches_prefill(model, prompt, count)
  local produced = {}
  for id in model:generate(prompt, { max_tokens = count, temperature = 0, stop_at_end = false }) do
    produced[#produced + 1] = id
  end
  assert(#produced == count, "generated " .. #produced .. " of " .. count .. " tokens")
  local full = { table.unpack(prompt) }
  for i = 1, #produced - 1 do full[#full + 1] = produced[i] end
  local logits = model:logits(full)
  for i, id in ipairs(produced) do
    local row = logits:slice(1, #prompt + i - 1, #prompt + i - 1):reshape(-1)
    assert(row:argmax() - 1 == id, string.format("token %d: decoded %d, prefill's argmax %d", i, id, row:argmax() - 1))
  end
  return produced
end

-- fp16 against fp32 logits for `ids`, through the final norm's outputs h [C, T] (the program
-- `norm_kind`) that the exact fp32 classifier `wcls` [V, C] (of m32) reads: asserts
-- max|h16 - h32| <= bound * max|h32| (the bound the caller derives) and, for every logit,
-- Hoelder's |dz_v| <= sum_c |wcls[v, c]| |dh_c| (+1e-5 of fp32 evaluation slack). Returns the
-- fp16 logits and the per-logit bounds [T, V].
function M.assert_fp16_logits_bound(m16, m32, ids, norm_kind, wcls, bound)
  local function final_h(model)
    local x, _, S = model:forward(ids)
    local h = model:program(norm_kind, nil, S):eval({ x = x }).y
    return h:slice(4, 1, #ids):reshape(h:shape()[2], #ids):to("fp32")
  end
  local h16, h32 = final_h(m16), final_h(m32)
  local dh = h16:sub(h32):abs()
  local h_max, dh_max = select(1, h32:abs():topk(1))[1], select(1, dh:topk(1))[1]
  assert(dh_max <= bound * h_max, string.format("max|dh| %.3g > %.3g * max|h| %.3g", dh_max, bound, h_max))
  local z16 = m16:logits(ids)
  local dz = z16:sub(m32:logits(ids)):abs()                          -- [T, V]
  local logit_bounds = wcls:abs():matmul(dh):transpose()             -- [T, V]
  local slack = logit_bounds:add(1e-5):sub(dz)
  assert(select(1, slack:scale(-1):topk(1))[1] <= 0, "a logit error exceeds its Hoelder bound")
  return z16, logit_bounds
end

-- The reference AdamW run (meta.json of the reference models: lr 1e-3, betas 0.9/0.999,
-- eps 1e-8, no weight decay; the same batch every step): the loss before each of five
-- steps and after the last, and how far the runtime's patch and compile counters moved
-- after the first step.
function M.adamw_losses(model, expected)
  local ane, optim = require("ane"), require("ane.optim")
  local ids, targets = expected.input_ids:totable(), expected.targets:totable()
  local opt = optim.adamw(model:parameters(), { lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0 })
  local losses, after_first = {}, nil
  for step = 1, 6 do
    local loss, grads = model:loss(ids, targets)
    losses[step] = loss
    if step <= 5 then
      opt:step(grads)
      model:load_parameters()
    end
    if step == 1 then after_first = ane.stats() end
  end
  local now = ane.stats()
  return losses, { patches = now.patches - after_first.patches, compiles = now.compiles - after_first.compiles }
end

-- A fresh directory: os.tmpname reserves a unique name (busted seeds math.random with the
-- time, so names built from it repeat across runs started in the same second).
-- Each is removed when the spec file that made it ends (spec/support/busted_helper.lua).
local made_dirs = {}
function M.tmpdir()
  local name = os.tmpname()
  os.remove(name)
  assert(lfs.mkdir(name))
  made_dirs[#made_dirs + 1] = name
  return name
end

local function remove_tree(path)
  if lfs.symlinkattributes(path, "mode") == "directory" then
    for entry in lfs.dir(path) do
      if entry ~= "." and entry ~= ".." then remove_tree(path .. "/" .. entry) end
    end
    lfs.rmdir(path)
  else
    os.remove(path)
  end
end

--- Removes the directories M.tmpdir made so far.
function M.remove_tmpdirs()
  for i = #made_dirs, 1, -1 do
    remove_tree(made_dirs[i])
    made_dirs[i] = nil
  end
end

function M.write_file(path, bytes)
  local file = assert(io.open(path, "wb"))
  file:write(bytes)
  file:close()
end

function M.read_file(path)
  local file = assert(io.open(path, "rb"))
  local bytes = file:read("a")
  file:close()
  return bytes
end

local function shell_quote(text)
  return "'" .. tostring(text):gsub("'", "'\\''") .. "'"
end
M.quote = shell_quote

--- GPT-2's vocabulary (token -> id) and merges ("a b" strings in rank order) from
--- data/tokenizers/gpt2, for specs that build tokenizers of other shapes from them.
function M.gpt2_vocab_and_merges()
  local dir = M.root .. "/data/tokenizers/gpt2/"
  local vocab = require("cjson").decode(M.read_file(dir .. "vocab.json"))
  local merges = {}
  for line in io.lines(dir .. "merges.txt") do
    if line ~= "" and not line:match("^#version") then merges[#merges + 1] = line end
  end
  return vocab, merges
end

-- Runs a shell command; returns stdout, stderr, exit code.
function M.run(command, stdin_text)
  local dir = M.tmpdir()
  local input = dir .. "/stdin"
  M.write_file(input, stdin_text or "")
  local full = string.format("%s <%s >%s/stdout 2>%s/stderr", command, shell_quote(input), dir, dir)
  local ok, _, code = os.execute(full)
  local out, err = M.read_file(dir .. "/stdout"), M.read_file(dir .. "/stderr")
  os.execute("rm -rf " .. shell_quote(dir))
  return out, err, ok and 0 or code
end

-- Runs the host with the given argument string.
function M.run_anelua(args, stdin_text, env)
  return M.run((env or "") .. " " .. shell_quote(M.anelua) .. " " .. args, stdin_text)
end

-- Autodiff against central finite differences (spec/autodiff_spec.lua explains the step
-- h = 1e-2 and the tolerance 1e-3 + 1e-3 |analytic|): loss = sum(f(inputs) * R) for a fixed
-- random R, all on sim in fp32 (cpu profile). Raises an error naming the input element.
function M.check_gradient(name, shapes, f, opts)
  local ane = require("ane")
  local H = 1e-2
  opts = opts or {}
  local g = ane.graph("f")
  local nodes, names = {}, {}
  for i, shape in ipairs(shapes) do
    names[i] = "in" .. i
    nodes[i] = g:input(names[i], shape, "fp32")
  end
  local out = f(g, table.unpack(nodes))
  local weights = ane.tensor.randn(out:shape(), { seed = 99 })
  local axes = {}
  for i = 0, #out:shape() - 1 do axes[#axes + 1] = i end
  local product = g:mul(out, g:const("r", weights))
  g:output("loss", #axes > 0 and g:reduce_sum(product, axes) or product)
  local backward = ane.grad(g, { wrt = names })
  backward:optimize()
  local forward_program = ane.compile(g, { profile = "cpu", precision = "fp32" })
  local backward_program = ane.compile(backward, { profile = "cpu", precision = "fp32" })
  local values = {}
  for i, shape in ipairs(shapes) do
    values[names[i]] = ane.tensor.rand(shape, { seed = i, low = opts.low or -1.5, high = opts.high or 1.5 })
  end
  local feed = {}
  for k, v in pairs(values) do feed[k] = v end
  feed.grad_loss = ane.tensor.from({ 1 }):reshape({})
  local grads = backward_program:eval(feed)
  local function loss(inputs) return forward_program:eval(inputs).loss:reshape(-1):get(1) end
  for _, input in ipairs(names) do
    local analytic = grads["grad_" .. input]:reshape(-1):totable()
    local flat = values[input]:reshape(-1)
    for i = 1, flat:numel() do
      local original = flat:get(i)
      flat:set(original + H, i)
      local up = loss(values)
      flat:set(original - H, i)
      local down = loss(values)
      flat:set(original, i)
      local numeric = (up - down) / (2 * H)
      local a = analytic[i]
      if math.abs(a - numeric) > 1e-3 + 1e-3 * math.abs(a) then
        error(string.format("%s: d loss / d %s[%d]: autodiff %.6g, finite differences %.6g", name, input, i, a, numeric), 2)
      end
    end
  end
end

--- The nodes of a graph as "name:op name:op ..." in its dump's order (for the passes' specs).
function M.ops_of(g)
  local ops = {}
  for line in g:dump():gmatch("[^\n]+") do
    local name, op = line:match("^  (%S+)%s.-= ([%w_]+)%(")
    if name then ops[#ops + 1] = name .. ":" .. op end
  end
  return table.concat(ops, " ")
end

--- A seeded fp16 tensor of normal(0, std = 0.1) values.
function M.fp16_randn(shape, seed, std)
  return require("ane").tensor.randn(shape, { seed = seed, std = std or 0.1, dtype = "fp16" })
end

--- A two-layer program: y = relu(W2 relu(W1 x + b1)), x [1, 64, 1, 32].
function M.two_layer_graph(w1, b1, w2)
  local ane, nn = require("ane"), require("ane.nn")
  local g = ane.graph("mlp")
  local x = g:input("x", { 1, 64, 1, 32 })
  local h = g:relu(nn.linear(g, x, w1, b1, { name = "fc1" }))
  g:output("y", g:relu(nn.linear(g, h, w2, nil, { name = "fc2" })))
  return g
end

--- Checks every line of a golden.jsonl: tok:encode gives its ids exactly and tok:decode gives
--- back expected_text(text). Returns the number of lines.
function M.check_golden(tok, golden, expected_text)
  local cjson = require("cjson")
  local lines = 0
  for line in io.lines(golden) do
    local case = cjson.decode(line)
    local ids = tok:encode(case.text)
    local same = #ids == #case.ids
    for i = 1, #case.ids do same = same and ids[i] == case.ids[i] end
    assert(same, string.format("%q: ids %s, expected %s", case.text, table.concat(ids, " "), table.concat(case.ids, " ")))
    local decoded = tok:decode(ids)
    assert(decoded == expected_text(case.text), string.format("%q decodes to %q", case.text, decoded))
    lines = lines + 1
  end
  return lines
end

return M
