-- Benchmark: the same Stories110M-shaped checkpoint (../shared/peers) converted by llama.cpp's
-- own tools to GGUF F16, Q8_0, Q4_0, Q4_K_M and Q5_K_M, read by both engines. For each format, rounds
-- alternate anelua and llama.cpp:
--   cold: a whole process as a user runs it, `anelua run FILE` (cpu profile) against
--         `llama-cli -m FILE` (2 threads), both greedy, --tokens tokens; each reports its own
--         decode rate, and the wall time of the whole process is kept too;
--   in-process: anelua's decode rate in this process against llama-bench's tg rate.
-- Then the drift of each format from F32 in both engines on the same text (README.md): mean
-- KL divergence and top-1 agreement of the next-token distributions (anelua's logits in fp32;
-- llama.cpp's from llama-perplexity --kl-divergence on the same tokens' windows).
-- Prints every round, the median ratios (anelua / llama.cpp) with their ranges, and the drift.
-- ANELUA_LLAMA_CPP_BIN names a llama.cpp build to use instead of the peers' (when those do not
-- run on this CPU: scripts/bench/build_llama_cpp.sh builds the same commit for it).
-- anelua runs the Q8_0, Q4_0, Q4_K_M and Q5_K_M formats as it does by default, on int8 activations
-- (llama.cpp's arithmetic for their blocks); --activations float runs them on float activations
-- instead (the exact product of the blocks).
--   build/anelua scripts/bench/gguf_decode.lua [--tokens 128] [--rounds 3] [--formats f16,q8_0,q4_0,q4_k_m,q5_k_m]
--     [--activations int8|float]
local ane = require("ane")
local lfs = require("lfs")
local models = require("ane.models")

local root = (arg[0]:match("^(.*)/scripts/bench/[^/]*$") or ".")
local common = dofile(root .. "/scripts/bench/common.lua")
local opts = require("ane.cli").command {
  name = "scripts/bench/gguf_decode.lua",
  summary = "GGUF decode and drift against llama.cpp on the same files, paired.",
  options = common.peer_options(root, {
    { "tokens", "integer", 128, "tokens to generate a run", min = 8 },
    { "rounds", "integer", 3, "alternating rounds", min = 1 },
    { "formats", "string", "f16,q8_0,q4_0,q4_k_m,q5_k_m", "the GGUF formats, comma-separated" },
    { "drift-tokens", "integer", 1024, "tokens of README.md scored for the drift", min = 256 },
    { "activations", "choice", "int8", "anelua's activations for the block formats (int8: its default)",
      choices = { "int8", "float" } },
  }),
}:parse(arg)

local paths, bin, gguf = common.stories_and_llama_cpp(opts, root)
if not paths then return end
local quantize = lfs.attributes(bin .. "/llama-quantize") and bin .. "/llama-quantize"
  or opts.peers .. "/llama.cpp/bin/llama-quantize"
local formats = {}
for name in opts.formats:gmatch("[^,]+") do
  local file = gguf .. "/model-" .. name .. ".gguf"
  if not lfs.attributes(file) then
    assert(os.execute(string.format("%s %s %s %s 2 > /dev/null 2>&1", common.quote(quantize),
      common.quote(gguf .. "/model-f32.gguf"), common.quote(file), name:upper())), "llama-quantize " .. name)
  end
  local kept = name ~= "f16" -- (the formats whose layers anelua reads as stored: Q8_0, Q4_0, the K_M files' Q4_K / Q5_K / Q6_K)
  formats[#formats + 1] = { name = name, file = file, kept = kept, activations = kept and opts.activations or "float" }
end

local function capture(command)
  local p = io.popen(command .. " 2>&1")
  local out = p:read("a")
  p:close()
  return out
end

local absolute_root = root:sub(1, 1) == "/" and root or lfs.currentdir() .. "/" .. root
local anelua = common.quote(absolute_root .. "/build/anelua") -- (run from /tmp: a file named `run` here would be taken for the script)
local prompt = "Once upon a time"

-- Cold runs: each process's own decode rate, and its wall time.
local function cold_anelua(file, activations)
  local start = ane.clock()
  local out = capture(string.format("cd /tmp && %s run %s --prompt %s --max-tokens %d --temperature 0 --profile cpu%s",
    anelua, common.quote(file), common.quote(prompt), opts.tokens, activations == "float" and " --activations float" or ""))
  local rate = tonumber(out:match("decode%s+%d+ tokens, ([%d.]+) tokens/s"))
  return assert(rate, out), ane.clock() - start
end

local function cold_llama(file)
  local start = ane.clock()
  local out = capture(string.format("%s -m %s -p %s -n %d -t 2 -c 512 --temp 0 -no-cnv -s 1 < /dev/null",
    common.quote(bin .. "/llama-cli"), common.quote(file), common.quote(prompt), opts.tokens))
  local rate = tonumber(out:match("eval time =[^\n]-%(%s*[%d.]+ ms per token,%s*([%d.]+) tokens per second%)\n[^\n]*total time"))
    or tonumber(out:match("llama_perf_context_print:%s+eval time =[^\n]-([%d.]+) tokens per second"))
  return assert(rate, out), ane.clock() - start
end

local function in_process_llama(file)
  local out = capture(string.format("%s -m %s -p 0 -n %d -t 2 -r 1 -o csv", common.quote(bin .. "/llama-bench"),
    common.quote(file), opts.tokens))
  local last = out:match("([^\n]+)\n?$")
  return assert(tonumber(last:match(',"([%d.]+)",[^,]*$')), out)
end

print(string.format("Stories110M shape, %d tokens a run, %d rounds; llama.cpp from %s", opts.tokens, opts.rounds, bin))
local rows = {}
for _, format in ipairs(formats) do
  local model = assert(models.load(format.file, { precision = "fp16", profile = "cpu", activations = format.activations }))
  local ids = models.prompt_ids(model, prompt)
  local cold, walls, inproc = {}, {}, {}
  for round = 1, opts.rounds do
    local a, a_wall = cold_anelua(format.file, format.activations)
    local l, l_wall = cold_llama(format.file)
    local a_in = common.decode_rate(model, ids, opts.tokens)
    local l_in = in_process_llama(format.file)
    cold[#cold + 1], walls[#walls + 1], inproc[#inproc + 1] = a / l, l_wall / a_wall, a_in / l_in
    print(string.format("%s round %d: cold anelua %.1f tok/s (%.2f s) llama-cli %.1f tok/s (%.2f s); in-process "
      .. "anelua %.1f llama-bench %.1f tok/s", format.name, round, a, a_wall, l, l_wall, a_in, l_in))
  end
  local label = format.name .. (format.kept and " (" .. format.activations .. " activations)" or "")
  rows[#rows + 1] = { "anelua run " .. label .. " (decode rate)", "llama-cli", cold }
  rows[#rows + 1] = { "anelua run " .. label .. " (whole process, inverse time)", "llama-cli", walls }
  rows[#rows + 1] = { "in-process " .. label, "llama-bench tg", inproc }
  model = nil
  collectgarbage()
end
common.print_ratios(rows)

-- Drift from F32 on README.md's first tokens, windows of 256 positions scored as
-- llama-perplexity --kl-divergence scores its chunks: each window's first token replaced by BOS,
-- the next-token distributions of positions 129-255 (its n_ctx / 2 .. n_ctx - 2)
local text = assert(ane.io.read_file(root .. "/README.md"))
local function logits_rows(file, activations)
  local model = assert(models.load(file, { precision = "fp32", profile = "cpu", activations = activations }))
  local ids = models.prompt_ids(model, text)
  local bos = ids[1] -- (the tokenizer's BOS begins the text's ids)
  local rows_out = {}
  for first = 1, math.min(#ids, opts.drift_tokens) - 255, 256 do
    local window = table.move(ids, first, first + 255, 1, {})
    window[1] = bos
    local logits = model:logits(window)
    for t = 129, 255 do
      rows_out[#rows_out + 1] = common.log_softmax(logits:slice(1, t, t):reshape(-1):totable())
    end
  end
  return rows_out
end
local reference = logits_rows(gguf .. "/model-f32.gguf")
local text_file = opts.work .. "/readme.txt"
ane.io.write_file_atomic(text_file, text)
local base = opts.work .. "/kl-base.bin"
capture(string.format("%s -m %s -f %s -c 256 -t 2 --chunks %d --kl-divergence-base %s", common.quote(bin .. "/llama-perplexity"),
  common.quote(gguf .. "/model-f32.gguf"), common.quote(text_file), opts.drift_tokens // 256, common.quote(base)))
print("\n| format | anelua mean KL | anelua top-1 | llama.cpp mean KL | llama.cpp top-1 |")
print("|---|---|---|---|---|")
for _, format in ipairs(formats) do
  local kl, top1 = common.divergence(reference, logits_rows(format.file, format.activations))
  local out = capture(string.format("%s -m %s -c 256 -t 2 --kl-divergence-base %s --kl-divergence",
    common.quote(bin .. "/llama-perplexity"), common.quote(format.file), common.quote(base)))
  local peer_kl = out:match("Mean%s+KLD:%s+([%d.e+-]+)")
  local peer_top = out:match("Same top p:%s+([%d.]+)")
  print(string.format("| %s%s | %.6f | %.2f%% | %s | %s%% |", format.name, format.kept
    and " (" .. format.activations .. " activations)" or "", kl, 100 * top1, peer_kl or "?", peer_top or "?"))
end
