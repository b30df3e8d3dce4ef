/* ane.quantize / ane.quantized: weights quantized per row (ane_core/tensor/quantize.h) as
 * Lua userdata of type "ane.Quantized". A quantized weight is what g:const and nn.linear
 * take in place of a tensor; the program then carries it compressed.
 *
 *   local q = ane.quantize(w, "int8")          -- or "int4", "q8_0", "q4_0"; opts.dtype = "fp16" (default) | "fp32"
 *   q:encoding(), q:dtype(), q:shape(), q:numel(), q:bytes(), q:dequantize(), q:gather(ids), q:reshape(O, I, 1, 1)
 *   q:matmul(x)                                -- W x for x fp32 [k, T] (the CPU classifier)
 *   q:data(), q:table()                        -- the stored tensors (int8 / packed uint8, fp32)
 *   q:blocks([name])                           -- GGUF's bytes of a q8_0 / q4_0 / q6_k weight (a GGUF writer's)
 *   ane.quantized{encoding =, dtype =, shape =, data =, table =}   -- from stored parts (loading)
 *   ane.blocks_quantized(bytes, "q8_0" | "q4_0" | "q6_k", {rows, k}, [name], [dtype])  -- GGUF's blocks kept
 *   ane.quantized.is(v) */
#include <stdlib.h>
#include <string.h>

#include "../ane_core/ir/graph.h"
#include "../ane_core/tensor/gemv.h"
#include "../ane_core/tensor/blocks.h"
#include "../ane_core/tensor/quantize.h"
#include "ane_lua.h"

#define QUANTIZED_TYPE "ane.Quantized"

static ane_quantized_weight *check_quantized(lua_State *L, int index) {
    return luaL_checkudata(L, index, QUANTIZED_TYPE);
}

ane_quantized_weight *ane_lua_test_quantized(lua_State *L, int index) {
    return luaL_testudata(L, index, QUANTIZED_TYPE);
}

static ane_quantized_weight *new_quantized(lua_State *L) {
    ane_quantized_weight *q = lua_newuserdatauv(L, sizeof *q, 0);
    memset(q, 0, sizeof *q);
    luaL_setmetatable(L, QUANTIZED_TYPE);
    return q;
}

static int q_gc(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    ane_tensor_release(&q->data);
    ane_tensor_release(&q->table);
    free(q->palette_codes[0]), free(q->palette_codes[1]);
    q->palette_codes[0] = q->palette_codes[1] = NULL;
    return 0;
}

static int64_t numel_of(const ane_quantized_weight *q) {
    int64_t n = 1;
    for (int i = 0; i < q->rank; i++) n *= q->shape[i];
    return n;
}

/* ane.quantize(tensor, "int8" | "int4" | "q8_0" | "q4_0", [{dtype = "fp16" | "fp32", name = label}]) */
static int l_quantize(lua_State *L) {
    ane_tensor *weight = ane_lua_check_tensor(L, 1);
    const char *name = luaL_checkstring(L, 2);
    ane_weight_encoding encoding;
    if (!ane_encoding_from_name(name, &encoding))
        return luaL_argerror(L, 2, lua_pushfstring(L, "encoding '%s' is not 'int8', 'int4', 'q8_0' or 'q4_0'", name));
    ane_dtype dtype = ANE_FP16;
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "dtype");
        dtype = ane_lua_check_dtype(L, lua_gettop(L), ANE_FP16);
        lua_pop(L, 1);
    }
    if (dtype != ANE_FP16 && dtype != ANE_FP32) return luaL_error(L, "ane.quantize: dtype must be fp16 or fp32");
    if (weight->ndim > ANE_IR_MAX_RANK) return luaL_error(L, "ane.quantize: rank %d is above %d", weight->ndim, ANE_IR_MAX_RANK);
    const char *label = "weight"; /* opts.name labels errors (the checkpoint's name of the weight) */
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "name");
        if (lua_isstring(L, -1)) label = lua_tostring(L, -1);
    }
    ane_quantized_weight *q = new_quantized(L);
    ane_error err;
    if (ane_quantize_rows(weight, encoding, dtype, label, &q->data, &q->table, &err)) return ane_lua_raise(L, &err);
    q->encoding = encoding;
    q->dtype = dtype;
    q->rank = weight->ndim;
    memcpy(q->shape, weight->shape, sizeof(int64_t) * (size_t)weight->ndim);
    return 1;
}

