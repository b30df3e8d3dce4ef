-- ane.cpu_kernels() (the kernel level in use) and ane.kernel_time() (what
-- scripts/bench/cpu_kernels.lua times). Witnesses: /proc/cpuinfo's flags for the level a Linux
-- x86-64 CPU reaches, ANELUA_CPU for the caps, and a product's rows for the timing.
local helpers = require("spec.helpers")
local ane = require("ane")

local run, q = helpers.run_anelua, helpers.quote

describe("ane.cpu_kernels", function()
  local print_level = "-e " .. q("print(require('ane').cpu_kernels())")

  it("names a level of the instruction set it was built for, as far as the CPU goes", function()
    local level = ane.cpu_kernels()
    if ane.capabilities().cpu == "arm64" then
      assert.is_truthy(level == "neon" or level == "neon-dotprod", level)
    elseif ane.capabilities().cpu == "x86_64" then
      assert.matches("^avx[%w%-]*$", level)
      local cpuinfo = io.open("/proc/cpuinfo") and helpers.read_file("/proc/cpuinfo") or ""
      local flags = " " .. (cpuinfo:match("\nflags%s*:%s*([^\n]*)") or "") .. " "
      if os.getenv("ANELUA_CPU") == nil and not os.getenv("ANELUA_TEST_EMULATOR") then
        local avx512 = flags:find(" avx512f ") ~= nil
        assert.are.equal(avx512, level:find("^avx512") ~= nil, "AVX-512F in /proc/cpuinfo: " .. tostring(avx512))
        if not avx512 and flags:find(" avx2 ") and flags:find(" fma ") and flags:find(" f16c ") then
          assert.are.equal("avx2", level)
        end
      end
    end
  end)

  it("is capped by ANELUA_CPU, and scalar turns every vector level off", function()
    assert.are.equal("scalar\n", (run(print_level, nil, "ANELUA_CPU=scalar")))
    local capped = run(print_level, nil, "ANELUA_CPU=" .. (ane.capabilities().cpu == "arm64" and "neon" or "avx2"))
    assert.matches("^[%w]+\n$", capped) -- one level, without the dot products or AVX-512's extensions
    assert.is_nil(capped:find("dotprod") or capped:find("avx512"))
  end)
end)

describe("ane.kernel_time", function()
  it("times a kernel and its library counterpart in seconds per call", function()
    local ours = ane.kernel_time("gemv_fp16", { rows = 64, k = 256, calls = 3 })
    local theirs = ane.kernel_time("sgemv", { rows = 64, k = 256, calls = 3 })
    assert.is_true(ours > 0 and ours < 1, tostring(ours))
    assert.is_true(theirs > 0 and theirs < 1, tostring(theirs))
    for _, name in ipairs({ "gemv_fp32", "gemv_int8", "gemv_int4", "gemm_fp16", "sgemm", "exp", "tanh", "sigmoid", "silu",
      "sum", "max", "adamw" }) do
      assert.is_number(ane.kernel_time(name, { rows = 8, k = 64, n = 100, columns = 3, calls = 1 }), name)
    end
  end)

  it("says which counterparts are Accelerate's where there is none", function()
    local seconds, why = ane.kernel_time("vvexpf", { n = 64, calls = 1 })
    if ane.capabilities().blas_kernels == "Accelerate" then
      assert.is_number(seconds)
    else
      assert.is_nil(seconds)
      assert.matches("vvexpf is Accelerate's %(macOS only%)", why)
    end
  end)

  it("refuses an unknown kernel and a count below one, naming them", function()
    assert.has_error(function() ane.kernel_time("gemv_fp64") end, "ane.kernel_time: unknown kernel 'gemv_fp64'")
    assert.has_error(function() ane.kernel_time("exp", { calls = 0 }) end, "ane.kernel_time: calls must be at least 1")
    assert.has_error(function() ane.kernel_time("gemm_fp16", { columns = 17 }) end,
      "ane.kernel_time: columns must be at most 16")
  end)
end)
