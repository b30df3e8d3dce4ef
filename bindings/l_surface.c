/* ane.surface: ANE I/O buffers as Lua userdata (type "ane.Surface").
 *
 * The userdata boxes an ane_surface pointer. __gc, __close and s:close() share one
 * idempotent release; methods on a closed surface raise an error. Tensor views returned
 * by s:tensor() hold the surface's storage, so they stay valid after close. */
#include <string.h>

#include "../ane_core/tensor/surface.h"
#include "ane_lua.h"

typedef struct surface_box {
    ane_surface *surface; /* NULL once closed */
} surface_box;

static ane_surface *check_surface(lua_State *L, int index) {
    surface_box *box = luaL_checkudata(L, index, ANE_SURFACE_TYPE);
    if (!box->surface) luaL_error(L, "attempt to use a closed surface");
    return box->surface;
}

ane_surface *ane_lua_test_surface(lua_State *L, int index) {
    surface_box *box = luaL_testudata(L, index, ANE_SURFACE_TYPE);
    if (box && !box->surface) luaL_error(L, "attempt to use a closed surface");
    return box ? box->surface : NULL;
}

static int surface_release(lua_State *L) {
    surface_box *box = luaL_checkudata(L, 1, ANE_SURFACE_TYPE);
    ane_surface_destroy(box->surface);
    box->surface = NULL;
    return 0;
}

static lua_Integer field_integer(lua_State *L, int table, const char *key, lua_Integer fallback, int required) {
    lua_getfield(L, table, key);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        if (required) luaL_error(L, "ane.surface: field '%s' is required", key);
        return fallback;
    }
    int is_integer;
    lua_Integer value = lua_tointegerx(L, -1, &is_integer);
    if (!is_integer) luaL_error(L, "ane.surface: field '%s' must be an integer, got %s", key, luaL_typename(L, -1));
    lua_pop(L, 1);
    return value;
}

/* ane.surface{channels = C, seq = S, dtype = "fp16" | "fp32", alloc_size = bytes,
 * below_minimum = true}: below_minimum allows an allocation under ANE-04's 49,152 bytes (the
 * probes bisect the device's minimum with it; the runtime never makes one). */
static int surface_new(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer channels = field_integer(L, 1, "channels", 0, 1);
    lua_Integer seq = field_integer(L, 1, "seq", 0, 1);
    lua_Integer alloc_size = field_integer(L, 1, "alloc_size", 0, 0);
    if (alloc_size < 0) return luaL_error(L, "ane.surface: alloc_size must not be negative");
    lua_getfield(L, 1, "dtype");
    ane_dtype dtype = ane_lua_check_dtype(L, lua_gettop(L), ANE_FP16);
    lua_getfield(L, 1, "below_minimum");
    int below_minimum = lua_toboolean(L, -1);
    lua_pop(L, 2);
    surface_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->surface = NULL;
    luaL_setmetatable(L, ANE_SURFACE_TYPE);
    ane_error err;
    if (ane_surface_create_sized(&box->surface, channels, seq, dtype, (size_t)alloc_size, below_minimum, &err))
        return ane_lua_fail(L, &err);
    return 1;
}

