/* ane._io: the C half of ane.io (lua/ane/io.lua): safetensors mapping, entry validation
 * and atomic writes. Environmental failures come back as `nil, message`. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "../ane_core/io/safetensors.h"
#include "ane_lua.h"

typedef struct mapping_box {
    ane_safetensors_file file; /* storage NULL once closed */
} mapping_box;

static mapping_box *check_mapping(lua_State *L, int index) {
    mapping_box *box = luaL_checkudata(L, index, ANE_MAPPING_TYPE);
    if (!box->file.storage) luaL_error(L, "attempt to use a closed mapping");
    return box;
}

static int mapping_release(lua_State *L) {
    mapping_box *box = luaL_checkudata(L, 1, ANE_MAPPING_TYPE);
    ane_safetensors_unmap(&box->file);
    return 0;
}

static int mapping_tostring(lua_State *L) {
    mapping_box *box = luaL_checkudata(L, 1, ANE_MAPPING_TYPE);
    if (!box->file.storage) lua_pushliteral(L, "ane.mapping (closed)");
    else lua_pushfstring(L, "ane.mapping of %d bytes", (int)box->file.storage->nbytes);
    return 1;
}

/* map_safetensors(path) -> mapping, header_json | nil, message */
static int l_map_safetensors(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    mapping_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    memset(box, 0, sizeof *box);
    luaL_setmetatable(L, ANE_MAPPING_TYPE);
    ane_error err;
    if (ane_safetensors_map(path, &box->file, &err)) return ane_lua_fail(L, &err);
    lua_pushlstring(L, box->file.header, box->file.header_len);
    return 2;
}

/* map_file(path) -> mapping of a whole raw file (offsets from byte 0) | nil, message */
static int l_map_file(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    mapping_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    memset(box, 0, sizeof *box);
    luaL_setmetatable(L, ANE_MAPPING_TYPE);
    ane_error err;
    if (ane_storage_map_file(path, &box->file.storage, &err)) return ane_lua_fail(L, &err);
    box->file.data_start = 0;
    box->file.data_size = box->file.storage->nbytes;
    lua_pushinteger(L, (lua_Integer)box->file.data_size);
    return 2;
}

/* mapping:tensor(path, name, dtype_code, shape, begin, end) -> tensor | nil, message */
static int m_tensor(lua_State *L) {
    mapping_box *box = check_mapping(L, 1);
    const char *path = luaL_checkstring(L, 2), *name = luaL_checkstring(L, 3), *code = luaL_checkstring(L, 4);
    int64_t shape[ANE_MAX_DIMS];
    luaL_checktype(L, 5, LUA_TTABLE);
    lua_Integer ndim = luaL_len(L, 5);
    if (ndim > ANE_MAX_DIMS) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: tensor '%s' has %d dimensions (at most %d supported)", path, name, (int)ndim, ANE_MAX_DIMS);
        return 2;
    }
    for (int i = 0; i < ndim; i++) {
        lua_geti(L, 5, i + 1);
        shape[i] = lua_tointeger(L, -1);
        lua_pop(L, 1);
    }
    lua_Integer begin = luaL_checkinteger(L, 6), end = luaL_checkinteger(L, 7);
    if (begin < 0 || end < 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "%s: tensor '%s' has negative data_offsets", path, name);
        return 2;
    }
    ane_tensor view = {0};
    ane_error err;
    if (ane_safetensors_tensor(&box->file, path, name, code, (int)ndim, shape, (uint64_t)begin, (uint64_t)end,
                               &view, &err))
        return ane_lua_fail(L, &err);
    ane_lua_push_tensor(L, &view);
    return 1;
}

