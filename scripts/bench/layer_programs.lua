-- Benchmark: what one program a layer does to decode on the cpu profile. The same model
-- decodes the same tokens with sessions whose steps run each layer as one program
-- (attention and FFN together, the default) and as two (`one_program_a_layer = false`); the
-- two step in turn, token by token, and the row prints the median ratio (one / two) of
-- tokens/s over the rounds and its range. The tokens must be the same.
--   build/anelua scripts/bench/layer_programs.lua [--model FILE] [--tokens N] [--rounds N]
-- Without --model: a Stories110M-shaped Llama of random weights, fp16.
local common = dofile((arg[0]:match("^(.*)/") or ".") .. "/common.lua")

local opts = require("ane.cli").command{
  name = "scripts/bench/layer_programs.lua", summary = "Decode tokens/s with one program a layer and with two.",
  options = common.decode_options {
    { "tokens", "integer", 256, "tokens decoded per timing", min = 1 },
    { "rounds", "integer", 8, "alternating rounds", min = 1 },
  }
}:parse(arg)

local model, prompt = common.decode_model(opts.model, opts.activations)

-- One round: a session of each kind decodes opts.tokens greedy tokens after the prompt, the
-- two stepping in turn (common.sessions_in_turn); each one's tokens/s.
local function round()
  local capacity = #prompt + opts.tokens
  local one, two, sessions, same = common.sessions_in_turn(model, prompt, opts.tokens,
    { capacity = capacity, one_program_a_layer = true }, { capacity = capacity, one_program_a_layer = false })
  assert(sessions[1].one_program_a_layer, "the model cannot run one program a layer")
  assert(same, "one program a layer changed the tokens")
  return one, two
end

print(string.format("%s; %d tokens per timing, %d rounds", opts.model or "Stories110M shape, random weights, fp16",
  opts.tokens, opts.rounds))
round() -- compile and warm up both
common.print_paired_rounds(opts.rounds, round, "one", "two")
