-- ane.models.decoder: what the decoder-only models share besides their network (which
-- ane.models.transformer builds): the per-model program cache with compile accounting, the
-- shape buckets, batched logits and statistics here; KV-cached generation and sampling in
-- ane.models.generation; the loss and its backward in ane.models.training. The transformer
-- mixes these in and provides:
--   graphs = { [kind] = function(self, layer weights, a, b) -> graph } for "attn_prefill",
--            "attn_decode", "ffn" and "norm"; refresh_weights() to bring self.P
--            (program-layout weights) up to date before a graph is built
--   forward(ids) -> x, per-layer prefill outputs {k =, v =}, bucket S
--   classify(x, T, S, first) -> [T - first + 1, V] logits of positions first (default 1) .. T
--   embed_token(id, position, W) -> [1, C, 1, W] input of one decoded token
--   cache_keys(prefill_k, T) -> [1, C, 1, T] keys as the decode program expects them cached
--   decode_inputs(position, W) -> extra inputs of the decode attention program (or {})
-- and the fields context_length, width (C), cache_width, n_layer, stop_token.
-- Training adds loss(ids, targets) on top of the hooks
--   embed_sequence(ids, S) -> [1, C, 1, S];  embedding_gradients(ids, dx [T, C], raw)
--   checkpoint_gradients(raw) -> gradients named and laid out as the checkpoint stores them
-- and the fields weight_consts = { [program kind] = { const names } } and saved = {
-- [program kind] = { node names } }: "<kind>_grad" programs are the backward graphs ane.grad
-- derives for those consts and the input x, taking the saved nodes' values (output by the
-- "<kind>_train" forward programs) instead of recomputing them. Saving the projections'
-- outputs leaves the backward only cheap elementwise work to redo.
local ane = require("ane")
local LORA_INPUTS = require("ane.models.lora").INPUTS -- the adapters' program inputs

local M = {}

--- The smallest power of two >= n, starting from floor.
function M.pow2_at_least(n, floor)
  local b = floor
  while b < n do b = b * 2 end
  return b
end

--- Checks and fills the options every model takes; returns precision and profile.
function M.check_options(opts, level)
  local precision = opts.precision or "fp16"
  if precision ~= "fp16" and precision ~= "fp32" then error("precision must be 'fp16' or 'fp32'", level + 1) end
  local profile = opts.profile or (precision == "fp32" and "cpu" or "ane")
  if profile ~= "ane" and profile ~= "cpu" then error("profile must be 'ane' or 'cpu'", level + 1) end
  if precision == "fp32" and profile == "ane" then
    error("precision 'fp32' runs fp32 weights, which the device refuses (ANE-26); use profile 'cpu' for the fp32 reference",
      level + 1)
  end
  return precision, profile
end

