/* Every entry of this CPU's kernel table (tensor/kernels.h) against the scalar reference
 * table (ane_kernels_scalar) on the same inputs, in one process: shapes that leave every
 * vector tail, special values, NaN and inf. What kernels.h specifies is held bit for bit: the
 * products over a cache (vecmat), e^x, tanh, sigmoid, SiLU, a softmax row's numerators and
 * their sum, sums and maxima, AdamW, decoded 4-bit rows, transposes, the integer codes, block
 * scales and palettes; within one level, fp16 rows give the sums of their fp32 values and
 * whole chunks of ANE_GEMV_CHUNK zeros add nothing. The other products are held to bounds:
 * float activations to 2 k u sum_j |w_j x_j| from the scalar sum (two fp32 sums of k products in
 * different orders, each within k u of the exact one; u = 2^-24), plus 2^-16 sum |w x| for the
 * AVX-512 BF16 4-bit kernel (x read as two bf16 parts: test_gemv.c derives it); integer
 * activations to 2 (k / 4 + 2) u sum of the blocks' |scale x integer sum| (the kernels' fp32
 * sums of exact integer lane sums; test_gemv.c), and on arm64, whose kernels add each block's
 * exact sum in the scalar order, bit for bit.
 *
 * ANELUA_TEST_EXPECT_LEVEL=name makes the level in use part of the check (the aarch64 row runs
 * this under qemu's cortex-a53, plain NEON, and its max CPU, with the dot products). Prints the
 * level and how many kernels and cases were checked. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/fp16.h"
#include "ane_core/tensor/gemv.h"
#include "ane_core/tensor/kernels.h"
#include "check.h"

static ane_kernel_table scalar;
static const ane_kernel_table *level;
static int kernels_checked, cases, bitwise_cases, bounded_cases;

static uint32_t state = 7;
static float uniform(void) { /* in [-1, 1) */
    state = state * 1664525u + 1013904223u;
    return (float)((double)(state >> 8) / (1 << 23) - 1.0);
}

