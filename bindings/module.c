/* luaopen_ane: the `ane` module table, the default backend, error conversion, the
 * project's Lua library path, and the Lua-implemented parts (ane.io) loaded on first use. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef __APPLE__
#include <mach-o/dyld.h>
#endif

#include "../ane_core/backend/backend.h"
#include "../ane_core/base/fp16.h"
#include "../ane_core/runtime/program.h"
#include "../ane_core/base/hash.h"
#include "../ane_core/base/interrupt.h"
#include "../ane_core/tensor/blas.h"
#include "../ane_core/tensor/intern.h"
#include "../ane_core/tensor/storage.h"
#include "ane_lua.h"

/* ------------------------------------------------------------------ errors */

int ane_lua_raise(lua_State *L, const ane_error *err) {
    if (err->status == ANE_ERR_INTERRUPTED) {
        /* The host's SIGINT handler also armed a hook to stop Lua code; this error already
         * reports the interruption, so disarm it (else it fires in the message handler). */
        ane_interrupt_clear();
        lua_sethook(L, NULL, 0, 0);
    }
    return luaL_error(L, "%s", err->message);
}

int ane_lua_fail(lua_State *L, const ane_error *err) {
    if (!ane_status_is_environmental(err->status)) return ane_lua_raise(L, err);
    lua_pushnil(L);
    lua_pushstring(L, err->message);
    return 2;
}

/* ------------------------------------------------------------------ backends */

/* The backends this build knows, all from the core's registry (ane_backend_at): whether each
 * is usable here and, if not, why. Selecting an unusable one is an error, never a silent
 * fallback. */

static int backend_usable(const char *name, char *why, size_t size) {
    const ane_backend *backend = ane_backend_find(name);
    return backend && backend->available(why, size);
}

static const char *default_backend = NULL;

/* Applies ANELUA_BACKEND (when set and not empty). Returns -1 with the reason, naming the
 * variable, when it names a backend that is unknown or unavailable: never a fallback. */
int ane_lua_backend_from_environment(char *message, size_t size) {
    const char *from_env = getenv("ANELUA_BACKEND");
    if (!from_env || !*from_env) return 0;
    char why[ANE_ERROR_MESSAGE_MAX];
    if (ane_lua_set_default_backend(from_env, why, sizeof why) == 0) return 0;
    snprintf(message, size, "ANELUA_BACKEND=%.40s: %s", from_env, why); /* (callers give ANE_ERROR_MESSAGE_MAX + 64) */
    return -1;
}

const char *ane_lua_default_backend(void) {
    if (!default_backend) {
        char message[ANE_ERROR_MESSAGE_MAX + 64];
        default_backend = "sim";
        (void)ane_lua_backend_from_environment(message, sizeof message); /* checked at load */
    }
    return default_backend;
}

int ane_lua_set_default_backend(const char *name, char *message, size_t size) {
    if (!ane_backend_find(name)) {
        char known[128] = "";
        for (int i = 0; ane_backend_at(i); i++)
            snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", i ? ", " : "", ane_backend_at(i)->name);
        snprintf(message, size, "unknown backend '%s' (known: %s)", name, known);
        return -2;
    }
    char why[ANE_ERROR_MESSAGE_MAX];
    if (!backend_usable(name, why, sizeof why)) {
        snprintf(message, size, "backend '%s' is not available: %s", name, why);
        return -1;
    }
    default_backend = ane_backend_find(name)->name;
    return 0;
}

/* The CPU path (profile 'cpu') and the fp32 reference are sim's by definition; every other
 * program goes to the default backend. Only programs that name no backend get here. */
const char *ane_lua_backend_for(const ane_compile_options *options) {
    if (options->profile == ANE_PROFILE_CPU || options->precision == ANE_PRECISION_FP32) return "sim";
    return ane_lua_default_backend();
}