static int m_write(lua_State *L) {
    ane_surface *surface = check_surface(L, 1);
    ane_tensor *t = ane_lua_check_tensor(L, 2);
    ane_error err;
    if (ane_surface_write(surface, t, &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

/* s:read([dtype]) -> a new [1, C, 1, S] tensor (the surface's dtype by default) */
static int m_read(lua_State *L) {
    ane_surface *surface = check_surface(L, 1);
    ane_dtype dtype = ane_lua_check_dtype(L, 2, surface->dtype);
    ane_tensor result = {0};
    ane_error err;
    if (ane_surface_read(surface, dtype, &result, &err)) return ane_lua_raise(L, &err);
    ane_lua_push_tensor(L, &result);
    return 1;
}

/* s:tensor() -> a [1, C, 1, S] view sharing the surface's memory (padded row stride) */
static int m_tensor(lua_State *L) {
    ane_surface *surface = check_surface(L, 1);
    ane_tensor view = {0};
    ane_error err;
    if (ane_surface_view(surface, &view, &err)) return ane_lua_raise(L, &err);
    ane_lua_push_tensor(L, &view);
    return 1;
}

static int m_info(lua_State *L) {
    ane_surface *surface = check_surface(L, 1);
    lua_createtable(L, 0, 8);
    lua_createtable(L, 4, 0);
    lua_Integer shape[4] = {1, surface->channels, 1, surface->seq};
    for (int i = 0; i < 4; i++) {
        lua_pushinteger(L, shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "shape");
    lua_pushinteger(L, surface->channels);
    lua_setfield(L, -2, "channels");
    lua_pushinteger(L, surface->seq);
    lua_setfield(L, -2, "seq");
    lua_pushstring(L, ane_dtype_name(surface->dtype));
    lua_setfield(L, -2, "dtype");
    lua_pushinteger(L, (lua_Integer)surface->row_stride);
    lua_setfield(L, -2, "row_stride");
    lua_pushinteger(L, (lua_Integer)surface->alloc_size);
    lua_setfield(L, -2, "alloc_size");
    lua_pushstring(L, surface->platform_handle ? "iosurface" : "memory");
    lua_setfield(L, -2, "kind");
    return 1;
}

static int m_tostring(lua_State *L) {
    surface_box *box = luaL_checkudata(L, 1, ANE_SURFACE_TYPE);
    if (!box->surface) {
        lua_pushliteral(L, "ane.surface (closed)");
        return 1;
    }
    ane_surface *s = box->surface;
    lua_pushfstring(L, "ane.surface %s [1, %d, 1, %d] row_stride=%d alloc_size=%d", ane_dtype_name(s->dtype),
                    (int)s->channels, (int)s->seq, (int)s->row_stride, (int)s->alloc_size);
    return 1;
}

/* ane.surface.layout{channels=, seq=, dtype=} -> row_stride, min_alloc (no allocation) */
static int surface_layout(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_Integer channels = field_integer(L, 1, "channels", 0, 1), seq = field_integer(L, 1, "seq", 0, 1);
    lua_getfield(L, 1, "dtype");
    ane_dtype dtype = ane_lua_check_dtype(L, lua_gettop(L), ANE_FP16);
    size_t row_stride, min_alloc;
    ane_error err;
    if (ane_surface_layout(channels, seq, dtype, &row_stride, &min_alloc, &err)) return ane_lua_raise(L, &err);
    lua_pushinteger(L, (lua_Integer)row_stride);
    lua_pushinteger(L, (lua_Integer)min_alloc);
    return 2;
}

static int surface_call(lua_State *L) {
    lua_remove(L, 1); /* the ane.surface table itself */
    return surface_new(L);
}

void ane_lua_open_surface(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"write", m_write}, {"read", m_read}, {"tensor", m_tensor}, {"info", m_info},
        {"close", surface_release}, {NULL, NULL},
    };
    static const luaL_Reg metamethods[] = {
        {"__gc", surface_release}, {"__close", surface_release}, {"__tostring", m_tostring}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_SURFACE_TYPE);
    luaL_setfuncs(L, metamethods, 0);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    lua_newtable(L);
    lua_pushinteger(L, ANE_SURFACE_MIN_ALLOC);
    lua_setfield(L, -2, "MIN_ALLOC");
    lua_pushinteger(L, ANE_SURFACE_ROW_ALIGN);
    lua_setfield(L, -2, "ROW_ALIGN");
    lua_pushcfunction(L, surface_layout);
    lua_setfield(L, -2, "layout");
    lua_newtable(L);
    lua_pushcfunction(L, surface_call);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
}