static ane_tensor *field_tensor(lua_State *L, int table, const char *key) {
    lua_getfield(L, table, key);
    ane_tensor *t = ane_lua_test_tensor(L, -1);
    if (!t) luaL_error(L, "ane.quantized: field '%s' must be a tensor", key);
    return t; /* left on the stack, which keeps it alive */
}

/* ane.quantized{encoding = "int8" | "int4" | "q8_0" | "q4_0", dtype = "fp16" | "fp32", shape = {...}, data =, table =} */
static int l_quantized(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "encoding");
    const char *name = lua_tostring(L, -1);
    ane_weight_encoding encoding;
    if (!name || !ane_encoding_from_name(name, &encoding))
        return luaL_error(L, "ane.quantized: encoding must be 'int8', 'int4', 'q8_0' or 'q4_0', got %s",
                          name ? name : luaL_typename(L, -1));
    lua_getfield(L, 1, "dtype");
    ane_dtype dtype = ane_lua_check_dtype(L, lua_gettop(L), ANE_FP16);
    lua_getfield(L, 1, "shape");
    if (!lua_istable(L, -1)) return luaL_error(L, "ane.quantized: field 'shape' must be a table of sizes");
    int64_t shape[ANE_MAX_DIMS];
    int rank = ane_lua_check_shape(L, lua_gettop(L), shape);
    ane_tensor *data = field_tensor(L, 1, "data");
    ane_tensor *table = field_tensor(L, 1, "table");
    /* the graph's checks, on a scratch graph, so parts that do not fit fail here, naming the field */
    ane_graph *g;
    ane_error err;
    ane_node *node;
    if (ane_graph_new("check", &g, &err)) return ane_lua_raise(L, &err);
    ane_tensor table32;
    ane_status status = ane_tensor_to(&table32, table, ANE_FP32, &err);
    if (!status) {
        status = ane_graph_const_encoded(g, "weight", dtype, rank, shape, encoding, data, &table32, &node, &err);
        if (status) ane_tensor_release(&table32);
    }
    ane_graph_free(g);
    if (status) {
        lua_pushfstring(L, "ane.quantized: %s", err.message);
        return lua_error(L);
    }
    ane_quantized_weight *q = new_quantized(L);
    ane_tensor_share(&q->data, data);
    q->table = table32;
    q->encoding = encoding;
    q->dtype = dtype;
    q->rank = rank;
    memcpy(q->shape, shape, sizeof(int64_t) * (size_t)rank);
    return 1;
}

static int l_quantized_call(lua_State *L) { /* ane.quantized{...}: drop the callable table */
    lua_remove(L, 1);
    return l_quantized(L);
}

static int q_is(lua_State *L) {
    lua_pushboolean(L, ane_lua_test_quantized(L, 1) != NULL);
    return 1;
}

static int q_encoding(lua_State *L) {
    lua_pushstring(L, ane_encoding_name(check_quantized(L, 1)->encoding));
    return 1;
}

static int q_dtype(lua_State *L) {
    lua_pushstring(L, ane_dtype_name(check_quantized(L, 1)->dtype));
    return 1;
}