static int same_bits(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static void bitwise(int equal, const char *what, long long detail) {
    cases++, bitwise_cases++;
    CHECK(equal, "%s (%lld): this level's bits differ from the scalar kernel's", what, detail);
}

/* ------------------------------------------------ float activations */

static const int64_t lengths[] = { 1, 2, 3, 4, 7, 8, 31, 32, 33, 63, 64, 96, 127, 128, 130, 256, 300, 768, 1030 };
#define LENGTHS (sizeof lengths / sizeof *lengths)
enum { ROWS = 9 }; /* one group of four, twice, and one row left over */

typedef struct float_case {
    float *w32, *x, *table, y[ROWS], reference[ROWS];
    uint16_t *w16;
    int8_t *q;
    uint8_t *packed;
    double magnitude[ROWS];
} float_case;

static void run_rows(const ane_kernel_table *t, kernel_weights weights, const void *w, const float *table, const float *x,
                     int64_t k, int64_t row_stride, float *y) {
    float *split = malloc(sizeof(float) * (size_t)k);
    gemv_job job = { y, w, x, k, row_stride, table, weights == WEIGHTS_LUT4 ? t->split_lut4(split, x, k) : NULL, NULL };
    t->rows_float[weights](&job, 0, ROWS);
    free(split);
}

static void check_float_rows(void) {
    const char *names[] = { "fp32 rows", "fp16 rows", "int8 rows", "4-bit rows", "q8_0 rows", "q4_0 rows", "q6_k rows", "q4_k rows", "q5_k rows" };
    _Static_assert(sizeof names / sizeof *names == WEIGHT_KINDS, "a name for each kind of rows");
    for (size_t s = 0; s < LENGTHS; s++) {
        int64_t k = lengths[s], even = (k + 1) / 2 * 2;
        float_case c;
        c.w32 = malloc(sizeof(float) * ROWS * even), c.x = malloc(sizeof(float) * even);
        c.table = malloc(sizeof(float) * ROWS * ANE_LUT4_ENTRIES);
        c.w16 = malloc(2 * ROWS * even), c.q = malloc(ROWS * even), c.packed = malloc(ROWS * even / 2);
        for (int64_t i = 0; i < ROWS * even; i++) {
            c.w32[i] = uniform();
            c.w16[i] = ane_fp32_to_fp16(c.w32[i]);
            c.q[i] = (int8_t)(uniform() * 127.0f);
        }
        for (int64_t i = 0; i < ROWS * even / 2; i++) c.packed[i] = (uint8_t)(uniform() * 128.0f + 128.0f);
        for (int64_t i = 0; i < ROWS * ANE_LUT4_ENTRIES; i++) c.table[i] = uniform();
        for (int64_t j = 0; j < even; j++) c.x[j] = uniform();
        /* the block kinds' rows (whole blocks only: Q8_0 / Q4_0 / Q4_K of 32, Q6_K of 256): random codes
         * and blocks (any bytes are codes: Q5_K's packed ones too), finite scales (Q4_K's pairs: scale,
         * offset); their weights, for the bound, as ane_dequantize_rows gives them */
        const ane_weight_encoding block_encodings[] = { ANE_ENCODING_Q8_0, ANE_ENCODING_Q4_0, ANE_ENCODING_Q6_K,
                                                        ANE_ENCODING_Q4_K, ANE_ENCODING_Q5_K };
        uint8_t *block_data = malloc((size_t)(ROWS * k + 1) * 2);
        float *block_table = malloc(sizeof(float) * (size_t)(ROWS * (k / 16) + 1)), *block_values = malloc(sizeof(float) * (size_t)(ROWS * k + 1));
        for (int64_t i = 0; i < (ROWS * k + 1) * 2; i++) block_data[i] = (uint8_t)(uniform() * 128.0f + 128.0f);
        for (int64_t i = 0; i < ROWS * (k / 16); i++) block_table[i] = 0.01f * uniform();
        for (int weights = WEIGHTS_FP32; weights < WEIGHT_KINDS; weights++) {
            int64_t n = weights == WEIGHTS_LUT4 ? even : k; /* 4-bit rows are even */
            int block_kind = weights >= WEIGHTS_Q8_0;
            ane_weight_encoding encoding = block_kind ? block_encodings[weights - WEIGHTS_Q8_0] : ANE_ENCODING_DENSE;
            if (block_kind && (k % (encoding == ANE_ENCODING_Q6_K ? 256 : 32) || k == 0)) continue;
            if (block_kind) ane_dequantize_rows(encoding, block_data, block_table, k, 0, ROWS, block_values);
            const float *table = block_kind ? block_table : c.table;
            const void *w = block_kind ? (const void *)block_data : weights == WEIGHTS_FP32 ? (const void *)c.w32
                          : weights == WEIGHTS_FP16 ? (const void *)c.w16
                          : weights == WEIGHTS_INT8 ? (const void *)c.q : (const void *)c.packed;
            run_rows(&scalar, weights, w, table, c.x, n, n, c.reference);
            run_rows(level, weights, w, table, c.x, n, n, c.y);
            int outside = 0;
            for (int r = 0; r < ROWS; r++) {
                double magnitude = 0, wj;
                for (int64_t j = 0; j < n; j++) {
                    wj = block_kind                ? block_values[r * n + j]
                         : weights == WEIGHTS_FP32 ? c.w32[r * n + j]
                         : weights == WEIGHTS_FP16 ? ane_fp16_to_fp32(c.w16[r * n + j])
                         : weights == WEIGHTS_INT8 ? c.q[r * n + j] * c.table[r]
                                                   : c.table[r * 16 + ((c.packed[(r * n + j) / 2] >> (4 * (j & 1))) & 15)];
                    magnitude += fabs(wj * c.x[j]);
                }
                double bf16_split = weights == WEIGHTS_LUT4 && level->lut4_reads_words ? ldexp(1.0, -16) : 0.0;
                double bound = (2.0 * (double)n * ldexp(1.0, -24) + bf16_split) * magnitude + 1e-30;
                outside += !(fabs((double)c.y[r] - (double)c.reference[r]) <= bound);
            }
            cases++, bounded_cases++;
            CHECK(outside == 0, "%s, k %lld: %d rows outside 2 k u sum |w x| of the scalar kernel's", names[weights],
                  (long long)n, outside);
        }
        free(block_data), free(block_table), free(block_values);
        /* fp16 rows give what their values in fp32 give, bit for bit */
        float y16[ROWS], y32[ROWS], *converted = malloc(sizeof(float) * ROWS * k);
        for (int64_t i = 0; i < ROWS * k; i++) converted[i] = ane_fp16_to_fp32(c.w16[i]);
        run_rows(level, WEIGHTS_FP16, c.w16, NULL, c.x, k, k, y16);
        run_rows(level, WEIGHTS_FP32, converted, NULL, c.x, k, k, y32);
        cases++, bitwise_cases++;
        CHECK(same_bits(y16, y32, sizeof y16), "fp16 rows, k %lld: not the sums of their fp32 values", (long long)k);
        /* the first 32 m elements of rows whose others are zeros: what the whole rows give */
        int64_t cut = k / ANE_GEMV_CHUNK * ANE_GEMV_CHUNK;
        if (cut > 0 && cut < k) {
            for (int r = 0; r < ROWS; r++)
                for (int64_t j = cut; j < k; j++) converted[r * k + j] = 0.0f, c.w16[r * k + j] = 0;
            float whole16[ROWS], whole32[ROWS], cut16[ROWS], cut32[ROWS];
            run_rows(level, WEIGHTS_FP16, c.w16, NULL, c.x, k, k, whole16);
            run_rows(level, WEIGHTS_FP16, c.w16, NULL, c.x, cut, k, cut16);
            run_rows(level, WEIGHTS_FP32, converted, NULL, c.x, k, k, whole32);
            run_rows(level, WEIGHTS_FP32, converted, NULL, c.x, cut, k, cut32);
            cases += 2, bitwise_cases += 2;
            CHECK(same_bits(whole16, cut16, sizeof cut16), "fp16 rows, k %lld cut at %lld: the sums differ", (long long)k,
                  (long long)cut);
            CHECK(same_bits(whole32, cut32, sizeof cut32), "fp32 rows, k %lld cut at %lld: the sums differ", (long long)k,
                  (long long)cut);
        }
        free(converted);
        free(c.w32), free(c.x), free(c.table), free(c.w16), free(c.q), free(c.packed);
    }
    kernels_checked += 5; /* four row kernels and split_lut4 */
}

/* ------------------------------------------------ products over a cache */

static void check_vecmat(void) {
    const int64_t ks[] = { 1, 7, 64 }, ns[] = { 1, 3, 4, 5, 16, 63, 64, 65, 130, 200 };
    for (size_t a = 0; a < sizeof ks / sizeof *ks; a++)
        for (size_t b = 0; b < sizeof ns / sizeof *ns; b++) {
            int64_t k = ks[a], n = ns[b], ld = n + 3;
            float *m = malloc(sizeof(float) * k * ld), *x = malloc(sizeof(float) * k);
            uint16_t *m16 = malloc(2 * k * ld);
            float *y = malloc(sizeof(float) * n), *reference = malloc(sizeof(float) * n);
            for (int64_t i = 0; i < k * ld; i++) m[i] = uniform(), m16[i] = ane_fp32_to_fp16(m[i]);
            for (int64_t i = 0; i < k; i++) x[i] = uniform();
            scalar.vecmat_fp32(reference, x, m, ld, k, n);
            level->vecmat_fp32(y, x, m, ld, k, n);
            bitwise(same_bits(y, reference, sizeof(float) * n), "vecmat fp32, n", (long long)n);
            scalar.vecmat_fp16(reference, x, m16, ld, k, n);
            level->vecmat_fp16(y, x, m16, ld, k, n);
            bitwise(same_bits(y, reference, sizeof(float) * n), "vecmat fp16, n", (long long)n);
            free(m), free(x), free(m16), free(y), free(reference);
        }
    kernels_checked += 2;
}

/* ------------------------------------------------ integer activations */

static void check_integer(void) {
    const int64_t ks[] = { 5, 32, 64, 100, 128, 256, 1030 };
    enum { COLUMNS = 2 };
    for (int activations = ANE_ACTIVATIONS_INT8; activations <= ANE_ACTIVATIONS_INT16; activations++)
        for (size_t s = 0; s < sizeof ks / sizeof *ks; s++)
            for (int lut4 = 0; lut4 < 2; lut4++) {
                int64_t k = ks[s] / 2 * 2 + (lut4 ? 0 : ks[s] % 2);
                float *x = malloc(sizeof(float) * k * COLUMNS), *palettes = malloc(sizeof(float) * ROWS * 16);
                float scales[ROWS];
                int8_t *q = malloc(ROWS * k);
                uint8_t *packed = malloc(ROWS * k / 2 + 1);
                for (int64_t i = 0; i < k * COLUMNS; i++) x[i] = uniform() * (i % 37 == 0 ? 8.0f : 1.0f);
                if (k > 40) x[40 * COLUMNS] = NAN; /* a block with a NaN: NaN products in the first column */
                for (int64_t i = 0; i < ROWS * k; i++) q[i] = (int8_t)(uniform() * 127.0f);
                for (int64_t i = 0; i < ROWS * k / 2; i++) packed[i] = (uint8_t)(uniform() * 128.0f + 128.0f);
                for (int i = 0; i < ROWS * 16; i++) palettes[i] = uniform();
                for (int r = 0; r < ROWS; r++) scales[r] = 0.01f + 0.001f * (float)r;
                size_t bytes = code_vector_bytes(k, activations), stride = ane_palette_codes_stride(activations);
                char *memory[2][COLUMNS], *codes[2];
                code_vector vectors[2][COLUMNS];
                const ane_kernel_table *tables[2] = { &scalar, level };
                float *y[2];
                for (int t = 0; t < 2; t++) {
                    codes[t] = malloc(stride * ROWS);
                    for (int r = 0; r < ROWS; r++) {
                        if (activations == ANE_ACTIVATIONS_INT8) tables[t]->palette8((palette8 *)codes[t] + r, palettes + 16 * r);
                        else tables[t]->palette16((palette16 *)codes[t] + r, palettes + 16 * r);
                    }
                    for (int c = 0; c < COLUMNS; c++) {
                        memory[t][c] = malloc(bytes);
                        quantize_codes_with(tables[t], &vectors[t][c], memory[t][c], x + c, COLUMNS, k, activations, lut4);
                    }
                    y[t] = malloc(sizeof(float) * ROWS * COLUMNS);
                    integer_job job = { y[t], lut4 ? (const void *)packed : q, scales, codes[t], vectors[t], COLUMNS, k,
                                        lut4 ? ANE_ENCODING_LUT4 : ANE_ENCODING_INT8, activations, NULL };
                    tables[t]->rows_integer[lut4][activations == ANE_ACTIVATIONS_INT16](&job, 0, ROWS);
                }
                int int8 = activations == ANE_ACTIVATIONS_INT8;
                bitwise(same_bits(codes[0], codes[1], stride * ROWS), int8 ? "int8 palettes, k" : "int16 palettes, k", k);
                for (int c = 0; c < COLUMNS; c++) {
                    const code_vector *a = &vectors[0][c], *b = &vectors[1][c];
                    size_t code_size = int8 ? 1 : 2;
                    bitwise(same_bits(int8 ? (void *)a->codes8 : (void *)a->codes16, int8 ? (void *)b->codes8 : (void *)b->codes16,
                                      code_size * (size_t)k) &&
                                same_bits(a->block_scales, b->block_scales, sizeof(float) * (size_t)((k + 31) / 32)),
                            int8 ? "int8 codes and scales, k" : "int16 codes and scales, k", k);
                }
                /* the products: the bound of the fp32 sums of exact block sums (NaN where the
                 * column has one), or on arm64 the scalar bits */
                int outside = 0;
                for (int r = 0; r < ROWS; r++)
                    for (int c = 0; c < COLUMNS; c++) {
                        const code_vector *v = &vectors[0][c];
                        double magnitude = 0;
                        for (int64_t first = 0; first < k; first += 32) {
                            double sum = 0;
                            for (int64_t j = first; j < first + 32 && j < k; j++) {
                                int64_t code = int8 ? v->codes8[j] : v->codes16[j];
                                int64_t weight = !lut4 ? q[r * k + j]
                                               : int8 ? ((const palette8 *)codes[0] + r)->entries[(packed[(r * k + j) / 2] >> (4 * (j & 1))) & 15]
                                                      : ((const palette16 *)codes[0] + r)->entries[(packed[(r * k + j) / 2] >> (4 * (j & 1))) & 15];
                                sum += fabs((double)(weight * code));
                            }
                            magnitude += fabs(v->block_scales[first / 32]) * sum;
                        }
                        float row_scale = lut4 ? *(const float *)(codes[0] + r * stride) : scales[r];
                        double bound = 2.0 * ((double)k / 4 + 2) * ldexp(1.0, -24) * magnitude * row_scale + 1e-30;
                        float got = y[1][r * COLUMNS + c], want = y[0][r * COLUMNS + c];
#if defined(__aarch64__)
                        (void)bound;
                        outside += !same_bits(&got, &want, sizeof got);
#else
                        outside += isnan(want) ? !isnan(got) : !(fabs((double)got - (double)want) <= bound);
#endif
                    }
                cases++;
#if defined(__aarch64__)
                bitwise_cases++;
#else
                bounded_cases++;
#endif
                CHECK(outside == 0, "%s rows x %s activations, k %lld: %d products off the scalar kernel's", lut4 ? "4-bit" : "int8",
                      int8 ? "int8" : "int16", (long long)k, outside);
                for (int t = 0; t < 2; t++) {
                    for (int c = 0; c < COLUMNS; c++) free(memory[t][c]);
                    free(codes[t]), free(y[t]);
                }
                free(x), free(palettes), free(q), free(packed);
            }
    kernels_checked += 4 + 2 + 2 + 2; /* rows (2 x 2), block quantizers, arrangements, palettes */
}

/* ------------------------------------------------ e^x and friends, sums and maxima */

static void check_vector_math(void) {
    enum { N = 4099 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N), *reference = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) x[i] = (float)(i - N / 2) * 0.05f + uniform() * 0.01f; /* -102 .. 102 */
    const float specials[] = { 0.0f, -0.0f, NAN, -NAN, INFINITY, -INFINITY, 88.7f, 88.8f, 89.0f, -103.9f, -104.0f, -105.0f,
                               1e-30f, -1e-30f, 1e-45f, 9.0f, -9.0f, 8.99f };
    memcpy(x, specials, sizeof specials);
    struct { const char *name; void (*mine)(float *, const float *, int64_t), (*ref)(float *, const float *, int64_t); } map[] = {
        { "exp", level->exp, scalar.exp }, { "tanh", level->tanh, scalar.tanh },
        { "sigmoid", level->sigmoid, scalar.sigmoid }, { "silu", level->silu, scalar.silu } };
    const int64_t counts[] = { 1, 3, 5, 8, 13, N };
    for (size_t f = 0; f < sizeof map / sizeof *map; f++)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            map[f].ref(reference, x, counts[c]);
            map[f].mine(y, x, counts[c]);
            bitwise(same_bits(y, reference, sizeof(float) * (size_t)counts[c]), map[f].name, (long long)counts[c]);
        }
    for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        const float *row = x + 18; /* past the specials: a finite softmax row */
        int64_t n = counts[c] < N - 18 ? counts[c] : N - 18;
        float sum_ref = scalar.exp_shifted_sum(reference, row, 3.0f, n), sum = level->exp_shifted_sum(y, row, 3.0f, n);
        bitwise(same_bits(y, reference, sizeof(float) * (size_t)n) && same_bits(&sum, &sum_ref, sizeof sum),
                "exp_shifted_sum", (long long)n);
        for (int take_max = 0; take_max < 2; take_max++) {
            float partial_ref[8], partial[8];
            for (int l = 0; l < 8; l++) partial_ref[l] = partial[l] = x[l + 20];
            int64_t whole = n / 8 * 8;
            scalar.reduce_partials(partial_ref, row, 0, whole, take_max);
            level->reduce_partials(partial, row, 0, whole, take_max);
            bitwise(same_bits(partial, partial_ref, sizeof partial), take_max ? "maxima" : "sums", (long long)n);
        }
    }
    float partial_ref[8] = { 0 }, partial[8] = { 0 }; /* a NaN among the maxima passes on */
    scalar.reduce_partials(partial_ref, x, 0, 16, 1);
    level->reduce_partials(partial, x, 0, 16, 1);
    bitwise(same_bits(partial, partial_ref, sizeof partial) && isnan(partial[2]), "maxima with a NaN", 16);
    free(x), free(y), free(reference);
    kernels_checked += 6;
}

