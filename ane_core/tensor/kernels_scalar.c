/* The scalar reference kernels: every entry of the kernel table (kernels.h) in plain C, the
 * level ANELUA_CPU=scalar runs and the one the vector levels are checked against. Compiled
 * with -ffp-contract=off: a multiply and an add stay two roundings on every CPU (arm64 would
 * fuse them otherwise), so these are the same bits on x86-64 and arm64. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../base/fp16.h"
#include "kernels.h"

/* ------------------------------------------------ float activations */

static float dot_fp16(const uint16_t *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

static float dot_fp32(const float *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += w[j] * x[j];
    return total;
}

static float dot_int8(const int8_t *q, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

static float dot_lut4(const uint8_t *packed, const float *palette, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

/* Q8_0 and Q4_0 rows: dot_fp32 over the weights scale x code. */
static float dot_q8_0(const int8_t *q, const float *scales, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += scales[j / ANE_ENCODING_BLOCK] * (float)q[j] * x[j];
    return total;
}

static float dot_q4_0(const uint8_t *packed, const float *scales, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += scales[j / ANE_ENCODING_BLOCK] * (float)ane_q4_code(packed, j) * x[j];
    return total;
}

static float dot_q6_k(const uint8_t *blocks, const float *scales, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += scales[j / ANE_Q6_K_GROUP] * (float)ane_q6_code(blocks, j) * x[j];
    return total;
}

static float dot_q4_k(const uint8_t *packed, const float *pairs, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += ane_q4_k_weight(packed, pairs, j) * x[j];
    return total;
}

static float dot_q5_k(const uint8_t *packed, const float *pairs, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += ane_shifted_weight(ane_q5_k_code(packed, j), pairs, j) * x[j];
    return total;
}

void rows_by_dots(const gemv_job *job, int64_t first, int64_t last, kernel_weights weights, const float_dots *dots) {
    int64_t k = job->k, stride = job->row_stride, blocks = k / ANE_ENCODING_BLOCK;
    for (int64_t r = first; r < last; r++) {
        if (weights == WEIGHTS_FP32) job->y[r] = dots->fp32((const float *)job->w + r * stride, job->x, k);
        else if (weights == WEIGHTS_FP16) job->y[r] = dots->fp16((const uint16_t *)job->w + r * stride, job->x, k);
        else if (weights == WEIGHTS_INT8) job->y[r] = dots->int8((const int8_t *)job->w + r * k, job->x, k) * job->table[r];
        else if (weights == WEIGHTS_LUT4)
            job->y[r] = dots->lut4((const uint8_t *)job->w + r * (k / 2), job->table + r * ANE_LUT4_ENTRIES, job->x, k);
        else if (weights == WEIGHTS_Q8_0) job->y[r] = dots->q8_0((const int8_t *)job->w + r * k, job->table + r * blocks, job->x, k);
        else if (weights == WEIGHTS_Q4_0) job->y[r] = dots->q4_0((const uint8_t *)job->w + r * (k / 2), job->table + r * blocks, job->x, k);
        else if (weights == WEIGHTS_Q4_K)
            job->y[r] = dots->q4_k((const uint8_t *)job->w + r * (k / 2), job->table + r * 2 * blocks, job->x, k);
        else if (weights == WEIGHTS_Q5_K)
            job->y[r] = dots->q5_k((const uint8_t *)job->w + ane_encoded_data_bytes(ANE_ENCODING_Q5_K, r, k),
                                   job->table + r * 2 * blocks, job->x, k);
        else job->y[r] = dots->q6_k((const uint8_t *)job->w + r * ane_encoded_data_bytes(ANE_ENCODING_Q6_K, 1, k),
                                    job->table + r * (k / ANE_Q6_K_GROUP), job->x, k);
    }
}

static const float_dots dots = {dot_fp32, dot_fp16, dot_int8, dot_lut4, dot_q8_0, dot_q4_0, dot_q6_k, dot_q4_k, dot_q5_k};
ROWS_BY_DOTS(dots)

static const float *split_lut4(float *x_split, const float *x, int64_t k) {
    (void)x_split, (void)x, (void)k;
    return NULL;
}

static void vecmat_fp32(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n) {
#define AT(i, j) m[(i) * ld + (j)]
    VECMAT_COLUMNS(y, x, k, 0, n, AT)
#undef AT
}

static void vecmat_fp16(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n) {
#define AT(i, j) ane_fp16_to_fp32(m[(i) * ld + (j)])
    VECMAT_COLUMNS(y, x, k, 0, n, AT)
#undef AT
}

/* ------------------------------------------------ integer activations */

float blocks_int8(ane_weight_encoding encoding, const void *codes, const float *scales, const code_vector *v) {
    return blocks_int8_from(encoding, codes, scales, v, 0);
}

/* Q4_K's and Q5_K's blocks (kernels.h): per block (scale x the activations') x (S - offset x C). */
static float shifted_blocks_int8_from(ane_weight_encoding encoding, const uint8_t *data, const float *pairs,
                                      const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t b = from / ANE_ENCODING_BLOCK; b < v->k / ANE_ENCODING_BLOCK; b++) {
        int32_t sum = 0, codes = 0;
        for (int64_t j = b * ANE_ENCODING_BLOCK; j < (b + 1) * ANE_ENCODING_BLOCK; j++) {
            int code = encoding == ANE_ENCODING_Q4_K ? ane_q4_unsigned_code(data, j) : ane_q5_k_code(data, j);
            sum += code * v->codes8[j], codes += v->codes8[j];
        }
        float both = pairs[2 * b] * v->block_scales[b], shifted = (float)sum - pairs[2 * b + 1] * (float)codes;
        total += both * shifted;
    }
    return total;
}

float blocks_int8_from(ane_weight_encoding encoding, const void *codes, const float *scales, const code_vector *v,
                       int64_t from) {
    if (ane_encoding_is_shifted(encoding)) return shifted_blocks_int8_from(encoding, codes, scales, v, from);
    const int8_t *q = codes;
    int group = encoding == ANE_ENCODING_Q6_K ? ANE_Q6_K_GROUP : ANE_ENCODING_BLOCK; /* weights a scale covers */
    float total = 0.0f;
    for (int64_t g = from / group; g < v->k / group; g++) {
        int32_t sum = 0;
        for (int64_t j = g * group; j < (g + 1) * group; j++) {
            int code = encoding == ANE_ENCODING_Q8_0 ? q[j] : encoding == ANE_ENCODING_Q4_0 ? ane_q4_code(codes, j)
                                                                                            : ane_q6_code(codes, j);
            sum += code * v->codes8[j];
        }
        total += (scales[g] * v->block_scales[g * group / Q8_BLOCK]) * (float)sum;
    }
    return total;
}

void integer_block_rows(const integer_job *job, int64_t first, int64_t last, const block_dots_int8 *dots) {
    int64_t row_bytes = ane_encoded_data_bytes(job->encoding, 1, job->k);
    int64_t width = ane_encoded_table_width(job->encoding, job->k);
    block_dot_int8 dot = job->encoding == ANE_ENCODING_Q8_0   ? dots->q8_0
                         : job->encoding == ANE_ENCODING_Q4_0 ? dots->q4_0
                         : job->encoding == ANE_ENCODING_Q6_K ? dots->q6_k
                         : job->encoding == ANE_ENCODING_Q4_K ? dots->q4_k
                                                              : dots->q5_k;
    /* a row's fp16 table (integer_job) converted here, a row at a time, where it fits: memory
     * gives half the table's bytes, the dots read the same values from the copy in cache */
    enum { CONVERTED_MAX = 1024 };
    float converted[CONVERTED_MAX]; /* [width] */
    int from_half = job->half_table && width <= CONVERTED_MAX;
    for (int64_t r = first; r < last; r++) {
        const float *table = job->table + r * width;
        if (from_half) ane_fp16_to_fp32_n(converted, job->half_table + r * width, (size_t)width), table = converted;
        for (int64_t c = 0; c < job->count; c++)
            job->y[r * job->count + c] = dot((const char *)job->data + r * row_bytes, table, &job->columns[c]);
    }
}

static float q8_0_int8_dot(const void *codes, const float *scales, const code_vector *v) {
    return blocks_int8(ANE_ENCODING_Q8_0, codes, scales, v);
}

static float q4_0_int8_dot(const void *codes, const float *scales, const code_vector *v) {
    return blocks_int8(ANE_ENCODING_Q4_0, codes, scales, v);
}

static float q6_k_int8_dot(const void *codes, const float *scales, const code_vector *v) {
    return blocks_int8(ANE_ENCODING_Q6_K, codes, scales, v);
}

static float q4_k_int8_dot(const void *codes, const float *scales, const code_vector *v) {
    return blocks_int8(ANE_ENCODING_Q4_K, codes, scales, v);
}

static float q5_k_int8_dot(const void *codes, const float *scales, const code_vector *v) {
    return blocks_int8(ANE_ENCODING_Q5_K, codes, scales, v);
}

static void rows_blocks_int8(void *context, int64_t first, int64_t last) {
    static const block_dots_int8 dots = {q8_0_int8_dot, q4_0_int8_dot, q6_k_int8_dot, q4_k_int8_dot, q5_k_int8_dot};
    integer_block_rows(context, first, last, &dots);
}

float q8_int8_from(const int8_t *q, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q8_BLOCK) {
        int64_t last = first + Q8_BLOCK < v->k ? first + Q8_BLOCK : v->k;
        int32_t sum = 0;
        for (int64_t j = first; j < last; j++) sum += q[j] * v->codes8[j];
        total += v->block_scales[first / Q8_BLOCK] * (float)sum;
    }
    return total;
}

float q8_lut4_from(const uint8_t *packed, const palette8 *p, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q8_BLOCK) {
        int64_t last = first + Q8_BLOCK < v->k ? first + Q8_BLOCK : v->k;
        int32_t sum = 0;
        for (int64_t j = first; j < last; j++) sum += p->entries[(packed[j / 2] >> (4 * (j & 1))) & 15u] * v->codes8[j];
        total += v->block_scales[first / Q8_BLOCK] * (float)sum;
    }
    return total;
}