static int q_shape(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    lua_createtable(L, q->rank, 0);
    for (int i = 0; i < q->rank; i++) {
        lua_pushinteger(L, q->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int q_numel(lua_State *L) {
    lua_pushinteger(L, numel_of(check_quantized(L, 1)));
    return 1;
}

/* Bytes stored: the codes plus the table in the weight's dtype (what the program carries). */
static int q_bytes(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    lua_pushinteger(L, ane_tensor_numel(&q->data) + ane_tensor_numel(&q->table) * (int64_t)ane_dtype_size(q->dtype));
    return 1;
}

/* The fp32 values the codes stand for, in the weight's shape. */
static int q_dequantize(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_empty(out, q->rank, q->shape, ANE_FP32, &err)) return ane_lua_raise(L, &err);
    int64_t rows = q->shape[0], k = rows ? numel_of(q) / rows : 0;
    ane_dequantize_rows(q->encoding, ane_tensor_data(&q->data), (const float *)ane_tensor_data(&q->table), k, 0, rows,
                        (float *)ane_tensor_data(out));
    return 1;
}

/* q:gather(ids) -> the fp32 values of rows ids (0-based) [#ids, k]: an embedding looked up in
 * its blocks, a row at a time (the table never dequantized whole). */
static int q_gather(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    lua_Integer count;
    int64_t *ids = ane_lua_read_integers(L, 2, "row id", &count); /* (pushes the array it fills) */
    int64_t rows = q->shape[0], k = rows ? numel_of(q) / rows : 0, shape[2] = {count, k};
    for (lua_Integer i = 0; i < count; i++)
        if (ids[i] < 0 || ids[i] >= rows)
            return luaL_error(L, "row id %I (position %I) is outside 0..%I", (lua_Integer)ids[i], (lua_Integer)(i + 1),
                              (lua_Integer)(rows - 1));
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_tensor_empty(out, 2, shape, ANE_FP32, &err)) return ane_lua_raise(L, &err);
    for (lua_Integer i = 0; i < count; i++)
        ane_dequantize_rows(q->encoding, ane_tensor_data(&q->data), (const float *)ane_tensor_data(&q->table), k, ids[i], 1,
                            (float *)ane_tensor_data(out) + i * k);
    return 1;
}

/* q:reshape(...): the same codes under another shape with the same rows (dimension 1). */
static int q_reshape(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    int64_t shape[ANE_MAX_DIMS];
    int rank = ane_lua_check_shape(L, 2, shape);
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= shape[i];
    if (rank < 1 || rank > ANE_IR_MAX_RANK || n != numel_of(q) || shape[0] != q->shape[0])
        return luaL_error(L, "quantized weight: reshape keeps the %lld elements and the %lld rows (dimension 1)",
                          (long long)numel_of(q), (long long)q->shape[0]);
    ane_quantized_weight *r = new_quantized(L);
    *r = *q;
    ane_tensor_share(&r->data, &q->data);
    ane_tensor_share(&r->table, &q->table);
    r->palette_codes[0] = r->palette_codes[1] = NULL; /* its own, when a product needs them */
    r->rank = rank;
    memcpy(r->shape, shape, sizeof(int64_t) * (size_t)rank);
    return 1;
}

/* q:matmul(x [, activations]): W x for x fp32 [k, T] (W viewed as [rows, k]), an fp32
 * [rows, T] tensor; activations "float" (the default: exact in the dequantized W), "int8"
 * or "int16" (blocks of 32 quantized for integer products, tensor/gemv.h). */
static int q_matmul(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    ane_tensor *x = ane_lua_check_tensor(L, 2);
    const char *activations_name = luaL_optstring(L, 3, "float");
    ane_activations activations;
    if (!ane_activations_from_name(activations_name, &activations))
        return luaL_error(L, "activations must be 'float', 'int8' or 'int16', not '%s'", activations_name);
    int64_t rows = q->shape[0], k = rows ? numel_of(q) / rows : 0;
    if (x->ndim != 2 || x->shape[0] != k || x->dtype != ANE_FP32)
        return luaL_error(L, "quantized weight [%lld, %lld]: matmul takes an fp32 [%lld, T] tensor", (long long)rows,
                          (long long)k, (long long)k);
    void **palette_codes = activations == ANE_ACTIVATIONS_FLOAT ? NULL : &q->palette_codes[activations == ANE_ACTIVATIONS_INT16];
    if (palette_codes && !*palette_codes && q->encoding == ANE_ENCODING_LUT4) { /* once per weight, not per product */
        *palette_codes = malloc((size_t)rows * ane_palette_codes_stride(activations) + 1);
        if (!*palette_codes) return luaL_error(L, "out of memory preparing a quantized weight's palettes");
        ane_palette_codes(*palette_codes, (const float *)ane_tensor_data(&q->table), rows, activations);
    }
    ane_tensor packed;
    ane_error err;
    if (ane_tensor_to(&packed, x, ANE_FP32, &err)) return ane_lua_raise(L, &err);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    int64_t shape[2] = {rows, x->shape[1]};
    ane_status status = ane_tensor_empty(out, 2, shape, ANE_FP32, &err);
    if (!status)
        status = ane_encoded_matmul((float *)ane_tensor_data(out), q->encoding, ane_tensor_data(&q->data),
                                    (const float *)ane_tensor_data(&q->table), palette_codes ? *palette_codes : NULL,
                                    (const float *)ane_tensor_data(&packed),
                                    rows, k, x->shape[1], activations, &err);
    ane_tensor_release(&packed);
    if (status) return ane_lua_raise(L, &err);
    return 1;
}

static int q_data(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_tensor_share(out, &q->data);
    return 1;
}

static int q_table(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_tensor_share(out, &q->table);
    return 1;
}

/* q:blocks([name]) -> GGUF's bytes of a q8_0 / q4_0 / q6_k weight (a uint8 tensor of its blocks, row
 * after row; tensor/blocks.h's ane_blocks_join), or nil and a message naming `name` */
static int q_blocks(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    const char *name = luaL_optstring(L, 2, "weight");
    ane_block_type type;
    if (!ane_encoding_is_gguf_block(q->encoding) || !ane_block_type_from_name(ane_encoding_name(q->encoding), &type))
        return luaL_error(L, "q:blocks: a %s weight has no GGUF blocks (q8_0, q4_0 and q6_k have)", ane_encoding_name(q->encoding));
    int64_t rows = q->shape[0];
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_blocks_join(type, &q->data, &q->table, rows, numel_of(q) / rows, name, out, &err)) return ane_lua_fail(L, &err);
    return 1;
}

