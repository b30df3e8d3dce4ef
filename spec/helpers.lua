-- Shared helpers of the busted specs: where the build and the test data are, temporary
-- files, and running the host as a subprocess.
local lfs = require("lfs")

local M = {}

M.root = lfs.currentdir() -- ctest and the README run busted from the project root
M.build = os.getenv("ANELUA_BUILD_DIR") or (M.root .. "/build")
M.anelua = M.build .. "/anelua"

-- The shared test data: $ANELUA_TEST_DATA or ../shared/data beside the project.
function M.data_dir()
  for _, dir in ipairs({ os.getenv("ANELUA_TEST_DATA") or "", M.root .. "/../shared/data" }) do
    if dir ~= "" and lfs.attributes(dir, "mode") == "directory" then return dir end
  end
  return nil
end

-- Returns the data path, or marks the test pending (skipped, by name) when the data is
-- absent on a developer machine; `pending` is busted's, passed in by the spec. In CI
-- (CI=true) absence is a failure.
function M.require_data(relative, pending)
  local dir = M.data_dir()
  if dir then return dir .. "/" .. relative end
  if os.getenv("CI") == "true" then error("test data missing: " .. relative .. " (CI must have ../shared/data)") end
  pending("test data missing: " .. relative)
  return nil
end

-- A reference model directory of the shared data (reference/<name>) and its PyTorch
-- expectations, or nil when pending (see require_data).
function M.reference(name, pending)
  local dir = M.require_data("reference/" .. name, pending)
  if not dir then return nil end
  local ane = require("ane")
  return dir, assert(ane.io.load_safetensors(dir .. "/expected.safetensors"))
end

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
function M.tmpdir()
  local name = os.tmpname()
  os.remove(name)
  assert(lfs.mkdir(name))
  return name
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

return M
