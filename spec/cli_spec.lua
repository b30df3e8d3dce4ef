-- The examples' and scripts' command lines (ane.cli): every mistake a user makes is one line
-- naming the flag and exit code 2 (or 1 for a problem found later), never a traceback;
-- --help everywhere; Ctrl-C ends generation and training cleanly.
local helpers = require("spec.helpers")
local cjson = require("cjson")
local q = helpers.quote

local function script(path) return q(helpers.root .. "/" .. path) end

-- Runs the host with args and sends it one SIGINT after `seconds` (as one Ctrl-C does;
-- timeout(1) would signal the process group too, i.e. twice).
local function run_interrupted(seconds, args)
  return helpers.run("bash -c " .. q(q(helpers.anelua) .. " " .. args .. " & pid=$!; sleep " .. seconds ..
    "; kill -INT $pid; wait $pid"))
end
local llama_tiny = q(helpers.root .. "/spec/data/reference/llama-tiny/model.bin")
local llama_tokenizer = q(helpers.root .. "/data/tokenizers/llama2/tokenizer.bin")

-- { command line, exit code, message pattern }
local bad_inputs = {
  { "examples/gpt2.lua --precision fp8", 2, "%-%-precision must be one of fp16, fp32, got 'fp8'" },
  { "examples/gpt2.lua --max-tokens 0", 2, "%-%-max%-tokens must be >= 1, got 0" },
  { "examples/gpt2.lua --temperature -1", 2, "%-%-temperature must be >= 0, got %-1" },
  { "examples/gpt2.lua --top-p 5", 2, "%-%-top%-p must be in %(0, 1%], got 5" },
  { "examples/gpt2.lua --top-k -3", 2, "%-%-top%-k must be >= 0, got %-3" },
  { "examples/gpt2.lua --seed 1.5", 2, "%-%-seed needs a whole number, got '1%.5'" },
  { "examples/gpt2.lua --prompt", 2, "%-%-prompt needs a value" },
  { "examples/gpt2.lua --colour red", 2, "unknown option %-%-colour" },
  { "examples/gpt2.lua --backend tpu", 2, "%-%-backend must be one of sim, ane, got 'tpu'" },
  { "examples/gpt2.lua --backend ane", 1, "backend 'ane' is not available" },
  { "examples/gpt2.lua --target m9", 2, "%-%-target: 'm9' is neither a built%-in target %(generic, m1, m2, m3, m4, m5, unchecked%)" },
  { "examples/gpt2.lua --target chip.json", 2, "%-%-target: probe report chip%.json: " },
  { "examples/gpt2.lua --model /nonexistent", 1, "%-%-model /nonexistent does not exist" },
  { "examples/gpt2.lua --model " .. q(helpers.root .. "/spec/data/reference/gpt2-tiny"), 1,
    "the tokenizer has 50257 tokens but the model's vocabulary 384" },
  { "examples/train_stories.lua --steps 1 --ckpt-dir ckpt --init " .. q(helpers.root .. "/spec/data/reference/gpt2-tiny"), 1,
    "the tokenizer has 50257 tokens but the model's vocabulary 384" },
  { "examples/gpt2.lua --model " .. q(helpers.root .. "/spec/data"), 1,
    "%-%-model .*/spec/data is an incomplete GPT%-2 directory: no config%.json, model%.safetensors" },
  { "examples/stories.lua", 2, "missing MODEL" },
  { "examples/chat.lua /nonexistent", 1, "/nonexistent: No such file or directory" },
  { "examples/chat.lua " .. q(helpers.root .. "/spec/data/reference/gpt2-tiny"), 1,
    "gpt2%-tiny: no tokenizer %(.-%) beside the model; `chat` needs text in and out" },
  { "examples/chat.lua " .. q(helpers.root .. "/spec/data/reference/qwen3-tiny") .. " --context 8", 2, "%-%-context must be >= 16, got 8" },
  { "chat " .. q(helpers.root .. "/spec/data/reference/qwen3-tiny") .. " --set x", 2, "unknown option %-%-set" },
  { "chat", 2, "missing MODEL" },
  { "examples/stories.lua /nonexistent.bin", 1, "/nonexistent%.bin: No such file or directory" },
  -- a directory where a file belongs: io.open takes it, the read fails (it said "nil")
  { "scripts/pretokenize.lua --tokenizer " .. q(helpers.root .. "/data/tokenizers/llama2/tokenizer.bin") ..
    " --out never.bin " .. q(helpers.root .. "/spec"), 1, "pretokenize%.lua: [^:]*/spec: Is a directory" },
  { "examples/stories.lua " .. llama_tiny .. " --backend ane", 1, "backend 'ane' is not available" },
  { "examples/stories.lua " .. llama_tiny .. " --verbose", 2, "unknown option %-%-verbose" },
  { "examples/stories.lua " .. llama_tiny .. " extra", 2, "unexpected argument 'extra'" },
  { "examples/stories.lua " .. llama_tiny .. " --activations int8", 2,
    "%-%-activations int8 multiplies quantized weights: add %-%-quantize int8 or int4" },
  { "examples/stories.lua " .. llama_tiny .. " --quantize int8 --activations int8 --profile ane", 1,
    "activations = 'int8' runs in the cpu profile only" },
  { "examples/stories.lua " .. llama_tiny .. " --precision fp32 --profile ane", 1, "precision 'fp32' runs fp32 weights" },
  { "examples/chat.lua --activations int8", 2, "%-%-activations int8 multiplies quantized weights" },
  { "examples/train_stories.lua --steps five", 2, "%-%-steps needs a whole number, got 'five'" },
  { "examples/train_stories.lua --precision bf16", 2, "%-%-precision must be one of fp32, fp16, got 'bf16'" },
  { "examples/train_stories.lua --lr 0", 2, "%-%-lr must be > 0, got 0" },
  { "examples/train_stories.lua --weights-as-inputs=yes", 2, "%-%-weights%-as%-inputs takes no value" },
  { "examples/train_stories.lua --data /nonexistent.bin", 1, "/nonexistent%.bin: cannot open" },
  { "examples/train_stories.lua --resume latest", 1, "%-%-resume latest: no checkpoint in .* yet" },
  { "examples/train_stories.lua --lora-alpha 2", 1, "%-%-lora%-alpha and %-%-adapters need %-%-lora%-rank" },
  { "examples/train_stories.lua --arch gpt2 --lora-rank 2", 1, "%-%-lora%-rank is for Llama models" },
  { "scripts/pretokenize.lua --out x.bin in.txt", 2, "%-%-tokenizer is required" },
  { "scripts/pretokenize.lua --tokenizer " .. llama_tokenizer .. " --out x.bin", 2, "missing FILE%.%.%." },
  { "scripts/pretokenize.lua --tokenizer " .. llama_tokenizer .. " --format csv --out x.bin a", 2,
    "%-%-format must be one of llama2c, llmc" },
  { "scripts/plot.lua /nonexistent.jsonl", 1, "No such file" },
  { "scripts/plot.lua /tmp", 1, "/tmp is a directory, not a metrics file" },
  { "scripts/plot.lua /dev/null", 1, "/dev/null holds no metrics: nothing to draw" },
  { "scripts/bench/train_step.lua --steps 0", 2, "%-%-steps must be >= 1, got 0" },
  { "scripts/bench/sim_ops.lua --seconds soon", 2, "%-%-seconds needs a number, got 'soon'" },
}

