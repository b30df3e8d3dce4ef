-- `anelua serve MODEL`: an OpenAI-compatible HTTP server over any model anelua loads
-- (ane.serve: /v1/chat/completions, /v1/completions, /v1/models, /health; docs/serve.md).
-- HTTP from libmicrohttpd (host/http.c). Binds 127.0.0.1 unless --host says otherwise; another
-- address needs --api-key (or --no-api-key, said out loud). One line per request on stderr.
-- SIGINT / SIGTERM: stop taking requests, finish the ones being answered, exit 0; a second
-- Ctrl-C cuts them short.
local ane = require("ane")
local chat_command = require("ane.commands.chat")
local cli = require("ane.cli")
local models = require("ane.models")
local serve = require("ane.serve")

local M = {}

function M.options()
  return cli.join({
    { "host", "string", "127.0.0.1", "the IPv4 address to listen on (0.0.0.0: every interface; needs --api-key)" },
    { "port", "integer", 8080, "the TCP port (0: any free one, printed at start)", min = 0, max = 65535 },
    { "parallel", "integer", 1, "requests answered at once, each in its own slot and KV cache", min = 1, max = 64 },
    { "queue", "integer", 16, "requests that may wait for a slot (503 with Retry-After beyond)", min = 0 },
    { "context", "integer", nil, "positions of context per slot (default: the model's)", min = 16 },
    { "prefill-chunk", "integer", 256, "prompt tokens fed per turn over all slots, between the decode steps", min = 1 },
    { "api-key", "string", nil, "require this key (Authorization: Bearer KEY)", metavar = "KEY" },
    { "no-api-key", "flag", false, "serve a non-loopback --host without a key (anyone who reaches it may use it)" },
    { "alias", "string", nil, "the model's name in the API (default: the file or directory name)" },
    { "timeout", "integer", 30, "seconds a client may stay silent mid-request before it is dropped", min = 1 },
    { "max-body", "integer", 1 << 20, "largest request body in bytes (413 beyond)", min = 1024 },
    { "tokenizer", "path", nil, "tokenizer.json, tokenizer.model or tokenizer.bin (default: the one beside the model)" },
    { "backend", "choice", nil, "sim (CPU, everywhere) or ane (the device, macOS); default ane.default_backend()",
      choices = { "sim", "ane" } },
    { "precision", "choice", "fp16", "fp16 (the device's numerics) or fp32 (the CPU reference)", choices = { "fp16", "fp32" } },
    { "profile", "choice", nil, "cpu (default on sim: the slots' decode steps run as one product) or ane (the "
      .. "device's rules, each slot stepped alone)", choices = { "ane", "cpu" } },
  }, cli.quantize_options())
end

local function loopback(host) return host:match("^127%.") ~= nil end

function M.main(...)
  local command = cli.command {
    name = "serve",
    usage = "MODEL [--port 8080] [--parallel N] [options]",
    summary = "Serves the model at MODEL over OpenAI's HTTP API (chat completions, completions, models, health).",
    positional = { { "MODEL", "a model directory or checkpoint file (as `anelua run` takes)" } },
    options = M.options(),
    epilog = "Ctrl-C or SIGTERM: stop taking requests, finish the ones in flight, exit 0. docs/serve.md has examples.",
  }
  local opts, positional = command:parse({ ... })
  local path = positional[1]
  if not loopback(opts.host) and not opts.api_key and not opts.no_api_key then
    command:usage_error("--host " .. opts.host .. " is reachable from other machines: give --api-key KEY "
      .. "(or --no-api-key to serve it open)")
  end
  if opts.api_key and opts.no_api_key then command:usage_error("--api-key and --no-api-key contradict each other") end
  if opts.api_key == "" then command:usage_error("--api-key needs a non-empty key") end
  command:use_backend(opts.backend)
  command:check_activations(opts, path)
  -- on sim the cpu profile unless --profile says otherwise: its decode steps are one position
  -- wide, so the slots' steps run as one product (the ane profile pads each to the device's 32)
  local load_options = require("ane.commands.run").model_options(opts)
  if not opts.profile and ane.default_backend() ~= "ane" then load_options.profile = "cpu" end
  local model, err = command:call(models.load, path, load_options)
  if not model then command:fail(err) end
  if opts.tokenizer then
    model.tokenizer, model.tokenizer_problem = models.tokenizer_file(opts.tokenizer, model.config and model.config.vocab_size)
  end
  if not model.tokenizer then command:fail(model.tokenizer_problem .. "; `serve` needs text in and out") end
  -- the chat endpoint when the model has a chat template (completions always)
  local template, why, _, stop_ids = chat_command.chat_setup(command, path, model)
  if template and next(stop_ids) == nil then
    template, why = nil, "the model names no end-of-turn token (eos_token_id, eos_token) to end an answer at"
  end
  local http = require("anelua.http")
  local server, listen_err = http.listen({ host = opts.host, port = opts.port, max_body = opts.max_body,
    timeout = opts.timeout, connections = opts.parallel + opts.queue + 8 })
  if not server then command:fail(listen_err) end
  local name = opts.alias or path:gsub("/+$", ""):match("([^/]+)$")
  local engine = serve.new(model, { id = name, parallel = opts.parallel, queue = opts.queue, context = opts.context,
    prefill_chunk = opts.prefill_chunk,
    api_key = opts.api_key, template = template, stop_ids = stop_ids,
    log = function(line) io.stderr:write(line, "\n") io.stderr:flush() end })
  io.stderr:write(tostring(model), "\n")
  local compile_start = ane.clock()
  local compiled = engine:prepare()
  if compiled > 0 then
    io.stderr:write(string.format("(%d programs of the slots' shared decode steps compiled in %.1f s)\n", compiled,
      ane.clock() - compile_start))
  end
  if not template then
    io.stderr:write("(no chat endpoint: " .. why:gsub("; `anelua run` continues raw text$", "")
      .. "; /v1/completions continues raw text)\n")
  end
  if not loopback(opts.host) then
    io.stderr:write(string.format("warning: listening on %s, reachable from other machines%s\n", opts.host,
      opts.api_key and "; requests need the API key" or " WITHOUT an API key"))
  end
  io.stderr:write(string.format("serving '%s' on http://%s:%d/v1 (%d slot%s of %d positions)\n", name, opts.host,
    server:port(), opts.parallel, opts.parallel == 1 and "" or "s", engine.context))
  io.stderr:flush()
  command:graceful_interrupts()
  local busy = false
  while not cli.stop_requested() do
    local request = server:next(busy and 0 or 0.05)
    while request do
      engine:handle(request)
      request = server:next(0)
    end
    busy = engine:step()
  end
  -- stopping: new requests get 503 (the server refuses them while it closes), the ones in
  -- flight finish unless a second Ctrl-C interrupts
  io.stderr:write("(stopping: finishing the requests in flight)\n")
  ane.set_graceful_interrupts(true)
  local ok, failure = pcall(function()
    while engine:step() do
      local request = server:next(0)
      while request do
        engine:handle_refused(request)
        request = server:next(0)
      end
      if cli.stop_requested() then error("interrupted", 0) end
    end
  end)
  if not ok then engine:cancel_all() end
  server:close()
  io.stderr:write(ok and "(stopped)\n" or "(stopped; the requests in flight were cut short: " .. tostring(failure) .. ")\n")
end

return M
