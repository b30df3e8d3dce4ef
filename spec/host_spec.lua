-- The anelua host: lua-compatible command line, the REPL (over a pipe; the terminal
-- session is shown in docs/repl.md), interrupts, backends, and the `ane` module loaded
-- from stock lua5.4 and from an installed tree.
local helpers = require("spec.helpers")
local lfs = require("lfs")

local run, q = helpers.run_anelua, helpers.quote

describe("anelua command line", function()
  local dir = helpers.tmpdir()

  it("prints its version with -v", function()
    local out, _, code = run("-v")
    assert.are.equal(0, code)
    assert.matches("^anelua %d+%.%d+%.%d+ %(Lua 5%.4", out)
  end)

  -- OpenBLAS takes a CPU model it does not know for a Prescott and runs SSE3 kernels (a
  -- quarter of sgemm's speed on this AVX-512 machine); the host starts again with the kernels
  -- the CPU has. /proc/cpuinfo is the independent witness of what the CPU has.
  -- the instruction set it reports is the one its binary was built for (readelf, the witness)
  it("reports the instruction set it was built for", function()
    local elf = helpers.run("readelf -h " .. q(helpers.build .. "/anelua"))
    local machine = elf:match("Machine:%s*([^\n]*)")
    local expected = machine:find("X86%-64") and "x86_64" or machine:find("AArch64") and "arm64" or "other"
    assert.are.equal(expected .. "\n", (run("-e " .. q("print(require('ane').capabilities().cpu)"))))
  end)

  it("runs OpenBLAS with kernels the CPU has, and keeps a choice the user made", function()
    local kernels = "-e " .. q("print(require('ane').capabilities().blas_kernels)")
    local cpuinfo = io.open("/proc/cpuinfo") and helpers.read_file("/proc/cpuinfo") or ""
    local flags = cpuinfo:match("\nflags%s*:%s*([^\n]*)") or ""
    local out, _, code = run(kernels, nil, "env -u OPENBLAS_CORETYPE")
    assert.are.equal(0, code)
    assert.matches("^%a[%w_]*\n$", out) -- a kernel set's name
    if flags:find("%f[%w]avx2%f[^%w]") and flags:find("%f[%w]fma%f[^%w]") then
      assert.are_not.equal("Prescott\n", out) -- generic kernels on a CPU with AVX2 and FMA
    end
    -- a kernel set OpenBLAS has for this instruction set (Debian builds it for many CPUs of each)
    local arm = run("-e " .. q("print(require('ane').capabilities().cpu)")) == "arm64\n"
    local chosen = arm and "NEOVERSEN1" or "Prescott"
    assert.are.equal((arm and "neoversen1" or chosen) .. "\n", run(kernels, nil, "OPENBLAS_CORETYPE=" .. chosen))
  end)

  -- Large tensors (32 MB and more) live in mappings of their own that ask for transparent huge
  -- pages; malloc's heap keeps small pages (a 2 MB page there is cleared whole for a few small
  -- blocks, which made start-up slower), and the host does not start again to change glibc's
  -- settings: the scripts (and what they start) see the environment the user gave. The
  -- witness is the kernel's own account of the process's mappings: the flag "hg"
  -- (MADV_HUGEPAGE) in /proc/self/smaps.
  it("asks for huge pages for large tensors, not on malloc's heap, and leaves the environment as it was", function()
    local mode = io.open("/sys/kernel/mm/transparent_hugepage/enabled")
    if not mode then
      pending("no transparent huge pages on this system (Linux only)")
      return
    end
    mode:close()
    local script = dir .. "/hugepages.lua"
    helpers.write_file(script, [[
      local small = require("ane").tensor({ 64 * 1024 }):fill(1) -- 256 KB: malloc's
      local large = require("ane").tensor({ 10 * 1024 * 1024 }):fill(1) -- 40 MB: a mapping of its own
      local flagged, heap_flagged, name = 0, false
      for line in io.open("/proc/self/smaps"):lines() do
        if line:match("^%x+%-%x+ ") then name = line:match("(%S+)$")
        elseif line:match("^VmFlags:") and line:find("%f[%w]hg%f[^%w]") then
          flagged = flagged + 1
          heap_flagged = heap_flagged or name == "[heap]"
        end
      end
      print(flagged > 0, heap_flagged, os.getenv("GLIBC_TUNABLES"), os.getenv("ANELUA_ADDED_ENV"), os.getenv("OPENBLAS_CORETYPE"))
    ]])
    local out, _, code = run(q(script), nil, "env -u GLIBC_TUNABLES -u OPENBLAS_CORETYPE")
    assert.are.equal(0, code)
    assert.are.equal("true\tfalse\tnil\tnil\tnil\n", out)
    -- a setting of the user's stands and is passed on unchanged
    out = run(q(script), nil, "env -u OPENBLAS_CORETYPE GLIBC_TUNABLES=glibc.malloc.tcache_count=8")
    assert.are.equal("true\tfalse\tglibc.malloc.tcache_count=8\tnil\tnil\n", out)
  end)

  it("runs -e statements and -l libraries in order", function()
    local out = run("-e " .. q("x = 1") .. " -l lfs -e " .. q("print(x, type(lfs))") .. " -l fs=lfs -e " .. q("print(fs == lfs)"))
    assert.are.equal("1\ttable\ntrue\n", out)
  end)

  it("passes script arguments in arg and ...", function()
    local script = dir .. "/args.lua"
    helpers.write_file(script, "#!/usr/bin/env anelua\nprint(arg[0], arg[1], arg[2], arg[-1], select('#', ...), ...)\n")
    local out, _, code = run("-e " .. q("x=1") .. " " .. q(script) .. " a b")
    assert.are.equal(0, code)
    assert.are.equal(script .. "\ta\tb\tx=1\t2\ta\tb\n", out)
    out = run("-- " .. q(script) .. " c")
    assert.are.equal(script .. "\tc\tnil\t--\t1\tc\n", out)
  end)

  it("runs a script from standard input with -", function()
    local out = run("- one", "print('stdin', ...)")
    assert.are.equal("stdin\tone\n", out)
    out = run("", "print('piped')") -- no tty: stdin runs as a script
    assert.are.equal("piped\n", out)
  end)

  it("honours LUA_PATH, LUA_INIT and -E", function()
    helpers.write_file(dir .. "/greeting.lua", "return 'hello from LUA_PATH'")
    local env = "LUA_PATH=" .. q(dir .. "/?.lua;;") .. " LUA_INIT=" .. q("init_ran = true")
    local out = run("-e " .. q("print(require('greeting'), init_ran)"), nil, env)
    assert.are.equal("hello from LUA_PATH\ttrue\n", out)
    local _, err, code = run("-E -e " .. q("print(init_ran) require('greeting')"), nil, env)
    assert.are_not.equal(0, code)
    assert.matches("module 'greeting' not found", err)
  end)

  it("finds the project's Lua libraries from any working directory", function()
    local out = helpers.run("cd / && " .. q(helpers.anelua) .. " -e " ..
      q("print(package.searchpath('ane.io', package.path))"))
    assert.matches("/lua/ane/io%.lua\n$", out)
  end)

  it("reports errors with a traceback and a failing exit status", function()
    local script = dir .. "/fails.lua"
    helpers.write_file(script, "local function inner() error('boom') end\ninner()\n")
    local out, err, code = run(q(script))
    assert.are.equal("", out)
    assert.are.equal(1, code)
    assert.matches("fails%.lua:1: boom", err)
    assert.matches("stack traceback:", err)
    assert.matches("in local 'inner'", err)
    -- mistakes in the options: status 2, as every script's
    for _, case in ipairs({ { "-x", "unrecognized option '%-x'\nusage: " }, { "--report", "'%-%-report' needs an argument" },
      { "--report r -e 1", "give %-%-probe too" } }) do
      _, err, code = run(case[1])
      assert.are.equal(2, code, case[1])
      assert.matches(case[2], err)
    end
    local out
    out, err, code = run("--version")
    assert.are.equal(0, code)
    assert.matches("^anelua %d+%.%d+%.%d+ %(Lua 5%.4", out)
    out, _, code = run("-h")
    assert.are.equal(0, code)
    assert.matches("Exit status: 0 done, 1 failed, 2 a mistake in the options, 130 stopped by Ctrl%-C", out)
  end)

  it("selects backends and refuses unavailable ones loudly", function()
    local out = run("--backend sim -e " .. q("print(require('ane').default_backend())"))
    assert.are.equal("sim\n", out)
    -- (an empty ANELUA_ANE_FRAMEWORK: the child never sees the test double of the ane matrix row)
    local _, err, code = run("--backend ane -e " .. q("print('ran')"), nil, "ANELUA_ANE_FRAMEWORK=")
    assert.are.equal(1, code)
    assert.matches("backend 'ane' is not available", err)
    _, err, code = run("--backend tpu -e 1") -- a name it does not know: a usage error
    assert.are.equal(2, code)
    assert.matches("unknown backend 'tpu'", err)
    out = run("-e " .. q("print(require('ane').default_backend())"), nil, "ANELUA_BACKEND=sim")
    assert.are.equal("sim\n", out)
  end)
end)