/* ------------------------------------------------ AdamW, 4-bit rows, transposes */

static void check_rest(void) {
    enum { N = 1031 };
    float p[2][N], m[2][N], v[2][N], g[N];
    for (int i = 0; i < N; i++) {
        p[0][i] = p[1][i] = uniform();
        m[0][i] = m[1][i] = uniform() * 0.1f;
        v[0][i] = v[1][i] = fabsf(uniform()) * 0.01f;
        g[i] = uniform();
    }
    adamw_constants c = { 0.9f, 0.999f, 1e-3f, 1e-8f, 0.01f, 1.0f / 0.1f, 1.0f / 0.001f, 0.5f };
    scalar.adamw(&c, p[0], m[0], v[0], g, N);
    level->adamw(&c, p[1], m[1], v[1], g, N);
    bitwise(same_bits(p[0], p[1], sizeof p[0]) && same_bits(m[0], m[1], sizeof m[0]) && same_bits(v[0], v[1], sizeof v[0]),
            "adamw", N);

    uint8_t packed[N];
    float palette[16], decoded[2][2 * N];
    for (int i = 0; i < N; i++) packed[i] = (uint8_t)(uniform() * 128.0f + 128.0f);
    for (int i = 0; i < 16; i++) palette[i] = uniform();
    palette[3] = NAN, palette[7] = -0.0f; /* bits as they are */
    const int64_t counts[] = { 1, 31, 32, 33, 64, 2 * N - 2 };
    for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
        memset(decoded, 0, sizeof decoded);
        scalar.lut4_decode(packed, palette, counts[i], decoded[0]);
        level->lut4_decode(packed, palette, counts[i], decoded[1]);
        bitwise(same_bits(decoded[0], decoded[1], sizeof decoded[0]), "lut4_decode", (long long)counts[i]);
    }

    enum { SIZE = 64 };
    uint32_t in[SIZE * SIZE * 2], out[2][SIZE * SIZE];
    for (int i = 0; i < SIZE * SIZE * 2; i++) in[i] = (uint32_t)i * 2654435761u;
    transpose_job jobs[2] = { { out[0], in, SIZE, SIZE, 2 * SIZE }, { out[1], in, SIZE, SIZE, 2 * SIZE } };
    memset(out, 0, sizeof out);
    for (int r = 0; r < SIZE; r += TRANSPOSE_TILE)
        for (int col = 0; col < SIZE; col += TRANSPOSE_TILE) {
            scalar.transpose_tile(&jobs[0], r, col);
            level->transpose_tile(&jobs[1], r, col);
        }
    bitwise(same_bits(out[0], out[1], sizeof out[0]) && out[0][1 * SIZE + 2] == in[1 + 2 * 2 * SIZE], "transpose", SIZE);
    kernels_checked += 3;
}

int main(void) {
    ane_kernels_scalar(&scalar);
    level = ane_kernels();
    const char *expected = getenv("ANELUA_TEST_EXPECT_LEVEL");
    if (expected && *expected)
        CHECK(strcmp(level->level, expected) == 0, "the kernel level is %s, expected %s", level->level, expected);
    check_float_rows();
    check_vecmat();
    check_integer();
    check_vector_math();
    check_rest();
    printf("test_kernels: level %s against scalar: %d kernels, %d cases (%d bit for bit, %d within bounds)\n", level->level,
           kernels_checked, cases, bitwise_cases, bounded_cases);
    return check_summary("test_kernels");
}