/* check_overlaps(path, names, begins, ends) -> true | nil, message */
static int l_check_overlaps(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    luaL_checktype(L, 3, LUA_TTABLE);
    luaL_checktype(L, 4, LUA_TTABLE);
    size_t count = (size_t)luaL_len(L, 2);
    /* One block for the three arrays, owned by a userdata so a Lua error cannot leak it. */
    size_t bytes = count * (sizeof(char *) + 2 * sizeof(uint64_t)) + 1;
    char *block = lua_newuserdatauv(L, bytes, 0);
    const char **names = (const char **)block;
    uint64_t *begin = (uint64_t *)(block + count * sizeof(char *)), *end = begin + count;
    for (size_t i = 0; i < count; i++) {
        lua_geti(L, 2, (lua_Integer)i + 1);
        names[i] = lua_tostring(L, -1); /* the strings stay anchored in the table */
        lua_pop(L, 1);
        lua_geti(L, 3, (lua_Integer)i + 1);
        begin[i] = (uint64_t)lua_tointeger(L, -1);
        lua_geti(L, 4, (lua_Integer)i + 1);
        end[i] = (uint64_t)lua_tointeger(L, -1);
        lua_pop(L, 2);
    }
    ane_error err;
    if (ane_safetensors_check_overlaps(path, count, names, begin, end, &err)) return ane_lua_fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

/* Collects the tensors of the array at `index` into a userdata-anchored C array. */
static const ane_tensor **check_tensor_array(lua_State *L, int index, size_t *count) {
    luaL_checktype(L, index, LUA_TTABLE);
    *count = (size_t)luaL_len(L, index);
    const ane_tensor **tensors = lua_newuserdatauv(L, (*count + 1) * sizeof *tensors, 0);
    for (size_t i = 0; i < *count; i++) {
        lua_geti(L, index, (lua_Integer)i + 1);
        tensors[i] = ane_lua_check_tensor(L, -1); /* anchored in the argument table */
        lua_pop(L, 1);
    }
    return tensors;
}

/* write_safetensors(path, header_json, {tensor, ...}) -> true | nil, message */
static int l_write_safetensors(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t header_len, count;
    const char *header = luaL_checklstring(L, 2, &header_len);
    const ane_tensor **tensors = check_tensor_array(L, 3, &count);
    ane_error err;
    if (ane_safetensors_write(path, header, header_len, tensors, count, &err)) return ane_lua_fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

/* write_atomic(path, prefix_bytes, {tensor, ...}) -> true | nil, message: temp, fsync, rename */
static int l_write_atomic(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    size_t prefix_len, count;
    const char *prefix = luaL_checklstring(L, 2, &prefix_len);
    const ane_tensor **tensors = check_tensor_array(L, 3, &count);
    ane_error err;
    if (ane_write_file_atomic(path, prefix, prefix_len, tensors, count, &err)) return ane_lua_fail(L, &err);
    lua_pushboolean(L, 1);
    return 1;
}

/* ane._io.pid() -> this process's id (the suffix of its temporary files) */
static int l_pid(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)getpid());
    return 1;
}

/* ane._io.process_alive(pid) -> whether a process with that id exists (a temporary file of
 * a live writer must not be swept) */
static int l_process_alive(lua_State *L) {
    lua_Integer pid = luaL_checkinteger(L, 1);
    lua_pushboolean(L, pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM));
    return 1;
}

void ane_lua_open_io_internal(lua_State *L) {
    static const luaL_Reg mapping_methods[] = {{"tensor", m_tensor}, {"close", mapping_release}, {NULL, NULL}};
    static const luaL_Reg mapping_meta[] = {
        {"__gc", mapping_release}, {"__close", mapping_release}, {"__tostring", mapping_tostring}, {NULL, NULL}};
    luaL_newmetatable(L, ANE_MAPPING_TYPE);
    luaL_setfuncs(L, mapping_meta, 0);
    luaL_newlib(L, mapping_methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg functions[] = {
        {"pid", l_pid},
        {"process_alive", l_process_alive},
        {"map_safetensors", l_map_safetensors},
        {"map_file", l_map_file},
        {"check_overlaps", l_check_overlaps},
        {"write_safetensors", l_write_safetensors},
        {"write_atomic", l_write_atomic},
        {NULL, NULL},
    };
    luaL_newlib(L, functions);
}
