/* Programs from Lua (type "ane.Program"): ane.compile, ane.compile_mil, ane.cached,
 * prog:eval / submit / patch / write_input / read_input / reset_input / inputs / outputs / weights / close,
 * and the runtime statistics.
 * Inputs and outputs are bound by name; values are tensors or surfaces. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ane_core/mil/emit.h"
#include "../ane_core/runtime/program.h"
#include "../ane_core/runtime/compile.h"
#include "../ane_core/runtime/async.h"
#include "../ane_core/tensor/blas.h"
#include "ane_lua.h"

#define ANE_PROGRAM_TYPE "ane.Program"

typedef struct program_box {
    ane_program *program; /* NULL once closed */
} program_box;

static ane_program *check_program(lua_State *L, int index) {
    program_box *box = luaL_checkudata(L, index, ANE_PROGRAM_TYPE);
    if (!box->program) luaL_error(L, "attempt to use a closed program");
    return box->program;
}

static int program_release(lua_State *L) {
    program_box *box = luaL_checkudata(L, 1, ANE_PROGRAM_TYPE);
    ane_program_close(box->program);
    box->program = NULL;
    return 0;
}

static program_box *new_program_box(lua_State *L) {
    program_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->program = NULL;
    luaL_setmetatable(L, ANE_PROGRAM_TYPE);
    return box;
}

/* Options: {backend =, precision = "fp16" | "fp32", profile = "ane" | "cpu", activations =
 * "float" | "int8" (quantized weights' products; cpu profile), fusions = false (sim: every
 * node its own step, the fused steps' baseline), key =, target =, max_conv_channels =}
 * (targets: l_target.c) */
static const char *read_options(lua_State *L, int index, ane_compile_options *options, const char **key) {
    memset(options, 0, sizeof *options);
    *key = NULL;
    ane_lua_read_target(L, index, &options->target); /* the default target when options name none */
    if (lua_isnoneornil(L, index)) return ane_lua_backend_for(options);
    luaL_checktype(L, index, LUA_TTABLE);
    lua_getfield(L, index, "backend");
    int explicit = !lua_isnil(L, -1);
    const char *backend = explicit ? luaL_checkstring(L, -1) : NULL;
    lua_getfield(L, index, "precision");
    const char *precision = luaL_optstring(L, -1, "fp16");
    if (strcmp(precision, "fp32") == 0) options->precision = ANE_PRECISION_FP32;
    else if (strcmp(precision, "fp16") != 0) luaL_error(L, "precision must be 'fp16' or 'fp32', not '%s'", precision);
    lua_getfield(L, index, "profile");
    const char *profile = luaL_optstring(L, -1, "ane");
    if (strcmp(profile, "cpu") == 0) options->profile = ANE_PROFILE_CPU;
    else if (strcmp(profile, "ane") != 0) luaL_error(L, "profile must be 'ane' or 'cpu', not '%s'", profile);
    lua_getfield(L, index, "activations");
    const char *activations = luaL_optstring(L, -1, "float");
    if (!ane_activations_from_name(activations, &options->activations))
        luaL_error(L, "activations must be 'float', 'int8' or 'int16', not '%s'", activations);
    lua_getfield(L, index, "fusions");
    options->step_by_step = !lua_isnil(L, -1) && !lua_toboolean(L, -1);
    lua_getfield(L, index, "key");
    *key = lua_tostring(L, -1);
    lua_getfield(L, index, "name");
    if (lua_isstring(L, -1)) snprintf(options->name, sizeof options->name, "%s", lua_tostring(L, -1));
    lua_pop(L, 7); /* the strings stay anchored by the options table */
    return explicit ? backend : ane_lua_backend_for(options);
}

/* Reads a weights table { [MIL path] = bytes of a MILBlob file, or the path of one } into
 * files (at most `capacity`); the bytes stay anchored in the table at `index`. */