float q16_int8_from(const int8_t *q, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q16_BLOCK) {
        int64_t last = first + Q16_BLOCK < v->k ? first + Q16_BLOCK : v->k, sum = 0;
        for (int64_t j = first; j < last; j++) sum += (int32_t)q[j] * v->codes16[j];
        total += v->block_scales[first / Q16_BLOCK] * (float)sum;
    }
    return total;
}

float q16_lut4_from(const uint8_t *packed, const palette16 *p, const code_vector *v, int64_t from) {
    float total = 0.0f;
    for (int64_t first = from; first < v->k; first += Q16_BLOCK) {
        int64_t last = first + Q16_BLOCK < v->k ? first + Q16_BLOCK : v->k, sum = 0;
        for (int64_t j = first; j < last; j++) sum += (int32_t)p->entries[(packed[j / 2] >> (4 * (j & 1))) & 15u] * v->codes16[j];
        total += v->block_scales[first / Q16_BLOCK] * (float)sum;
    }
    return total;
}

static float q8_int8_dot(const int8_t *q, const code_vector *v) { return q8_int8_from(q, v, 0); }
static float q8_lut4_dot(const uint8_t *packed, const void *palette, const code_vector *v) {
    return q8_lut4_from(packed, palette, v, 0);
}
static float q16_int8_dot(const int8_t *q, const code_vector *v) { return q16_int8_from(q, v, 0); }
static float q16_lut4_dot(const uint8_t *packed, const void *palette, const code_vector *v) {
    return q16_lut4_from(packed, palette, v, 0);
}