describe("anelua REPL", function()
  it("keeps its memory and history file bounded over thousands of lines in a terminal", function()
    -- scripts/repl_cycles.sh drives a real terminal (script(1)) with 5,000 lines that each
    -- compile, run and close a program; the program cache is full (256) and memory settled by
    -- line 1,000. Before the fix the in-memory history grew ~1.1 KB per line (4.4 MB over the
    -- last 4,000 here) and the history file was rewritten on every line; now RSS moves by
    -- about 1 MB of allocator noise (10,000 lines: 12 -> 13 MB). The script keeps malloc's heap
    -- on ordinary pages: khugepaged's collapses would add 2 MB steps whenever its scan comes round.
    local out, err, code = helpers.run(q(helpers.root .. "/scripts/repl_cycles.sh") .. " 5000")
    assert.are.equal(0, code, err)
    local early, last = out:match("cycles 1000 rss_mb (%d+)"), out:match("cycles 5000 rss_mb (%d+)")
    assert.is_not_nil(early, out .. err)
    assert.is_not_nil(last, out .. err)
    assert.is_true(tonumber(last) - tonumber(early) < 2.5, out)
    assert.matches("cycles 5000 rss_mb %d+ lua_kb %d+ cached 256", out)
    assert.is_true(tonumber(out:match("history_lines (%d+)")) <= 1100, out)
  end)

  it("prints expressions, continues statements and survives errors", function()
    local input = table.concat({
      "1 + 1",
      "function square(x)",
      "  return x * x",
      "end",
      "square(7)",
      "error('oops')",
      "ane.tensor.from({1, 2})",
      "'still here'",
    }, "\n") .. "\n"
    local out, err, code = run("-i", input)
    assert.are.equal(0, code)
    assert.matches("> 2\n", out)
    assert.matches(">> >> > 49\n", out) -- the continuation prompts of the function
    assert.matches("ane.tensor fp32 %[2%] { 1, 2 }", out)
    assert.matches("still here", out)
    assert.matches("stdin:1: oops\nstack traceback:", err)
  end)

  it("interrupts a running chunk with SIGINT and returns to the prompt", function()
    local input = "while true do end\nprint('after the interrupt')\n"
    local out, err, code = helpers.run("timeout -s INT --preserve-status 1 " .. q(helpers.anelua) .. " -i", input)
    assert.are.equal(0, code)
    assert.matches("interrupted!", err)
    assert.matches("after the interrupt", out)
  end)
end)