int ane_lua_weight_files(lua_State *L, int index, ane_mil_file *files, int capacity) {
    int count = 0;
    if (lua_isnoneornil(L, index)) return 0;
    luaL_checktype(L, index, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, index)) {
        if (count == capacity) luaL_error(L, "at most %d weight files", capacity);
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "weights must map MIL paths to byte strings or file paths");
        size_t size;
        const char *value = lua_tolstring(L, -1, &size);
        int looks_like_milblob = size >= 64 && value[4] == 2 && value[5] == 0 && value[6] == 0 && value[7] == 0;
        if (!looks_like_milblob) { /* a file path: read it, keep the bytes in the table */
            FILE *file = fopen(value, "rb");
            if (!file) luaL_error(L, "weight file '%s' for '%s' cannot be opened", value, lua_tostring(L, -2));
            luaL_Buffer buffer;
            luaL_buffinit(L, &buffer);
            char chunk[65536];
            size_t got;
            while ((got = fread(chunk, 1, sizeof chunk, file)) > 0) luaL_addlstring(&buffer, chunk, got);
            fclose(file);
            luaL_pushresult(&buffer);
            lua_pushvalue(L, -3);
            lua_insert(L, -2);
            lua_settable(L, index); /* replaces the path by the bytes; keys unchanged, so next() is fine */
            lua_pushvalue(L, -2);
            lua_gettable(L, index);
            lua_replace(L, -2);
            value = lua_tolstring(L, -1, &size);
        }
        files[count] = (ane_mil_file){.path = lua_tostring(L, -2), .bytes = (const uint8_t *)value, .size = size};
        count++;
        lua_pop(L, 1);
    }
    return count;
}

static void print_new_warnings(lua_State *L, const ane_report *report);

/* Whether options.quiet asks that warnings are returned only, not printed in the REPL. */
static int quiet(lua_State *L, int options_index) {
    if (!lua_istable(L, options_index)) return 0;
    int result = lua_getfield(L, options_index, "quiet") != LUA_TNIL && lua_toboolean(L, -1);
    lua_pop(L, 1);
    return result;
}

/* -> program, warnings: the weight files' notes as diagnostics with ID "weights" */
static int create(lua_State *L, const char *mil, size_t length, const ane_mil_file *files, int nfiles, int options_index,
                  const char *default_name) {
    ane_compile_options options;
    const char *key;
    const char *backend = read_options(L, options_index, &options, &key);
    if (!options.name[0] && default_name) snprintf(options.name, sizeof options.name, "%s", default_name);
    program_box *box = new_program_box(L);
    ane_error err;
    if (ane_program_create(backend, &options, key, mil, length, files, nfiles, &box->program, &err)) return ane_lua_raise(L, &err);
    const ane_notes *notes = ane_program_notes(box->program);
    ane_report report = {0};
    for (int i = 0; i < notes->count; i++)
        ane_report_add(&report, "weights", NULL, ANE_SEVERITY_WARNING, "%s", notes->text[i]);
    if (notes->dropped)
        ane_report_add(&report, "weights", NULL, ANE_SEVERITY_WARNING, "... and %d more notes about the weight files",
                       notes->dropped);
    if (!quiet(L, options_index)) print_new_warnings(L, &report);
    ane_lua_push_diagnostics(L, &report);
    ane_report_free(&report);
    return 2;
}

/* In the REPL (the host sets the registry flag), each warning is printed once per session. */
static void print_new_warnings(lua_State *L, const ane_report *report) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "ane.repl_warnings") != LUA_TTABLE) {
        lua_pop(L, 1);
        return;
    }
    for (int i = 0; i < report->count; i++) {
        const ane_diagnostic *d = &report->items[i];
        lua_pushfstring(L, "%s: %s", d->id, d->message);
        lua_pushvalue(L, -1);
        if (lua_rawget(L, -3) == LUA_TNIL) {
            fprintf(stderr, "warning %s\n", lua_tostring(L, -2));
            lua_pushvalue(L, -2);
            lua_pushboolean(L, 1);
            lua_rawset(L, -5);
        }
        lua_pop(L, 2);
    }
    fflush(stderr);
    lua_pop(L, 1);
}

/* ane.compile(graph, options) -> program, warnings: the core's pipeline (runtime/compile.c),
 * no Lua in between; warnings as g:validate lists them (the REPL prints each once unless
 * options.quiet). */
