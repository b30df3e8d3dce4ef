-- scripts/get_models.sh against a stand-in hub on 127.0.0.1 (spec/support/hub_server.py):
-- files land where the examples look, each verified against the hash the hub publishes
-- (SHA-256 of large files, git blob SHA-1 of small ones); a mismatch keeps nothing.
local helpers = require("spec.helpers")
local q = helpers.quote

local script = q(helpers.root .. "/scripts/get_models.sh")

-- Starts the hub over root (extra: server flags); returns its base URL.
local function start_hub(root, extra)
  local port_file = helpers.tmpdir() .. "/port"
  os.execute("python3 " .. q(helpers.root .. "/spec/support/hub_server.py") .. " " .. q(root) .. " " .. q(port_file) ..
    " --seconds 20 " .. (extra or "") .. " >/dev/null 2>&1 &")
  for _ = 1, 100 do
    local file = io.open(port_file)
    if file then
      local port = file:read("l")
      file:close()
      if port then return "http://127.0.0.1:" .. port end
    end
    os.execute("sleep 0.05")
  end
  error("the stand-in hub did not start")
end

local function random_bytes(count, seed)
  local ane = require("ane")
  return ane.tensor.randn({ count // 4 }, { seed = seed }):bytes()
end

-- A hub directory with the files of stories15M, stories42M and gpt2 (small stand-ins).
local function hub_files()
  local root = helpers.tmpdir()
  os.execute("mkdir -p " .. q(root .. "/karpathy/tinyllamas") .. " " .. q(root .. "/openai-community/gpt2"))
  local files = {
    ["karpathy/tinyllamas/stories15M.bin"] = random_bytes(8192, 1),
    ["karpathy/tinyllamas/stories42M.bin"] = random_bytes(4096, 2),
    ["openai-community/gpt2/config.json"] = '{"model_type": "gpt2"}\n',
    ["openai-community/gpt2/model.safetensors"] = random_bytes(16384, 3),
    ["openai-community/gpt2/vocab.json"] = '{"a": 0}\n',
    ["openai-community/gpt2/merges.txt"] = "#version: 0.2\n",
  }
  for path, bytes in pairs(files) do helpers.write_file(root .. "/" .. path, bytes) end
  return root, files
end

describe("scripts/get_models.sh", function()
  it("fetches models where the examples look, verified, and does not fetch them twice", function()
    local root, files = hub_files()
    local url = start_hub(root)
    local models = helpers.tmpdir()
    local env = "ANELUA_MODELS=" .. q(models) .. " ANELUA_MODELS_URL=" .. q(url) .. " "
    local out, err, code = helpers.run(env .. script .. " stories15M gpt2")
    assert.are.equal(0, code, err)
    assert.are.equal(files["karpathy/tinyllamas/stories15M.bin"], helpers.read_file(models .. "/stories15M/stories15M.bin"))
    for _, name in ipairs({ "config.json", "model.safetensors", "vocab.json", "merges.txt" }) do
      assert.are.equal(files["openai-community/gpt2/" .. name], helpers.read_file(models .. "/gpt2/" .. name), name)
    end
    -- the Stories tokenizer is the shipped one
    assert.are.equal(helpers.read_file(helpers.root .. "/data/tokenizers/llama2/tokenizer.bin"),
      helpers.read_file(models .. "/stories15M/tokenizer.bin"))
    assert.matches("stories15M%.bin verified %(%x+%)", out)
    assert.matches("config%.json verified %(" .. string.rep("%x", 40) .. "%)", out) -- a small file: git blob SHA-1
    assert.matches("model%.safetensors verified %(" .. string.rep("%x", 64) .. "%)", out) -- large: SHA-256
    out, err, code = helpers.run(env .. script .. " stories15M")
    assert.are.equal(0, code, err)
    assert.matches("already there %(verified%)", out)
    assert.is_nil(out:find("downloading", 1, true))
  end)

  it("keeps nothing when a file's bytes do not match the published checksum", function()
    local root = hub_files()
    local url = start_hub(root, "--wrong stories42M.bin --wrong vocab.json")
    local models = helpers.tmpdir()
    local env = "ANELUA_MODELS=" .. q(models) .. " ANELUA_MODELS_URL=" .. q(url) .. " "
    local _, err, code = helpers.run(env .. script .. " stories42M")
    assert.are.equal(1, code)
    assert.matches("stories42M%.bin: checksum %x+ does not match the published f+; the file was not kept", err)
    assert.is_nil(io.open(models .. "/stories42M/stories42M.bin"))
    assert.is_nil(io.open(models .. "/stories42M/stories42M.bin.part"))
    _, err, code = helpers.run(env .. script .. " gpt2")
    assert.are.equal(1, code)
    assert.matches("vocab%.json: checksum %x+ does not match the published 0+", err)
    -- no directory is left for the examples to take for a model (config.json had arrived)
    local lfs = require("lfs")
    assert.is_nil(lfs.attributes(models .. "/stories42M"))
    assert.is_nil(lfs.attributes(models .. "/gpt2"))
  end)

  it("says what it knows for a wrong name and a missing file", function()
    local _, err, code = helpers.run(script .. " llama3")
    assert.are.equal(2, code)
    assert.matches("unknown model 'llama3'", err)
    assert.matches("usage: scripts/get_models.sh NAME", err)
    local url = start_hub(helpers.tmpdir())
    local offline = helpers.tmpdir()
    _, err, code = helpers.run("ANELUA_MODELS=" .. q(offline) .. " ANELUA_MODELS_URL=" .. q(url) .. " " ..
      script .. " stories110M")
    assert.is_nil(require("lfs").attributes(offline .. "/stories110M")) -- nothing left behind
    assert.are.equal(1, code)
    assert.matches("stories110M%.bin: the server did not answer", err)
    local help = helpers.run(script .. " --help")
    assert.matches("qwen3%-0%.6b", help)
    assert.is_nil(help:find("set -euo", 1, true)) -- the comment alone
  end)
end)
