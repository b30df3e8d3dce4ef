/* ane.tensor: host tensors as Lua userdata (type "ane.Tensor").
 *
 * The userdata holds an ane_tensor by value; its storage is refcounted, so views made by
 * slice/transpose/reshape keep the bytes alive on their own and no user values are needed.
 * Indices, dimensions and slice bounds are 1-based and inclusive, as usual in Lua. Result
 * userdata are created before the core fills them, so a failing core call leaves nothing
 * to free but an empty userdata for the collector. */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "../ane_core/base/hash.h"
#include "../ane_core/base/memory_read.h"
#include "../ane_core/tensor/intern.h"
#include "../ane_core/tensor/storage.h"
#include "../ane_core/tensor/vector_math.h"
#include "ane_lua.h"

/* ------------------------------------------------------------------ helpers */

static int tensor_gc(lua_State *L) {
    ane_tensor *t = luaL_checkudata(L, 1, ANE_TENSOR_TYPE);
    ane_tensor_release(t);
    return 0;
}

/* Lua's collector sees only the small userdata boxes, not the tensor bytes behind them, so
 * it would let hundreds of megabytes of dead tensors pile up (and every new large block
 * would cost fresh pages). When live tensor storage has grown by COLLECT_AFTER_BYTES since
 * the last collection, collect now: freed blocks then get reused. A full collection takes
 * ~0.1 ms (a Qwen3 session) to ~0.3 ms (GPT-2 training, ~0.03 s a 2-3 s step); a smaller
 * margin means fewer fresh pages: at 32 MB a Qwen3-0.6B decode (a new 600 KB logits row per
 * token) faulted in fresh memory for its first ~50 tokens, 3% of their time. */
enum { COLLECT_AFTER_BYTES = 8 << 20 };

static void collect_if_pressured(lua_State *L) {
    static size_t next_collection = COLLECT_AFTER_BYTES;
    size_t live = ane_storage_live_heap_bytes();
    if (live <= next_collection) return;
    lua_gc(L, LUA_GCCOLLECT);
    next_collection = ane_storage_live_heap_bytes() + COLLECT_AFTER_BYTES;
}

/* Pushes an empty tensor userdata for a core function to fill. */
ane_tensor *ane_lua_new_tensor_slot(lua_State *L) {
    collect_if_pressured(L);
    ane_tensor *t = lua_newuserdatauv(L, sizeof *t, 0);
    memset(t, 0, sizeof *t);
    luaL_setmetatable(L, ANE_TENSOR_TYPE);
    return t;
}

void ane_lua_push_tensor(lua_State *L, ane_tensor *t) {
    ane_tensor *slot = ane_lua_new_tensor_slot(L);
    *slot = *t;
}

ane_tensor *ane_lua_test_tensor(lua_State *L, int index) {
    ane_tensor *t = luaL_testudata(L, index, ANE_TENSOR_TYPE);
    return t && t->storage ? t : NULL;
}

ane_tensor *ane_lua_check_tensor(lua_State *L, int index) {
    ane_tensor *t = luaL_checkudata(L, index, ANE_TENSOR_TYPE);
    if (!t->storage) luaL_argerror(L, index, "tensor has no storage (it failed to build)");
    return t;
}

ane_dtype ane_lua_check_dtype(lua_State *L, int index, ane_dtype fallback) {
    if (lua_isnoneornil(L, index)) return fallback;
    const char *name = luaL_checkstring(L, index);
    ane_dtype dtype;
    if (!ane_dtype_from_name(name, &dtype))
        luaL_argerror(L, index, lua_pushfstring(L, "unknown dtype '%s' (expected one of: %s)", name,
                                                 ane_dtype_all_names()));
    return dtype;
}

int64_t ane_lua_check_integer_arg(lua_State *L, int index, const char *what) {
    int is_integer;
    lua_Integer value = lua_tointegerx(L, index, &is_integer);
    if (!is_integer)
        luaL_argerror(L, index, lua_pushfstring(L, "%s must be an integer, got %s", what, luaL_typename(L, index)));
    return value;
}

int64_t *ane_lua_read_integers(lua_State *L, int index, const char *what, lua_Integer *count) {
    luaL_checktype(L, index, LUA_TTABLE);
    *count = luaL_len(L, index);
    int64_t *values = lua_newuserdatauv(L, (size_t)(*count + 1) * sizeof *values, 0);
    for (lua_Integer i = 0; i < *count; i++) {
        lua_geti(L, index, i + 1);
        values[i] = ane_lua_check_integer_arg(L, -1, what);
        lua_pop(L, 1);
    }
    return values;
}