static int l_compile(lua_State *L) {
    ane_graph *graph = ane_lua_check_graph(L, 1);
    lua_settop(L, 2);
    ane_compile_options options;
    const char *key;
    const char *backend = read_options(L, 2, &options, &key);
    if (!options.name[0]) snprintf(options.name, sizeof options.name, "%s", graph->name); /* named after the graph */
    program_box *box = new_program_box(L);
    ane_report report = {0};
    ane_error err;
    if (ane_compile_graph(graph, backend, &options, key, &box->program, &report, &err)) {
        ane_report_free(&report);
        return ane_lua_raise(L, &err);
    }
    if (!quiet(L, 2)) print_new_warnings(L, &report); /* {quiet = true}: returned, not printed (the probes' programs) */
    ane_lua_push_diagnostics(L, &report);
    ane_report_free(&report);
    return 2;
}

/* ane.compile_mil(text, weights, options) */
static int l_compile_mil(lua_State *L) {
    lua_settop(L, 3);
    size_t length;
    const char *text = luaL_checklstring(L, 1, &length);
    ane_mil_file files[16];
    int nfiles = ane_lua_weight_files(L, 2, files, 16);
    return create(L, text, length, files, nfiles, 3, NULL);
}

/* ane.cached(key) -> a new instance of the program compiled under key, or nil */
static int l_cached(lua_State *L) {
    const char *key = luaL_checkstring(L, 1);
    program_box *box = new_program_box(L);
    ane_error err;
    if (ane_program_from_cache(key, &box->program, &err)) return ane_lua_raise(L, &err);
    if (!box->program) return 0;
    return 1;
}

/* Reads a table of name -> tensor | surface into ios (names anchored by the table). */
static int read_ios(lua_State *L, int index, ane_io *ios, int capacity, const char *role) {
    int count = 0;
    if (lua_isnoneornil(L, index)) return 0;
    luaL_checktype(L, index, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, index)) {
        if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "%s names must be strings", role);
        if (count == capacity) luaL_error(L, "too many %ss", role);
        ane_io *io = &ios[count++];
        io->name = lua_tostring(L, -2);
        io->surface = ane_lua_test_surface(L, -1);
        io->tensor = io->surface ? NULL : ane_lua_test_tensor(L, -1);
        if (!io->surface && !io->tensor)
            luaL_error(L, "%s '%s' must be a tensor or a surface, not a %s", role, io->name, luaL_typename(L, -1));
        lua_pop(L, 1);
    }
    return count;
}

/* The outputs table of an eval: new tensors, or the destinations (table at `destinations`)
 * the outputs were written into. */
static void push_results(lua_State *L, ane_program *program, ane_tensor *results, int destinations) {
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    lua_createtable(L, 0, nout);
    for (int i = 0; i < nout; i++) {
        if (results[i].storage) {
            ane_lua_push_tensor(L, &results[i]);
        } else if (lua_istable(L, destinations)) { /* written into the caller's destination: return it */
            lua_getfield(L, destinations, out_ports[i].name); /* (nil: consumed by an append) */
        } else {
            lua_pushnil(L);
        }
        lua_setfield(L, -2, out_ports[i].name);
    }
}

/* Reads eval options {append = {input = output name | number, ...}, at = position (1-based),
 * at_of = {input = position (1-based), ...} (an append's own, where it differs), positions = n,
 * clamp = limit (the appended values clamped at +-limit, NaN as 0, counted)} at `index` into
 * *options (names anchored by the table; appends[capacity]). */
