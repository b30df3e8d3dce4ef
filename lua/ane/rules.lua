-- ane.rules: the ANE constraint catalogue by ID, as the validator, sim and the REPL cite it.
-- Each rule: what the device does, what breaks, the workaround, and what anelua does about it
-- (reject, emulate, model or warn). `status` marks the rules sources disagree on, which a
-- probe on the user's chip must settle.
--
--   local rules = require("ane.rules")
--   rules.get("ANE-21").rule, rules.list()   -- (ane.rule(id) in the REPL prints one)
local M = {}

local CATALOGUE = {
  { "ANE-01", "concat is rejected by the device compiler", "compile failure",
    "separate programs, or pack on the CPU and slice_by_index", "rejected at validation", "disputed" },
  { "ANE-02", "the output buffers of one program share one allocation size", "eval error 0x1d",
    "pad every output surface to the largest", "rejected at eval" },
  { "ANE-03", "outputs bind to buffers in the alphabetical order of their MIL names", "silently wrong data",
    "bind by name", "emulated: ports are sorted" },
  { "ANE-04", "every I/O surface allocation holds at least ~49,152 bytes", "eval error 0x1d",
    "pad (e.g. a sequence of 16 at 768 fp32 channels)", "rejected at eval" },
  { "ANE-05", "about 119 compiles per process, then silent failures", "silent failure or crash",
    "cache programs, patch weights, checkpoint and restart the process", "modelled: a per-process compile budget" },
  { "ANE-06", "scaled_dot_product_attention ignores its attn_mask (newer reports: honoured for causal masks up to "
    .. "2,048 positions)", "silently unmasked attention", "decompose attention with an additive mask",
    "warned at validation", "disputed" },
  { "ANE-07", "weights are baked into the compiled program", "stale outputs after overwriting weight files",
    "the patch path, or weights as inputs", "emulated: only prog:patch changes a program's weights" },
  { "ANE-08", "a BLOBFILE offset points at the blob's 64-byte metadata record", "garbage weights",
    "write offsets as the MILBlob format says", "rejected when the offset is not a record" },
  { "ANE-09", "MIL text goes to the framework as bytes, not a string object", "crash", "pass UTF-8 bytes",
    "the ane backend only" },
  { "ANE-10", "gelu is not an op (Orion; ANEForge runs gelu on M1-M5)", "compile failure",
    "the tanh form (ane.nn.gelu), or a target whose probe report accepted gelu",
    "the cpu profile runs gelu; the ane profile refuses it unless the target accepted it", "disputed" },
  { "ANE-11", "the weights dictionary is an empty dictionary, never nil", "crash", "pass {}", "the ane backend only" },
  { "ANE-12", "matmul's transpose flags are named bool consts (Orion; ANEForge writes inline literals)",
    "compile rejection", "emit bool consts", "the emitter writes named consts; the parser reads both forms", "disputed" },
  { "ANE-13", "conv takes no bias", "compile rejection", "a separate add", "rejected" },
  { "ANE-14", "the return tuple names live nodes", "InvalidMILProgram", "emit the names after optimization",
    "rejected" },
  { "ANE-15", "an exec() restart costs ~50 ms", "latency", "batch steps per process", "modelled in stats" },
  { "ANE-16", "very wide convs (e.g. 32,000 input channels) are rejected", "compile failure",
    "the classifier on the CPU, or split it", "rejected above 16,384 channels (configurable)" },
  { "ANE-17", "a 1x1 conv runs ~3x faster than the same matmul", "performance", "linear layers as 1x1 convs",
    "modelled" },
  { "ANE-18", "the input buffers share one allocation size (one report: ascending sizes)", "eval error 0x1d or zeros",
    "allocate every input at the largest size", "rejected at eval", "disputed" },
  { "ANE-19", "inputs bind in the alphabetical order of their parameter names", "silently wrong data",
    "bind by name", "emulated: ports are sorted" },
  { "ANE-20", "I/O buffers hold the declared shape packed as [1, C, 1, S]; other rank-4 I/O is accepted",
    "silently wrong data", "write packed data at the start of the surface",
    "emulated: [1, C, 1, S] in channel rows, other rank-4 shapes packed; other ranks rejected" },
  { "ANE-21", "the I/O width (last axis) is a multiple of 32 and at least 32; rows sit at a 64-byte stride "
    .. "(one report ran width 16)", "silently wrong data or dispatch failure", "pad the last axis",
    "emulated: the 64-byte row stride; narrower than 32 warned, below a target's measured minimum rejected", "disputed" },
  { "ANE-22", "shapes are static", "InvalidMILProgram", "one program per shape bucket", "rejected: '?' dims" },
  { "ANE-23", "conv kernels are at most 15 wide (13 on M1)", "compile failure", "split the kernel", "rejected" },
  { "ANE-24", "state ops, scatter and slice_update are unsupported", "compile failure",
    "the KV cache in CPU-written input surfaces", "rejected" },
  { "ANE-25", "gather is unsupported", "compile failure", "embeddings and sampling on the CPU", "rejected on the device" },
  { "ANE-26", "compute is fp16 only (fp32 only at I/O, cast at once; no bf16)", "compile failure",
    "cast at the boundary; convert bf16 checkpoints", "rejected; sim rounds every op to fp16" },
  { "ANE-27", "~32 MB of on-chip SRAM; larger working sets run ~30% slower", "performance cliff",
    "tile or split programs", "warned (SRAM annotation)" },
  { "ANE-28", "a purely elementwise program may be refused", "compile failure", "fuse it into a neighbour with a "
    .. "conv or matmul", "warned" },
  { "ANE-29", "reduce_mean compiles but fails at dispatch on some chips", "eval failure", "reduce_sum times 1/N",
    "warned" },
  { "ANE-30", "softmax over an axis that is not a power of two fails on some chips", "InvalidMILProgram",
    "pad the axis with a large negative mask", "warned" },
  { "ANE-31", "the width (last) axis and a matmul's contraction are at most 16,384 long on M1-M3, 65,536 on M4/M5",
    "compile failure", "split the axis", "rejected above the target's limit (generic: 16,384)", "chip-dependent" },
  { "ANE-32", "one program holds about 2 GB of baked weights (1.5 GB compiles, 3.4 GB fails)", "compile failure",
    "split the layers over several programs", "rejected above the target's limit (2 GiB), warned above 3/4 of it" },
  { "ANE-33", "the M1 and M2 compilers reject cast", "compile failure", "fp16 program inputs and outputs",
    "rejected on targets m1 and m2, warned elsewhere", "chip-dependent" },
}

local by_id = {}
for i, row in ipairs(CATALOGUE) do
  local rule = { id = row[1], rule = row[2], symptom = row[3], workaround = row[4], anelua = row[5],
    status = row[6] or "agreed" }
  CATALOGUE[i], by_id[rule.id] = rule, rule
end

--- The rule with this ID ("ANE-21", or 21), or nil.
function M.get(id)
  if math.type(id) == "integer" then id = string.format("ANE-%02d", id) end
  return by_id[id]
end

local Rule = { __tostring = function(rule)
  return string.format("%s (%s): %s\n  symptom     %s\n  workaround  %s\n  anelua      %s", rule.id, rule.status,
    rule.rule, rule.symptom, rule.workaround, rule.anelua)
end }
for _, rule in ipairs(CATALOGUE) do setmetatable(rule, Rule) end

--- ane.rule(id): the rule (it prints as its description), or an error naming the IDs there are.
function M.describe(id)
  local rule = M.get(id)
  if not rule then error(string.format("no rule %s (the catalogue has ANE-01 .. ANE-%02d)", tostring(id), #CATALOGUE), 2) end
  return rule
end

--- Every rule, in ID order.
function M.list() return CATALOGUE end

return M