/* ane.backend_for{precision =, profile =} -> the backend a program with these options gets */
static int l_backend_for(lua_State *L) {
    ane_compile_options options = {0};
    if (!lua_isnoneornil(L, 1)) {
        luaL_checktype(L, 1, LUA_TTABLE);
        lua_getfield(L, 1, "precision");
        options.precision = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "fp32") == 0 ? ANE_PRECISION_FP32
                                                                                              : ANE_PRECISION_FP16;
        lua_getfield(L, 1, "profile");
        options.profile = lua_isstring(L, -1) && strcmp(lua_tostring(L, -1), "cpu") == 0 ? ANE_PROFILE_CPU : ANE_PROFILE_ANE;
        lua_pop(L, 2);
    }
    lua_pushstring(L, ane_lua_backend_for(&options));
    return 1;
}

static int l_default_backend(lua_State *L) {
    lua_pushstring(L, ane_lua_default_backend());
    return 1;
}

static int l_set_default_backend(lua_State *L) {
    char message[ANE_ERROR_MESSAGE_MAX + 64];
    if (ane_lua_set_default_backend(luaL_checkstring(L, 1), message, sizeof message) != 0)
        return luaL_error(L, "%s", message);
    return 0;
}

/* ane.backends() -> { sim = true, ane = "why it is unavailable" } */
static int l_backends(lua_State *L) {
    lua_newtable(L);
    for (int i = 0; ane_backend_at(i); i++) {
        const char *name = ane_backend_at(i)->name;
        char why[ANE_ERROR_MESSAGE_MAX];
        if (backend_usable(name, why, sizeof why)) lua_pushboolean(L, 1);
        else lua_pushstring(L, why);
        lua_setfield(L, -2, name);
    }
    return 1;
}

/* ------------------------------------------------------------------ library path */

static int is_directory(const char *path) {
    struct stat info;
    return stat(path, &info) == 0 && S_ISDIR(info.st_mode);
}

/* The project's share directory (the checkout's root, or <prefix>/share/anelua when
 * installed): the parent of the Lua library directory found below. */
static char share_dir[4096];

void ane_lua_add_library_path(lua_State *L) {
    Dl_info info;
    if (!dladdr((void *)&ane_lua_add_library_path, &info) || !info.dli_fname) return;
    char here[4096];
    if (!realpath(info.dli_fname, here)) return;
    char *slash = strrchr(here, '/');
    if (!slash) return;
    *slash = '\0';
    /* The build tree links lua/ beside the binaries; an install puts it under share/ (the last
     * candidate, absolute: where this build installs it, for a LuaRocks tree, which deploys the
     * host and ane.so apart from the rock's share/). */
#ifndef ANELUA_INSTALLED_SHARE
#define ANELUA_INSTALLED_SHARE ""
#endif
    static const char *const candidates[] = {"/lua", "/../share/anelua/lua", "/../../../share/anelua/lua",
                                             ANELUA_INSTALLED_SHARE "/lua"};
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char dir[4200], probe[4300], resolved[4096];
        if (candidates[i][0] == '/' && i == sizeof candidates / sizeof candidates[0] - 1)
            snprintf(dir, sizeof dir, "%s", candidates[i]); /* absolute */
        else
            snprintf(dir, sizeof dir, "%s%s", here, candidates[i]);
        snprintf(probe, sizeof probe, "%s/ane", dir);
        if (!is_directory(probe) || !realpath(dir, resolved)) continue;
        snprintf(share_dir, sizeof share_dir, "%s", resolved);
        char *parent = strrchr(share_dir, '/');
        if (parent) *parent = '\0';
        lua_getglobal(L, "package");
        if (!lua_istable(L, -1)) {
            lua_pop(L, 1);
            return;
        }
        lua_getfield(L, -1, "path");
        const char *current = lua_tostring(L, -1);
        char entry[4200];
        snprintf(entry, sizeof entry, "%s/?.lua", resolved);
        if (!current || !strstr(current, entry)) {
            lua_pushfstring(L, "%s;%s/?.lua;%s/?/init.lua", current ? current : "", resolved, resolved);
            lua_setfield(L, -3, "path");
        }
        lua_pop(L, 2);
        return;
    }
}

/* ------------------------------------------------------------------ module */

/* ane.clock() -> seconds on a monotonic wall clock (os.clock counts CPU time of all threads) */
static int l_clock(lua_State *L) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* ane.data_dir() -> the directory of the data shipped with anelua (tokenizers): <root>/data
 * in a checkout, <prefix>/share/anelua/data when installed; nil if the library was not found. */