describe("interrupts", function()
  it("stop a long C loop, which polls the flag", function()
    -- randn of 2^28 values takes seconds; the signal comes after 0.5 s and the error
    -- comes from inside randn (the core's flag), not from a hook after it returned.
    local script = "local ane = require('ane'); local t = ane.tensor.randn({ 1 << 28 }); print('finished')"
    local out, err, code = helpers.run("timeout -s INT --preserve-status 0.5 " .. q(helpers.anelua) .. " -e " .. q(script))
    assert.are.equal("", out)
    assert.matches("interrupted during a random fill", err) -- (a hook after it returned says "interrupted!")
    assert.is_nil(err:find("traceback", 1, true)) -- the user's Ctrl-C is no fault
    assert.are.equal(130, code) -- as shells report SIGINT
  end)

  it("end a script whose graceful stop was not enough (a second Ctrl-C) with status 130, no traceback", function()
    local dir = helpers.tmpdir()
    helpers.write_file(dir .. "/loop.lua", "require('ane').set_graceful_interrupts(true)\n" ..
      "while true do local x = 0 for i = 1, 1e6 do x = x + i end end\n")
    local out, err, code = helpers.run("bash -c " .. q(q(helpers.anelua) .. " " .. q(dir .. "/loop.lua") ..
      " & pid=$!; sleep 0.5; kill -INT $pid; sleep 0.3; kill -INT $pid; wait $pid"))
    assert.are.equal("", out)
    assert.are.equal(130, code)
    assert.matches("interrupted!", err)
    assert.is_nil(err:find("traceback", 1, true))
  end)
end)

describe("the ane module outside the host", function()
  -- A sanitized ane.so cannot load into an unsanitized lua5.4 (the ASan runtime must come
  -- first), so these two run in normal builds only.
  local sanitized = os.getenv("ANELUA_SANITIZE") == "ON"

  -- #native: these two run the build with the host's own lua5.4 and C compiler, so a cross
  -- build's tests (the aarch64 row, under qemu-user) leave them out (busted --exclude-tags)
  it("loads in stock lua5.4 through package.cpath, with its Lua libraries #native", function()
    if sanitized then return pending("sanitizer build: stock lua5.4 cannot load an ASan module") end
    local script = "package.cpath = " .. string.format("%q", helpers.build .. "/?.so;") .. " .. package.cpath; " ..
        "local ane = require('ane'); print(ane.version, type(ane.io.load_safetensors), ane.tensor.from({ 3 }):get(1))"
    local out, err, code = helpers.run("cd / && lua5.4 -e " .. q(script))
    assert.are.equal(0, code, err)
    assert.matches("^%d+%.%d+%.%d+\tfunction\t3%.0\n$", out)
  end)

  it("works from an installed prefix: host, module, examples and scripts with their data, docs, libanecore #native", function()
    if sanitized then return pending("sanitizer build: stock lua5.4 cannot load an ASan module") end
    local prefix = helpers.tmpdir()
    local _, err, code = helpers.run("cmake --install " .. q(helpers.build) .. " --prefix " .. q(prefix))
    assert.are.equal(0, code, err)
    local out = helpers.run("cd / && " .. q(prefix .. "/bin/anelua") .. " -e " ..
      q("print(package.searchpath('ane.io', package.path)); print(require('ane').data_dir())"))
    assert.are.equal(prefix .. "/share/anelua/lua/ane/io.lua\n" .. prefix .. "/share/anelua/data\n", out)
    local script = "package.cpath = " .. string.format("%q", prefix .. "/lib/lua/5.4/?.so;") ..
        " .. package.cpath; print(type(require('ane').io))"
    out = helpers.run("cd / && lua5.4 -e " .. q(script))
    assert.are.equal("table\n", out)
    -- an installed example finds the installed tokenizer (from any working directory)
    local tokens = helpers.tmpdir()
    out, err, code = helpers.run("cd " .. q(tokens) .. " && " .. q(prefix .. "/bin/anelua") .. " " ..
      q(prefix .. "/share/anelua/examples/train_stories.lua") .. " --arch gpt2 --steps 2 --batch 1 --seq 16 --dim 16" ..
      " --layers 1 --heads 2 --ckpt-dir " .. q(tokens .. "/run"))
    assert.are.equal(0, code, err)
    assert.matches("vocab 50257", out) -- the shipped GPT-2 tokenizer's
    -- the installed gpt2.lua names the installed get_models.sh (it named a checkout's path)
    _, err = helpers.run("cd " .. q(tokens) .. " && " .. q(prefix .. "/bin/anelua") .. " " ..
      q(prefix .. "/share/anelua/examples/gpt2.lua") .. " --max-tokens 1")
    assert.is_truthy(err:find(prefix .. "/share/anelua/scripts/get_models.sh gpt2", 1, true), err)
    for _, file in ipairs({ "share/doc/anelua/README.md", "share/doc/anelua/api.md", "share/man/man1/anelua.1",
      "share/anelua/data/tokenizers/llama2/tokenizer.bin", "share/anelua/data/tokenizers/qwen3/tokenizer.json",
      "include/anelua/ane_core/runtime/program.h", "lib/libanecore.a", "share/doc/anelua/c-api.md",
      "share/anelua/scripts/pretokenize.lua", "share/anelua/scripts/plot.lua", "share/anelua/scripts/quantize.lua",
      "share/anelua/scripts/get_models.sh" }) do
      assert.is_truthy(lfs.attributes(prefix .. "/" .. file), file)
    end
    -- a C program against libanecore through its pkg-config file
    local source = tokens .. "/use_core.c"
    helpers.write_file(source, "#include <stdio.h>\n#include <ane_core/base/fp16.h>\n" ..
      "int main(void) { printf(\"%g\\n\", ane_fp16_to_fp32(ane_fp32_to_fp16(0.1f))); return 0; }\n")
    local pc = "PKG_CONFIG_PATH=" .. q(prefix .. "/lib/pkgconfig")
    out, err, code = helpers.run("cc " .. q(source) .. " -o " .. q(tokens .. "/use_core") ..
      " $(" .. pc .. " pkg-config --cflags --libs --static anecore) && " .. q(tokens .. "/use_core"))
    assert.are.equal(0, code, err)
    assert.are.equal("0.0999756\n", out) -- 0.1 rounded to fp16
    -- docs/c-api.md's example, as the page prints it
    local page = helpers.read_file(helpers.root .. "/docs/c-api.md")
    helpers.write_file(tokens .. "/linear.c", assert(page:match("```c\n(.-)```"), "no C block in docs/c-api.md"))
    out, err, code = helpers.run("cc " .. q(tokens .. "/linear.c") .. " -o " .. q(tokens .. "/linear") ..
      " $(" .. pc .. " pkg-config --cflags --libs --static anecore) && " .. q(tokens .. "/linear"))
    assert.are.equal(0, code, err)
    assert.matches("^y%[0, 3, 0, 5%] = %-?[%d.]+ %(by hand %-?[%d.]+%): agree\n$", out)
    os.execute("rm -rf " .. q(prefix) .. " " .. q(tokens))
  end)
end)