static void read_eval_options(lua_State *L, int index, ane_eval_options *options, ane_append *appends, int capacity) {
    memset(options, 0, sizeof *options);
    options->appends = appends;
    if (lua_isnoneornil(L, index)) return;
    luaL_checktype(L, index, LUA_TTABLE);
    lua_getfield(L, index, "positions");
    if (!lua_isnil(L, -1) && (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1))
        luaL_error(L, "eval: option 'positions' must be how many leading positions of the outputs are read, got %s",
                   luaL_tolstring(L, -1, NULL));
    options->positions_read = lua_isnil(L, -1) ? 0 : (int64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, index, "clamp");
    if (!lua_isnil(L, -1) && !(lua_type(L, -1) == LUA_TNUMBER && lua_tonumber(L, -1) > 0))
        luaL_error(L, "eval: option 'clamp' must be the positive limit the appended values are clamped at, got %s",
                   luaL_tolstring(L, -1, NULL));
    options->clamp_limit = lua_isnil(L, -1) ? 0.0 : lua_tonumber(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, index, "append");
    int table = lua_gettop(L);
    if (lua_isnil(L, table)) return;
    if (!lua_istable(L, table)) luaL_error(L, "eval: option 'append' must be a table of input = output name or number");
    lua_getfield(L, index, "at");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
        luaL_error(L, "eval: option 'at' must be the position (1-based) the appends write, got %s", luaL_tolstring(L, -1, NULL));
    options->at = (int64_t)lua_tointeger(L, -1) - 1;
    lua_pop(L, 1);
    lua_getfield(L, index, "at_of");
    int own = lua_gettop(L);
    if (!lua_isnil(L, own) && !lua_istable(L, own)) luaL_error(L, "eval: option 'at_of' must be a table of input = position");
    lua_pushnil(L);
    while (lua_next(L, table)) {
        if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "eval: append keys must be input names");
        if (options->nappends == capacity) luaL_error(L, "eval: too many appends");
        ane_append *append = &appends[options->nappends++];
        append->input = lua_tostring(L, -2);
        append->output = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (!append->output && lua_type(L, -1) != LUA_TNUMBER)
            luaL_error(L, "eval: append '%s' must name an output or give a number, not a %s", append->input,
                       luaL_typename(L, -1));
        append->value = append->output ? 0.0 : lua_tonumber(L, -1);
        append->at = -1;
        if (lua_istable(L, own)) {
            lua_getfield(L, own, append->input);
            if (!lua_isnil(L, -1) && (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1))
                luaL_error(L, "eval: at_of.%s must be a position (1-based), got %s", append->input, luaL_tolstring(L, -1, NULL));
            if (!lua_isnil(L, -1)) append->at = (int64_t)lua_tointeger(L, -1) - 1;
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1); /* at_of */
}

/* prog:eval(inputs, [destinations], [options]) -> { output name = tensor or the destination
 * given }; options: ane_eval_options (append, at, positions; the outputs an append consumes are
 * left out; with clamp, also the counts of appended values clamped and of NaNs zeroed). */