static int l_data_dir(lua_State *L) {
    if (!share_dir[0]) return 0;
    lua_pushfstring(L, "%s/data", share_dir);
    return 1;
}

/* ane.set_graceful_interrupts(on): the first Ctrl-C becomes a stop request the script
 * polls with ane.stop_requested(); a second one interrupts (in the host; stock lua5.4
 * keeps its own handler, which always interrupts). */
static int l_set_graceful_interrupts(lua_State *L) {
    ane_interrupt_set_graceful(lua_toboolean(L, 1));
    return 0;
}

static int l_stop_requested(lua_State *L) {
    lua_pushboolean(L, ane_interrupt_stop_requested());
    return 1;
}

/* ane.checksum(string) -> 16 hex digits (the hash of t:checksum(); for metadata) */
static int l_checksum(lua_State *L) {
    size_t length;
    const char *bytes = luaL_checklstring(L, 1, &length);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ane_hash64(ANE_HASH_SEED, bytes, length));
    lua_pushstring(L, hex);
    return 1;
}

/* ane.memory() -> { heap_bytes = tensor and surface heap bytes alive, interned = consts
 * shared by content across programs, interned_bytes = their bytes (counted once) } */
static int l_memory(lua_State *L) {
    size_t count, bytes;
    ane_intern_stats(&count, &bytes);
    lua_createtable(L, 0, 3);
    lua_pushinteger(L, (lua_Integer)ane_storage_live_heap_bytes());
    lua_setfield(L, -2, "heap_bytes");
    lua_pushinteger(L, (lua_Integer)count);
    lua_setfield(L, -2, "interned");
    lua_pushinteger(L, (lua_Integer)bytes);
    lua_setfield(L, -2, "interned_bytes");
    return 1;
}

static int l_simd(lua_State *L) {
    lua_pushstring(L, ane_fp16_simd_name());
    return 1;
}

/* Submodules written in Lua are loaded on first access (`ane.io`), since they require
 * `ane` themselves and cannot be loaded while luaopen_ane runs. */
static int module_index(lua_State *L) {
    static const struct { const char *key, *module, *field; } lazy[] = {
        {"io", "ane.io", NULL}, {"nn", "ane.nn", NULL}, {"rules", "ane.rules", NULL},
        {"rule", "ane.rules", "describe"}, /* ane.rule("ANE-21") */
        {"probe", "ane.probe", NULL},      /* ane.probe.list(), ane.probe.run(name) */
        {"help", "ane.repl", "help"},      /* ane.help(x) -> text */
    };
    const char *key = lua_tostring(L, 2);
    for (size_t i = 0; key && i < sizeof lazy / sizeof lazy[0]; i++) {
        if (strcmp(key, lazy[i].key) != 0) continue;
        lua_getglobal(L, "require");
        lua_pushstring(L, lazy[i].module);
        lua_call(L, 1, 1);
        if (lazy[i].field) lua_getfield(L, -1, lazy[i].field);
        lua_pushvalue(L, -1);
        lua_setfield(L, 1, key); /* cache in the module table */
        return 1;
    }
    return 0;
}

/* ane.executable() -> the program that starts this host again (a child of the same host,
 * e.g. a probe that must not take the REPL down with it, or training restarting itself), or
 * nil: ANELUA_EXECUTABLE when set (a wrapper that starts it, as the tests of a cross build
 * start it under qemu-user), else this process's own program. */
static int l_executable(lua_State *L) {
    const char *chosen = getenv("ANELUA_EXECUTABLE");
    if (chosen && *chosen) {
        lua_pushstring(L, chosen);
        return 1;
    }
    char path[4096];
#ifdef __APPLE__
    uint32_t size = sizeof path;
    if (_NSGetExecutablePath(path, &size) != 0) return 0;
#else
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
#endif
    lua_pushstring(L, path);
    return 1;
}

/* ane.exec(argv, env) replaces this process with argv (a list; argv[1] found on PATH), after
 * setting the variables of env: how training restarts itself when the device's compile
 * budget is near (ANE-05, ANE-15). Returns nil and a message only when exec fails. */
