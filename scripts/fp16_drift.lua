-- Reports how far fp16 training drifts from PyTorch: the six AdamW losses of the tiny
-- reference models (spec/data/reference) in fp32 and fp16 on sim, as max relative error.
--   build/anelua scripts/fp16_drift.lua
require("ane.cli").command{ name = "scripts/fp16_drift.lua",
  summary = "How far fp16 training drifts from PyTorch on the tiny reference models." }:parse(arg)
local ane = require("ane")
local gpt2 = require("ane.models.gpt2")
local llama = require("ane.models.llama")
local optim = require("ane.optim")
for _, case in ipairs({ { "gpt2-tiny", function(d, p) return gpt2.load(d, p) end }, { "llama-tiny", function(d, p) return llama.load(d .. "/model.bin", p) end } }) do
  local dir = (arg[0]:match("^(.*)/scripts/[^/]*$") or ".") .. "/spec/data/reference/" .. case[1]
  local e = ane.io.load_safetensors(dir .. "/expected.safetensors")
  for _, prec in ipairs({ "fp32", "fp16" }) do
    local m = assert(case[2](dir, { precision = prec, profile = "cpu" }))
    local opt = optim.adamw(m:parameters(), { lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0 })
    local want = e.adamw_losses:totable()
    local worst = 0
    local ids, t = e.input_ids:totable(), e.targets:totable()
    for s = 1, 6 do
      local loss, g = m:loss(ids, t)
      worst = math.max(worst, math.abs(loss - want[s]) / want[s])
      if s <= 5 then opt:step(g) m:load_parameters() end
    end
    print(case[1], prec, string.format("max relative loss drift over 6 losses: %.2e", worst))
  end
end
