-- Chat in the terminal: `anelua chat` (lua/ane/commands/chat.lua) with a demo when no model
-- is given.
--   anelua examples/chat.lua [MODEL_DIR] [anelua chat's options]
-- With MODEL_DIR it is `anelua chat MODEL_DIR`: any family with a chat template in its
-- directory. Without it a small Qwen3-shaped model with random weights answers through the
-- Qwen3 tokenizer and chat template in data/tokenizers/qwen3 (the replies are noise; the chat
-- machinery is real).
local chat_command = require("ane.commands.chat")
local cli = require("ane.cli")

if arg[1] and not arg[1]:match("^%-") then os.exit(chat_command.main(table.unpack(arg)) or 0) end

local command = cli.command{
  name = "examples/chat.lua",
  usage = "[MODEL_DIR] [options]",
  summary = "Chat in the terminal (anelua chat); without MODEL_DIR, a random-weight Qwen3-shaped demo.",
  positional = { { "MODEL_DIR", "a model directory with a chat template (none: the demo)", optional = true } },
  options = chat_command.options(),
  epilog = "Interactive without --prompt: /help lists the commands; Ctrl-C stops an answer, Ctrl-D ends the chat.",
}
local opts = command:parse(arg)
command:use_backend(opts.backend)
command:check_activations(opts, nil)
local ane = require("ane")
local chat = require("ane.chat")
local qwen3 = require("ane.models.qwen3")
local tokenizers = ane.data_dir() .. "/tokenizers/qwen3"
local model = command:call(qwen3.from_weights, qwen3.random_weights(qwen3.CONFIGS.demo, opts.seed),
  { precision = opts.precision, profile = opts.profile or (opts.activations and "cpu"), quantize = opts.quantize,
    activations = opts.activations })
local tok, err = require("ane.tokenizer").load(tokenizers .. "/tokenizer.json")
if not tok then command:fail(err) end
model.tokenizer = tok
local template, why = chat.template(tokenizers)
if not template then command:fail(why) end
io.stderr:write("demo: no MODEL_DIR given, so a small Qwen3-shaped model with random weights answers (noise);\n"
  .. "      pass a model directory (e.g. Qwen3-0.6B) to chat for real\n")
os.exit(chat_command.converse(command, model, template, opts, qwen3.DEMO_IDS, qwen3.DEMO_GENERATION))