--- Fields of a fresh model (merge into the model table).
function M.new_state(kind, opts, precision, profile)
  M.instances = (M.instances or 0) + 1
  return {
    backend = opts.backend or ane.backend_for { precision = precision, profile = profile },
    precision = precision, profile = profile, dtype = precision,
    programs = {}, program_kinds = {}, id = string.format("%s#%d", kind, M.instances),
    min_width = profile == "ane" and 32 or 1, -- ANE-21: device I/O at least 32 wide
    counters = { programs = 0, compile_seconds = 0, prefill_tokens = 0, prefill_seconds = 0, decode_tokens = 0,
      decode_seconds = 0, loss_forward_seconds = 0, loss_backward_seconds = 0, clamped = 0, nans = 0 },
    -- opts.clamp: a limit, or false for none; fp16 models clamp at the fp16 maximum by default
    clamp_limit = opts.clamp == nil and (precision == "fp16" and 65504 or nil) or opts.clamp or nil,
    -- fp16 models with clamping also saturate attention scores at the fp16 range before the
    -- softmax, inside the programs (not counted: a program has no counter to report)
    softmax_clip = precision == "fp16" and opts.clamp ~= false and 65504 or nil,
    -- opts.fusions = false: sim runs every node of the programs as its own step (the fused
    -- steps' baseline, scripts/bench/sim_fusions.lua; the same values either way)
    fusions = opts.fusions ~= false,
  }
end

local Methods = {}

-- A view of graph g for building a program that computes one position while its I/O keeps
-- `width` positions (the device's rows: ANE-21). The builder runs at width 1: each input it
-- declares one position wide becomes a `width`-wide input sliced to its first position, and
-- each output one position wide is padded back to `width` with zeros. So a decode step in the
-- `ane` profile computes 1 position, not 32, and the same program runs on the device.
local function one_position(g, width)
  local view = { graph = g }
  local function widened(shape)
    local wide = {}
    for i, n in ipairs(shape) do wide[i] = n end
    wide[#wide] = width
    return wide
  end
  function view.input(_, name, shape, ...)
    if shape[#shape] ~= 1 then return g:input(name, shape, ...) end
    local begin = {}
    for i = 1, #shape do begin[i] = 0 end
    return g:slice_by_size(g:input(name, widened(shape), ...), begin, shape, { name = name .. "_position" })
  end
  function view.output(_, name, node)
    local shape = node:shape()
    if shape[#shape] ~= 1 then return g:output(name, node) end
    local amounts = {}
    for i = 1, 2 * #shape do amounts[i] = 0 end
    amounts[2 * #shape] = width - 1 -- after the last axis
    if node:name() == name then node:rename(name .. "_position") end -- the output's name goes to the padded rows
    return g:output(name, g:pad(node, amounts, { name = name }))
  end
  return setmetatable(view, { __index = function(_, key)
    local member = g[key]
    if type(member) ~= "function" then return member end
    return function(self, ...) return member(self == view and g or self, ...) end
  end })
end

--- A new graph for a program builder (builders call self:graph(name), not ane.graph): while
--- a "<kind>_step" program is built, the one-position view above.
function Methods:graph(name)
  local g = ane.graph(name)
  return self.step_width and one_position(g, self.step_width) or g
end

--- The kind of program that computes the first `valid` of `width` positions: "<kind>_step"
--- for one position of a wider program (a decode step in the `ane` profile), else kind.
function Methods:kind_for(kind, valid, width)
  return (valid == 1 and width > 1) and kind .. "_step" or kind
end

-- No appends (Methods:clamped).
local NONE = {}

-- The key of self.programs for a program's kind, layer and sizes.
local function program_key(kind, layer, a, b) return string.format("%s:L%d:%d:%d", kind, layer or 0, a, b or 0) end

--- The program for (kind, layer, shapes), built by self:build_graph and compiled once.
--- "<kind>_step" is <kind> computing only the first of its `a` positions (kind_for).
--- "<kind>_train" is <kind> that also outputs its saved activations (self.saved[kind]:
--- node names, typically the projections' outputs); "<kind>_grad" is the backward graph of
--- <kind> for its weight consts and its input x, taking those activations as inputs
--- instead of recomputing them.
function Methods:program(kind, layer, a, b)
  local key = program_key(kind, layer, a, b)
  local program = self.programs[key]
  if program then return program end
  -- the graph's building counts as compiling, as ane.compile's passes do: both make the
  -- program once, and a step's time is its decoding's (12 Stories110M layer graphs: 2-3 ms)
  local start = ane.clock()
  local g
  local forward_kind = kind:match("^(.+)_grad$")
  local training_kind = kind:match("^(.+)_train$")
  local step_kind = kind:match("^(.+)_step$")
  if step_kind then -- built at width 1, its I/O `a` wide (one_position)
    self.step_width = a
    local ok, built = pcall(self.build_graph, self, step_kind, layer, 1, b)
    self.step_width = nil
    if not ok then error(built, 0) end
    g = built.graph
  elseif training_kind then
    g = self:build_graph(training_kind, layer, a, b)
    local outputs = g:outputs() -- a node the program outputs already (a cached k, v) keeps its output
    for _, name in ipairs(self.saved[training_kind]) do
      if outputs[name] == nil then
        g:output(name, g:node(name))
      elseif outputs[name] ~= name then
        error(string.format("%s: output '%s' is node '%s', not the saved node of that name", kind, name, outputs[name]))
      end
    end
  elseif forward_kind then
    local wrt = { "x" }
    if self.lora then -- the base weights are frozen: gradients for the adapters only
      if forward_kind:match("^attn") then
        for _, name in ipairs(LORA_INPUTS) do wrt[#wrt + 1] = name end
      end
    else
      for _, const in ipairs(self.weight_consts[forward_kind]) do wrt[#wrt + 1] = const end
    end
    -- on the device profile, weight gradients come out in its I/O layout (ANE-20/21)
    g = ane.grad(self:build_graph(forward_kind, layer, a, b), { wrt = wrt, saved = self.saved[forward_kind],
      device_layout = self.profile == "ane" })
  else
    g = self:build_graph(kind, layer, a, b)
  end
  -- ane.compile runs the pass pipeline itself; quiet: a model's programs carry warnings its
  -- design accepts (ANE-28's elementwise final norm, ANE-21's narrow decode widths); they are
  -- kept per program, not printed to its user
  local warnings
  program, warnings = ane.compile(g, { backend = self.backend, precision = self.precision, profile = self.profile,
    activations = self.activations, fusions = self.fusions, key = self.id .. ":" .. key, quiet = true })
  self.compile_warnings = self.compile_warnings or {}
  self.compile_warnings[key] = warnings
  self.counters.compile_seconds = self.counters.compile_seconds + (ane.clock() - start)
  self.counters.programs = self.counters.programs + 1
  self.programs[key] = program
  self.program_kinds[key] = { kind = kind, layer = layer }
  return program
end

--- Lets go of a program of self:program(kind, layer, a, b): the next request compiles it
--- again, and whoever still holds it keeps it until they let go too (then it is collected,
--- with its inputs' buffers).
function Methods:forget_program(kind, layer, a, b)
  local key = program_key(kind, layer, a, b)
  self.programs[key], self.program_kinds[key] = nil, nil
end

--- Iterates the compiled programs as program, kind, layer (nil for the ones of no layer).
function Methods:each_program()
  local key
  return function()
    local program
    key, program = next(self.programs, key)
    if not key then return nil end
    local what = self.program_kinds[key]
    return program, what.kind, what.layer
  end
end

--- Seconds since `start`, less the time spent compiling programs meanwhile (reported apart).
function Methods:elapsed_without_compiling(start, compile_seconds_then)
  return (ane.clock() - start) - (self.counters.compile_seconds - compile_seconds_then)
end


--- Adds what a program takes besides its activations: layer l's LoRA adapters (attention
--- programs) and, with weights_as_inputs, its weights. group: "attn", "ffn" or "norm" (l = 0).
function Methods:extra_inputs(group, l, inputs)
  if self.lora and group == "attn" then
    for _, name in ipairs(LORA_INPUTS) do inputs[name] = self.adapters[name .. "." .. (l - 1)] end
  end
  if self.weight_feed then
    for name, t in pairs(self.weight_feed[group][l]) do inputs[name] = t end
  end
  return inputs
end

--- Evaluates a forward program with its extra inputs (see extra_inputs). With a clamp limit (fp16
--- models: 65504, the paper's stability fix, docs/reference/numerics.md) every output is clamped in place
--- before it feeds the next program's norm or softmax: values beyond the limit (infinities)
--- become +-limit, NaN becomes 0, and both are counted in self.counters.
--- destinations (optional): tensors the outputs are written into, by name; options (optional):
--- prog:eval's (appends to a session's caches), and `positions`: only the outputs' leading
--- positions are clamped (a one-position program's: the rest are its zero padding). An output
--- an append takes is clamped as it is appended (prog:eval's `clamp`, set here): the cache holds
--- what a prefill's clamped outputs put there, and the output itself is read by no one after.
function Methods:eval(program, group, l, inputs, destinations, options)
  if not (self.clamp_limit and options and options.append) then
    return self:clamped(self:eval_unclamped(program, group, l, inputs, destinations, options), options)
  end
  options.clamp = self.clamp_limit
  local outputs, clamped, nans = self:eval_unclamped(program, group, l, inputs, destinations, options)
  local counters = self.counters
  counters.clamped, counters.nans = counters.clamped + clamped, counters.nans + nans
  return self:clamped(outputs, options)
end

--- Starts an eval on a helper thread (prog:submit); :wait() on the result returns what
--- self:eval would have (options: `positions` as there).
function Methods:submit(program, group, l, inputs, destinations, options)
  local ticket = program:submit(self:extra_inputs(group, l, inputs), destinations)
  return { wait = function() return self:clamped(ticket:wait(), options) end }
end

--- Outputs clamped at the model's activation limit (options.positions: their leading ones),
--- the clamps and NaNs counted.
function Methods:clamped(outputs, options)
  local limit = self.clamp_limit
  if limit then
    local counters, positions = self.counters, options and options.positions
    local appended = options and options.append or NONE -- (input = output name: clamped as appended)
    for name, t in pairs(outputs) do
      local taken = false
      for _, output in pairs(appended) do taken = taken or output == name end
      if not taken then
        if t.tensor then t = t:tensor() end -- (a surface's values)
        if positions then t = t:slice(t:ndim(), 1, positions) end
        local clamped, nans = t:clamp_activations(limit)
        counters.clamped, counters.nans = counters.clamped + clamped, counters.nans + nans
      end
    end
  end
  return outputs
end

--- Evaluates a program without clamping: the backward programs use it, so an fp16 overflow
--- reaches the loss scaler as Inf/NaN (which skips the step) instead of being hidden.
function Methods:eval_unclamped(program, group, l, inputs, destinations, options)
  return program:eval(self:extra_inputs(group, l, inputs), destinations, options)
end

--- The graph of one program kind: self.graphs[kind](self, layer weights, a, b, layer), after the
--- model has brought its program-layout weights up to date (self:refresh_weights).
function Methods:build_graph(kind, layer, a, b)
  self:refresh_weights()
  return self.graphs[kind](self, layer and self.P.layers[layer], a, b, layer)
end

--- Patches weights into programs: `patches` is a list of { program, { const name -> tensor } }.
--- A program lacks the consts its graph does not need (a backward one has no bias, for one).
--- A tensor that several programs take as the same const (a layer's forward, backward and
--- decoding programs) is patched into them together: the sim backend writes it once and
--- they read the same bytes.
function M.patch_programs(patches)
  local holders, order = {}, {} -- holders[tensor][const name]: the programs, in order of appearance
  for _, item in ipairs(patches) do
    local program, patch = item[1], item[2]
    for _, weight in ipairs(program:weights()) do
      local value = patch[weight.name]
      if value then
        local by_name = holders[value] or {}
        holders[value] = by_name
        if not by_name[weight.name] then
          by_name[weight.name] = {}
          order[#order + 1] = { value, weight.name }
        end
        table.insert(by_name[weight.name], program)
      end
    end
  end
  for _, entry in ipairs(order) do
    local value, name = entry[1], entry[2]
    ane.patch_together(holders[value][name], { [name] = value })
  end
end

--- The sequence size programs are built for to hold T positions (at most the size of
--- `limit`): a power of two, at least the device's minimum width, up to 512; beyond, on sim,
--- the next multiple of 256, so a 520-token prefill computes 768 positions, not 1,024. On
--- the device each size costs a compile of every layer's programs (ANE-05): powers of two.
function Methods:bucket(T, limit)
  local function size(n)
    local pow2 = M.pow2_at_least(n, self.min_width)
    if self.backend == "ane" or pow2 <= 512 then return pow2 end
    return 256 * math.ceil(n / 256)
  end
  return math.min(size(T), math.max(size(limit), self.min_width))
end

--- Checks ids against the vocabulary and the context length.
function Methods:check_ids(ids, vocab, positions, level)
  if #ids == 0 then error("logits: empty sequence", level + 1) end
  if #ids > positions then
    error(string.format("logits: %d tokens exceed the model's %d positions", #ids, positions), level + 1)
  end
  for i, id in ipairs(ids) do
    if math.type(id) ~= "integer" or id < 0 or id >= vocab then
      error(string.format("logits: ids[%d] = %s is not a token id (0..%d)", i, tostring(id), vocab - 1), level + 1)
    end
  end
end

--- logits(ids) -> [T, V] (fp32); logits({ids1, ids2, ...}) -> [B, T, V] (equal lengths).
function Methods:logits(ids)
  if type(ids) ~= "table" or #ids == 0 then error("logits: ids must be a non-empty array", 2) end
  if type(ids[1]) == "table" then
    local T, V = #ids[1], self.vocab_size
    local out = ane.tensor({ #ids, T, V })
    for b, seq in ipairs(ids) do
      if #seq ~= T then error("logits: batch sequences must have equal lengths", 2) end
      out:slice(1, b, b):copy_from(self:logits(seq):reshape(1, T, V))
    end
    return out
  end
  local start, compiling = ane.clock(), self.counters.compile_seconds
  local x, _, S = self:forward(ids)
  local logits = self:classify(x, #ids, S)
  self.counters.prefill_tokens = self.counters.prefill_tokens + #ids
  self.counters.prefill_seconds = self.counters.prefill_seconds + self:elapsed_without_compiling(start, compiling)
  return logits
end


--- Timing and program counts of this model so far.
function Methods:stats()
  local s = self.counters
  return {
    backend = self.backend, precision = self.precision, profile = self.profile, programs = s.programs,
    compile_ms = s.compile_seconds * 1000, prefill_tokens = s.prefill_tokens,
    prefill_tokens_per_s = s.prefill_seconds > 0 and s.prefill_tokens / s.prefill_seconds or 0,
    decode_tokens = s.decode_tokens, decode_tokens_per_s = s.decode_seconds > 0 and s.decode_tokens / s.decode_seconds or 0,
    decode_ms_per_token = s.decode_tokens > 0 and s.decode_seconds * 1000 / s.decode_tokens or 0,
    loss_forward_ms = s.loss_forward_seconds * 1000, loss_backward_ms = s.loss_backward_seconds * 1000,
    clamped = s.clamped, nans = s.nans,
  }
end

local MASK = -65504 -- the additive attention mask (the largest fp16 magnitude)
M.MASK = MASK

--- Copies the shared methods into a model's method table: the program cache and logits
--- here, generation (ane.models.generation) and the loss with its backward
--- (ane.models.training).
function M.mixin(methods)
  M.add_methods(methods, Methods, "ane.models.decoder")
  M.add_methods(methods, require("ane.models.generation").methods, "ane.models.generation")
  M.add_methods(methods, require("ane.models.training").methods, "ane.models.training")
  return methods
end

local method_sources = setmetatable({}, { __mode = "k" }) -- method table -> name -> the module that added it

--- Adds the methods of `from` (a module's, named `source`) to a model's method table; a name
--- that is there already is an error naming both: mixins extend, they never replace.
function M.add_methods(methods, from, source)
  local sources = method_sources[methods] or {}
  method_sources[methods] = sources
  for name, f in pairs(from) do
    if methods[name] ~= nil and methods[name] ~= f then
      error(string.format("method '%s' of %s clashes with the one %s added", name, source, sources[name] or "the model"), 2)
    end
    methods[name], sources[name] = f, source
  end
  return methods
end

--- Logits [T, V] of the classifier wcls [V, C] (fp32) for final-norm columns [C, T] (fp32):
--- h^T W^T through transposed views (no copies); one column goes through the
--- matrix-vector product, which streams wcls at memory speed. activations ("float" | "int8" |
--- "int16", for a quantized wcls) as the model's.
function M.classifier_logits(wcls, columns, activations)
  local T = columns:shape()[2]
  if ane.quantized.is(wcls) then -- read as stored: int8 / 4-bit rows
    local logits = wcls:matmul(columns, activations) -- [V, T]
    return T == 1 and logits:reshape(1, wcls:shape()[1]) or logits:transpose():copy()
  end
  if T == 1 then return wcls:matmul(columns):reshape(1, wcls:shape()[1]) end
  return columns:transpose():matmul(wcls:transpose())
end

--- Logits soft-capped: cap * tanh(logits / cap) (a new fp32 tensor).
function M.softcap(logits, cap) return logits:scale(1 / cap):tanh():scale(cap) end

--- The gradient through M.softcap: d loss / d logits from d loss / d capped, given capped:
--- dcapped * (1 - (capped / cap)^2).
function M.softcap_backward(dcapped, capped, cap)
  local t = capped:scale(1 / cap)
  return dcapped:mul(t:mul(t):scale(-1):add(1))
end

--- t in dtype: t itself when it already is (a view, no copy), a converted copy otherwise.
function M.in_dtype(t, dtype) return t:dtype() == dtype and t or t:to(dtype) end

--- A linear weight [out, in] as the [out, in, 1, 1] conv weight of the programs, in dtype.
function M.conv_weight(t, dtype)
  local shape = t:shape()
  return M.in_dtype(t, dtype):reshape(shape[1], shape[2], 1, 1)
end

--- A quantized linear weight [out, in] as the programs' [out, in, 1, 1] conv weight
--- computing in dtype (its codes shared; the table as it is).
function M.quantized_conv_weight(q, dtype)
  local shape = q:shape()
  if q:dtype() ~= dtype then
    q = ane.quantized { encoding = q:encoding(), dtype = dtype, shape = shape, data = q:data(), table = q:table() }
  end
  return q:reshape(shape[1], shape[2], 1, 1)
end

local QUANTIZE_MODES = { int8 = true, int4 = true, q8_0 = true, q4_0 = true }
--- The encodings of llama.cpp's blocks (Q8_0, Q4_0: a scale per 32; Q4_K and Q5_K as a scale and
--- an offset per 32; Q6_K, a scale per 16): sim reads them as stored; the device's programs take
--- them dequantized.
M.BLOCK_ENCODINGS = { q8_0 = true, q4_0 = true, q4_k = true, q5_k = true, q6_k = true }

--- opts.quantize ("int8" | "int4" | "q8_0" | "q4_0" | nil) and opts.quantize_classifier (false
--- or one of those; "int8" by default when quantize is set, quantize itself for q8_0 / q4_0)
--- checked; returns both (nil for none). W (the weights) says whether the classifier comes
--- quantized already; backend: Q8_0 and Q4_0 quantize on sim only.
function M.check_quantize_options(opts, W, level, backend)
  local quantize, classifier = opts.quantize, opts.quantize_classifier
  if quantize ~= nil and not QUANTIZE_MODES[quantize] then
    error(string.format("quantize must be 'int8', 'int4', 'q8_0' or 'q4_0', not %s", tostring(quantize)), level + 1)
  end
  if M.BLOCK_ENCODINGS[quantize] and backend ~= "sim" then
    error(string.format("quantize = '%s' runs on the sim backend (the device's programs carry per-row int8 or int4 "
      .. "weights): add backend = 'sim', or quantize 'int8' or 'int4'", quantize), level + 1)
  end
  if classifier == nil then classifier = M.BLOCK_ENCODINGS[quantize] and quantize or quantize and "int8" or false end
  if classifier ~= false and not QUANTIZE_MODES[classifier] then
    error(string.format("quantize_classifier must be false, 'int8', 'int4', 'q8_0' or 'q4_0', not %s",
      tostring(classifier)), level + 1)
  end
  if (quantize or ane.quantized.is(W.classifier)) and opts.weights_as_inputs then
    error("quantized weights are baked into the programs; weights_as_inputs feeds dense ones (choose one)", level + 1)
  end
  for _, L in ipairs(W.layers or {}) do -- a quantized checkpoint: its codes are final
    for _, t in pairs(L) do
      if ane.quantized.is(t) and quantize and quantize ~= t:encoding() then
        error(string.format("%s holds %s weights already; quantize = '%s' would quantize their codes again (load it "
          .. "without quantize, or quantize the dense checkpoint)", tostring(W.source), t:encoding(), quantize), level + 1)
      end
    end
  end
  return quantize, classifier or nil
end

--- opts.activations: "float", "int8" or "int16": the activations of the products with
--- quantized weights quantized in blocks of 32 for integer dot products (int8: fastest, a
--- measured drift; int16: each activation within 1/65534 of its block's largest, 4-bit weights
--- read faster than with float; docs/performance.md). Needs quantized weights and sim's cpu
--- profile: the device multiplies in fp16, and the `ane` profile is its faithful double. The
--- default is float, but for a GGUF file's Q8_0 / Q4_0 layers read as stored (`from_gguf`) on
--- sim's cpu profile, int8: llama.cpp's own arithmetic for its blocks, whose drift from F32 is
--- no more than llama.cpp's on the same file (docs/performance.md). Returns the choice.
function M.check_activations(opts, model, level, from_gguf)
  local gguf_blocks = from_gguf and not model.quantize and model.profile == "cpu" and model.backend == "sim"
    and M.BLOCK_ENCODINGS[M.layer_encoding(model) or ""]
  local activations = opts.activations or (gguf_blocks and "int8" or "float")
  if activations ~= "float" and activations ~= "int8" and activations ~= "int16" then
    error(string.format("activations must be 'float', 'int8' or 'int16', not %s", tostring(activations)), level + 1)
  end
  if activations ~= "float" and not model.quantized then
    error(string.format("activations = '%s' is for quantized weights: add quantize = 'int8' or 'int4' (or load a "
      .. "quantized checkpoint, or a GGUF file of Q8_0, Q4_0, Q4_K, Q5_K or Q6_K layers: the other types are dequantized at load)",
      activations), level + 1)
  end
  if activations == "int16" and M.BLOCK_ENCODINGS[model.quantize or M.layer_encoding(model)] then
    error(string.format("activations = 'int16' is for int8 and int4 weights; %s weights multiply float or int8 "
      .. "activations", model.quantize or M.layer_encoding(model)), level + 1)
  end
  if activations ~= "float" and model.profile ~= "cpu" then
    error(string.format("activations = '%s' runs in the cpu profile only (the device multiplies in fp16): add profile = "
      .. "'cpu'", activations), level + 1)
  end
  return activations
end

--- Whether any layer weight is a quantized one (a quantized checkpoint).
function M.holds_quantized(layers)
  for _, L in ipairs(layers) do
    for _, t in pairs(L) do
      if ane.quantized.is(t) then return true end
    end
  end
  return false
end

--- The encoding of a model's quantized layer weights ("int8", ..., "q4_0"), or nil for dense ones.
function M.layer_encoding(model)
  for _, L in ipairs(model.P.layers) do
    for _, t in pairs(L) do
      if ane.quantized.is(t) then return t:encoding() end
    end
  end
end

--- ", int8 weights (classifier int8)" for a model's description; "" for dense ones.
function M.quantization_label(model)
  if not model.quantized then return "" end
  local classifier = ane.quantized.is(model.P.classifier) and model.P.classifier:encoding() or "fp32"
  return string.format(", %s weights (classifier %s)%s", M.layer_encoding(model) or "dense", classifier,
    model.activations ~= "float" and ", " .. model.activations .. " activations" or "")
end

function M.refuse_quantized_training(model, level)
  error(string.format("%s holds quantized weights, which are for inference: train the dense checkpoint (or LoRA "
    .. "adapters on it) and quantize after", model.id), level + 1)
end

--- randn(shape, std) for random model weights: each call draws from its own seed derived
--- from `seed` and the call count, so a model's weights depend only on seed and order.
function M.seeded_randn(seed)
  local calls = 0
  return function(shape, std)
    calls = calls + 1
    return ane.tensor.randn(shape, { seed = seed * 1000 + calls, std = std })
  end
end

return M