int ane_lua_check_shape(lua_State *L, int index, int64_t *shape) {
    if (lua_isinteger(L, index)) { /* shape given as separate integers */
        int top = lua_gettop(L), ndim = top - index + 1;
        if (ndim > ANE_MAX_DIMS) luaL_error(L, "a tensor has at most %d dimensions", ANE_MAX_DIMS);
        for (int i = 0; i < ndim; i++) shape[i] = ane_lua_check_integer_arg(L, index + i, "shape entry");
        return ndim;
    }
    luaL_argexpected(L, lua_istable(L, index), index, "shape table");
    lua_Integer ndim = luaL_len(L, index);
    if (ndim > ANE_MAX_DIMS)
        luaL_argerror(L, index, lua_pushfstring(L, "a tensor has at most %d dimensions, got %d", ANE_MAX_DIMS, (int)ndim));
    for (int i = 0; i < ndim; i++) {
        lua_geti(L, index, i + 1);
        int is_integer;
        lua_Integer size = lua_tointegerx(L, -1, &is_integer);
        if (!is_integer || size < 0)
            luaL_argerror(L, index, lua_pushfstring(L, "shape[%d] must be a non-negative integer, got %s", i + 1,
                                                     is_integer ? lua_tostring(L, -1) : luaL_typename(L, -1)));
        shape[i] = size;
        lua_pop(L, 1);
    }
    return (int)ndim;
}

/* Stores the Lua value at `index` into one element, or returns 0 if it is not usable. */
static int store_lua_value(lua_State *L, int index, char *element, ane_dtype dtype) {
    if (lua_isinteger(L, index)) {
        ane_dtype_store_int(element, dtype, lua_tointeger(L, index));
        return 1;
    }
    if (lua_type(L, index) == LUA_TNUMBER) {
        ane_dtype_store(element, dtype, lua_tonumber(L, index));
        return 1;
    }
    if (lua_isboolean(L, index)) {
        ane_dtype_store_int(element, dtype, lua_toboolean(L, index));
        return 1;
    }
    return 0;
}

static void push_element(lua_State *L, const char *element, ane_dtype dtype) {
    switch (ane_dtype_kind_of(dtype)) {
    case ANE_KIND_FLOAT: lua_pushnumber(L, ane_dtype_load(element, dtype)); break;
    case ANE_KIND_BOOL: lua_pushboolean(L, ane_dtype_load_int(element, dtype) != 0); break;
    default: lua_pushinteger(L, ane_dtype_load_int(element, dtype)); break;
    }
}

/* 1-based, inclusive Lua position -> 0-based; negative positions count from the end. */
static int64_t lua_position(int64_t position, int64_t size) { return position < 0 ? size + position : position - 1; }

static int check_dim_arg(lua_State *L, int index, const ane_tensor *t) {
    int64_t dim = ane_lua_check_integer_arg(L, index, "dimension");
    int64_t zero_based = lua_position(dim, t->ndim);
    if (zero_based < 0 || zero_based >= t->ndim)
        luaL_argerror(L, index, lua_pushfstring(L, "dimension %d does not exist in a %d-D tensor", (int)dim, t->ndim));
    return (int)zero_based;
}

/* ------------------------------------------------------------------ constructors */

