-- Shared by the benchmarks: best-of-n timing, the memory read bandwidth that bounds decoding,
-- the peers (run.c, llama.cpp) built and run on the same checkpoint, and the divergence of
-- logits from a reference. Load with dofile(<dir of the script> .. "/common.lua").
local ane = require("ane")

local M = {}

--- The fastest of n runs of fn, in seconds.
function M.best_of(n, fn)
  local best = math.huge
  for _ = 1, n do
    local start = ane.clock()
    fn()
    best = math.min(best, ane.clock() - start)
  end
  return best
end

--- Read bandwidth in bytes/s: probe(n) reads 1 GB of random bytes on every core with no
--- other work (t:xor_words()), best of n. (It was BLAS's y = A x on the same gigabyte, which
--- reads ~10% slower than the memory can: anelua's own products beat that "bound".) The
--- probe keeps its buffer, so it can measure right next to each timing on a shared machine.
function M.bandwidth_probe()
  local side = 16384
  local A = ane.tensor.rand({ side, side }, { seed = 1 }) -- [side, side] fp32: 1 GB
  return function(n) return side * side * 4 / M.best_of(n or 3, function() A:xor_words() end) end
end

--- Decode rounds on a shared machine: each round measures the read bandwidth (probe, best
--- of 3) right before and right after decode() -> tokens/s, ms/token; the bound of a round is
--- the faster of the two / bytes_per_token (one probe alone, caught in a slow moment of the
--- machine, let a decode read "above its bound"). Returns the round with the median ratio to
--- its bound, and the lowest and highest ratios.
function M.paired_decode_rounds(probe, rounds, bytes_per_token, decode)
  local results = {}
  for r = 1, rounds do
    local before = probe(3)
    local rate, ms = decode()
    local bandwidth = math.max(before, probe(3))
    local bound = bandwidth / bytes_per_token
    results[r] = { bandwidth = bandwidth, rate = rate, ms = ms, bound = bound, ratio = rate / bound }
  end
  table.sort(results, function(a, b) return a.ratio < b.ratio end)
  return results[(rounds + 1) // 2], results[1].ratio, results[rounds].ratio
end

--- Bytes one decoded token reads: every layer weight and the classifier, as stored (an fp16
--- model's decode reads its fp16 copy of the classifier, once one was made).
function M.bytes_per_token(model)
  local function bytes(w) return ane.quantized.is(w) and w:bytes() or w:numel() * w:element_size() end
  local total = bytes(model.P.classifier_fp16 or model.P.classifier)
  for _, L in ipairs(model.P.layers) do
    for _, w in pairs(L) do total = total + bytes(w) end
  end
  return total
end

--- Greedy decode of `tokens` after the prompt `ids`, whose prefill is not timed; compiles (a
--- cache growing into a new size) are taken out of the time. Returns tokens/s, ms/token.
function M.decode_rate(model, ids, tokens)
  local session = model:session({ capacity = #ids + tokens })
  local row = assert(session:feed(ids))
  local before = model:stats()
  local start = ane.clock()
  for _ = 1, tokens do row = assert(session:feed({ row:argmax() - 1 })) end
  local seconds = ane.clock() - start - (model:stats().compile_ms - before.compile_ms) / 1000
  return tokens / seconds, 1000 * seconds / tokens
end

--- The options of a decode bench on common.decode_model, with its own after them.
function M.decode_options(options)
  local all = {
    { "model", "path", nil, "a model file or directory (default: random Stories110M-shaped weights)" },
    { "activations", "string", nil, "the model's activations option (int8: a GGUF's llama.cpp-style products)" },
  }
  for _, option in ipairs(options) do all[#all + 1] = option end
  return all
end

--- Runs round() `rounds` times (each returning tokens/s of variant A, then of B) and prints the
--- medians and the median ratio A / B with its range, under the columns' names.
function M.print_paired_rounds(rounds, round, name_a, name_b)
  local ratios, a_rates, b_rates = {}, {}, {}
  for r = 1, rounds do
    a_rates[r], b_rates[r] = round()
    ratios[r] = a_rates[r] / b_rates[r]
  end
  local ratio, low, high = M.median_and_range(ratios)
  print(string.format("%14s %14s %9s %13s", name_b .. " t/s", name_a .. " t/s", "ratio", "range"))
  print(string.format("%14.1f %14.1f %8.3fx %6.3f-%.3f", (M.median_and_range(b_rates)), (M.median_and_range(a_rates)),
    ratio, low, high))
end

--- The model a decode bench runs on the cpu profile, fp16 (a file or directory, with the given
--- activations option; nil: a Stories110M-shaped Llama of random weights), and a 4-token prompt.
function M.decode_model(path, activations)
  local model
  if path then
    model = assert(require("ane.models").load(path, { precision = "fp16", profile = "cpu", activations = activations }))
  else
    local llama = require("ane.models.llama")
    local config = { dim = 768, hidden = 2048, n_layer = 12, n_head = 12, vocab_size = 32000, seq_len = 1024 }
    model = llama.from_weights(llama.random_weights(config, 11), { precision = "fp16", profile = "cpu" })
  end
  return model, { 1, 7919 % model.vocab_size, 15838 % model.vocab_size, 23757 % model.vocab_size }
end

--- Two sessions of one model (session options a and b) decode `tokens` greedy tokens after
--- `prompt`, stepping in turn token by token (which steps first alternates), so a minute's
--- slower memory slows both alike; returns each one's tokens/s (compiles left out), the
--- sessions, and whether they chose the same tokens.
function M.sessions_in_turn(model, prompt, tokens, a, b)
  local sessions, rows, seconds, ids = {}, {}, {}, { {}, {} }
  for kind, options in ipairs({ a, b }) do
    sessions[kind] = model:session(options)
    rows[kind], seconds[kind] = assert(sessions[kind]:feed(prompt)), 0
  end
  for i = 1, tokens do
    for turn = 0, 1 do
      local kind = (i + turn) % 2 + 1
      ids[kind][i] = rows[kind]:argmax() - 1
      local start, compile_ms = ane.clock(), model:stats().compile_ms
      rows[kind] = assert(sessions[kind]:feed({ ids[kind][i] }))
      seconds[kind] = seconds[kind] + ane.clock() - start - (model:stats().compile_ms - compile_ms) / 1000
    end
  end
  return tokens / seconds[1], tokens / seconds[2], sessions, table.concat(ids[1], ",") == table.concat(ids[2], ",")
end

function M.quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- The median of a list of numbers and its lowest and highest values.
function M.median_and_range(list)
  local sorted = { table.unpack(list) }
  table.sort(sorted)
  return sorted[(#sorted + 1) // 2], sorted[1], sorted[#sorted]
end

--- The command-line options of a bench that runs the peers: where their sources are and
--- where they are built (append to the bench's own options).
function M.peer_options(root, options)
  options[#options + 1] = { "peers", "path", root .. "/../shared/peers", "the peers' sources and build script" }
  options[#options + 1] = { "work", "path", "/tmp/anelua-peers", "where the peers are built and the checkpoint written" }
  return options
end

--- Prints the Markdown table of paired ratios: rows of { ours, theirs, ratios (a list) }.
function M.print_ratios(rows)
  print("| anelua | peer | median ratio (anelua / peer) | range |")
  print("|---|---|---|---|")
  for _, row in ipairs(rows) do
    local median, low, high = M.median_and_range(row[3])
    print(string.format("| %s | %s | %.2fx | %.2f-%.2f |", row[1], row[2], median, low, high))
  end
end

--- The peers of ../shared/peers built into `work` (run.c, a random Stories110M checkpoint):
--- returns the paths { runc =, checkpoint = }, or nil and why they are not available.
function M.stories_peers(peers, work)
  local lfs = require("lfs")
  if not lfs.attributes(peers .. "/build.sh") then return nil, "no " .. peers .. "/build.sh (the peers' sources)" end
  local paths = { runc = work .. "/run", checkpoint = work .. "/stories110M.bin" }
  if not lfs.attributes(paths.runc) or not lfs.attributes(paths.checkpoint) then
    print("building the peers into " .. work .. " (run.c, a random Stories110M checkpoint) ...")
    if not os.execute("bash " .. M.quote(peers .. "/build.sh") .. " " .. M.quote(work) .. " > /dev/null") then
      return nil, peers .. "/build.sh failed"
    end
  end
  return paths
end

--- llama.cpp's binaries and the same checkpoint as GGUF files (F32, F16, Q8_0, Q4_0, made by
--- ../shared/peers/llama.cpp/make_models.sh in work/gguf): returns bin, gguf directory, or
--- nil and why they are not available.
function M.llama_cpp_models(peers, work, checkpoint, tokenizer_bin)
  -- ANELUA_LLAMA_CPP_BIN: a build of the same llama.cpp for this CPU (build_llama_cpp.sh),
  -- where the peers' binaries stop on an instruction it lacks
  local bin = os.getenv("ANELUA_LLAMA_CPP_BIN") or peers .. "/llama.cpp/bin"
  if not require("lfs").attributes(bin .. "/llama-bench") then return nil, "no " .. bin .. "/llama-bench" end
  local gguf = work .. "/gguf"
  if not os.execute(string.format("bash %s %s %s %s > /dev/null 2>&1", M.quote(peers .. "/llama.cpp/make_models.sh"),
      M.quote(checkpoint), M.quote(tokenizer_bin), M.quote(gguf))) then
    return nil, "make_models.sh could not convert the checkpoint to GGUF"
  end
  -- the binaries were built for one CPU (GGML_NATIVE): on another they may die on an
  -- instruction it lacks, which must read as "not available", not as a speed
  local ran, how, code = os.execute(string.format("%s -m %s -p 8 -n 0 -t 1 -r 1 > /dev/null 2>&1",
    M.quote(bin .. "/llama-bench"), M.quote(gguf .. "/model-f32.gguf")))
  if not ran then
    local illegal = (how == "signal" and code == 4) or (how == "exit" and code == 128 + 4)
    return nil, string.format("llama.cpp's binaries do not run on this CPU (llama-bench: %s %s%s)", how, tostring(code),
      illegal and ", an illegal instruction: they were built for a CPU with other instruction sets" or "")
  end
  return bin, gguf
end

--- The Stories110M peers and llama.cpp's GGUF files of the same checkpoint for a benchmark
--- parsed with peer_options: paths, bin, gguf directory; or nil after printing why they are
--- not available (the benchmark then has nothing to compare against).
function M.stories_and_llama_cpp(opts, root)
  local paths, why = M.stories_peers(opts.peers, opts.work)
  local bin, gguf
  if paths then bin, gguf = M.llama_cpp_models(opts.peers, opts.work, paths.checkpoint,
    root .. "/data/tokenizers/llama2/tokenizer.bin") end
  if not bin then
    print("peer not available: " .. (why or gguf) .. "; nothing to compare against")
    return nil
  end
  return paths, bin, gguf
end

--- llama.cpp's weights in `gguf_file` (a file of llama_cpp_models), dequantized to fp32 as a
--- llama2.c checkpoint (scripts/bench/gguf_to_llama2c.py, with gguf-py from the peers) at
--- `out`, made once; returns out, or nil and why.
function M.llama_cpp_weights(peers, gguf_file, out)
  if require("lfs").attributes(out) then return out end
  local script = (arg[0]:match("^(.*)/scripts/") or ".") .. "/scripts/bench/gguf_to_llama2c.py"
  local ok = os.execute(string.format("PYTHONPATH=%s /usr/bin/python3 %s %s %s.part > /dev/null 2>&1 && mv %s.part %s",
    M.quote(peers .. "/llama.cpp/gguf-py"), M.quote(script), M.quote(gguf_file), M.quote(out), M.quote(out), M.quote(out)))
  if not ok then return nil, "gguf_to_llama2c.py could not read " .. gguf_file end
  return out
end

--- The fixed text quantized weights are scored on (scripts/quantize_fidelity.lua, its first
--- --tokens; quantized_decode.lua, its first --drift-positions).
M.FIDELITY_TEXT = [[Once upon a time, in a small village by the sea, there lived a girl named Lily who loved to
collect shells. Every morning she walked along the beach with her little dog, Max, and filled her
basket with shells of every colour. One day she found a shell that was bigger than any she had ever
seen. When she held it to her ear she heard a soft voice singing a song about the waves, the wind and
a ship that sailed far away to an island where the trees were made of gold.

Lily ran home to show her mother. Her mother listened to the shell for a long time, and then she
smiled and said that her own grandmother had told her about such shells when she was small. "They
only sing for people who are kind to the sea," she said. Lily thought about that all evening. She
put the shell on the table by her bed and fell asleep listening to the song.

The next morning the beach was covered with rubbish that a storm had brought in the night. There
were bottles, old nets, plastic bags and a broken chair. Max barked at a crab that was stuck in a
net. Lily carefully cut the net with her mother's scissors and the crab ran sideways back into the
water. Then she fetched a big bag from the shed and began to pick up everything that did not belong
on the sand.

At first she worked alone. After a while a boy called Tom came to help, and then his sister Anna,
and then the old fisherman who lived at the end of the road. By lunchtime half the village was on
the beach, laughing and carrying bags, and the sand was clean again. The fisherman made a fire and
cooked fish for everyone, and the children sat on the rocks and told each other stories.

That night Lily held the shell to her ear again. The song was louder and happier than before, and
this time she could hear words in it. The voice thanked her and her friends for looking after the
sea. Lily smiled, whispered goodnight to the shell, and promised that she would come back to the
beach every day, rain or sun, for as long as she lived by the sea.]]

--- Per position of a logits row [V] (a Lua array): its log-softmax.
function M.log_softmax(row)
  local peak = -math.huge
  for _, v in ipairs(row) do peak = math.max(peak, v) end
  local sum = 0
  for _, v in ipairs(row) do sum = sum + math.exp(v - peak) end
  local log_sum, out = peak + math.log(sum), {}
  for i, v in ipairs(row) do out[i] = v - log_sum end
  return out
end

function M.argmax(row)
  local best, at = -math.huge, 1
  for i, v in ipairs(row) do if v > best then best, at = v, i end end
  return at
end

--- How far logits [T, V] are from reference ones on the same positions: the mean KL
--- divergence of each position's next-token distribution from the reference's (nats), and the
--- share of positions whose top-1 token is the reference's. Both as log-softmax rows (log_softmax).
function M.divergence(reference_rows, rows)
  local kl, agree = 0, 0
  for t, lp in ipairs(rows) do
    local ref = reference_rows[t]
    for v = 1, #lp do kl = kl + math.exp(ref[v]) * (ref[v] - lp[v]) end
    if M.argmax(lp) == M.argmax(ref) then agree = agree + 1 end
  end
  return kl / #rows, agree / #rows
end

--- llama-bench's tokens/s (2 threads, one repetition) for a prompt of `prompt` tokens
--- (prefill) or `generated` generated ones (decode): one of the two is 0.
function M.llama_bench(bin, gguf_file, prompt, generated)
  local command = string.format("%s -m %s -p %d -n %d -t 2 -r 1 -o csv 2>/dev/null", M.quote(bin .. "/llama-bench"),
    M.quote(gguf_file), prompt, generated)
  local pipe = io.popen(command)
  local csv = pipe:read("a")
  pipe:close()
  local last = csv:match("([^\n]+)\n?$") or ""
  local fields = {}
  for field in last:gmatch('"([^"]*)"') do fields[#fields + 1] = field end
  return tonumber(fields[#fields - 1]) -- avg_ts
end

--- run.c's greedy generation of `tokens` positions: its own "achieved tok/s" and its text.
function M.run_runc(paths, tokenizer_bin, tokens, prompt)
  local out = os.tmpname()
  local command = string.format("%s %s -z %s -t 0 -n %d -i %s > %s.out 2> %s.err", M.quote(paths.runc),
    M.quote(paths.checkpoint), M.quote(tokenizer_bin), tokens, M.quote(prompt), out, out)
  assert(os.execute(command), "run.c failed: " .. command)
  local text = io.open(out .. ".out"):read("a")
  local rate = tonumber(io.open(out .. ".err"):read("a"):match("achieved tok/s: ([%d.]+)"))
  os.remove(out .. ".out")
  os.remove(out .. ".err")
  os.remove(out)
  return rate, text
end

--- anelua's greedy generation from `prompt` (with BOS) to `tokens` positions, as run.c
--- counts them: generated tok/s without compile time (the prompt's prefill inside), the text,
--- and the decode steps' own rate (the prefill outside, as llama-bench's tg counts).
function M.anelua_greedy(model, tok, prompt, tokens)
  local ids = tok:encode(prompt, { bos = true })
  local produced = {}
  local before = model:stats()
  local steps, step_seconds = model.counters.decode_tokens, model.counters.decode_seconds
  local start = ane.clock()
  for id in model:generate(ids, { max_tokens = tokens - #ids, temperature = 0, stop_at_end = false }) do
    produced[#produced + 1] = id
  end
  local seconds = ane.clock() - start
  local compiling = (model:stats().compile_ms - before.compile_ms) / 1000
  local decode_rate = (model.counters.decode_tokens - steps) / (model.counters.decode_seconds - step_seconds)
  return #produced / (seconds - compiling), tok:decode({ 29871, table.unpack(produced) }), decode_rate
end

return M
