/* libFuzzer harness for the readers of user files written in Lua or reached through the
 * `ane` module: each input is written to a file and handed to the reader FUZZ_READER names
 * (spec/fuzz/readers.lua lists them: safetensors, llama2c, llmc, shard, sentencepiece,
 * tokenizer_json, vocab_merges, tokenizer_bin, checkpoint, hf_config, llama_config, gpt2_config,
 * probe_report, checkpoint_metadata). A reader must answer any bytes
 * with a value or nil and a message: a Lua error (a traceback for the user's mistake) is a
 * finding, and so is a crash, a sanitizer report, a hang (libFuzzer's -timeout) or a leak.
 * Lua lines executed are coverage too (count_line). Built by scripts/fuzz.sh (clang,
 * -fsanitize=fuzzer,address,undefined). */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../bindings/ane_lua.h"

static lua_State *L;
static char path[256];
static int reader_ref = LUA_NOREF;

/* Coverage of the Lua code for libFuzzer: the readers are Lua, which the compiler's
 * instrumentation does not see, so a line hook counts each pair of consecutive lines run
 * (an edge, as AFL counts branches) into libFuzzer's extra counters. Without it the fuzzer
 * is blind inside pure-Lua readers. The hook takes the line the event carries and asks Lua
 * for nothing more (lua_getinfo per line was half the run time); lines of different files
 * may share a counter, which only blurs the signal a little. The hook itself is not
 * instrumented: it is the harness, not the code under test. */
#define LUA_LINE_COUNTERS 16384 /* libFuzzer scans every counter after every input */
__attribute__((used, section("__libfuzzer_extra_counters"))) static uint8_t lua_lines[LUA_LINE_COUNTERS];
static uint32_t previous_line;

__attribute__((no_sanitize("coverage", "address", "undefined"))) static void count_line(lua_State *state, lua_Debug *ar) {
    (void)state;
    uint32_t line = (uint32_t)ar->currentline * 2654435761u; /* spread the line numbers */
    lua_lines[(line ^ previous_line) % LUA_LINE_COUNTERS]++;
    previous_line = line >> 1;
}

static void fail_setup(const char *what) {
    fprintf(stderr, "fuzz_lua_reader: %s: %s\n", what, L ? lua_tostring(L, -1) : "no Lua state");
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *reader = getenv("FUZZ_READER");
    if (!reader) {
        fprintf(stderr, "fuzz_lua_reader: set FUZZ_READER (see spec/fuzz/readers.lua)\n");
        abort();
    }
    /* in memory where the machine has it: writing each input to a disk-backed /tmp made the
     * kernel half of the run time */
    const char *dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, sizeof path, "%s/fuzz_lua_reader_%d", dir, (int)getpid());
    L = luaL_newstate();
    luaL_openlibs(L);
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_ane);
    lua_setfield(L, -2, "ane");
    lua_pop(L, 1);
    const char *root = getenv("FUZZ_ROOT") ? getenv("FUZZ_ROOT") : ".";
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/lua/?.lua;%s/lua/?/init.lua;%s/?.lua", root, root, root);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    char script[512];
    snprintf(script, sizeof script, "%s/spec/fuzz/readers.lua", root);
    if (luaL_dofile(L, script) != LUA_OK) fail_setup(script);
    lua_getfield(L, -1, reader);
    if (!lua_isfunction(L, -1)) {
        fprintf(stderr, "fuzz_lua_reader: no reader '%s' in %s\n", reader, script);
        abort();
    }
    reader_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    lua_pop(L, 1);
    lua_sethook(L, count_line, LUA_MASKLINE, 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
    previous_line = 0;
    lua_rawgeti(L, LUA_REGISTRYINDEX, reader_ref);
    lua_pushstring(L, path);
    if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
        /* readers.lua turns the reader's own error into "reader raised: ..." */
        fprintf(stderr, "fuzz_lua_reader: %s\n", lua_tostring(L, -1));
        abort();
    }
    lua_settop(L, 0);
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
