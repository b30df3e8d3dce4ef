-- Checkpoints: resuming reproduces an uninterrupted run bit for bit (fp32), a SIGKILL in
-- the middle of writing leaves the previous checkpoint loadable, old ones are pruned, and
-- llama2.c export loads back to the same model.
local ane = require("ane")
local helpers = require("spec.helpers")
local llama = require("ane.models.llama")
local optim = require("ane.optim")
local checkpoint = require("ane.checkpoint")

local function reference() return helpers.repo_data():reference("llama-tiny") end

-- `steps` AdamW steps on the reference batch from a model and optimizer; returns losses.
local function train(model, opt, ids, targets, steps)
  local losses = {}
  for i = 1, steps do
    local loss, grads = model:loss(ids, targets)
    losses[i] = loss
    opt:step(grads)
    model:load_parameters()
  end
  return losses
end

describe("checkpoints", function()
  it("resume to the same losses as an uninterrupted run (fp32, bit for bit)", function()
    local dir, expected = reference()
    local ids, targets = expected.input_ids:totable(), expected.targets:totable()
    local options = { lr = 1e-3, weight_decay = 0.01 }
    local straight = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    local all = train(straight, optim.adamw(straight:parameters(), options), ids, targets, 10)

    local first = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    local opt = optim.adamw(first:parameters(), options)
    local part1 = train(first, opt, ids, targets, 5)
    local ckpt_dir = helpers.tmpdir()
    local path = assert(checkpoint.save(ckpt_dir, 5, { params = first:parameters(), m = opt.m, v = opt.v },
      { data_position = 5, config = first.config }))

    local state = assert(checkpoint.load(path))
    assert.are.equal(5, state.step)
    local resumed = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    for name, t in pairs(resumed:parameters()) do t:copy_from(state.params[name]) end
    resumed:load_parameters()
    local opt2 = optim.adamw(resumed:parameters(), options)
    opt2.m, opt2.v, opt2.steps = state.m, state.v, state.step
    local part2 = train(resumed, opt2, ids, targets, 5)
    for i = 1, 5 do
      assert.are.equal(all[i], part1[i])
      assert.are.equal(all[5 + i], part2[i], "step " .. (5 + i))
    end
  end)

  it("keep the previous checkpoint loadable when a writer is killed mid-write", function()
    local ckpt_dir = helpers.tmpdir()
    local small = { params = { w = ane.tensor.from({ 1, 2, 3 }) } }
    local first = assert(checkpoint.save(ckpt_dir, 1, small))
    -- A child process saves a ~400 MB checkpoint of step 2; kill it with SIGKILL mid-write.
    local script = string.format([[local ane = require('ane'); local checkpoint = require('ane.checkpoint')
      checkpoint.save(%q, 2, { params = { big = ane.tensor({ 100000000 }) } })]], ckpt_dir)
    helpers.run("sh -c " .. helpers.quote(helpers.quote(helpers.anelua) .. " -e " .. helpers.quote(script) ..
      " & pid=$!; sleep 0.3; kill -9 $pid; wait $pid 2>/dev/null; true"))
    assert.are.equal(first, checkpoint.latest(ckpt_dir)) -- no step-2 file appeared
    local state = assert(checkpoint.load(first))
    assert.are.same({ 1, 2, 3 }, state.params.w:totable())
  end)

  it("keep only the newest N", function()
    local ckpt_dir = helpers.tmpdir()
    for step = 1, 5 do assert(checkpoint.save(ckpt_dir, step, { params = { w = ane.tensor({ 2 }) } }, nil, { keep = 2 })) end
    local count = 0
    for entry in require("lfs").dir(ckpt_dir) do if entry:match("^ckpt") then count = count + 1 end end
    assert.are.equal(2, count)
    assert.matches("ckpt%-00000005%.safetensors$", checkpoint.latest(ckpt_dir))
  end)

  it("export llama2.c files that load back to the same logits", function()
    local dir, expected = reference()
    local model = assert(llama.load(dir .. "/model.bin", { precision = "fp32" }))
    local path = helpers.tmpdir() .. "/export.bin"
    assert(checkpoint.export_llama2c(path, model.config, model:parameters()))
    assert.are.equal(helpers.read_file(dir .. "/model.bin"), helpers.read_file(path))
    local again = assert(llama.load(path, { precision = "fp32" }))
    local ids = expected.input_ids:totable()[1]
    assert.are.equal(model:logits(ids):bytes(), again:logits(ids):bytes())
  end)
end)