void integer_rows_by_dots(const integer_job *job, int64_t first, int64_t last, integer_dot_int8 int8_dot,
                          integer_dot_lut4 lut4_dot) {
    int64_t count = job->count;
    size_t stride = job->activations == ANE_ACTIVATIONS_INT8 ? sizeof(palette8) : sizeof(palette16);
    for (int64_t r = first; r < last; r++) {
        float *y = job->y + r * count;
        if (job->encoding == ANE_ENCODING_INT8) {
            const int8_t *q = (const int8_t *)job->data + r * job->k;
            for (int64_t c = 0; c < count; c++) y[c] = int8_dot(q, &job->columns[c]) * job->table[r];
        } else {
            const char *palette = job->palette_codes + (size_t)r * stride;
            float scale = *(const float *)palette; /* palette8 and palette16 both start with it */
            const uint8_t *packed = (const uint8_t *)job->data + r * (job->k / 2);
            for (int64_t c = 0; c < count; c++) y[c] = lut4_dot(packed, palette, &job->columns[c]) * scale;
        }
    }
}

static void rows_q8(void *context, int64_t first, int64_t last) {
    integer_rows_by_dots(context, first, last, q8_int8_dot, q8_lut4_dot);
}

static void rows_q16(void *context, int64_t first, int64_t last) {
    integer_rows_by_dots(context, first, last, q16_int8_dot, q16_lut4_dot);
}

void fill_chunk_scales(code_vector *v) {
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK)
        for (int lane = 0; lane < 8; lane++) v->chunk_scales[j / 8 + lane] = v->block_scales[j / Q8_BLOCK + lane / 4];
}

static void arrange_nothing(code_vector *v, int for_lut4) { (void)v, (void)for_lut4; }
static void arrange_nothing_for_q4_0(code_vector *v) { (void)v; }

