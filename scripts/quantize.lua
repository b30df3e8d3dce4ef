-- Quantizes a Llama-family model once and writes it as a directory that loads without
-- re-quantizing (model:save): config.json with quantization_config, the codes and their
-- scales / palettes in model.safetensors, the tokenizer files copied. --mode none keeps the
-- weights unquantized in --precision: an fp16 directory then loads as views of its file,
-- with nothing to convert at start-up.
--   anelua scripts/quantize.lua MODEL.bin|MODEL_DIR OUT_DIR [--mode int8|int4|none]
--          [--classifier int8|int4|none] [--precision fp16|fp32]
-- Then: anelua examples/chat.lua OUT_DIR (a Qwen3 directory) or examples/stories.lua OUT_DIR.
local ane = require("ane")
local llama = require("ane.models.llama")
local lfs = require("lfs")

local command = require("ane.cli").command {
  name = "scripts/quantize.lua",
  usage = "MODEL.bin|MODEL_DIR OUT_DIR [options]",
  summary = "Quantize (or convert) a Llama / Qwen3 model once and save it as a directory that loads as it is.",
  positional = { { "MODEL", "a llama2.c checkpoint or a Hugging Face Llama / Qwen3 directory" },
    { "OUT_DIR", "the quantized directory to write (created)" } },
  options = {
    { "mode", "choice", "int8", "int8 (per-row scales), int4 (per-row 16-value palettes) or none (the weights in --precision)",
      choices = { "int8", "int4", "none" } },
    { "classifier", "choice", "int8", "how the classifier is stored (quantized modes)", choices = { "int8", "int4", "none" } },
    { "precision", "choice", "fp16", "the precision the tables are rounded to (fp16 for the device)",
      choices = { "fp16", "fp32" } },
  },
}
local opts, positional = command:parse(arg)
local source, out = positional[1], positional[2]
if not lfs.attributes(source) then command:fail(source .. " does not exist") end
if lfs.attributes(out) and lfs.attributes(out, "mode") ~= "directory" then command:fail(out .. " exists and is not a directory") end
local start = ane.clock()
local quantized = opts.mode ~= "none"
local model, err = llama.load(source, { precision = opts.precision, profile = "cpu", quantize = quantized and opts.mode or nil,
  quantize_classifier = quantized and opts.classifier ~= "none" and opts.classifier or false })
if not model then command:fail(err) end
local quantized_seconds = ane.clock() - start
local ok, why = model:save(out)
if not ok then command:fail(why) end
local bytes = 0
for file in lfs.dir(out) do
  if file ~= "." and file ~= ".." then bytes = bytes + (lfs.attributes(out .. "/" .. file, "size") or 0) end
end
print(string.format("%s -> %s: %s (%.1f s to load%s); %s, %.1f MB written", source, out, tostring(model),
  quantized_seconds, quantized and " and quantize" or "", out, bytes / 1e6))