describe("checkpoint integrity", function()
  -- A small checkpoint: two tensors and an optimizer moment, with a config.
  local function write_one(dir)
    local params = { ["wq.0"] = ane.tensor.randn({ 8, 8 }, { seed = 1 }), ["rms_final"] = ane.tensor.from({ 1, 2, 3, 4 }) }
    local m = { ["wq.0"] = ane.tensor.randn({ 8, 8 }, { seed = 2 }) }
    return assert(checkpoint.save(dir, 7, { params = params, m = m }, { config = { dim = 8 } })), params
  end

  -- Rewrites one byte of a file at a 1-based position.
  local function flip(path, position)
    local bytes = helpers.read_file(path)
    local flipped = string.char(bytes:byte(position) ~ 0x01)
    helpers.write_file(path, bytes:sub(1, position - 1) .. flipped .. bytes:sub(position + 1))
  end

  it("load back what was saved when nothing changed", function()
    local path, params = write_one(helpers.tmpdir())
    local state = assert(checkpoint.load(path))
    assert.are.equal(0, state.params["wq.0"]:max_abs_diff(params["wq.0"]))
    assert.are.equal(7, state.step)
  end)

  it("name the tensor whose data holds a flipped byte", function()
    local path = write_one(helpers.tmpdir())
    local header_length = string.unpack("<I8", helpers.read_file(path))
    local tensors = assert(ane.io.load_safetensors(path))
    -- the data section is tensors in header order; flip a byte in every tensor in turn
    local header = require("cjson").decode(helpers.read_file(path):sub(9, 8 + header_length))
    for name, entry in pairs(header) do
      if name ~= "__metadata__" then
        local fresh = write_one(helpers.tmpdir())
        flip(fresh, 8 + header_length + entry.data_offsets[1] + 2)
        local state, err = checkpoint.load(fresh)
        assert.is_nil(state, name)
        assert.matches("tensor '" .. name:gsub("%p", "%%%0") .. "' does not match its checksum", err)
      end
    end
    assert.is_not_nil(tensors["param.wq.0"])
  end)

  it("refuse a header whose metadata changed (a digit of the step)", function()
    local path = write_one(helpers.tmpdir())
    local bytes = helpers.read_file(path)
    local at = bytes:find('"step":"7"', 1, true)
    assert.is_truthy(at, "the step is in the header")
    helpers.write_file(path, bytes:sub(1, at + 7) .. "6" .. bytes:sub(at + 9))
    local state, err = checkpoint.load(path)
    assert.is_nil(state)
    assert.matches("metadata does not match its checksum", err)
  end)

  -- one flipped bit in the key "metadata_checksum" used to make a checkpoint pass for one
  -- written before checksums existed, and every check was skipped: a flipped data bit then
  -- loaded in silence
  it("refuse a header whose metadata_checksum key a flipped bit renamed, with its data damaged", function()
    local path = write_one(helpers.tmpdir())
    local bytes = helpers.read_file(path)
    local at = bytes:find('"metadata_checksum"', 1, true)
    assert.is_truthy(at, "the key is in the header")
    flip(path, at + 17) -- ..._checksum -> ..._checksul
    flip(path, #bytes - 3) -- and a byte of the last tensor's data
    local state, err = checkpoint.load(path)
    assert.is_nil(state)
    assert.matches("has no metadata_checksum but holds '[%w_]+', which only checkpoints with checksums hold", err)
  end)

  -- written as the writer did before checksums (its keys and nothing else): it loads, and
  -- its values are checked as any checkpoint's
  it("load a checkpoint from before checksums, and check its values", function()
    local dir = helpers.tmpdir()
    local function old_checkpoint(data_position, rng)
      local path = dir .. "/ckpt-00000003.safetensors"
      assert(ane.io.save_safetensors(path, { ["param.w"] = ane.tensor.from({ 1, 2 }) }, {
        format = "anelua-checkpoint-1", step = "3", data_position = data_position, rng = rng, config = "{}",
        trainer = "{}" }))
      return path
    end
    local state = assert(checkpoint.load(old_checkpoint("64", "0")))
    assert.are.equal(3, state.step)
    assert.are.equal(64, state.data_position)
    assert.are.same({ 1, 2 }, state.params.w:totable())
    for _, case in ipairs({ { "nan", "0", "data_position 'nan' is not a count" },
      { "-5", "0", "data_position '%-5' is not a count" }, { "8", "x", "rng 'x' is not an integer" } }) do
      local path = old_checkpoint(case[1], case[2])
      local loaded, err = checkpoint.load(path)
      assert.is_nil(loaded, case[3])
      assert.matches("ckpt%-00000003%.safetensors: the checkpoint's " .. case[3], err)
    end
  end)

  it("refuse a header whose JSON a flipped byte broke, naming the file", function()
    local path = write_one(helpers.tmpdir())
    flip(path, 9) -- the opening brace of the header JSON
    local state, err = checkpoint.load(path)
    assert.is_nil(state)
    assert.matches("ckpt%-00000007%.safetensors", err)
  end)
end)
