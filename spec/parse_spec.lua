-- mil/parse.c through ane.compile_mil: parse(emit(g)) evaluates like g for every golden
-- program, errors cite line:column with the line and a caret, BLOBFILE references are
-- checked against the weight file (ANE-08), and the dialect's variants parse.
local ane = require("ane")
local graphs = require("spec.golden_graphs")

describe("MIL parsing", function()
  it("reproduces every golden program's semantics: parse(emit(g)) evaluates bit-identically", function()
    for _, name in ipairs(graphs.names) do
      local g = graphs[name]()
      local text, weights = g:mil()
      local parsed = assert(ane.graph.parse(text, weights))
      assert.are.equal(text, (parsed:mil())) -- and re-emits the same bytes
      local direct = ane.compile(g, { profile = "cpu" })
      local via_text = ane.compile_mil(text, weights, { profile = "cpu" })
      local feed = {}
      for i, port in ipairs(direct:inputs()) do feed[port.name] = ane.tensor.randn(port.shape, { seed = i, std = 0.5 }) end
      local a, b = direct:eval(feed), via_text:eval(feed)
      for key, value in pairs(a) do assert.are.equal(value:bytes(), b[key]:bytes(), name) end
    end
  end)

  it("reports errors at line:column with the line and a caret", function()
    local text = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 32]> x) {\n" ..
        "        tensor<fp16, [1, 4, 1, 32]> y = relu(x = x)[name = string(\"y\")]\n    } -> (y);\n}\n"
    local ok, err = ane.graph.parse(text)
    assert.is_nil(ok)
    assert.are.equal("<mil>:5:5: expected ';' at the end of the statement, found '}'\n" ..
      "        } -> (y);\n" ..
      "        ^", err)
    local cases = {
      { "tensor<fp16, [1, 4, 1, 32]> y = conv(x = x, weight = w, bias = b)", "conv takes no bias %(ANE%-13%)" },
      { "tensor<fp16, [1, 4, 1, 32]> y = relu(x = nope)", "'nope' is not defined" },
      { "tensor<fp16, [1, 4, 1, 64]> y = relu(x = x)", "'y' is declared tensor<fp16, %[1, 4, 1, 64%]> but relu gives fp16%[1, 4, 1, 32%]" },
      { "tensor<fp16, [1, 4, 1, 32]> y = gelu(x = x, mode = string(\"ERF\"))",
        "gelu mode 'ERF' is not EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION" },
      { "tensor<fp16, [1, 4, 1, 32]> y = write_state(x = x)", "ANE%-24" },
      { "tensor<fp16, [1, 4, 1, 32]> y = relu(x = x, alpha = x)", "relu has no parameter 'alpha'" },
      { "tensor<fp16, [4]> c = const()[name = string(\"c\"), val = tensor<fp16, [4]>(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), offset = uint64(64)))]",
        "weight file '@model_path/weights/weight.bin' was not given" },
    }
    for _, case in ipairs(cases) do
      local program = "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 4, 1, 32]> x) {\n        " .. case[1] ..
          ";\n    } -> (x);\n}\n"
      local parsed, message = ane.graph.parse(program)
      assert.is_nil(parsed, case[2])
      assert.matches("^<mil>:4:%d+: .*" .. case[2], message)
      assert.matches("\n    %s+ *%^$", message)
    end
    local _, dead = ane.graph.parse("program(1.3) { func main(tensor<fp16, [1, 4, 1, 32]> x) { } -> (ghost); }")
    assert.matches("returned name 'ghost' is not a live node of the function %(ANE%-14%)", dead)
  end)

  -- ANE-12 is disputed (Orion saw inline literals refused, ANEForge writes them): the parser reads
  -- both forms, and what reaches the device is the emitter's text, whose flags are named consts.
  it("reads matmul's flags as inline literals as it reads named consts, and emits named consts", function()
    local function program(flags)
      return "program(1.3)\n{\n    func main<ios18>(tensor<fp16, [1, 1, 8, 16]> a, tensor<fp16, [1, 1, 4, 16]> b) {\n"
        .. flags .. "        tensor<fp16, [1, 1, 8, 4]> y = matmul(x = a, y = b, transpose_x = tx, transpose_y = ty)"
        .. "[name = string(\"y\")];\n    } -> (y);\n}\n"
    end
    local named = program("        bool tx = const()[name = string(\"tx\"), val = bool(false)];\n"
      .. "        bool ty = const()[name = string(\"ty\"), val = bool(true)];\n")
    local inline = program(""):gsub("transpose_x = tx, transpose_y = ty", "transpose_x = bool(false), transpose_y = bool(true)")
    local feed = { a = ane.tensor.randn({ 1, 1, 8, 16 }, { seed = 3 }):to("fp16"),
      b = ane.tensor.randn({ 1, 1, 4, 16 }, { seed = 4 }):to("fp16") }
    local want = ane.compile_mil(named, {}, { profile = "cpu" }):eval(feed).y
    for _, profile in ipairs({ "cpu", "ane" }) do
      local got = ane.compile_mil(inline, {}, { profile = profile }):eval(feed).y
      assert.are.equal(want:to("fp32"):bytes(), got:to("fp32"):bytes(), profile)
    end
    -- b^T: y[i][j] = sum_k a[i][k] b[j][k], checked on one element against the inputs
    local a, b, y = feed.a:to("fp32"), feed.b:to("fp32"), want:to("fp32")
    local sum = 0
    for k = 1, 16 do sum = sum + a:get(1, 1, 2, k) * b:get(1, 1, 3, k) end
    assert.is_true(math.abs(y:get(1, 1, 2, 3) - sum) <= 2e-3 * (1 + math.abs(sum)), y:get(1, 1, 2, 3) .. " vs " .. sum)
    local reparsed = assert(ane.graph.parse(inline))
    assert.matches("transpose_x = [%a_][%w_]*,", (reparsed:mil()))
  end)

  it("checks BLOBFILE references against the weight file (ANE-08)", function()
    local g = graphs.linear()
    local text, weights = g:mil()
    local bad = text:gsub("offset = uint64%(64%)", "offset = uint64(128)")
    local _, err = ane.graph.parse(bad, weights)
    assert.matches("record at offset 128: sentinel is 0x[%x]+, not 0xDEADBEEF %(ANE%-08%)", err)
  end)

  it("accepts the dialect's variants: comments, inline consts, several functions, hex floats", function()
    local text = [[
program(1.3)
[buildInfo = dict<string, string>({{"coremlc-version", "3505.4.1"}})]
{
    // a helper function, parsed and set aside
    func helper<ios18>(tensor<fp16, [1, 4, 1, 32]> x) {
        tensor<fp16, [1, 4, 1, 32]> y = relu(x = x)[name = string("y")];
    } -> (y);
    func main<ios18>(tensor<fp16, [1, 4, 1, 32]> x) {
        fp16 half = const()[name = string("half"), val = fp16(0x1p-1)];  /* 0.5 */
        tensor<fp16, [1, 4, 1, 32]> scaled = mul(x = x, y = half)[name = string("scaled")];
        tensor<fp16, [1, 4, 1, 32]> y = add(x = scaled, y = fp16(-0x1.8p+1))[name = string("y")];
    } -> (y);
}
]]
    local program = ane.compile_mil(text, {}, { profile = "cpu" })
    local x = ane.tensor.from({ 2, 4, 6, 8 }, { 1, 4, 1, 1 }):reshape(1, 4, 1, 1)
    local full = ane.tensor({ 1, 4, 1, 32 })
    full:slice(4, 1, 1):copy_from(x)
    local y = program:eval({ x = full }).y
    assert.are.same({ -2, -1, 0, 1 }, { y:get(1, 1, 1, 1), y:get(1, 2, 1, 1), y:get(1, 3, 1, 1), y:get(1, 4, 1, 1) })
    local helper = assert(ane.graph.parse(text, {}, { ["function"] = "helper" }))
    assert.are.equal("helper", helper:name())
  end)
end)
