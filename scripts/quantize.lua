-- Quantizes a Llama-family model once and writes it as a directory that loads without
-- re-quantizing (model:save): config.json with quantization_config, the codes and their
-- scales / palettes in model.safetensors, the tokenizer files copied. --mode none keeps the
-- weights unquantized in --precision: an fp16 directory then loads as views of its file,
-- with nothing to convert at start-up. An OUT ending in .gguf is a GGUF file llama.cpp opens
-- (ane.formats.gguf_export): --mode q8_0 (its default there) or q4_0 as llama.cpp's blocks,
-- none as F16 (F32 with --precision fp32), norms F32, with the model's tokenizer and chat
-- template.
--   anelua scripts/quantize.lua MODEL.bin|MODEL_DIR|MODEL.gguf OUT_DIR|OUT.gguf
--          [--mode int8|int4|q8_0|q4_0|none] [--classifier int8|int4|none] [--precision fp16|fp32]
-- Then: anelua examples/chat.lua OUT_DIR (a Qwen3 directory) or examples/stories.lua OUT_DIR;
-- anelua run OUT.gguf, or llama.cpp's llama-cli -m OUT.gguf.
local ane = require("ane")
local llama = require("ane.models.llama")
local lfs = require("lfs")

local command = require("ane.cli").command {
  name = "scripts/quantize.lua",
  usage = "MODEL.bin|MODEL_DIR|MODEL.gguf OUT_DIR|OUT.gguf [options]",
  summary = "Quantize (or convert) a Llama-family model once and save it as a directory that loads as it is, or as a GGUF file.",
  positional = { { "MODEL", "a llama2.c checkpoint, a Hugging Face Llama-family directory or a GGUF file" },
    { "OUT", "the directory to write (created), or a .gguf file (llama.cpp opens it)" } },
  options = {
    { "mode", "choice", nil, "int8 (per-row scales), int4 (per-row 16-value palettes), q8_0 / q4_0 (llama.cpp's blocks of "
      .. "32, a scale each) or none (the weights in --precision); default int8, for a .gguf q8_0",
      choices = { "int8", "int4", "q8_0", "q4_0", "none" } },
    { "classifier", "choice", nil, "how the classifier is stored in a quantized directory (default int8; a .gguf holds "
      .. "every matrix in --mode's type)", choices = { "int8", "int4", "none" } },
    { "precision", "choice", "fp16", "the precision the tables are rounded to (fp16 for the device); a .gguf with --mode "
      .. "none: its matrices F16 or F32",
      choices = { "fp16", "fp32" } },
  },
}
local opts, positional = command:parse(arg)
local source, out = positional[1], positional[2]
local to_gguf = out:match("%.gguf$") ~= nil
local mode = opts.mode or (to_gguf and "q8_0" or "int8")
if not lfs.attributes(source) then command:fail(source .. " does not exist") end
if to_gguf and (mode == "int8" or mode == "int4") then
  command:fail("--mode " .. mode .. " has no GGUF type (its scales are per row); a .gguf takes q8_0, q4_0 or none")
end
if to_gguf and opts.classifier then command:fail("--classifier is for a directory: a .gguf holds every matrix in --mode's type") end
if to_gguf and lfs.attributes(out, "mode") == "directory" then command:fail(out .. " is a directory, not a file to write")
elseif not to_gguf and lfs.attributes(out) and lfs.attributes(out, "mode") ~= "directory" then
  command:fail(out .. " exists and is not a directory")
end
local start = ane.clock()
local quantized = mode ~= "none"
-- (the blocks are sim's encodings: the model is only read back, never run on the device here;
-- for a GGUF file it is read in fp32, the file's norms and scales exact, its F16 made at writing)
local model, err = llama.load(source, { precision = to_gguf and "fp32" or opts.precision, profile = "cpu",
  quantize = quantized and mode or nil,
  backend = (mode == "q8_0" or mode == "q4_0") and "sim" or nil,
  quantize_classifier = not to_gguf and quantized and (opts.classifier or "int8") ~= "none" and (opts.classifier or "int8") or false })
if not model then command:fail(err) end
local quantized_seconds = ane.clock() - start
local ok, why, bytes
if to_gguf then
  local file_type = quantized and mode:upper() or (opts.precision == "fp32" and "F32" or "F16")
  ok, why = require("ane.formats.gguf_export").write(out, model, { type = file_type })
  if not ok then command:fail(why) end
  for _, note in ipairs(why) do print("note: " .. note) end
  bytes = lfs.attributes(out, "size")
else
  ok, why = model:save(out)
  if not ok then command:fail(why) end
  bytes = 0
  for file in lfs.dir(out) do
    if file ~= "." and file ~= ".." then bytes = bytes + (lfs.attributes(out .. "/" .. file, "size") or 0) end
  end
end
print(string.format("%s -> %s: %s (%.1f s to load%s); %s, %.1f MB written", source, out, tostring(model),
  quantized_seconds, quantized and " and quantize" or "", out, bytes / 1e6))