static int l_exec(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int count = (int)luaL_len(L, 1);
    if (count < 1 || count > 255) return luaL_error(L, "ane.exec: argv needs 1..255 words, got %d", count);
    const char *argv[256];
    for (int i = 1; i <= count; i++) {
        lua_rawgeti(L, 1, i);
        argv[i - 1] = luaL_checkstring(L, -1); /* anchored in the table */
        lua_pop(L, 1);
    }
    argv[count] = NULL;
    if (lua_istable(L, 2)) {
        lua_pushnil(L);
        while (lua_next(L, 2)) {
            const char *name = luaL_checkstring(L, -2);
            const char *value = luaL_tolstring(L, -1, NULL);
            if (setenv(name, value, 1) != 0) return luaL_error(L, "ane.exec: cannot set %s", name);
            lua_pop(L, 2);
        }
    }
    fflush(NULL);
    execvp(argv[0], (char *const *)argv);
    lua_pushnil(L);
    lua_pushfstring(L, "ane.exec: cannot run %s: %s", argv[0], strerror(errno));
    return 2;
}

/* ANELUA_COMPILE_BUDGET sets the per-process compile budget (ANE-05) before any compile. */
static int budget_from_environment(char *message, size_t size) {
    const char *text = getenv("ANELUA_COMPILE_BUDGET");
    if (!text || !*text) return 0;
    char *end;
    long long value = strtoll(text, &end, 10);
    ane_error err;
    if (*end || end == text || ane_runtime_set_compile_budget(value, &err) != ANE_OK) {
        snprintf(message, size, "ANELUA_COMPILE_BUDGET=%s: needs a whole number >= 0", text);
        return -1;
    }
    return 0;
}

int luaopen_ane(lua_State *L) {
    char backend_problem[ANE_ERROR_MESSAGE_MAX + 64];
    if (!default_backend && ane_lua_backend_from_environment(backend_problem, sizeof backend_problem) != 0)
        return luaL_error(L, "%s", backend_problem);
    if (budget_from_environment(backend_problem, sizeof backend_problem) != 0) return luaL_error(L, "%s", backend_problem);
    ane_lua_add_library_path(L);
    static int blas_rested; /* once: a later opening could find BLAS busy in another thread */
    if (!blas_rested++) ane_blas_rest_threads();
    static const luaL_Reg functions[] = {
        {"default_backend", l_default_backend},
        {"backend_for", l_backend_for},
        {"set_default_backend", l_set_default_backend},
        {"backends", l_backends},
        {"simd", l_simd},
        {"memory", l_memory},
        {"clock", l_clock},
        {"exec", l_exec}, {"executable", l_executable},
        {"data_dir", l_data_dir},
        {"checksum", l_checksum},
        {"set_graceful_interrupts", l_set_graceful_interrupts},
        {"stop_requested", l_stop_requested},
        {NULL, NULL},
    };
    luaL_newlib(L, functions);
    lua_pushliteral(L, ANELUA_VERSION);
    lua_setfield(L, -2, "version");
    ane_lua_open_tensor(L);
    lua_setfield(L, -2, "tensor");
    ane_lua_open_surface(L);
    lua_setfield(L, -2, "surface");
    ane_lua_open_graph(L);
    lua_getfield(L, -1, "grad");
    lua_setfield(L, -3, "grad"); /* ane.grad as well as ane.graph.grad */
    lua_setfield(L, -2, "graph");
    ane_lua_open_milblob(L);
    lua_setfield(L, -2, "milblob");
    ane_lua_open_target(L);
    ane_lua_open_quantize(L);
    ane_lua_open_program(L);
    ane_lua_open_kernels(L);
    ane_lua_open_bpe(L);
    lua_setfield(L, -2, "_bpe");
    ane_lua_open_spm(L);
    lua_setfield(L, -2, "_spm");
    ane_lua_open_nfc(L);
    lua_setfield(L, -2, "_nfc");
    ane_lua_open_io_internal(L);
    lua_setfield(L, -2, "_io");
    lua_newtable(L);
    lua_pushcfunction(L, module_index);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    return 1;
}