static int m_eval(lua_State *L) {
    ane_program *program = check_program(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    ane_io inputs[64], destinations[64];
    ane_append appends[64];
    ane_eval_options options;
    int ninputs = read_ios(L, 2, inputs, 64, "input");
    int ndestinations = read_ios(L, 3, destinations, 64, "output");
    read_eval_options(L, 4, &options, appends, 64);
    int64_t clamped = 0, nans = 0;
    options.clamped = &clamped, options.nans = &nans;
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    ane_tensor results[64]; /* [nout] used (cleared: 10 KB whole, every eval of a decode step) */
    memset(results, 0, (size_t)(nout < 64 ? nout : 64) * sizeof *results);
    ane_error err;
    ane_async_wait_idle(program); /* (what ane_program_eval does first) */
    if (ane_program_eval_with(program, inputs, ninputs, destinations, ndestinations, &options, results, &err))
        return ane_lua_raise(L, &err);
    push_results(L, program, results, 3);
    if (!(options.clamp_limit > 0)) return 1;
    lua_pushinteger(L, (lua_Integer)clamped);
    lua_pushinteger(L, (lua_Integer)nans);
    return 3;
}

/* ---- asynchronous evaluation: prog:submit(inputs, [destinations]) -> ticket; ticket:wait() */

#define ANE_TICKET_TYPE "ane.Ticket"

typedef struct ticket_box {
    ane_ticket *ticket; /* NULL once waited for */
} ticket_box;

/* ticket:wait() -> the outputs, as prog:eval returns them */
static int ticket_wait(lua_State *L) {
    ticket_box *box = luaL_checkudata(L, 1, ANE_TICKET_TYPE);
    if (!box->ticket) return luaL_error(L, "this ticket was already waited for");
    ane_tensor results[64];
    memset(results, 0, sizeof results);
    ane_error err;
    ane_status status = ane_ticket_wait(box->ticket, results, &err);
    box->ticket = NULL;
    if (status) return ane_lua_raise(L, &err);
    lua_getiuservalue(L, 1, 1); /* { program, inputs, destinations } */
    lua_rawgeti(L, -1, 1);
    program_box *program = luaL_checkudata(L, -1, ANE_PROGRAM_TYPE);
    if (!program->program) { /* closed after the submit (the close waited for the eval) */
        for (int i = 0; i < 64; i++) ane_tensor_release(&results[i]);
        return luaL_error(L, "the program was closed before ticket:wait(); its outputs are gone");
    }
    lua_rawgeti(L, -2, 3);
    push_results(L, program->program, results, lua_gettop(L));
    return 1;
}

/* A ticket dropped without a wait still waits (its inputs must outlive the eval). */
static int ticket_gc(lua_State *L) {
    ticket_box *box = luaL_checkudata(L, 1, ANE_TICKET_TYPE);
    if (!box->ticket) return 0;
    ane_tensor results[64];
    memset(results, 0, sizeof results);
    if (ane_ticket_wait(box->ticket, results, NULL) == ANE_OK) /* (its program may be gone at exit) */
        for (int i = 0; i < 64; i++) ane_tensor_release(&results[i]);
    box->ticket = NULL;
    return 0;
}

static int m_submit(lua_State *L) {
    ane_program *program = check_program(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    ane_io inputs[64], destinations[64];
    int ninputs = read_ios(L, 2, inputs, 64, "input");
    int ndestinations = read_ios(L, 3, destinations, 64, "output");
    ticket_box *box = lua_newuserdatauv(L, sizeof *box, 1);
    box->ticket = NULL;
    luaL_setmetatable(L, ANE_TICKET_TYPE);
    lua_createtable(L, 3, 0); /* keeps the program, inputs and destinations alive until the wait */
    for (int i = 1; i <= 3; i++) {
        lua_pushvalue(L, i);
        lua_rawseti(L, -2, i);
    }
    lua_setiuservalue(L, -2, 1);
    ane_error err;
    if (ane_program_submit(program, inputs, ninputs, destinations, ndestinations, &box->ticket, &err))
        return ane_lua_raise(L, &err);
    return 1;
}

/* prog:write_input(name, tensor, [position = 1]) -> prog: keeps input `name` in the program
 * (a KV cache), `tensor` written at positions position .. position + n - 1 of its last axis;
 * evals that bind nothing for `name` read it. */
static int m_write_input(lua_State *L) {
    ane_program *program = check_program(L, 1);
    const char *name = luaL_checkstring(L, 2);
    ane_tensor *value = ane_lua_test_tensor(L, 3);
    if (!value) return luaL_error(L, "write_input: the value must be a tensor, not a %s", luaL_typename(L, 3));
    lua_Integer position = luaL_optinteger(L, 4, 1);
    if (position < 1) return luaL_error(L, "write_input: positions count from 1, not %d", (int)position);
    ane_error err;
    if (ane_program_write_input(program, name, position - 1, value, &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

/* prog:read_input(name) -> a new tensor holding the resident input */
static int m_read_input(lua_State *L) {
    ane_program *program = check_program(L, 1);
    ane_tensor out;
    ane_error err;
    if (ane_program_read_input(program, luaL_checkstring(L, 2), &out, &err)) return ane_lua_raise(L, &err);
    ane_lua_push_tensor(L, &out);
    return 1;
}

/* prog:reset_input(name) -> prog: forgets what write_input kept for `name` (the next write
 * starts from zeros; evals bind it until then) */
static int m_reset_input(lua_State *L) {
    ane_program *program = check_program(L, 1);
    ane_error err;
    if (ane_program_reset_input(program, luaL_checkstring(L, 2), &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

/* prog:patch{ name = tensor, ... } -> prog */
static int m_patch(lua_State *L) {
    ane_program *program = check_program(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        const char *name = lua_tostring(L, -2);
        if (lua_type(L, -2) != LUA_TSTRING) return luaL_error(L, "patch: weight names must be strings");
        ane_tensor *value = ane_lua_test_tensor(L, -1);
        if (!value) return luaL_error(L, "patch: '%s' must be a tensor, not a %s", name, luaL_typename(L, -1));
        ane_error err;
        if (ane_program_patch(program, name, value, &err)) return ane_lua_raise(L, &err);
        lua_pop(L, 1);
    }
    lua_settop(L, 1);
    return 1;
}

/* ane.patch_together({prog, ...}, { name = tensor, ... }): each weight patched into every
 * program listed (distinct ones, each holding it) at once; the sim backend writes it once,
 * into bytes the programs then share (until one of them is patched alone). */
static int l_patch_together(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer count = luaL_len(L, 1);
    if (count < 1) return luaL_error(L, "patch_together: the list of programs is empty");
    if (count > INT_MAX) return luaL_error(L, "patch_together: too many programs");
    ane_program **programs = lua_newuserdatauv(L, (size_t)count * sizeof *programs, 0); /* [count], collected */
    for (lua_Integer i = 1; i <= count; i++) {
        lua_geti(L, 1, i);
        program_box *box = luaL_testudata(L, -1, ANE_PROGRAM_TYPE);
        if (!box || !box->program)
            return luaL_error(L, "patch_together: entry %d of the list is %s", (int)i, box ? "a closed program" : "not a program");
        programs[i - 1] = box->program;
        lua_pop(L, 1);
    }
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING) return luaL_error(L, "patch_together: weight names must be strings");
        const char *name = lua_tostring(L, -2);
        ane_tensor *value = ane_lua_test_tensor(L, -1);
        if (!value) return luaL_error(L, "patch_together: '%s' must be a tensor, not a %s", name, luaL_typename(L, -1));
        ane_error err;
        if (ane_program_patch_together(programs, (int)count, name, value, &err)) return ane_lua_raise(L, &err);
        lua_pop(L, 1);
    }
    return 0;
}

static void push_port(lua_State *L, const ane_port *port, int index) {
    lua_createtable(L, 0, 4);
    lua_pushstring(L, port->name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, ane_dtype_name(port->dtype));
    lua_setfield(L, -2, "dtype");
    lua_createtable(L, port->rank, 0);
    for (int i = 0; i < port->rank; i++) {
        lua_pushinteger(L, port->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "shape");
    lua_pushinteger(L, index);
    lua_setfield(L, -2, "binding");
    lua_rawseti(L, -2, index);
}

static int ports(lua_State *L, int outputs) {
    ane_program *program = check_program(L, 1);
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    const ane_port *list = outputs ? out_ports : in_ports;
    int count = outputs ? nout : nin;
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) push_port(L, &list[i], i + 1);
    return 1;
}

static int m_inputs(lua_State *L) { return ports(L, 0); }
static int m_outputs(lua_State *L) { return ports(L, 1); }

typedef struct weight_list {
    lua_State *L;
    int count;
} weight_list;

static void push_weight(void *context, const ane_node *node) {
    weight_list *list = context;
    lua_State *L = list->L;
    ane_port port;
    snprintf(port.name, sizeof port.name, "%s", node->name);
    port.dtype = node->dtype;
    port.rank = node->rank;
    memcpy(port.shape, node->shape, sizeof port.shape);
    push_port(L, &port, ++list->count);
}

/* prog:weights() -> { {name =, dtype =, shape =}, ... } the patchable consts */
static int m_weights(lua_State *L) {
    ane_program *program = check_program(L, 1);
    lua_newtable(L);
    weight_list list = {L, 0};
    ane_program_weights(program, push_weight, &list);
    return 1;
}

static int m_tostring(lua_State *L) {
    program_box *box = luaL_checkudata(L, 1, ANE_PROGRAM_TYPE);
    if (!box->program) {
        lua_pushliteral(L, "ane.program (closed)");
        return 1;
    }
    const ane_compile_options *o = ane_program_options(box->program);
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(box->program, &in_ports, &nin, &out_ports, &nout);
    char activations[32] = "";
    if (o->activations != ANE_ACTIVATIONS_FLOAT)
        snprintf(activations, sizeof activations, ", %s activations", ane_activations_name(o->activations));
    lua_pushfstring(L, "ane.program %s (backend %s, %s, profile %s%s, %d inputs, %d outputs)", ane_program_name(box->program),
                    ane_program_backend(box->program), o->precision == ANE_PRECISION_FP32 ? "fp32" : "fp16",
                    o->profile == ANE_PROFILE_CPU ? "cpu" : "ane", activations, nin, nout);
    return 1;
}

/* ane.stats() */
static int l_stats(lua_State *L) {
    ane_runtime_stats s;
    ane_runtime_stats_get(&s);
    lua_createtable(L, 0, 16);
    ane_lua_set_integer(L, "compiles", s.compiles);
    ane_lua_set_integer(L, "cache_hits", s.cache_hits);
    ane_lua_set_integer(L, "loads", s.loads);
    ane_lua_set_integer(L, "evals", s.evals);
    ane_lua_set_integer(L, "patches", s.patches);
    ane_lua_set_integer(L, "unloads", s.unloads);
    ane_lua_set_integer(L, "compile_budget", s.compile_budget);
    ane_lua_set_integer(L, "budget_left", s.budget_left);
    ane_lua_set_integer(L, "sanitized_values", s.sanitized_values);
    ane_lua_set_integer(L, "sram_warnings", s.sram_warnings);
    ane_lua_set_integer(L, "cached_programs", s.cached_programs);
    ane_lua_set_integer(L, "cache_limit", s.cache_limit);
    ane_lua_set_integer(L, "cache_evictions", s.cache_evictions);
    ane_lua_set_number(L, "compile_ms", s.compile_ms);
    ane_lua_set_number(L, "load_ms", s.load_ms);
    ane_lua_set_number(L, "eval_ms", s.eval_ms);
    ane_lua_set_number(L, "patch_ms", s.patch_ms);
    ane_lua_set_number(L, "restart_cost_ms", s.restart_cost_ms);
    ane_lua_set_integer(L, "backend_compiles", s.backend_compiles);
    ane_device_stats d;
    ane_device_stats_get(&d);
    if (d.bound) { /* what the `ane` backend did and found in this process */
        lua_createtable(L, 0, 20);
        lua_pushstring(L, d.patch_strategy);
        lua_setfield(L, -2, "patch_strategy");
        lua_pushstring(L, d.patch_check);
        lua_setfield(L, -2, "patch_check");
        const struct { const char *name; int64_t value; } counts[] = {
            {"loaded", d.loaded}, {"loaded_limit", d.loaded_limit}, {"load_retries", d.load_retries},
            {"requests_built", d.requests_built}, {"zero_copy_evals", d.zero_copy_evals}, {"copied_evals", d.copied_evals},
            {"ports_unverified", d.ports_unverified}, {"row_stride_mismatches", d.row_stride_mismatches},
            {"commits", d.commits}, {"patch_checks", d.patch_checks}, {"reloads", d.reloads},
            {"donor_loads", d.donor_loads}, {"recompiles", d.recompiles}, {"stale_dirs_removed", d.stale_dirs_removed},
        };
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) ane_lua_set_integer(L, counts[i].name, counts[i].value);
        lua_setfield(L, -2, "device");
    }
    return 1;
}

static void push_encoding_line(void *context, const char *text) {
    lua_State *L = context;
    lua_pushstring(L, text);
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
}

/* ane.capabilities(): what this process knows about the backends and the device */
static int l_capabilities(lua_State *L) {
    lua_createtable(L, 0, 12);
    lua_pushstring(L, ane_lua_default_backend());
    lua_setfield(L, -2, "backend");
    lua_pushstring(L, ane_blas_kernels()); /* the CPU kernels behind sim's matrix products */
    lua_setfield(L, -2, "blas_kernels");
#if defined(__x86_64__)
    lua_pushstring(L, "x86_64"); /* the instruction set this build runs */
#elif defined(__aarch64__)
    lua_pushstring(L, "arm64");
#else
    lua_pushstring(L, "other");
#endif
    lua_setfield(L, -2, "cpu");
    char why[ANE_ERROR_MESSAGE_MAX];
    int device = ane_device_backend.available(why, sizeof why);
    lua_pushboolean(L, device);
    lua_setfield(L, -2, "device");
    if (!device) {
        lua_pushstring(L, why);
        lua_setfield(L, -2, "device_unavailable");
        return 1;
    }
    ane_device_stats d;
    ane_device_stats_get(&d);
    lua_pushboolean(L, d.is_double);
    lua_setfield(L, -2, "test_double");
    lua_pushstring(L, d.framework);
    lua_setfield(L, -2, "framework");
    char chip[128];
    if (ane_device_chip(chip, sizeof chip)) {
        lua_pushstring(L, chip);
        lua_setfield(L, -2, "chip");
    }
    if (d.multi_input < 0) lua_pushliteral(L, "unknown");
    else lua_pushboolean(L, d.multi_input);
    lua_setfield(L, -2, "multi_input");
    lua_pushstring(L, d.patch_strategy);
    lua_setfield(L, -2, "patch_strategy");
    ane_lua_set_string(L, "port_listing", d.port_listing);
    lua_pushboolean(L, d.identifier_hashes_weights);
    lua_setfield(L, -2, "identifier_hashes_weights");
    ane_lua_set_integer(L, "loaded_limit", d.loaded_limit);
    ane_runtime_stats s;
    ane_runtime_stats_get(&s);
    ane_lua_set_integer(L, "compile_budget", s.compile_budget);
    lua_newtable(L);
    ane_device_encoding_report(push_encoding_line, L);
    lua_setfield(L, -2, "encodings");
    return 1;
}

static int l_reset_stats(lua_State *L) {
    (void)L;
    ane_runtime_stats_reset();
    return 0;
}

/* ane.clear_cache() -> number of compiled programs freed (those no open program uses) */
static int l_clear_cache(lua_State *L) {
    lua_pushinteger(L, ane_runtime_cache_clear());
    return 1;
}

static int l_set_compile_budget(lua_State *L) {
    ane_error err;
    if (ane_runtime_set_compile_budget(luaL_optinteger(L, 1, 0), &err)) return ane_lua_raise(L, &err);
    return 0;
}

/* ane.set_cache_limit(n): unused compiled programs kept (LRU); no argument restores 256 */
static int l_set_cache_limit(lua_State *L) {
    ane_error err;
    if (ane_runtime_set_cache_limit(luaL_optinteger(L, 1, 0), &err)) return ane_lua_raise(L, &err);
    return 0;
}

void ane_lua_open_program(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"eval", m_eval}, {"submit", m_submit}, {"patch", m_patch}, {"write_input", m_write_input},
        {"read_input", m_read_input}, {"reset_input", m_reset_input}, {"inputs", m_inputs}, {"outputs", m_outputs},
        {"weights", m_weights}, {"close", program_release}, {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__gc", program_release}, {"__close", program_release}, {"__tostring", m_tostring}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_TICKET_TYPE);
    lua_pushcfunction(L, ticket_gc);
    lua_setfield(L, -2, "__gc");
    lua_newtable(L);
    lua_pushcfunction(L, ticket_wait);
    lua_setfield(L, -2, "wait");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
        luaL_newmetatable(L, ANE_PROGRAM_TYPE);
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg functions[] = {
        {"compile", l_compile}, {"compile_mil", l_compile_mil}, {"cached", l_cached}, {"stats", l_stats},
        {"capabilities", l_capabilities}, {"patch_together", l_patch_together},
        {"reset_stats", l_reset_stats}, {"set_compile_budget", l_set_compile_budget},
        {"clear_cache", l_clear_cache}, {"set_cache_limit", l_set_cache_limit}, {NULL, NULL},
    };
    luaL_setfuncs(L, functions, 0);
}
