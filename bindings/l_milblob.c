/* ane.milblob: MILBlob v2 weight files from Lua, for tools and tests.
 *   ane.milblob.write({ {dtype = "fp16", data = bytes}, ... }) -> file bytes, {record offsets}
 *   ane.milblob.read(bytes, [name]) -> { {offset =, dtype_code =, size =, data_offset =}, ... }, notes
 *                                      | nil, message (naming `name`, the record offset and field)
 *   ane.milblob.lookup(bytes, offset, dtype, size, [name]) -> data bytes, notes | nil, message
 * Files are read as the device reads them (ane_core/mil/milblob.h): `notes` lists what a
 * file does differently from the format (other writers' layouts), `message` what would give
 * garbage (data past the end, an offset that is no record). */
#include <stdlib.h>

#include "../ane_core/mil/milblob.h"
#include "ane_lua.h"

static uint32_t check_code(lua_State *L, int index) {
    ane_dtype dtype = ane_lua_check_dtype(L, index, ANE_FP16);
    uint32_t code = ane_milblob_code_for(dtype);
    if (!code) luaL_error(L, "MILBlob has no data type code for %s", ane_dtype_name(dtype));
    return code;
}

static int l_write(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    ane_milblob_writer writer;
    ane_milblob_writer_init(&writer);
    lua_Integer count = luaL_len(L, 1);
    lua_createtable(L, (int)count, 0);
    int offsets = lua_gettop(L);
    for (lua_Integer i = 1; i <= count; i++) {
        lua_geti(L, 1, i);
        if (!lua_istable(L, -1)) {
            ane_milblob_writer_free(&writer);
            return luaL_error(L, "blob %d must be a table {dtype =, data =}", (int)i);
        }
        lua_getfield(L, -1, "dtype");
        lua_getfield(L, -2, "data");
        size_t size;
        const char *data = lua_tolstring(L, -1, &size);
        ane_dtype dtype;
        const char *name = lua_tostring(L, -2);
        uint32_t code = name && ane_dtype_from_name(name, &dtype) ? ane_milblob_code_for(dtype) : 0;
        if (!data || !code) {
            ane_milblob_writer_free(&writer);
            return luaL_error(L, "blob %d needs a data string and a dtype with a MILBlob code", (int)i);
        }
        uint64_t offset;
        ane_error err;
        if (ane_milblob_add(&writer, code, data, size, &offset, &err)) {
            ane_milblob_writer_free(&writer);
            return ane_lua_raise(L, &err);
        }
        lua_pop(L, 3);
        lua_pushinteger(L, (lua_Integer)offset);
        lua_rawseti(L, offsets, i);
    }
    lua_pushlstring(L, writer.bytes.data, writer.bytes.length);
    ane_milblob_writer_free(&writer);
    lua_insert(L, offsets);
    return 2;
}

static int l_read(lua_State *L) {
    size_t size;
    const char *bytes = luaL_checklstring(L, 1, &size);
    const char *name = luaL_optstring(L, 2, "weight.bin");
    ane_milblob_record *records;
    int count;
    ane_error err;
    ane_notes notes = {0};
    ane_mil_file file = {.path = name, .bytes = (const uint8_t *)bytes, .size = size};
    if (ane_milblob_parse(&file, name, &records, &count, &notes, &err)) return ane_lua_fail(L, &err);
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) {
        lua_createtable(L, 0, 4);
        lua_pushinteger(L, (lua_Integer)records[i].record_offset);
        lua_setfield(L, -2, "offset");
        lua_pushinteger(L, records[i].code);
        lua_setfield(L, -2, "dtype_code");
        lua_pushinteger(L, (lua_Integer)records[i].size);
        lua_setfield(L, -2, "size");
        lua_pushinteger(L, (lua_Integer)records[i].data_offset);
        lua_setfield(L, -2, "data_offset");
        lua_rawseti(L, -2, i + 1);
    }
    free(records);
    ane_lua_push_notes(L, &notes);
    return 2;
}

static int l_lookup(lua_State *L) {
    size_t size;
    const char *bytes = luaL_checklstring(L, 1, &size);
    lua_Integer offset = luaL_checkinteger(L, 2);
    uint32_t code = check_code(L, 3);
    lua_Integer expected = luaL_checkinteger(L, 4);
    const char *name = luaL_optstring(L, 5, "weight.bin");
    const uint8_t *data;
    ane_error err;
    if (offset < 0 || expected < 0) return luaL_error(L, "offset and size must not be negative");
    ane_notes notes = {0};
    ane_mil_file file = {.path = name, .bytes = (const uint8_t *)bytes, .size = size};
    if (ane_milblob_lookup(&file, name, (uint64_t)offset, code, (uint64_t)expected, &data, &notes, &err))
        return ane_lua_fail(L, &err);
    lua_pushlstring(L, (const char *)data, (size_t)expected);
    ane_lua_push_notes(L, &notes);
    return 2;
}

void ane_lua_push_notes(lua_State *L, const ane_notes *notes) {
    lua_createtable(L, notes->count + (notes->dropped > 0), 0);
    for (int i = 0; i < notes->count; i++) {
        lua_pushstring(L, notes->text[i]);
        lua_rawseti(L, -2, i + 1);
    }
    if (notes->dropped) {
        lua_pushfstring(L, "... and %d more", notes->dropped);
        lua_rawseti(L, -2, notes->count + 1);
    }
}

void ane_lua_open_milblob(lua_State *L) {
    static const luaL_Reg functions[] = {{"write", l_write}, {"read", l_read}, {"lookup", l_lookup}, {NULL, NULL}};
    luaL_newlib(L, functions);
}
