-- LuaRocks: builds anelua with CMake (the host and the `ane` module) and installs the module
-- and the host where the tree finds them, the Lua libraries, examples, scripts, data and docs
-- in the rock's own directory (the module finds them there: its build records the path).
--   luarocks --lua-version 5.4 make anelua-0.1.0-1.rockspec
-- The CMake build runs in the rock's directory and is removed after the install, so the
-- checkout stays clean. CI builds and runs it (.ci/run, the luarocks row).
rockspec_format = "3.0"
package = "anelua"
version = "0.1.0-1"
source = { url = "git+file:///dev/null", tag = "v0.1.0" } -- replace with the repository's URL when published
description = {
  summary = "Program Apple's Neural Engine from Lua: graphs, MIL, a CPU simulator, models, training",
  detailed = [[
A plain-C core (graph IR, compiler passes, MIL emitter and parser, MILBlob weights, the sim
backend with the ANE's fp16 numerics and constraint catalogue, the runtime) wrapped as the Lua
5.4 module `ane`, with models (GPT-2, Llama 2/3.x, SmolLM2, Mistral, Phi-3, Qwen2, Qwen3),
tokenizers, optimizers, training with checkpoints and LoRA written in Lua.]],
  license = "MIT",
}
dependencies = { "lua == 5.4", "luafilesystem", "lua-cjson" }
-- (BLAS, PCRE2 and utf8proc are found by CMake through pkg-config, which knows Debian's
-- multiarch include directories; LuaRocks' header search does not.)
build = {
  type = "command",
  build_command = [[cmake -S . -B "$(PREFIX)/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$(PREFIX)" ]]
    .. [[-DANELUA_LUA_CMOD_DIR="$(LIBDIR)" -DCMAKE_INSTALL_BINDIR="$(BINDIR)" -DANELUA_INSTALL_C_LIBRARY=OFF ]]
    .. [[-DANELUA_ANE_DOUBLE=OFF && cmake --build "$(PREFIX)/build" --target anelua ane_module -j 4]],
  install_command = [[cmake --install "$(PREFIX)/build" && rm -rf "$(PREFIX)/build"]],
}