describe("command lines", function()
  -- cli.stream with a stand-in model of 10 positions that never ends a text on its own
  local function stream_with(prompt_tokens, max_tokens)
    local body = string.format([[
      local cli = require("ane.cli")
      local model = { context_length = 10, stop_token = 99, generate = function(_, prompt, o)
        local left = math.min(o.max_tokens, 10 - #prompt)
        return function() if left > 0 then left = left - 1 return 7 end end
      end }
      local prompt = {}
      for i = 1, %d do prompt[i] = 1 end
      cli.stream(model, prompt, { max_tokens = %d, temperature = 0, top_k = 0, top_p = 1 }, 100, function() io.write("t") end)
    ]], prompt_tokens, max_tokens)
    return helpers.run_anelua("-e " .. q(body))
  end

  it("say when generation stops at the end of the model's context, and refuse a prompt that fills it", function()
    local out, err, code = stream_with(4, 100)
    assert.are.equal(0, code, err)
    assert.are.equal("tttttt\n", out)
    assert.matches("stopped at the end of the model's context: 10 positions, 4 of them the prompt; %-%-max%-tokens asked for 100", err)
    out, err, code = stream_with(4, 3) -- the budget ends first: nothing to say
    assert.are.equal("ttt\n", out)
    assert.are.equal("", err)
    out, err, code = stream_with(10, 5)
    assert.are.equal(1, code)
    assert.matches("the prompt's 10 tokens fill the model's context of 10 positions: nothing to generate", err)
    -- a chat prompt that does not fit: said on stderr, status 1 (it exited 0)
    out, err, code = helpers.run_anelua(script("examples/chat.lua") .. " " .. q(helpers.root .. "/spec/data/reference/qwen3-tiny")
      .. " --context 16 --prompt " .. q(string.rep("hello ", 40)))
    assert.are.equal(1, code)
    assert.matches("%(this turn does not fit: the conversation would take %d+ of its 16 positions%)", err)
    assert.are.equal("", out)
  end)

  it("run the GPT-2 demo past a model directory a download left incomplete, saying so", function()
    local models = helpers.tmpdir()
    os.execute("mkdir -p " .. q(models .. "/gpt2"))
    local out, err, code = helpers.run("cd " .. q(models) .. " && ANELUA_MODELS=" .. q(models) .. " " .. q(helpers.anelua) ..
      " " .. script("examples/gpt2.lua") .. " --max-tokens 1")
    assert.are.equal(0, code, err)
    assert.matches("/gpt2 is an incomplete GPT%-2 directory %(no config%.json, model%.safetensors%), not used", err)
    assert.matches("=== DEMO", err) -- (notices and statistics on stderr, the text alone on stdout)
    assert.is_nil(out:find("===", 1, true))
    assert.matches("\n%-%-%- stats\n", err)
  end)

  for _, case in ipairs(bad_inputs) do
    it("answer '" .. case[1]:gsub(helpers.root:gsub("%p", "%%%0") .. "/", "") .. "' in one line", function()
      local dir = helpers.tmpdir()
      -- a path's first word is a script of the checkout; a bare word is a host command (chat)
      local command = case[1]:gsub("^(%S+/%S+)", script)
      -- as a user of this Linux machine runs them: no test double behind --backend ane
      local out, err, code = helpers.run("cd " .. q(dir) .. " && ANELUA_BACKEND= ANELUA_ANE_FRAMEWORK= " .. q(helpers.anelua) .. " "
        .. command)
      assert.are.equal(case[2], code, err)
      assert.matches(case[3], err)
      assert.is_nil(err:find("stack traceback", 1, true), err)
      assert.is_nil(err:find("%.lua:%d+:"), err) -- no source positions for a user's mistake
      local first_line = err:match("^[^\n]*")
      assert.matches(case[3], first_line)
      if case[2] == 2 then assert.matches("\nusage: anelua ", err) end
      assert.are.equal("", out:match("stack traceback") or "")
    end)
  end

  it("have a real --help each", function()
    for _, path in ipairs({ "examples/gpt2.lua", "examples/stories.lua", "examples/train_stories.lua", "examples/chat.lua",
      "scripts/pretokenize.lua", "scripts/plot.lua", "scripts/fp16_drift.lua", "scripts/update_golden.lua",
      "scripts/bench/compile.lua", "scripts/bench/gpt2.lua", "scripts/bench/gpt2_agreement.lua",
      "scripts/bench/patch_vs_compile.lua", "scripts/bench/sim_ops.lua", "scripts/bench/stories_decode.lua",
      "scripts/bench/tokenizer_anelua.lua", "scripts/bench/tokenizer_corpus.lua", "scripts/bench/train_step.lua",
      "scripts/bench/decode_vs_runc.lua" }) do
      local out, err, code = helpers.run_anelua(script(path) .. " --help")
      assert.are.equal(0, code, err)
      assert.matches("^usage: anelua " .. path:gsub("%p", "%%%0"), out)
      assert.matches("\n  %-%-help%s+this text\n", out)
      local short = helpers.run_anelua(script(path) .. " -h") -- as every tool takes it
      assert.are.equal(out, short, path .. " -h")
    end
    local out, _, code = helpers.run_anelua(script("examples/train_stories.lua") .. " --help")
    assert.are.equal(0, code)
    assert.matches("%-%-steps INTEGER%s+steps the learning%-rate schedule plans for %(default 100%)", out)
    out, _, code = helpers.run_anelua("--help")
    assert.are.equal(0, code)
    assert.matches("^usage: ", out)
    assert.matches("%-%-backend NAME", out)
  end)

  it("take --target for every command that compiles, and ANELUA_TARGET", function()
    local out, err, code = helpers.run_anelua(script("examples/gpt2.lua") .. " --help")
    assert.are.equal(0, code, err)
    assert.matches("%-%-target T%s+the device validation checks: generic %(default%), m1 %.%. m5, or a probe report", out)
    for _, path in ipairs({ "scripts/pretokenize.lua", "scripts/plot.lua" }) do -- (they compile nothing)
      assert.is_nil(helpers.run_anelua(script(path) .. " --help"):find("--target", 1, true), path)
    end
    assert.is_nil(helpers.run_anelua(script("examples/stories.lua") .. " --help"):find("demo", 1, true)) -- (none there)
    out, err, code = helpers.run_anelua("-e " .. q("print(require('ane').default_target())"), nil, "ANELUA_TARGET=m2")
    assert.are.equal(0, code, err)
    assert.are.equal("m2\n", out)
    out, err, code = helpers.run_anelua("-e " .. q("print(require('ane').compile)"), nil, "ANELUA_TARGET=m9")
    assert.are.equal(0, code, err) -- read on first use, not at load
    _, err, code = helpers.run_anelua("-e " .. q("local ane = require('ane'); local g = ane.graph('g'); "
      .. "g:output('y', g:relu(g:input('x', {1, 4, 1, 32}))); ane.compile(g)"), nil, "ANELUA_TARGET=m9")
    assert.are.equal(1, code)
    assert.matches("ANELUA_TARGET=m9: target 'm9' is neither a built%-in target", err)
  end)

  it("refuse an unusable ANELUA_BACKEND instead of running elsewhere", function()
    local out, err, code = helpers.run_anelua("-e " .. q("print('ran')"), nil, "ANELUA_BACKEND=ane ANELUA_ANE_FRAMEWORK=")
    assert.are.equal(1, code)
    assert.are.equal("", out)
    assert.matches("ANELUA_BACKEND=ane: backend 'ane' is not available", err)
    _, err, code = helpers.run_anelua("-e " .. q("print('ran')"), nil, "ANELUA_BACKEND=gpu")
    assert.are.equal(1, code)
    assert.matches("ANELUA_BACKEND=gpu: unknown backend 'gpu'", err)
  end)
end)

describe("Ctrl-C", function()
  local train = script("examples/train_stories.lua") .. " --batch 2 --seq 16 --dim 16 --hidden 32 --layers 1 --heads 2"

  it("during training finishes the step, checkpoints, prints how to resume and exits 130", function()
    local dir = helpers.tmpdir()
    local out, err, code = run_interrupted(3, train .. " --steps 100000 --ckpt-every 100000 --ckpt-dir " .. q(dir))
    assert.are.equal(130, code, err)
    assert.is_nil(err:find("traceback", 1, true), err)
    local step = tonumber(out:match("interrupted: stopped after step (%d+) of 100000"))
    assert.is_truthy(step, out)
    assert.matches("checkpoint " .. dir:gsub("%p", "%%%0") .. string.format("/ckpt%%-%08d%%.safetensors", step), out)
    -- the hint runs as it is printed: the host by the path it was started by (not on a PATH in a checkout)
    local hint = out:match("resume with: ([^\n]+)")
    assert.is_truthy(hint, out)
    assert.matches("^%S*anelua%S* .*train_stories%.lua .*%-%-resume latest$", hint)
    assert.is_truthy(io.open(hint:match("^(%S+)")), "the hint's host exists: " .. hint)
    -- the resumed run continues at the next step; the metrics hold every step once
    out, err, code = helpers.run_anelua(train .. " --steps 100000 --stop-after " .. (step + 3) ..
      " --ckpt-every 100000 --resume latest --ckpt-dir " .. q(dir))
    assert.are.equal(0, code, err)
    assert.matches("Resuming from .* %(step " .. step .. "%)", out)
    local steps = {}
    for line in io.lines(dir .. "/metrics.jsonl") do steps[#steps + 1] = cjson.decode(line).step end
    assert.are.equal(step + 3, #steps)
    for i, s in ipairs(steps) do assert.are.equal(i, s) end
  end)

  it("resumed metrics drop the steps a kill left after the last checkpoint", function()
    local dir = helpers.tmpdir()
    local _, err, code = helpers.run_anelua(train .. " --steps 6 --ckpt-every 3 --ckpt-dir " .. q(dir))
    assert.are.equal(0, code, err)
    os.remove(dir .. "/ckpt-00000006.safetensors") -- as if killed after step 6's metrics but before its checkpoint
    _, err, code = helpers.run_anelua(train .. " --steps 6 --ckpt-every 3 --resume latest --ckpt-dir " .. q(dir))
    assert.are.equal(0, code, err)
    local steps = {}
    for line in io.lines(dir .. "/metrics.jsonl") do steps[#steps + 1] = cjson.decode(line).step end
    assert.are.same({ 1, 2, 3, 4, 5, 6 }, steps)
  end)

  it("during generation prints what was generated and the statistics, and exits 130", function()
    local out, err, code = run_interrupted(2, script("examples/gpt2.lua") ..
      " --max-tokens 1000 --profile cpu --precision fp32 --prompt Hello")
    assert.are.equal(130, code, err)
    assert.is_nil(err:find("traceback", 1, true), err)
    assert.matches("^Hello[^\n]*\n$", out) -- the text alone
    assert.matches("%(interrupted: stopped after the current token%)\n%-%-%- stats\n", err)
    assert.matches("decode%s+%d+ tokens", err)
  end)
end)