static int q_tostring(lua_State *L) {
    ane_quantized_weight *q = check_quantized(L, 1);
    char shape[128];
    ane_shape_string(shape, sizeof shape, q->rank, q->shape);
    lua_pushfstring(L, "ane.quantized(%s, %s %s, %d bytes)", ane_encoding_name(q->encoding), ane_dtype_name(q->dtype),
                    shape, (int)(ane_tensor_numel(&q->data) + ane_tensor_numel(&q->table) * (int64_t)ane_dtype_size(q->dtype)));
    return 1;
}

/* ane.dequantize_blocks(bytes, "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "q4_k" | "q5_k" | "q6_k", shape, [name],
 * [dtype "fp32" (default) | "fp16": each weight rounded]) -> a tensor of shape from llama.cpp's blocks (a uint8 tensor of exactly those blocks; ane_core/tensor/blocks.h), or nil
 * and a message naming `name` for blocks that do not fit the shape or hold a non-finite scale */
static int l_dequantize_blocks(lua_State *L) {
    ane_tensor *blocks = ane_lua_check_tensor(L, 1);
    const char *type_name = luaL_checkstring(L, 2);
    ane_block_type type;
    if (!ane_block_type_from_name(type_name, &type))
        return luaL_argerror(L, 2, lua_pushfstring(L, "block type '%s' is not one of q8_0, q4_0, q4_1, q5_0, q5_1, q4_k, q5_k, q6_k", type_name));
    const char *name = luaL_optstring(L, 4, "blocks");
    ane_dtype dtype = lua_isnoneornil(L, 5) ? ANE_FP32 : ane_lua_check_dtype(L, 5, ANE_FP32);
    if (dtype != ANE_FP16 && dtype != ANE_FP32) return luaL_argerror(L, 5, "dtype must be fp32 or fp16");
    lua_Integer ndim;
    int64_t *shape = ane_lua_read_integers(L, 3, "shape", &ndim); /* (pushes the array it fills) */
    ane_tensor *out = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_blocks_dequantize(type, blocks, (int)ndim, shape, dtype, name, out, &err)) return ane_lua_fail(L, &err);
    return 1;
}