/* ane.tensor(shape, dtype) -> zeros */
static int tensor_call(lua_State *L) {
    int64_t shape[ANE_MAX_DIMS];
    int ndim = ane_lua_check_shape(L, 2, shape);
    ane_dtype dtype = ane_lua_check_dtype(L, 3, ANE_FP32);
    ane_tensor *t = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_zeros(t, ndim, shape, dtype, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* The shape of nested tables, read down the first entries: {{1, 2, 3}, {4, 5, 6}} -> [2, 3].
 * Raggedness is caught while filling. */
static int infer_shape(lua_State *L, int index, int64_t *shape) {
    int ndim = 0;
    lua_pushvalue(L, index);
    while (lua_istable(L, -1)) {
        if (ndim == ANE_MAX_DIMS) luaL_error(L, "values nest deeper than %d levels", ANE_MAX_DIMS);
        shape[ndim++] = luaL_len(L, -1);
        if (shape[ndim - 1] == 0) break;
        lua_geti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);
    return ndim;
}

typedef struct fill_state {
    char *data;            /* the tensor's contiguous bytes */
    size_t element_size;
    int64_t next, numel;
    ane_dtype dtype;
    const int64_t *nested_shape; /* when values nest like the shape, checked level by level */
    int ndim;
} fill_state;

/* Writes the leaves of (possibly nested) tables in order. */
static void fill_from_values(lua_State *L, int index, fill_state *state, int depth) {
    lua_Integer length = luaL_len(L, index);
    if (state->nested_shape && length != state->nested_shape[depth])
        luaL_error(L, "values are ragged: %d entries at depth %d where %d were expected", (int)length, depth + 1,
                   (int)state->nested_shape[depth]);
    for (lua_Integer i = 1; i <= length; i++) {
        lua_geti(L, index, i);
        int is_table = lua_istable(L, -1);
        if (state->nested_shape && is_table != (depth + 1 < state->ndim))
            luaL_error(L, "values are ragged: a %s at depth %d", luaL_typename(L, -1), depth + 2);
        if (is_table) {
            fill_from_values(L, lua_gettop(L), state, depth + 1);
        } else {
            if (state->next >= state->numel)
                luaL_error(L, "values has more than the %d elements of the shape", (int)state->numel);
            if (!store_lua_value(L, -1, state->data + state->next * state->element_size, state->dtype))
                luaL_error(L, "values element %d is a %s, expected a number", (int)state->next + 1, luaL_typename(L, -1));
            state->next++;
        }
        lua_pop(L, 1);
    }
}

/* ane.tensor.from(values, [shape], [dtype]): values flat (with shape) or nested tables. */
static int tensor_from(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    int64_t shape[ANE_MAX_DIMS];
    int ndim, nested = !lua_istable(L, 2);
    if (!nested) {
        ndim = ane_lua_check_shape(L, 2, shape);
    } else {
        ndim = infer_shape(L, 1, shape);
        if (!lua_isnoneornil(L, 2) && !lua_isstring(L, 2)) luaL_argexpected(L, 0, 2, "shape table or dtype");
        if (lua_isstring(L, 2)) { /* from(values, dtype) */
            lua_settop(L, 2);
            lua_pushnil(L);
            lua_insert(L, 2);
        }
    }
    ane_dtype dtype = ane_lua_check_dtype(L, 3, ANE_FP32);
    ane_tensor *t = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_zeros(t, ndim, shape, dtype, &err)) return ane_lua_raise(L, &err);
    fill_state state = {ane_tensor_data(t), ane_dtype_size(dtype), 0, ane_tensor_numel(t), dtype,
                        nested ? shape : NULL, ndim};
    fill_from_values(L, 1, &state, 0);
    if (state.next != state.numel) {
        char text[128];
        return luaL_error(L, "values has %d elements but shape %s needs %d", (int)state.next,
                          ane_shape_string(text, sizeof text, ndim, shape), (int)state.numel);
    }
    return 1;
}

/* ane.tensor.from_bytes(string, shape, [dtype]) */
static int tensor_from_bytes(lua_State *L) {
    size_t length;
    const char *bytes = luaL_checklstring(L, 1, &length);
    int64_t shape[ANE_MAX_DIMS];
    int ndim = ane_lua_check_shape(L, 2, shape);
    ane_dtype dtype = ane_lua_check_dtype(L, 3, ANE_FP32);
    ane_tensor *t = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_zeros(t, ndim, shape, dtype, &err)) return ane_lua_raise(L, &err);
    size_t expected = (size_t)ane_tensor_numel(t) * ane_dtype_size(dtype);
    if (length != expected)
        return luaL_error(L, "from_bytes: %d bytes given, but %d %s elements need %d", (int)length,
                          (int)ane_tensor_numel(t), ane_dtype_name(dtype), (int)expected);
    memcpy(ane_tensor_data(t), bytes, length);
    return 1;
}

double ane_lua_option_number(lua_State *L, int index, const char *key, double fallback) {
    if (!lua_istable(L, index)) return fallback;
    lua_getfield(L, index, key);
    double value = fallback;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER) luaL_error(L, "option '%s' must be a number, got %s", key, luaL_typename(L, -1));
        value = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return value;
}

static ane_dtype option_dtype(lua_State *L, int index) {
    if (!lua_istable(L, index)) return ANE_FP32;
    lua_getfield(L, index, "dtype");
    ane_dtype dtype = ane_lua_check_dtype(L, lua_gettop(L), ANE_FP32);
    lua_pop(L, 1);
    return dtype;
}

/* The draw's seed: the option's (reproducible), or a fresh one when none is given. */
static uint64_t option_seed(lua_State *L, int index) {
    if (!lua_istable(L, index)) return ane_random_fresh_seed();
    lua_getfield(L, index, "seed");
    int is_integer;
    lua_Integer seed = lua_tointegerx(L, -1, &is_integer);
    if (!is_integer && !lua_isnil(L, -1)) luaL_error(L, "option 'seed' must be an integer");
    int given = !lua_isnil(L, -1);
    lua_pop(L, 1);
    return given ? (uint64_t)seed : ane_random_fresh_seed();
}

