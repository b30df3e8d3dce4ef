-- ane.models.lora: low-rank adapters on the q and v projections of a transformer model
-- (ane.models.transformer): the adapters are inputs of the attention programs, so the base
-- weights stay frozen and adapters train and swap with no compile and no patch. The
-- methods here are mixed into every model; the attention programs call M.delta.
local ane = require("ane")
local nn = require("ane.nn")

local M = { methods = {} }
local Methods = M.methods

-- The adapters' program inputs, per layer.
M.INPUTS = { "lora_a_q", "lora_b_q", "lora_a_v", "lora_b_v" }

-- The output rows of projection `which`: q's heads, or v's kv heads.
local function projection_width(model, which)
  return which == "q" and model.arch.n_head * model.arch.head_dim or model.cache_width
end

--- The LoRA delta of projection `which` ("q" or "v") of h [1, dim, 1, S]: nn.lora_delta with
--- A [1, rank, 1, dim] and B^T [1, rank, 1, width] as the inputs lora_a_<which>, lora_b_<which>.
function M.delta(model, g, h, which)
  local rank, width = model.lora.rank, projection_width(model, which)
  local a = g:input("lora_a_" .. which, { 1, rank, 1, model.width }, model.dtype)
  local b_t = g:input("lora_b_" .. which, { 1, rank, 1, width }, model.dtype)
  return nn.lora_delta(g, h, a, b_t, width, model.lora.alpha, { name = "lora_" .. which })
end

--- Adapters on q and v (separate projections only). lora: rank, alpha (default rank), seed.
--- A starts normal(0, 1/sqrt(dim)), B at zero, so the model starts unchanged.
function Methods:enable_lora(lora)
  if next(self.programs) then error("enable_lora: must come before the first program is compiled", 2) end
  if self.arch.qkv == "fused" then error("enable_lora: adapters go on separate q and v projections; this model fuses qkv", 2) end
  local dim = self.width
  local rank = math.tointeger(lora.rank)
  if not rank or rank < 1 or rank > dim then error("enable_lora: rank must be an integer in 1.." .. dim, 2) end
  self.lora = { rank = rank, alpha = lora.alpha or rank }
  self.adapters = {}
  local n, seed = 0, lora.seed or 1
  for l = 0, self.n_layer - 1 do
    for _, which in ipairs({ "q", "v" }) do
      n = n + 1
      self.adapters["lora_a_" .. which .. "." .. l] = ane.tensor.randn({ 1, rank, 1, dim },
        { seed = seed * 1000 + n, std = 1 / math.sqrt(dim) })
      self.adapters["lora_b_" .. which .. "." .. l] = ane.tensor({ 1, rank, 1, projection_width(self, which) })
    end
  end
end

--- Writes the adapters (fp32, names lora_a_q.0 ...; B stored transposed, [rank, dim]) with
--- rank and alpha in the metadata, atomically.
function Methods:save_adapters(path)
  if not self.lora then error("save_adapters: LoRA is not enabled on this model", 2) end
  local tensors = {}
  for name, t in pairs(self.adapters) do tensors[name] = t:reshape(self.lora.rank, t:numel() // self.lora.rank) end
  return ane.io.save_safetensors(path, tensors, { format = "anelua-lora-1", rank = tostring(self.lora.rank),
    alpha = tostring(self.lora.alpha) })
end

--- Replaces the adapters by those of a file (same rank); takes effect at the next eval, with
--- no compile. Returns true or nil, message.
function Methods:load_adapters(path)
  if not self.lora then error("load_adapters: LoRA is not enabled on this model", 2) end
  local tensors, metadata = ane.io.load_safetensors(path)
  if not tensors then return nil, metadata end
  if metadata.format ~= "anelua-lora-1" then return nil, path .. ": not an anelua LoRA file" end
  if tonumber(metadata.rank) ~= self.lora.rank then
    return nil, string.format("%s: adapters of rank %s, the model uses rank %d", path, tostring(metadata.rank), self.lora.rank)
  end
  for name, t in pairs(self.adapters) do
    local saved = tensors[name]
    if not saved then return nil, path .. ": no tensor '" .. name .. "'" end
    if saved:numel() ~= t:numel() then return nil, string.format("%s: '%s' has %d elements, expected %d", path, name, saved:numel(), t:numel()) end
  end
  if tonumber(metadata.alpha) ~= self.lora.alpha then -- alpha / rank is a const of the compiled programs
    return nil, string.format("%s: adapters trained with alpha %s, the model uses alpha %s", path, tostring(metadata.alpha),
      tostring(self.lora.alpha))
  end
  for name, t in pairs(self.adapters) do t:copy_from(tensors[name]:to("fp32"):reshape(table.unpack(t:shape()))) end
  return true
end

return M