/* ane.blocks_quantized(bytes, "q8_0" | "q4_0" | "q6_k" | "q4_k" | "q5_k", {rows, k}, [name], [dtype]) -> a quantized
 * weight [rows, k] of that encoding holding the blocks' codes and scales as they are (q6_k: for
 * the CPU's products, q:matmul, not programs; tensor/blocks.h's
 * ane_blocks_split; dtype "fp16" (default) or "fp32", the program's), or nil and a message naming
 * `name` for blocks that do not fit the shape or hold a non-finite scale */
static int l_blocks_quantized(lua_State *L) {
    ane_tensor *blocks = ane_lua_check_tensor(L, 1);
    const char *type_name = luaL_checkstring(L, 2);
    ane_block_type type;
    ane_weight_encoding encoding;
    if (!ane_block_type_from_name(type_name, &type) || !ane_encoding_from_name(type_name, &encoding) ||
        !ane_encoding_is_gguf_block(encoding))
        return luaL_argerror(L, 2, lua_pushfstring(L, "block type '%s' is not q8_0, q4_0, q6_k, q4_k or q5_k (the others are "
                                                      "dequantized)", type_name));
    const char *name = luaL_optstring(L, 4, "blocks");
    ane_dtype dtype = lua_isnoneornil(L, 5) ? ANE_FP16 : ane_lua_check_dtype(L, 5, ANE_FP16);
    if (dtype != ANE_FP16 && dtype != ANE_FP32) return luaL_argerror(L, 5, "dtype must be fp16 or fp32");
    lua_Integer ndim;
    int64_t *shape = ane_lua_read_integers(L, 3, "shape", &ndim); /* (pushes the array it fills) */
    if (ndim != 2) return luaL_argerror(L, 3, "the shape of a quantized matrix is {rows, k}");
    ane_quantized_weight *q = new_quantized(L);
    ane_error err;
    if (ane_blocks_split(type, blocks, shape[0], shape[1], dtype, name, &q->data, &q->table, &err)) return ane_lua_fail(L, &err);
    q->encoding = encoding;
    q->dtype = dtype;
    q->rank = 2;
    memcpy(q->shape, shape, 2 * sizeof(int64_t));
    return 1;
}

static const luaL_Reg quantized_methods[] = {
    {"encoding", q_encoding}, {"dtype", q_dtype}, {"shape", q_shape}, {"numel", q_numel}, {"bytes", q_bytes},
    {"dequantize", q_dequantize}, {"gather", q_gather}, {"reshape", q_reshape}, {"matmul", q_matmul}, {"data", q_data}, {"table", q_table}, {"blocks", q_blocks}, {NULL, NULL},
};

void ane_lua_open_quantize(lua_State *L) {
    if (luaL_newmetatable(L, QUANTIZED_TYPE)) {
        luaL_newlib(L, quantized_methods);
        lua_setfield(L, -2, "__index");
        lua_pushcfunction(L, q_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, q_tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pop(L, 1);
    lua_pushcfunction(L, l_quantize);
    lua_setfield(L, -2, "quantize");
    lua_pushcfunction(L, l_dequantize_blocks);
    lua_setfield(L, -2, "dequantize_blocks");
    lua_pushcfunction(L, l_blocks_quantized);
    lua_setfield(L, -2, "blocks_quantized");
    lua_newtable(L); /* ane.quantized: a callable table with .is */
    lua_pushcfunction(L, q_is);
    lua_setfield(L, -2, "is");
    lua_newtable(L);
    lua_pushcfunction(L, l_quantized_call);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "quantized");
}