/* ane.tensor.randn(shape, {seed=, mean=, std=, dtype=}) and
 * ane.tensor.rand(shape, {seed=, low=, high=, dtype=}) (uniform in [low, high)) */
static int random_tensor(lua_State *L, int normal) {
    int64_t shape[ANE_MAX_DIMS];
    int ndim = ane_lua_check_shape(L, 1, shape);
    if (!lua_isnoneornil(L, 2)) luaL_checktype(L, 2, LUA_TTABLE);
    ane_dtype dtype = option_dtype(L, 2);
    uint64_t seed = option_seed(L, 2);
    double p0 = ane_lua_option_number(L, 2, normal ? "mean" : "low", 0), p1 = ane_lua_option_number(L, 2, normal ? "std" : "high", 1);
    ane_tensor *t = ane_lua_new_tensor_slot(L);
    ane_error err;
    ane_status status = normal ? ane_tensor_randn(t, ndim, shape, dtype, seed, p0, p1, &err)
                               : ane_tensor_rand(t, ndim, shape, dtype, seed, p0, p1, &err);
    if (status) return ane_lua_raise(L, &err);
    return 1;
}

static int tensor_randn(lua_State *L) { return random_tensor(L, 1); }
static int tensor_rand(lua_State *L) { return random_tensor(L, 0); }

/* ------------------------------------------------------------------ queries */

