/* ane.cpu_kernels(): the CPU kernel level in use (ane_core/tensor/kernels.h), and
 * ane.kernel_time(name, options): seconds per call of one CPU kernel, or of the platform
 * library's counterpart on the same input, timed here in C so a Lua call's cost stays out of
 * it (scripts/bench/cpu_kernels.lua alternates the two and prints their ratios).
 *
 * Names: gemv_fp32 | gemv_fp16 | gemv_int8 | gemv_int4 (a decode step's matrix-vector product,
 * [rows, k] weights, float activations, on the helper threads as in a decode), sgemv (the BLAS's
 * cblas_sgemv on the fp32 weights: Accelerate on macOS, OpenBLAS elsewhere), gemm_fp16 (the
 * fp16 weights times `columns` columns, a server's batched step: ane_gemm_fp16_few_columns),
 * sgemm (cblas_sgemm on the fp32 weights and the same columns), exp | tanh | sigmoid
 * | silu | sum | max (over n values), vvexpf | vvtanhf | sve | maxv (Accelerate's vForce and vDSP
 * counterparts; macOS only), adamw (n parameters). options: rows, k, n, columns (gemm_fp16 and
 * sgemm: 1 to ANE_FEW_COLUMNS, default 8), calls (default 20). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../ane_core/base/fp16.h"
#include "../ane_core/tensor/blas.h"
#include "../ane_core/tensor/gemv.h"
#include "../ane_core/tensor/kernels.h"
#include "../ane_core/tensor/vector_math.h"
#include "ane_lua.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int l_cpu_kernels(lua_State *L) {
    lua_pushstring(L, ane_kernels()->level);
    return 1;
}

static int64_t option(lua_State *L, const char *name, int64_t fallback) {
    if (lua_type(L, 2) != LUA_TTABLE) return fallback;
    lua_getfield(L, 2, name);
    int64_t value = lua_isnil(L, -1) ? fallback : (int64_t)luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    if (value < 1) luaL_error(L, "ane.kernel_time: %s must be at least 1", name);
    return value;
}

/* Inputs of every kernel: weights [rows, k] in each encoding, x [k, columns] (its first column
 * a matrix-vector product's x), y [rows, columns], values [n]. */
typedef struct inputs {
    int64_t rows, k, n, columns;
    float *w, *x, *y, *scales, *palettes, *values, *out, *m, *v;
    uint16_t *w16;
    int8_t *q;
    uint8_t *packed;
    ane_error err; /* why a kernel that can fail failed (call: -2) */
} inputs;

static void free_inputs(inputs *in) {
    free(in->w), free(in->x), free(in->y), free(in->scales), free(in->palettes), free(in->values), free(in->out);
    free(in->m), free(in->v), free(in->w16), free(in->q), free(in->packed);
}

static int make_inputs(inputs *in, int64_t rows, int64_t k, int64_t n, int64_t columns) {
    memset(in, 0, sizeof *in);
    in->rows = rows, in->k = k = (k + 1) / 2 * 2, in->n = n, in->columns = columns;
    in->w = malloc(sizeof(float) * rows * k), in->w16 = malloc(2 * rows * k), in->q = malloc(rows * k);
    in->packed = malloc(rows * k / 2), in->x = malloc(sizeof(float) * k * columns), in->y = malloc(sizeof(float) * rows * columns);
    in->scales = malloc(sizeof(float) * rows), in->palettes = malloc(sizeof(float) * rows * 16);
    in->values = malloc(sizeof(float) * n), in->out = malloc(sizeof(float) * n);
    in->m = calloc((size_t)n, sizeof(float)), in->v = calloc((size_t)n, sizeof(float));
    if (!in->w || !in->w16 || !in->q || !in->packed || !in->x || !in->y || !in->scales || !in->palettes || !in->values ||
        !in->out || !in->m || !in->v)
        return 0;
    uint32_t state = 1;
#define UNIFORM() (state = state * 1664525u + 1013904223u, (float)((double)(state >> 8) / (1 << 23) - 1.0))
    for (int64_t i = 0; i < rows * k; i++) {
        in->w[i] = 0.02f * UNIFORM();
        in->w16[i] = ane_fp32_to_fp16(in->w[i]);
        in->q[i] = (int8_t)(127.0f * UNIFORM());
    }
    for (int64_t i = 0; i < rows * k / 2; i++) in->packed[i] = (uint8_t)(128.0f + 127.0f * UNIFORM());
    for (int64_t i = 0; i < rows * 16; i++) in->palettes[i] = 0.02f * UNIFORM();
    for (int64_t i = 0; i < rows; i++) in->scales[i] = 0.0002f;
    for (int64_t i = 0; i < k * columns; i++) in->x[i] = UNIFORM();
    for (int64_t i = 0; i < n; i++) in->values[i] = 4.0f * UNIFORM();
#undef UNIFORM
    return 1;
}

/* One call of the named kernel; 0 for an unknown name, -1 for one this platform lacks, -2 for a
 * failure (in->err says why). */
