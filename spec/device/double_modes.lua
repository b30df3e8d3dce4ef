-- (Not named *_spec.lua: it runs only through the device/* ctest rows, which set the double
-- and its mode; `busted spec/` skips it.)
-- The `ane` backend's decisions against each behaviour the test double can emulate
-- (ANE_DOUBLE_MODE; one ctest row per mode, see CMakeLists.txt). Every row compares the
-- device path's outputs with `sim` running the same program in the same process: the double
-- executes through sim, so a correct backend gives equal bytes, and a wrong decision (a stale
-- patch kept, ports bound by position, rows at the wrong stride) gives different ones.
local ane = require("ane")
local nn = require("ane.nn")

local mode = os.getenv("ANE_DOUBLE_MODE") or ""

local function fp16(shape, seed)
  return ane.tensor.randn(shape, { seed = seed, std = 0.1, dtype = "fp16" })
end

-- y = relu(W x + b), one 64x64 linear layer over [1, 64, 1, width]
local function linear_graph(name, weight, width)
  local g = ane.graph(name)
  local x = g:input("x", { 1, 64, 1, width or 32 })
  g:output("y", g:relu(nn.linear(g, x, weight, fp16({ 64 }, 9), { name = "fc" })))
  return g
end

-- two inputs declared out of alphabetical order, two outputs
local function two_input_graph()
  local g = ane.graph("pair")
  local b = g:input("beta", { 1, 64, 1, 32 })
  local a = g:input("alpha", { 1, 64, 1, 32 })
  local w = g:const("w", fp16({ 64, 64, 1, 1 }, 1))
  g:output("sum", g:add(g:conv(a, w), b))
  g:output("diff", g:sub(g:conv(a, w), b))
  return g
end

-- three inputs and three outputs of one shape, declared in neither alphabetical order nor
-- its rotation: any port bound to another's surface changes an output
local function three_port_graph()
  local g = ane.graph("three")
  local c, a, b = g:input("c_in", { 1, 64, 1, 32 }), g:input("a_in", { 1, 64, 1, 32 }), g:input("b_in", { 1, 64, 1, 32 })
  local w = g:const("w", fp16({ 64, 64, 1, 1 }, 1))
  g:output("c", g:sub(g:conv(c, w), a))
  g:output("a", g:add(g:conv(a, w), b))
  g:output("b", g:mul(b, c))
  return g
end

local function same_outputs(g, inputs)
  local device = ane.compile(g, { backend = "ane" }):eval(inputs)
  local sim = ane.compile(g, { backend = "sim" }):eval(inputs)
  for name, value in pairs(sim) do
    assert.are.equal(value:bytes(), device[name]:bytes(), "output " .. name .. " differs from sim's")
  end
  return device
end

local x = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 5 })

-- Patches a device program and a sim program the same way twice; the device's outputs must
-- follow sim's after each patch. Returns the device stats after the first and second patch.
local function patch_twice()
  local w0, w1, w2 = fp16({ 64, 64, 1, 1 }, 1), fp16({ 64, 64, 1, 1 }, 2), fp16({ 64, 64, 1, 1 }, 3)
  local device = ane.compile(linear_graph("patched", w0), { backend = "ane" })
  local sim = ane.compile(linear_graph("patched", w0), { backend = "sim" })
  assert.are.equal(sim:eval({ x = x }).y:bytes(), device:eval({ x = x }).y:bytes())
  local after = {}
  for i, w in ipairs({ w1, w2 }) do
    device:patch({ fc_weight = w })
    sim:patch({ fc_weight = w })
    local want = sim:eval({ x = x }).y:bytes()
    assert.are_not.equal(want, ane.compile(linear_graph("original", w0), { backend = "sim" }):eval({ x = x }).y:bytes())
    assert.are.equal(want, device:eval({ x = x }).y:bytes(), "patch " .. i .. " did not take effect on the device path")
    after[i] = ane.stats()
  end
  return after
end

-- The strategy the first patch's check must settle on, per mode.
local strategy_cases = {
  [""] = { "donor", "reload stale, donor works, identifier hashes weights" },
  ["reload-effect"] = { "reload", "reload works, donor works, identifier hashes weights" },
  ["donor-stale"] = { "recompile", "reload stale, donor stale, identifier hashes weights" },
  ["donor-fails"] = { "recompile", "reload stale, donor fails, identifier hashes weights" },
  -- the donor gets the donor's own identifier, so aned's cache hands back the old weights;
  -- the reference compiled last exposes it (compiled first, it would have hidden it)
  ["id-paths"] = { "recompile", "reload stale, donor stale, identifier ignores weights" },
}

describe("the ane backend against the double in mode '" .. mode .. "'", function()
  -- (modes whose point is that compiles fail are left to their own test)
  local compiles_work = not (mode == "compile-error" or mode == "encoding-mismatch" or mode:match("^budget"))
  if compiles_work then
    it("runs through the device path and agrees with sim byte for byte", function()
      assert.is_true(ane.capabilities().test_double)
      same_outputs(linear_graph("plain", fp16({ 64, 64, 1, 1 }, 1)), { x = x })
      assert.is_true(ane.stats().device.requests_built >= 1)
    end)
  end

  if mode == "" then
    it("binds to the encodings a Mac reports, offsets and qualifiers included", function()
      local lines = ane.capabilities().encodings
      assert.is_true(#lines >= 13)
      local text = table.concat(lines, "\n")
      assert.is_nil(text:find("MISMATCH", 1, true), text)
      -- objc4 declares release oneway void: 'V' before the type, which the bind step ignores
      assert.matches("%-%[NSObject release%] expected v@: live Vv16@0:8", text)
      assert.matches("%-%[_ANEInMemoryModel evaluateWithQoS:options:request:error:%] expected ([Bc])@:I@@%^@ live %144@0:8I16@20@28%^@36", text)
    end)

    it("refuses the 129th loaded program with a message before the device would", function()
      local first = ane.compile(linear_graph("many", fp16({ 64, 64, 1, 1 }, 1)), { backend = "ane", key = "many" })
      local loaded = { first }
      local already = ane.stats().device.loaded
      for i = already + 1, 128 do loaded[#loaded + 1] = ane.cached("many") end
      assert.are.equal(128, ane.stats().device.loaded)
      local ok, err = pcall(ane.cached, "many")
      assert.is_false(ok)
      assert.matches("128 programs are loaded in this process, the device's limit %(the 129th load fails%); close programs",
        err)
      loaded[#loaded]:close() -- unloading frees a slot
      assert.are.equal(127, ane.stats().device.loaded)
      loaded[#loaded] = ane.cached("many")
      assert.are.equal(first:eval({ x = x }).y:bytes(), loaded[#loaded]:eval({ x = x }).y:bytes())
      for _, p in ipairs(loaded) do p:close() end
    end)

    it("tells the REPL user once which weight-update strategy the device took", function()
      local helpers = require("spec.helpers")
      local session = table.concat({
        'nn = require("ane.nn"); g = ane.graph("t"); x = g:input("x", {1, 64, 1, 32})',
        'g:output("y", nn.linear(g, x, ane.tensor.randn({64, 64, 1, 1}, {dtype = "fp16"}), nil, {name = "fc"}))',
        'p = ane.compile(g); p:eval{x = ane.tensor.randn({1, 64, 1, 32})}',
        'p:patch{fc_weight = ane.tensor.randn({64, 64, 1, 1}, {dtype = "fp16", seed = 3})}',
        'r = p:eval{x = ane.tensor.randn({1, 64, 1, 32})}',
        'p:patch{fc_weight = ane.tensor.randn({64, 64, 1, 1}, {dtype = "fp16", seed = 4})}',
        'r = p:eval{x = ane.tensor.randn({1, 64, 1, 32})}', "" }, "\n")
      local out = helpers.run_anelua("-i", session, "ANELUA_BACKEND=ane")
      local _, told = out:gsub("ane: weight patches take effect on this device by 'donor' %(reload stale, donor works, "
        .. "identifier hashes weights%)", "")
      assert.are.equal(1, told, out)
    end)

    it("refuses a TMPDIR too long for its program directories, saying so", function()
      local helpers = require("spec.helpers")
      local long = "/tmp/" .. string.rep("d", 4085) -- never created: the path is refused first
      local script = 'local ane = require("ane"); local g = ane.graph("t"); g:output("y", g:relu(g:input("x", {1, 8, 1, 32}))); '
        .. 'local ok, err = pcall(ane.compile, g, { backend = "ane" }); print(ok, err)'
      local out, err, code = helpers.run_anelua("-e " .. helpers.quote(script), nil, "TMPDIR=" .. long)
      assert.are.equal(0, code, err)
      assert.matches("^false\t.*a program directory under TMPDIR %(4090 characters%) would be longer than %d+; "
        .. "set TMPDIR to a shorter path", out)
    end)

    it("sweeps the temporary directories of processes that died", function()
      local helpers = require("spec.helpers")
      local dead = helpers.run("sh -c 'echo $$'"):match("%d+") -- a process that has exited
      local root = (os.getenv("TMPDIR") or "/tmp"):gsub("/$", "")
      local stale = root .. "/00000000000000000000000000dead" .. dead:sub(-2)
      assert(require("lfs").mkdir(stale))
      helpers.write_file(stale .. "/model.mil", "left behind")
      helpers.write_file(stale .. "/.anelua-owner-" .. dead, "")
      local out = helpers.run_anelua("-e " .. helpers.quote("print(require('ane').capabilities().device)"), nil,
        "ANELUA_BACKEND=")
      assert.are.equal("true\n", out)
      assert.is_nil(require("lfs").attributes(stale))
    end)
  end

  if strategy_cases[mode] then
    it("checks the first patch once and keeps the strategy that works: " .. strategy_cases[mode][1], function()
      local compiles_before = ane.stats().backend_compiles
      local after = patch_twice()
      assert.are.equal(strategy_cases[mode][1], after[1].device.patch_strategy)
      assert.are.equal(strategy_cases[mode][2], after[1].device.patch_check)
      assert.are.equal(strategy_cases[mode][1], ane.capabilities().patch_strategy)
      assert.are.equal(1, after[2].device.patch_checks) -- the second patch is not checked again
      -- the check's reference compile counts against the budget (ANE-05); a recompile
      -- strategy compiles once more per patch, the others never
      assert.are.equal(compiles_before + 1, after[1].backend_compiles)
      local per_patch = strategy_cases[mode][1] == "recompile" and 1 or 0
      assert.are.equal(after[1].backend_compiles + per_patch, after[2].backend_compiles)
      if mode == "id-paths" then assert.is_false(ane.capabilities().identifier_hashes_weights) end
    end)
  end

  if mode == "donor-stale" then
    -- (here patches commit by recompiling, so training spends the compile budget step by step)
    it("restarts training with exec() and --resume when the budget is near, with the same losses bit for bit", function()
      local helpers = require("spec.helpers")
      local function train(dir, budget)
        local out, err, code = helpers.run_anelua("examples/train_stories.lua --steps 6 --precision fp16 --backend ane "
          .. "--ckpt-dir " .. helpers.quote(dir), nil, budget and ("ANELUA_COMPILE_BUDGET=" .. budget) or "")
        assert.are.equal(0, code, err)
        local losses = {}
        for line in io.lines(dir .. "/metrics.jsonl") do losses[#losses + 1] = line:match('"loss_hex":"([^"]+)"') end
        return out, losses
      end
      local _, uninterrupted = train(helpers.tmpdir())
      local out, restarted = train(helpers.tmpdir(), 40) -- 10 compiles to start, 10 per step after the first
      assert.matches("compile budget: %d+ left, a step needs up to %d+ %(ANE%-05%): checkpoint .* after step %d+, "
        .. "restarting this process with %-%-resume", out)
      assert.matches("restart 1 after the compile budget: %d+ ms from exec%(%) to here", out)
      assert.matches("restarts 1 %(%d+ ms%)", out)
      assert.are.equal(6, #restarted)
      assert.are.same(uninterrupted, restarted)
    end)
  end

  if mode == "donor-stale,budget-nil=40" then
    -- the device's budget (40 here) is lower than the configured one (119): a step fails
    it("restarts training from the last checkpoint when the device's budget runs out first, same losses", function()
      local helpers = require("spec.helpers")
      local function train(dir, double_mode)
        local out, err, code = helpers.run_anelua("examples/train_stories.lua --steps 8 --ckpt-every 2 --precision fp16 "
          .. "--backend ane --ckpt-dir " .. helpers.quote(dir), nil, "ANE_DOUBLE_MODE=" .. double_mode)
        assert.are.equal(0, code, err)
        local losses = {}
        for line in io.lines(dir .. "/metrics.jsonl") do losses[#losses + 1] = line:match('"loss_hex":"([^"]+)"') end
        return out, losses
      end
      local _, uninterrupted = train(helpers.tmpdir(), "donor-stale")
      local out, restarted = train(helpers.tmpdir(), mode)
      assert.matches("compile budget ran out on the device at step %d+ after %d+ compiles %(ANE%-05%): restarting this "
        .. "process from .*ckpt%-%d+%.safetensors with a budget of %d+", out)
      assert.matches("restarts 1", out)
      assert.are.equal(8, #restarted)
      assert.are.same(uninterrupted, restarted)
    end)
  end

  if mode == "ports-declared" or mode == "ports-rotated" then
    it("binds each port at its position in the order modelAttributes lists them", function()
      local xb = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 6 })
      same_outputs(two_input_graph(), { alpha = x, beta = xb })
      local xc = ane.tensor.randn({ 1, 64, 1, 32 }, { seed = 7 })
      local outputs = same_outputs(three_port_graph(), { a_in = x, b_in = xb, c_in = xc })
      assert.are_not.equal(outputs.a:bytes(), outputs.b:bytes())
      -- (anelua's MIL declares ports alphabetically, so only the rotated listing differs)
      if mode == "ports-rotated" then assert.are.equal("not alphabetical", ane.capabilities().port_listing) end
    end)
  end

  if mode == "row-align=128,reports-row-stride" then
    it("copies through surfaces at the row stride the loaded model reports", function()
      local before = ane.stats().device.copied_evals
      same_outputs(linear_graph("narrow", fp16({ 64, 64, 1, 1 }, 1), 32), { x = x }) -- 64-byte rows here
      local device = ane.stats().device
      assert.are.equal(before + 1, device.copied_evals)
      assert.is_true(device.row_stride_mismatches >= 1)
    end)
  end

  -- A chip whose rows are not the catalogue's 64 bytes reports no stride: the target says
  -- where rows start (m4 packed, m5 32 elements), and the generic target gets it wrong.
  local chip_of_mode = { ["rows=packed"] = "m4", ["rows=32-elements"] = "m5" }
  if chip_of_mode[mode] then
    it("lays I/O rows out as the target's chip does when the model reports no stride", function()
      for _, dtype in ipairs({ "fp16", "fp32" }) do
        local function narrow()
          local g = ane.graph("narrow_" .. dtype)
          local input = g:input("x", { 1, 64, 1, 48 }, dtype)
          local h = dtype == "fp16" and input or g:cast(input, "fp16")
          h = g:conv(h, g:const("w", fp16({ 64, 64, 1, 1 }, 1)))
          g:output("y", dtype == "fp16" and h or g:cast(h, "fp32"))
          return g
        end
        local xin = { x = ane.tensor.randn({ 1, 64, 1, 48 }, { seed = 5, dtype = dtype }) }
        local want = ane.compile(narrow(), { backend = "sim" }):eval(xin).y:bytes()
        local chip = ane.compile(narrow(), { backend = "ane", target = chip_of_mode[mode] }):eval(xin).y:bytes()
        assert.are.equal(want, chip, dtype .. " rows at the " .. chip_of_mode[mode] .. " target's layout")
        -- (fp16 rows of 32 elements are 64 bytes; packed fp32 rows of 192 bytes are 64-byte aligned)
        if (dtype == "fp16") == (mode == "rows=packed") then
          local generic = ane.compile(narrow(), { backend = "ane", target = "generic" }):eval(xin).y:bytes()
          assert.are_not.equal(want, generic, dtype .. ": the generic layout should misread this chip")
        end
      end
    end)
  end

  if mode == "load-transient" then
    it("retries a failed load once after 100 ms", function()
      same_outputs(linear_graph("retried", fp16({ 64, 64, 1, 1 }, 4)), { x = x })
      assert.are.equal(1, ane.stats().device.load_retries)
    end)
  end

  if mode == "multi-input-0x1d" then
    it("names status 0x1d and the packing remedy when the device refuses several inputs", function()
      local program = ane.compile(two_input_graph(), { backend = "ane" })
      local ok, err = pcall(program.eval, program, { alpha = x, beta = x })
      assert.is_false(ok)
      -- as a Mac words it: Code=8, the status only in the description
      assert.matches("program 'pair': %-%[_ANEInMemoryModel evaluateWithQoS:options:request:error:%] failed, code 8, " ..
        "status 0x1d: .*ANEProgramProcessRequestDirect%(%) Failed with status=0x1d", err)
      assert.is_nil(err:find("underlying", 1, true))
      assert.matches("ANE%-02/ANE%-04/ANE%-18", err)
      assert.matches("pack the inputs into one %[1, C, 1, S%] input", err)
      assert.is_false(ane.capabilities().multi_input)
    end)
  end

  if mode == "compile-error" then
    it("reports the compiler's NSError and its underlying error", function()
      local ok, err = pcall(ane.compile, linear_graph("refused", fp16({ 64, 64, 1, 1 }, 1)), { backend = "ane" })
      assert.is_false(ok)
      assert.matches("program 'refused': %-%[_ANEInMemoryModel compileWithQoS:options:error:%] failed, status 0x2: ", err)
      assert.matches("ANECCompile%(%) FAILED", err)
      assert.matches("underlying: .*MIL compiler: unsupported op 'gelu'", err)
    end)
  end

  if mode == "budget-nil=3" then
    it("names the compile budget when a compile returns NO without an error", function()
      for i = 1, 3 do ane.compile(linear_graph("fits" .. i, fp16({ 64, 64, 1, 1 }, i)), { backend = "ane" }) end
      local ok, err = pcall(ane.compile, linear_graph("over", fp16({ 64, 64, 1, 1 }, 4)), { backend = "ane" })
      assert.is_false(ok)
      assert.matches("program 'over': .*compileWithQoS.* failed, it returned NO without an NSError", err)
      assert.matches("compile budget %(ANE%-05%) running out: restart the process", err)
    end)
  end

  if mode == "budget-silent=3" then
    it("notices a program that loads but evaluates nothing, and names the budget", function()
      for i = 1, 3 do
        ane.compile(linear_graph("fits" .. i, fp16({ 64, 64, 1, 1 }, i)), { backend = "ane" }):eval({ x = x })
      end
      local program = ane.compile(linear_graph("hollow", fp16({ 64, 64, 1, 1 }, 4)), { backend = "ane" })
      local ok, err = pcall(program.eval, program, { x = x })
      assert.is_false(ok)
      assert.matches("program 'hollow': the device accepted the program but wrote nothing to output 'y'", err)
      assert.matches("silent form of the compile budget running out %(ANE%-05%)", err)
    end)
  end

  if mode == "budget-silent=2" then
    it("takes a patch check whose reference compile evaluates nothing for the budget, not a verdict", function()
      ane.compile(linear_graph("fits", fp16({ 64, 64, 1, 1 }, 1)), { backend = "ane" }):eval({ x = x }) -- compile 1
      local program = ane.compile(linear_graph("patched", fp16({ 64, 64, 1, 1 }, 2)), { backend = "ane" }) -- compile 2
      program:eval({ x = x })
      program:patch({ fc_weight = fp16({ 64, 64, 1, 1 }, 3) })
      local ok, err = pcall(program.eval, program, { x = x }) -- the check's reference is compile 3: hollow
      assert.is_false(ok)
      assert.matches("program 'patched': the device accepted the program but wrote nothing", err)
      assert.matches("%(ANE%-05%)", err)
      assert.are.equal("unknown", ane.capabilities().patch_strategy)
    end)
  end

  if mode == "encoding-mismatch" then
    it("refuses to send anything when a live type encoding differs from the table, printing both", function()
      local why = ane.backends().ane
      assert.are.equal("string", type(why))
      assert.matches("type encodings differ", why)
      -- (BOOL is 'B' on arm64, 'c' on x86-64: the double stands for the Mac of its architecture)
      assert.matches("%-%[_ANEInMemoryModel compileWithQoS:options:error:%]: expected ([Bc])@:I@%^@, live %140@0:8Q16@24%^@32", why)
      assert.error_matches(function() ane.compile(linear_graph("never", fp16({ 64, 64, 1, 1 }, 1)), { backend = "ane" }) end,
        "refusing to send any message")
    end)
  end
end)