static int push_int64_array(lua_State *L, const int64_t *values, int count) {
    lua_createtable(L, count, 0);
    for (int i = 0; i < count; i++) {
        lua_pushinteger(L, values[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int m_shape(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    return push_int64_array(L, t->shape, t->ndim);
}

static int m_strides(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    return push_int64_array(L, t->strides, t->ndim);
}

static int m_dtype(lua_State *L) {
    lua_pushstring(L, ane_dtype_name(ane_lua_check_tensor(L, 1)->dtype));
    return 1;
}

static int m_numel(lua_State *L) {
    lua_pushinteger(L, ane_tensor_numel(ane_lua_check_tensor(L, 1)));
    return 1;
}

static int m_element_size(lua_State *L) {
    lua_pushinteger(L, (lua_Integer)ane_dtype_size(ane_lua_check_tensor(L, 1)->dtype));
    return 1;
}

/* ane.tensor.is(value) -> true for a tensor */
static int tensor_is(lua_State *L) {
    lua_pushboolean(L, ane_lua_test_tensor(L, 1) != NULL);
    return 1;
}

static int m_ndim(lua_State *L) {
    lua_pushinteger(L, ane_lua_check_tensor(L, 1)->ndim);
    return 1;
}

static int m_is_contiguous(lua_State *L) {
    lua_pushboolean(L, ane_tensor_is_contiguous(ane_lua_check_tensor(L, 1)));
    return 1;
}

/* #t: the size of the first dimension (0 for a scalar) */
static int m_len(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    lua_pushinteger(L, t->ndim ? t->shape[0] : 0);
    return 1;
}

static int push_converted(lua_State *L, const ane_tensor *t, ane_dtype dtype);

/* t:checksum() -> 16 hex digits over the dtype, the shape and the values (row-major), so a
 * flipped byte in a checkpoint's data or a changed shape or dtype gives another checksum. */
static int m_checksum(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    const char *dtype = ane_dtype_name(t->dtype);
    uint64_t h = ane_hash64(ANE_HASH_SEED, dtype, strlen(dtype));
    for (int d = 0; d < t->ndim; d++) {
        int64_t extent = t->shape[d];
        h = ane_hash64(h, &extent, sizeof extent);
    }
    const ane_tensor *source = t;
    if (!ane_tensor_is_contiguous(t)) {
        push_converted(L, t, t->dtype);
        source = lua_touserdata(L, -1);
    }
    h = ane_hash64(h, ane_tensor_data((ane_tensor *)source), (size_t)ane_tensor_numel(source) * ane_dtype_size(source->dtype));
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)h);
    lua_pushstring(L, hex);
    return 1;
}

/* t:xor_words() -> the XOR of the contiguous tensor's bytes as little-endian 8-byte words (the
 * last zero-padded), read on every core: the benches time it as the memory's read rate. */
static int m_xor_words(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    if (!ane_tensor_is_contiguous(t)) return luaL_error(L, "xor_words: the tensor is a strided view (copy it first)");
    lua_pushinteger(L, (lua_Integer)ane_xor_words(ane_tensor_data(t), (size_t)ane_tensor_numel(t) * ane_dtype_size(t->dtype)));
    return 1;
}

/* The contiguous bytes of the tensor in its dtype (native byte order). */
static int m_bytes(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    if (ane_tensor_is_contiguous(t)) {
        lua_pushlstring(L, ane_tensor_data(t), (size_t)ane_tensor_numel(t) * ane_dtype_size(t->dtype));
        return 1;
    }
    push_converted(L, t, t->dtype);
    ane_tensor *copy = lua_touserdata(L, -1);
    lua_pushlstring(L, ane_tensor_data(copy), (size_t)ane_tensor_numel(copy) * ane_dtype_size(copy->dtype));
    return 1;
}

static char *element_at_args(lua_State *L, ane_tensor *t, int first) {
    int count = lua_gettop(L) - first + 1;
    if (count != t->ndim)
        luaL_error(L, "a %d-D tensor needs %d indices, got %d", t->ndim, t->ndim, count < 0 ? 0 : count);
    int64_t index[ANE_MAX_DIMS];
    for (int i = 0; i < t->ndim; i++) {
        int64_t position = ane_lua_check_integer_arg(L, first + i, "index");
        index[i] = position - 1;
        if (position < 1) index[i] = -1; /* reported as out of range below */
    }
    char *element;
    ane_error err;
    if (ane_tensor_element(t, index, &element, &err)) ane_lua_raise(L, &err);
    return element;
}

/* t:get(i, j, ...) with 1-based indices */
static int m_get(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    push_element(L, element_at_args(L, t, 2), t->dtype);
    return 1;
}

/* t:intern() -> t: its bytes become read-only and shared with every program const of the
 * same bytes (compiled programs hold no copy of their own; tensor/intern.h). */
static int m_intern(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    ane_intern_add(t);
    lua_settop(L, 1);
    return 1;
}

/* t:is_readonly() -> whether writes through t are refused (it maps a file, or is interned) */
static int m_is_readonly(lua_State *L) {
    lua_pushboolean(L, ane_lua_check_tensor(L, 1)->storage->readonly);
    return 1;
}

/* t:release_pages() -> t: a tensor mapping a file gives back the pages it has read (they
 * leave resident memory; reading t again brings them back); other tensors: nothing. */
static int m_release_pages(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    if (ane_tensor_is_contiguous(t))
        ane_storage_release_pages(t->storage, t->offset, (size_t)ane_tensor_numel(t) * ane_dtype_size(t->dtype));
    lua_settop(L, 1);
    return 1;
}

/* t:set(value, i, j, ...) */
static int m_set(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    luaL_checkany(L, 2);
    if (t->storage->readonly) return luaL_error(L, "tensor is read-only (it maps a file, or programs share it as a weight); copy() it before writing");
    char *element = element_at_args(L, t, 3);
    if (!store_lua_value(L, 2, element, t->dtype))
        luaL_argexpected(L, 0, 2, "number");
    lua_settop(L, 1);
    return 1;
}

static void push_nested(lua_State *L, const ane_tensor *t, int dim, const char *base) {
    if (dim == t->ndim) {
        push_element(L, base, t->dtype);
        return;
    }
    luaL_checkstack(L, 4, "tensor nests too deep");
    lua_createtable(L, (int)t->shape[dim], 0);
    size_t step = (size_t)t->strides[dim] * ane_dtype_size(t->dtype);
    for (int64_t i = 0; i < t->shape[dim]; i++) {
        push_nested(L, t, dim + 1, base + i * step);
        lua_rawseti(L, -2, i + 1);
    }
}

/* t:totable() -> nested tables (a number for a 0-D tensor) */
static int m_totable(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    push_nested(L, t, 0, ane_tensor_data(t));
    return 1;
}

static int m_tostring(lua_State *L) {
    ane_tensor *t = luaL_checkudata(L, 1, ANE_TENSOR_TYPE);
    if (!t->storage) {
        lua_pushliteral(L, "ane.tensor (empty)");
        return 1;
    }
    char shape[256];
    luaL_Buffer b;
    luaL_buffinit(L, &b);
    lua_pushfstring(L, "ane.tensor %s %s {", ane_dtype_name(t->dtype), ane_shape_string(shape, sizeof shape, t->ndim, t->shape));
    luaL_addvalue(&b);
    /* Up to 8 values in storage order of the logical layout. */
    int64_t numel = ane_tensor_numel(t), shown = numel < 8 ? numel : 8, index[ANE_MAX_DIMS] = {0};
    for (int64_t k = 0; k < shown; k++) {
        char *element;
        ane_tensor_element(t, index, &element, NULL);
        char text[64];
        if (ane_dtype_kind_of(t->dtype) == ANE_KIND_FLOAT) snprintf(text, sizeof text, "%.6g", ane_dtype_load(element, t->dtype));
        else snprintf(text, sizeof text, "%" PRId64, ane_dtype_load_int(element, t->dtype));
        luaL_addstring(&b, k ? ", " : " ");
        luaL_addstring(&b, text);
        for (int i = t->ndim - 1; i >= 0 && ++index[i] == t->shape[i]; i--) index[i] = 0;
    }
    luaL_addstring(&b, numel > shown ? ", ... }" : " }");
    luaL_pushresult(&b);
    return 1;
}

/* ------------------------------------------------------------------ views and copies */

/* t:slice(dim, start, [stop]) with 1-based inclusive bounds; negative ones count from the end */
static int m_slice(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    int dim = check_dim_arg(L, 2, t);
    int64_t size = t->shape[dim];
    int64_t start = lua_position(ane_lua_check_integer_arg(L, 3, "slice start"), size);
    int64_t stop = lua_isnoneornil(L, 4) ? size : lua_position(ane_lua_check_integer_arg(L, 4, "slice stop"), size) + 1;
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_slice(out, t, dim, start, stop, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* t:transpose([d0, d1]); defaults to the last two dimensions */
static int m_transpose(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    int d0 = lua_isnoneornil(L, 2) ? t->ndim - 2 : check_dim_arg(L, 2, t);
    int d1 = lua_isnoneornil(L, 3) ? t->ndim - 1 : check_dim_arg(L, 3, t);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_transpose(out, t, d0, d1, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* t:reshape(shape) or t:reshape(d1, d2, ...); one entry may be -1 */
static int m_reshape(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    int64_t shape[ANE_MAX_DIMS];
    int ndim;
    if (lua_istable(L, 2)) {
        ndim = (int)luaL_len(L, 2);
        if (ndim > ANE_MAX_DIMS) return luaL_error(L, "a tensor has at most %d dimensions", ANE_MAX_DIMS);
        for (int i = 0; i < ndim; i++) {
            lua_geti(L, 2, i + 1);
            shape[i] = ane_lua_check_integer_arg(L, -1, "shape entry");
            lua_pop(L, 1);
        }
    } else {
        ndim = lua_gettop(L) - 1;
        if (ndim > ANE_MAX_DIMS) return luaL_error(L, "a tensor has at most %d dimensions", ANE_MAX_DIMS);
        for (int i = 0; i < ndim; i++) shape[i] = ane_lua_check_integer_arg(L, i + 2, "shape entry");
    }
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_reshape(out, t, ndim, shape, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* Pushes a new contiguous copy of t in `dtype`. */
static int push_converted(lua_State *L, const ane_tensor *t, ane_dtype dtype) {
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_to(out, t, dtype, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* t:to(dtype) -> a new contiguous tensor */
static int m_to(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    luaL_argcheck(L, !lua_isnoneornil(L, 2), 2, "dtype expected");
    return push_converted(L, t, ane_lua_check_dtype(L, 2, t->dtype));
}

static int m_copy(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    return push_converted(L, t, t->dtype);
}

/* t:<method>(u) writing u's values into t by `write`; returns t */
static int write_from(lua_State *L, ane_status (*write)(ane_tensor *, const ane_tensor *, ane_error *)) {
    ane_tensor *t = ane_lua_check_tensor(L, 1), *u = ane_lua_check_tensor(L, 2);
    ane_error err;
    if (write(t, u, &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

/* t:copy_from(u): writes u's values into t (same shape), converting dtypes */
static int m_copy_from(lua_State *L) { return write_from(L, ane_tensor_copy_into); }

/* t:add_from(u): t += u in place (same shape), in t's dtype */
static int m_add_from(lua_State *L) { return write_from(L, ane_tensor_add_into); }

static int m_fill(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    double value = lua_isboolean(L, 2) ? lua_toboolean(L, 2) : luaL_checknumber(L, 2);
    ane_error err;
    if (ane_tensor_fill(t, value, &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

/* ------------------------------------------------------------------ arithmetic */

/* The operand at `index` as a tensor: a tensor, or a number made into a 0-D tensor of the
 * other operand's dtype (fp32 when that is an integer dtype and the number is not). */
static ane_tensor *operand(lua_State *L, int index, const ane_tensor *other) {
    if (lua_type(L, index) != LUA_TNUMBER) return ane_lua_check_tensor(L, index);
    ane_dtype dtype = other->dtype;
    if (ane_dtype_kind_of(dtype) != ANE_KIND_FLOAT && !lua_isinteger(L, index)) dtype = ANE_FP32;
    ane_tensor *scalar = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_zeros(scalar, 0, NULL, dtype, &err)) ane_lua_raise(L, &err);
    store_lua_value(L, index, ane_tensor_data(scalar), dtype);
    lua_replace(L, index);
    return scalar;
}

static int binary(lua_State *L, ane_binary_op op) {
    ane_tensor *a, *b;
    if (lua_type(L, 1) == LUA_TNUMBER) { /* 2 - t from the metamethods */
        b = ane_lua_check_tensor(L, 2);
        a = operand(L, 1, b);
    } else {
        a = ane_lua_check_tensor(L, 1);
        b = operand(L, 2, a);
    }
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_binary(out, a, b, op, &err)) return ane_lua_raise(L, &err);
    return 1;
}

static int m_add(lua_State *L) { return binary(L, ANE_BINARY_ADD); }
static int m_sub(lua_State *L) { return binary(L, ANE_BINARY_SUB); }
static int m_mul(lua_State *L) { return binary(L, ANE_BINARY_MUL); }
static int m_div(lua_State *L) { return binary(L, ANE_BINARY_DIV); }

static int m_scale(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    double factor = luaL_checknumber(L, 2);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_scale(out, t, factor, &err)) return ane_lua_raise(L, &err);
    return 1;
}

static int m_unm(lua_State *L) {
    lua_settop(L, 1);
    lua_pushnumber(L, -1.0);
    return m_scale(L);
}

static int m_matmul(lua_State *L) {
    ane_tensor *a = ane_lua_check_tensor(L, 1), *b = ane_lua_check_tensor(L, 2);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_matmul(out, a, b, &err)) return ane_lua_raise(L, &err);
    return 1;
}

static int m_max_abs_diff(lua_State *L) {
    ane_tensor *a = ane_lua_check_tensor(L, 1), *b = ane_lua_check_tensor(L, 2);
    double diff;
    ane_error err;
    if (ane_tensor_max_abs_diff(a, b, &diff, &err)) return ane_lua_raise(L, &err);
    lua_pushnumber(L, diff);
    return 1;
}

/* t:first_outside([limit = inf]) -> the 0-based flat index and value of the first element
 * that is NaN or of magnitude >= limit, or nil (ane_tensor_first_outside) */
static int m_first_outside(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    double limit = luaL_optnumber(L, 2, HUGE_VAL), value;
    int64_t index;
    ane_error err;
    if (ane_tensor_first_outside(t, limit, &index, &value, &err)) return ane_lua_raise(L, &err);
    if (index < 0) return 0;
    lua_pushinteger(L, index);
    lua_pushnumber(L, value);
    return 2;
}

/* t:allclose(u, [rtol = 1e-5], [atol = 1e-8]), numpy's defaults */
static int m_allclose(lua_State *L) {
    ane_tensor *a = ane_lua_check_tensor(L, 1), *b = ane_lua_check_tensor(L, 2);
    double rtol = luaL_optnumber(L, 3, 1e-5), atol = luaL_optnumber(L, 4, 1e-8);
    int close;
    ane_error err;
    if (ane_tensor_allclose(a, b, rtol, atol, &close, &err)) return ane_lua_raise(L, &err);
    lua_pushboolean(L, close);
    return 1;
}

/* t:gather(ids) -> rows of t by 0-based ids (token ids index embedding tables directly) */
static int m_gather(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    lua_Integer count;
    int64_t *ids = ane_lua_read_integers(L, 2, "row id", &count);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_gather_rows(out, t, ids, count, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* t:topk(k) -> values, positions (1-based, in the flattened tensor), largest first */
static int m_topk(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    lua_Integer k = luaL_optinteger(L, 2, 1);
    if (k < 1 || k > ane_tensor_numel(t)) return luaL_argerror(L, 2, "k must be 1..numel");
    int64_t *indices = lua_newuserdatauv(L, (size_t)k * sizeof *indices, 0);
    double *values = lua_newuserdatauv(L, (size_t)k * sizeof *values, 0);
    ane_error err;
    if (ane_tensor_topk(t, k, indices, values, &err)) return ane_lua_raise(L, &err);
    lua_createtable(L, (int)k, 0);
    lua_createtable(L, (int)k, 0);
    for (lua_Integer i = 0; i < k; i++) {
        lua_pushnumber(L, values[i]);
        lua_rawseti(L, -3, i + 1);
        lua_pushinteger(L, indices[i] + 1);
        lua_rawseti(L, -2, i + 1);
    }
    return 2;
}

/* row:sample(temperature, top_k, top_p, u, [min_p]) -> a 1-based index drawn from softmax(row /
 * temperature) over its top_k largest (nil or 0: all), cut to the top_p nucleus (nil: none),
 * after min_p's cut (nil or 0: none), with u in [0, 1) (ane_tensor_sample) */
static int m_sample(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    double temperature = luaL_checknumber(L, 2);
    lua_Integer top_k = luaL_optinteger(L, 3, 0);
    double top_p = luaL_optnumber(L, 4, 1.0), u = luaL_checknumber(L, 5), min_p = luaL_optnumber(L, 6, 0.0);
    int64_t index;
    ane_error err;
    if (ane_tensor_sample(t, temperature, top_k, top_p, min_p, u, &index, &err)) return ane_lua_raise(L, &err);
    lua_pushinteger(L, index + 1);
    return 1;
}

/* t:abs() -> |t| elementwise (fp32 result for float inputs, the same dtype otherwise) */
static int m_abs(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_to(out, t, ANE_FP32, &err)) return ane_lua_raise(L, &err);
    float *data = (float *)ane_tensor_data(out);
    int64_t n = ane_tensor_numel(out);
    for (int64_t i = 0; i < n; i++) data[i] = fabsf(data[i]);
    return 1;
}

/* t:tanh() -> a new fp32 tensor of tanh of each element (the CPU kernels' tanh) */
static int m_tanh(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_to(out, t, ANE_FP32, &err)) return ane_lua_raise(L, &err);
    float *data = (float *)ane_tensor_data(out);
    ane_tanh_n(data, data, ane_tensor_numel(out));
    return 1;
}

/* t:argmax() -> the 1-based flat position of the largest element */
static int m_argmax(lua_State *L) {
    ane_tensor *t = ane_lua_check_tensor(L, 1);
    int64_t index;
    double value;
    ane_error err;
    if (ane_tensor_topk(t, 1, &index, &value, &err)) return ane_lua_raise(L, &err);
    lua_pushinteger(L, index + 1);
    return 1;
}

/* ------------------------------------------------------------------ registration */

void ane_lua_open_tensor(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"shape", m_shape}, {"strides", m_strides}, {"dtype", m_dtype}, {"numel", m_numel}, {"element_size", m_element_size},
        {"ndim", m_ndim}, {"is_contiguous", m_is_contiguous}, {"bytes", m_bytes}, {"checksum", m_checksum}, {"xor_words", m_xor_words}, {"get", m_get},
        {"set", m_set}, {"totable", m_totable}, {"slice", m_slice}, {"transpose", m_transpose},
        {"reshape", m_reshape}, {"to", m_to}, {"copy", m_copy}, {"copy_from", m_copy_from}, {"add_from", m_add_from},
        {"fill", m_fill}, {"add", m_add}, {"sub", m_sub}, {"mul", m_mul}, {"div", m_div},
        {"scale", m_scale}, {"matmul", m_matmul}, {"max_abs_diff", m_max_abs_diff},
        {"first_outside", m_first_outside},
        {"allclose", m_allclose}, {"gather", m_gather}, {"topk", m_topk}, {"sample", m_sample}, {"argmax", m_argmax}, {"abs", m_abs}, {"tanh", m_tanh},
        {"intern", m_intern}, {"is_readonly", m_is_readonly}, {"release_pages", m_release_pages}, {NULL, NULL},
    };
    static const luaL_Reg metamethods[] = {
        {"__gc", tensor_gc}, {"__tostring", m_tostring}, {"__len", m_len}, {"__add", m_add},
        {"__sub", m_sub}, {"__mul", m_mul}, {"__div", m_div}, {"__unm", m_unm}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_TENSOR_TYPE);
    luaL_setfuncs(L, metamethods, 0);
    luaL_newlib(L, methods);
    luaL_setfuncs(L, ane_lua_train_methods, 0); /* l_train.c */
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    static const luaL_Reg constructors[] = {
        {"from", tensor_from}, {"from_bytes", tensor_from_bytes}, {"randn", tensor_randn},
        {"rand", tensor_rand}, {"is", tensor_is}, {NULL, NULL},
    };
    luaL_newlib(L, constructors);
    luaL_setfuncs(L, ane_lua_train_functions, 0); /* l_train.c */
    lua_newtable(L); /* ane.tensor(shape, dtype) through __call */
    lua_pushcfunction(L, tensor_call);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
}