static int call(const char *name, inputs *in) {
    int64_t rows = in->rows, k = in->k, n = in->n, columns = in->columns;
    if (!strcmp(name, "gemv_fp32")) ane_gemv_fp32(in->y, in->w, in->x, rows, k);
    else if (!strcmp(name, "gemv_fp16")) ane_gemv_fp16(in->y, in->w16, in->x, rows, k);
    else if (!strcmp(name, "gemv_int8")) return ane_gemv_encoded(in->y, ANE_ENCODING_INT8, in->q, in->scales, in->x, rows, k, &in->err) ? -2 : 1;
    else if (!strcmp(name, "gemv_int4")) return ane_gemv_encoded(in->y, ANE_ENCODING_LUT4, in->packed, in->palettes, in->x, rows, k, &in->err) ? -2 : 1;
    else if (!strcmp(name, "sgemv"))
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)rows, (int)k, 1.0f, in->w, (int)k, in->x, 1, 0.0f, in->y, 1);
    else if (!strcmp(name, "gemm_fp16")) return ane_gemm_fp16_few_columns(in->y, in->w16, in->x, rows, k, columns, &in->err) ? -2 : 1;
    else if (!strcmp(name, "sgemm"))
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)columns, (int)k, 1.0f, in->w, (int)k, in->x,
                    (int)columns, 0.0f, in->y, (int)columns);
    else if (!strcmp(name, "exp")) ane_exp_n(in->out, in->values, n);
    else if (!strcmp(name, "tanh")) ane_tanh_n(in->out, in->values, n);
    else if (!strcmp(name, "sigmoid")) ane_sigmoid_n(in->out, in->values, n);
    else if (!strcmp(name, "silu")) ane_silu_n(in->out, in->values, n);
    else if (!strcmp(name, "sum")) in->out[0] = ane_sum_n(in->values, n);
    else if (!strcmp(name, "max")) in->out[0] = ane_max_n(in->values, n);
    else if (!strcmp(name, "adamw")) {
        adamw_constants c = {0.9f, 0.999f, 1e-7f, 1e-8f, 0.0f, 10.0f, 1000.0f, 1.0f};
        ane_kernels()->adamw(&c, in->out, in->m, in->v, in->values, n);
    }
#if defined(__APPLE__)
    else if (!strcmp(name, "vvexpf")) { int count = (int)n; vvexpf(in->out, in->values, &count); }
    else if (!strcmp(name, "vvtanhf")) { int count = (int)n; vvtanhf(in->out, in->values, &count); }
    else if (!strcmp(name, "sve")) vDSP_sve(in->values, 1, in->out, (vDSP_Length)n);
    else if (!strcmp(name, "maxv")) vDSP_maxv(in->values, 1, in->out, (vDSP_Length)n);
#else
    else if (!strcmp(name, "vvexpf") || !strcmp(name, "vvtanhf") || !strcmp(name, "sve") || !strcmp(name, "maxv")) return -1;
#endif
    else return 0;
    return 1;
}

/* The last shape's inputs, kept for the next call of the same shape (a bench alternates kernels
 * on one input; making a classifier's weights takes longer than timing them). */
static inputs kept;

static int l_kernel_time(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    int64_t rows = option(L, "rows", 768), k = option(L, "k", 768), n = option(L, "n", 4096), calls = option(L, "calls", 20);
    int64_t columns = option(L, "columns", 8);
    if (columns > ANE_FEW_COLUMNS) luaL_error(L, "ane.kernel_time: columns must be at most %d", ANE_FEW_COLUMNS);
    if (!kept.w || kept.rows != rows || kept.k != (k + 1) / 2 * 2 || kept.n != n || kept.columns != columns) {
        free_inputs(&kept);
        if (!make_inputs(&kept, rows, k, n, columns)) {
            free_inputs(&kept);
            memset(&kept, 0, sizeof kept);
            return luaL_error(L, "ane.kernel_time: out of memory for [%lld, %lld] weights", (long long)rows, (long long)k);
        }
    }
    inputs in = kept;
    int known = call(name, &in); /* and a first call, untimed: pages touched, threads awake */
    if (known == -2) return ane_lua_raise(L, &in.err);
    if (known <= 0) {
        if (known < 0) {
            lua_pushnil(L);
            lua_pushfstring(L, "%s is Accelerate's (macOS only)", name);
            return 2;
        }
        return luaL_error(L, "ane.kernel_time: unknown kernel '%s'", name);
    }
    double start = now();
    for (int64_t i = 0; i < calls; i++) call(name, &in);
    double seconds = (now() - start) / (double)calls;
    lua_pushnumber(L, seconds);
    return 1;
}

void ane_lua_open_kernels(lua_State *L) {
    lua_pushcfunction(L, l_cpu_kernels);
    lua_setfield(L, -2, "cpu_kernels");
    lua_pushcfunction(L, l_kernel_time);
    lua_setfield(L, -2, "kernel_time");
}
