-- LuaRocks: builds anelua with CMake (the host, the `ane` module, libanecore) and installs
-- the module where Lua 5.4 finds it, plus the Lua libraries, examples, data and docs.
rockspec_format = "3.0"
package = "anelua"
version = "0.1.0-1"
source = { url = "git+file:///dev/null", tag = "v0.1.0" } -- replace with the repository's URL when published
description = {
  summary = "Program Apple's Neural Engine from Lua: graphs, MIL, a CPU simulator, models, training",
  detailed = [[
A plain-C11 core (graph IR, compiler passes, MIL emitter and parser, MILBlob weights, the
sim backend with the ANE's fp16 numerics and constraint catalogue, the runtime) wrapped as
the Lua 5.4 module `ane`, with models (GPT-2, Llama-2/Stories, Qwen3), tokenizers, optimizers,
training with checkpoints and LoRA written in Lua.]],
  license = "MIT",
}
dependencies = { "lua == 5.4", "luafilesystem", "lua-cjson" }
external_dependencies = {
  platforms = {
    linux = { OPENBLAS = { header = "cblas.h" }, PCRE2 = { header = "pcre2.h" }, UTF8PROC = { header = "utf8proc.h" } },
    macosx = { PCRE2 = { header = "pcre2.h" }, UTF8PROC = { header = "utf8proc.h" } },
  },
}
build = {
  type = "cmake",
  variables = {
    CMAKE_BUILD_TYPE = "Release",
    CMAKE_INSTALL_PREFIX = "$(PREFIX)",
    CMAKE_INSTALL_LIBDIR = "lib",
  },
}
