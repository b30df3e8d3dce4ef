-- Benchmark: what a session's cache size does to decode on the cpu profile. Two sessions of one
-- model hold the same positions in caches of different sizes (session capacities --small and
-- --large, each rounded up to a multiple of 64 positions: generation.lua's FIRST_CACHE) and
-- decode the same tokens, stepping in turn token by token (common.sessions_in_turn); the row
-- prints the median ratio (small / large) of tokens/s over the rounds and its range. A step's
-- attention reads the positions written, but each cache row from its start, so the rows'
-- length (the size) costs too. The tokens must be the same.
--   build/anelua scripts/bench/cache_sizes.lua [--model FILE] [--activations int8] [--tokens N]
--     [--small P] [--large P] [--rounds N]
-- Without --model: a Stories110M-shaped Llama of random weights, fp16.
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")

local opts = require("ane.cli").command{
  name = "scripts/bench/cache_sizes.lua", summary = "Decode tokens/s with caches of two sizes holding the same positions.",
  options = common.decode_options {
    { "tokens", "integer", 127, "tokens decoded per timing (after a 4-token prompt)", min = 1 },
    { "small", "integer", 133, "the capacity of the session of smaller caches (positions)", min = 1 },
    { "large", "integer", 256, "the capacity of the other (at most 256: its caches take it at once)", min = 1, max = 256 },
    { "rounds", "integer", 6, "alternating rounds", min = 1 },
  }
}:parse(arg)

local model, prompt = common.decode_model(opts.model, opts.activations)
if #prompt + opts.tokens > math.min(opts.small, opts.large) then
  io.stderr:write(string.format("scripts/bench/cache_sizes.lua: %d positions (a 4-token prompt and --tokens) do not fit --small %d\n",
    #prompt + opts.tokens, math.min(opts.small, opts.large)))
  os.exit(2)
end

local function round()
  local small, large, sessions, same = common.sessions_in_turn(model, prompt, opts.tokens,
    { capacity = opts.small }, { capacity = opts.large })
  assert(same, "the cache size changed the tokens")
  return small, large, sessions[1].size, sessions[2].size
end

local _, _, small_size, large_size = round() -- compile and warm up both
print(string.format("%s; positions 5-%d in caches of %d and %d positions; %d rounds",
  opts.model or "Stories110M shape, random weights, fp16", #prompt + opts.tokens, small_size, large_size, opts.rounds))
common.print_paired_rounds(opts.rounds, round, "small", "large")