static void palette8_of(palette8 *p, const float *palette) {
    float largest = 0.0f;
    for (int i = 0; i < ANE_LUT4_ENTRIES; i++) largest = fabsf(palette[i]) > largest ? fabsf(palette[i]) : largest;
    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    p->scale = largest / 127.0f;
    for (int i = 0; i < ANE_LUT4_ENTRIES; i++) p->entries[i] = (int8_t)lrintf(palette[i] * inverse);
}

float block_codes16(const float *x, int64_t stride, int64_t count, float levels, int16_t *codes) {
    float largest = 0.0f;
    int not_finite = 0;
    for (int64_t j = 0; j < count; j++) {
        float a = fabsf(x[j * stride]);
        not_finite |= !isfinite(a);
        largest = a > largest ? a : largest;
    }
    float inverse = largest > 0.0f && !not_finite ? levels / largest : 0.0f;
    for (int64_t j = 0; j < count; j++) codes[j] = (int16_t)lrintf(x[j * stride] * inverse);
    return not_finite ? NAN : largest / levels; /* a NaN or inf makes the block's products NaN */
}

static void palette16_of(palette16 *p, const float *palette) {
    p->scale = block_codes16(palette, 1, ANE_LUT4_ENTRIES, (float)Q16_PALETTE_LEVELS, p->entries);
}

/* ------------------------------------------------ e^x, tanh, sigmoid, SiLU (vector_math.h)
 *
 * e^x: n = round(x log2 e), r = x - n ln 2 (ln 2 in two parts, |r| <= ln 2 / 2), e^r - 1 by
 * its Taylor series to r^8 / 8! (the first term left out is under 0.06 ulp there), and
 * e^x = 2^n (1 + (e^r - 1)), the power of two applied as two factors so that results
 * below 2^-126 round once, as subnormals. tanh |x| = m / (m + 2) with m = e^(2|x|) - 1
 * computed as 2^n (e^r - 1) + (2^n - 1), which keeps small |x| exact to the last bits
 * (no 1 - 2 / (e^2x + 1) cancellation); |x| >= 9 gives 1 (tanh 9 rounds to 1 in fp32). The
 * vector levels run these operations in this order (vector_math_constants.h), fused
 * multiply-adds where these write fmaf. */
#include "vector_math_constants.h"

