-- `anelua run MODEL --prompt TEXT` (lua/ane/commands/run.lua) through the host, on the
-- PyTorch-checked fixtures: the text it prints is the prompt and the library's own greedy
-- continuation decoded, stop strings end it before them, and mistakes are one line.
local helpers = require("spec.helpers")
local models = require("ane.models")

local run, q = helpers.run_anelua, helpers.quote
local qwen3 = helpers.root .. "/spec/data/reference/qwen3-tiny"

describe("anelua run", function()
  it("continues the prompt with the model's greedy ids, text on stdout, statistics on stderr", function()
    local model = assert(models.load(qwen3, { precision = "fp32" }))
    local ids = {}
    for id in model:generate(models.prompt_ids(model, "Hello"), { max_tokens = 6, temperature = 0 }) do
      if id == model.stop_token then break end
      ids[#ids + 1] = id
    end
    local out, err, code = run("run " .. q(qwen3) .. " --prompt Hello --max-tokens 6 --temperature 0 --precision fp32")
    assert.are.equal(0, code, err)
    assert.are.equal("Hello" .. model.tokenizer:decode(ids) .. "\n", out)
    assert.matches("%-%-%- stats\n", err)
    assert.matches("^qwen3 %(", err)
  end)

  it("ends the text before a --stop string, never printing a piece of it", function()
    local out = run("run " .. q(qwen3) .. " --prompt Hello --max-tokens 6 --temperature 0 --precision fp32")
    local continuation = out:sub(6, -2)
    assert.is_true(#continuation >= 2, "a continuation to cut: '" .. continuation .. "'")
    local stop = continuation:sub(2, 2) -- a character the greedy text has after its first
    local cut, err, code = run("run " .. q(qwen3) .. " --prompt Hello --max-tokens 6 --temperature 0 --precision fp32"
      .. " --stop " .. q(stop) .. " --stop 'never here'")
    assert.are.equal(0, code, err)
    assert.are.equal("Hello" .. continuation:sub(1, continuation:find(stop, 1, true) - 1) .. "\n", cut)
  end)

  it("says when a model has no tokenizer, a GGUF file is cut short, or a flag is wrong", function()
    local _, err, code = run("run " .. q(helpers.root .. "/spec/data/reference/llama3-tiny") .. " --prompt Hi")
    assert.are.equal(1, code)
    assert.matches("llama3%-tiny: no tokenizer %(tokenizer%.json.*; `run` needs text in and out", err)
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/m.gguf", "GGUF\3\0\0\0")
    _, err, code = run("run " .. q(dir .. "/m.gguf"))
    assert.are.equal(1, code)
    assert.matches("m%.gguf: the tensor count at offset 8 needs 8 bytes, past the end of the 8%-byte file", err)
    _, err, code = run("run")
    assert.are.equal(2, code)
    assert.matches("run: missing MODEL", err)
    _, err, code = run("run " .. q(qwen3) .. " --min-p 2")
    assert.are.equal(2, code)
    assert.matches("%-%-min%-p must be in %[0, 1%], got 2", err)
  end)

  -- llama-tiny (vocabulary 320) with Llama 2's tokenizer.bin cut to its first 320 records
  -- (llama2.c's layout: int32 max length, then per token float32 score, int32 length, bytes).
  -- Seed 29 samples "▁A" first, a piece whose space SentencePiece drops when it starts a
  -- decode: the continuation printed is what the whole text's decode has after the prompt.
  it("prints a SentencePiece model's continuation as the whole text decodes it (--tokenizer)", function()
    local bytes = helpers.read_file(helpers.root .. "/data/tokenizers/llama2/tokenizer.bin")
    local at = 5
    for _ = 1, 320 do at = at + 8 + string.unpack("<i4", bytes, at + 4) end
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/tokenizer.bin", bytes:sub(1, at - 1))
    local checkpoint = helpers.root .. "/spec/data/reference/llama-tiny/model.bin"
    local model = assert(models.load(checkpoint, { precision = "fp32" }))
    model.tokenizer = assert(models.tokenizer_file(dir .. "/tokenizer.bin", 320))
    local prompt = "in the end"
    local ids = models.prompt_ids(model, prompt)
    local all = { table.unpack(ids, 2) } -- (without the BOS)
    local prompt_text = model.tokenizer:decode(all)
    for id in model:generate(ids, { max_tokens = 8, temperature = 1, top_k = 40, seed = 29 }) do
      if id == model.stop_token then break end
      all[#all + 1] = id
    end
    local continuation = model.tokenizer:decode(all):sub(#prompt_text + 1)
    assert.are.equal(" A", continuation:sub(1, 2)) -- (the case this checks)
    local out, err, code = run("run " .. q(checkpoint) .. " --tokenizer " .. q(dir .. "/tokenizer.bin") .. " --prompt "
      .. q(prompt) .. " --max-tokens 8 --temperature 1 --seed 29 --precision fp32")
    assert.are.equal(0, code, err)
    assert.are.equal(prompt .. continuation .. "\n", out)
  end)

  it("runs ./run as a script when the directory has one", function()
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/run", "print('the script named run', ...)\n")
    local out = helpers.run("cd " .. q(dir) .. " && " .. q(helpers.anelua) .. " run x")
    assert.are.equal("the script named run\tx\n", out)
  end)
end)