static float power_of_two(int n) { /* 2^n for -126 <= n <= 127 */
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* x = n ln 2 + r; returns e^r - 1 and sets *n. x is finite and clamped. */
static float reduced_expm1(float x, int *n) {
    float whole = nearbyintf(x * LOG2_E);
    float r = fmaf(whole, -LN2_HIGH, x);
    r = fmaf(whole, -LN2_LOW, r);
    float p = TAYLOR[0];
    for (int i = 1; i < 7; i++) p = fmaf(p, r, TAYLOR[i]);
    *n = (int)whole;
    return fmaf(p, r * r, r);
}

float exp_scalar(float x) {
    if (x != x) return x;
    if (x < EXP_LOWEST) return 0.0f;
    int n;
    float m = reduced_expm1(x < EXP_HIGHEST ? x : EXP_HIGHEST, &n);
    int half = n >> 1; /* floor(n / 2): both factors are normal numbers */
    float first = power_of_two(half);
    return fmaf(first, m, first) * power_of_two(n - half);
}

static float tanh_scalar(float x) {
    if (x != x) return x;
    float magnitude = fabsf(x);
    magnitude = magnitude < TANH_SATURATES ? magnitude : TANH_SATURATES;
    int n;
    float m = reduced_expm1(magnitude + magnitude, &n);
    float scale = power_of_two(n);
    m = fmaf(scale, m, scale - 1.0f);
    return copysignf(m / (m + 2.0f), x);
}

/* With e = e^-|x| (never overflowing): sigmoid x = 1 / (1 + e) for x >= 0, e / (1 + e) below
 * (so sigmoid -88.8 is its subnormal 3e-39, not 1 / (1 + infinity) = 0); SiLU is x times it. */
static float sigmoid_scalar(float x) {
    float e = exp_scalar(-fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

static float silu_scalar(float x) {
    float e = exp_scalar(-fabsf(x));
    return (x >= 0.0f ? x : x * e) / (1.0f + e);
}

#define MAP_SCALAR(name, op)                                                   \
    static void name(float *out, const float *x, int64_t n) {                  \
        for (int64_t i = 0; i < n; i++) out[i] = op(x[i]);                     \
    }
MAP_SCALAR(exp_n, exp_scalar)
MAP_SCALAR(tanh_n, tanh_scalar)
MAP_SCALAR(sigmoid_n, sigmoid_scalar)
MAP_SCALAR(silu_n, silu_scalar)
#undef MAP_SCALAR

/* Summed in eight lanes (element i into lane i % 8) over the whole eights, the lanes in order,
 * then the tail: the order every level keeps. */
static float exp_shifted_sum(float *out, const float *x, float shift, int64_t n) {
    float lanes[8] = { 0 }, total = 0.0f;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int lane = 0; lane < 8; lane++) lanes[lane] += out[i + lane] = exp_scalar(x[i + lane] - shift);
    for (int lane = 0; lane < 8; lane++) total += lanes[lane];
    for (; i < n; i++) total += out[i] = exp_scalar(x[i] - shift);
    return total;
}

static void reduce_partials(float *partial, const float *x, int64_t from, int64_t whole, int take_max) {
    for (int64_t c = from; c < whole; c += 8)
        for (int l = 0; l < 8; l++) {
            float v = x[c + l];
            partial[l] = take_max ? (v > partial[l] || v != v ? v : partial[l]) : partial[l] + v;
        }
}

/* ------------------------------------------------ AdamW, 4-bit rows, transposes */

void adamw_scalar(const adamw_constants *c, float *p, float *m, float *v, const float *g, int64_t count) {
    for (int64_t i = 0; i < count; i++) {
        float gi = g[i] * c->scale;
        m[i] = c->b1 * m[i] + (1.0f - c->b1) * gi;
        v[i] = c->b2 * v[i] + (1.0f - c->b2) * gi * gi;
        float m_hat = m[i] * c->inv_c1, v_hat = v[i] * c->inv_c2;
        p[i] -= c->lr * (m_hat / (sqrtf(v_hat) + c->eps) + c->wd * p[i]);
    }
}

void lut4_decode_scalar(const uint8_t *packed, const float *palette, int64_t count, float *out) {
    for (int64_t j = 0; j < count; j++) out[j] = palette[(packed[j / 2] >> (4 * (j % 2))) & 15u];
}

static void transpose_tile(const transpose_job *j, int64_t r0, int64_t c0) {
    for (int64_t r = r0; r < r0 + TRANSPOSE_TILE; r++)
        for (int64_t c = c0; c < c0 + TRANSPOSE_TILE; c++) j->out[r * j->cols + c] = j->in[r + c * j->column_step];
}

void ane_kernels_scalar(ane_kernel_table *t) {
    t->level = "scalar";
    t->rows_float[WEIGHTS_FP32] = rows_fp32;
    t->rows_float[WEIGHTS_FP16] = rows_fp16;
    t->rows_float[WEIGHTS_INT8] = rows_int8;
    t->rows_float[WEIGHTS_LUT4] = rows_lut4;
    t->rows_float[WEIGHTS_Q8_0] = rows_q8_0;
    t->rows_float[WEIGHTS_Q4_0] = rows_q4_0;
    t->rows_float[WEIGHTS_Q6_K] = rows_q6_k;
    t->rows_float[WEIGHTS_Q4_K] = rows_q4_k;
    t->rows_float[WEIGHTS_Q5_K] = rows_q5_k;
    t->rows_blocks_int8 = rows_blocks_int8;
    t->rows_fp16_columns = NULL, t->fp16_columns_at_once = 1; /* (a column at a time) */
    t->arrange_q4_0_codes8 = arrange_nothing_for_q4_0;
    t->split_lut4 = split_lut4;
    t->lut4_reads_words = 0;
    t->vecmat_fp32 = vecmat_fp32;
    t->vecmat_fp16 = vecmat_fp16;
    t->rows_integer[0][0] = t->rows_integer[1][0] = rows_q8;
    t->rows_integer[0][1] = t->rows_integer[1][1] = rows_q16;
    t->quantize_block8 = NULL;
    t->quantize_block16 = NULL;
    t->arrange_codes8 = t->arrange_codes16 = arrange_nothing;
    t->palette8 = palette8_of;
    t->palette16 = palette16_of;
    t->exp = exp_n;
    t->tanh = tanh_n;
    t->sigmoid = sigmoid_n;
    t->silu = silu_n;
    t->exp_shifted_sum = exp_shifted_sum;
    t->reduce_partials = reduce_partials;
    t->adamw = adamw_scalar;
    t->lut4_decode = lut4_decode_scalar;
    t->transpose_tile = transpose_tile;
}
