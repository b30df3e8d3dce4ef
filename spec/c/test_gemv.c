/* tensor/gemv.c against products summed here in double: fp16 and fp32 weights, int8 and
 * 4-bit palette encodings, row counts that split over the helper threads and row lengths
 * that leave vector tails, and the multi-column ane_encoded_matmul. Tolerance: fp32
 * accumulation of k products has a forward error of at most ~k u sum_j |w_j x_j| (u = 2^-24,
 * recursive summation; blocked or FMA sums do better), so each row is held to
 * 2 k u sum_j |w_j x_j|, plus 1e-30 for an all-zero row; 4-bit rows with float activations on
 * a CPU with AVX512_BF16 (k >= 128) plus 2^-16 sum_j |w_j x_j|: that kernel reads x as two bf16
 * parts, each rounded to nearest (8 significant bits, relative error <= 2^-8), so hi + lo is off x
 * by at most 2^-8 |x - hi| <= 2^-16 |x|, and each product by 2^-16 |w_j x_j|. Every row's result
 * must also equal, bit for bit, the product of that row alone (rows_differing_alone), and
 * products run together by ane_gemv_parts (one column) or ane_gemm_parts (a few) what each
 * gives alone, column by column (parts_differing_alone).
 * Q8_0 and Q4_0 rows (blocks of 32 codes with an fp16 scale each) and Q6_K rows (blocks of 256,
 * decoded here from the format's definition; and a program's, packed by ane_q6_k_pack_codes with
 * d zero, their scales the table's) must give, bit for bit, what
 * ane_gemv_fp32 gives for their dequantized values (each weight scale x code, exact in fp32), as
 * a matrix-vector product, as a few columns and in parts (check_blocks); more columns, which go
 * through the decoded panels, are held to the fp32 bound above against the sum in double; on
 * int8 activations they must give the blocks' integer arithmetic computed here, bit for bit.
 *
 * Integer activations (int8: codes up to L = 127, palettes to P = 127; int16: L = 32767,
 * P = 16383) are checked twice. (1) Against the quantized arithmetic computed here from its
 * definition (gemv.h: codes and scales in fp32 as specified, each block's integer dot
 * product exact, the sum in double): only the kernel's fp32 sum of at most k / 4 lane terms
 * differs (a lane: 4 products of a block, or 8 in VNNI's 4-bit kernel; lanes of a block may cancel, so the magnitude is
 * summed over adjacent pairs, which every kernel's lanes are made of), held to
 * 2 (k / 4 + 2) u sum |pair terms| (more than 16 columns go through BLAS: k fp32 products of
 * the quantized values, each rounded twice, held to 2 (k + 2) u sum |products|). (2) Against
 * the true product of the dequantized weights and x: quantizing a block with largest |x| M
 * to scale d = fl(M / L) and codes round(x fl(L / M)) leaves |x - d c| <= d (1/2 + 3 L u)
 * (the product x fl(L/M) is off by at most L u before rounding; d fl(L/M) = 1 + 2u at most,
 * |x| <= L d (1 + u)); a palette entry likewise |p - s e| <= s (1/2 + 3 P u). So
 * |w x - (s e)(d c)| <= (1/2 + 3 P u) s |x| + (|w| + (1/2 + 3 P u) s)(1/2 + 3 L u) d per
 * element, summed, plus the fp32 term of (1). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/cpu.h"
#include "ane_core/base/fp16.h"
#include "ane_core/tensor/gemv.h"
#include "check.h"

/* ane_gemv_encoded, its status checked (it fails only for memory) */
static void gemv_encoded_ok(float *y, ane_weight_encoding encoding, const void *data, const float *table, const float *x,
                            int64_t rows, int64_t k) {
    ane_error err;
    CHECK(ane_gemv_encoded(y, encoding, data, table, x, rows, k, &err) == ANE_OK, "ane_gemv_encoded: %s", err.message);
}

static uint32_t state = 2024;
static float uniform(void) { /* in [-1, 1) */
    state = state * 1664525u + 1013904223u;
    return (float)((double)(state >> 8) / (1 << 23) - 1.0);
}

/* The bound above over sum_j |w_j x_j| (see there); lut4: 4-bit rows with float activations. */
static double bound_factor(int64_t k, int lut4) {
    double split = lut4 && k >= 128 && ane_cpu_has_avx512_bf16() ? ldexp(1.0, -16) : 0.0;
    return 2.0 * (double)k * ldexp(1.0, -24) + split;
}

static int rows_within(const float *y, const double *ref, const double *magnitude, int64_t rows, int64_t k, int lut4) {
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        double bound = bound_factor(k, lut4) * magnitude[r] + 1e-30;
        bad += !(fabs(y[r] - ref[r]) <= bound);
    }
    return bad;
}

/* Each row's result is the one it has as a product of that row alone: the kernels take rows
 * in groups whose members depend on how the rows were split (over threads, then a share's
 * quarters), and greedy decoding must not depend on that split. `product` is called with
 * all rows, then one row at a time. */
typedef void (*row_product)(float *y, const void *w, const float *tables, const float *x, int64_t rows, int64_t k);

static int rows_differing_alone(row_product product, const void *w, size_t row_bytes, const float *tables,
                                int64_t table_stride, const float *x, int64_t rows, int64_t k, const float *y) {
    int differing = 0;
    for (int64_t r = 0; r < rows; r++) {
        float alone = NAN;
        product(&alone, (const char *)w + r * row_bytes, tables ? tables + r * table_stride : NULL, x, 1, k);
        differing += memcmp(&alone, &y[r], sizeof alone) != 0;
    }
    return differing;
}

static void product_fp32(float *y, const void *w, const float *tables, const float *x, int64_t rows, int64_t k) {
    (void)tables;
    ane_gemv_fp32(y, w, x, rows, k);
}
static void product_fp16(float *y, const void *w, const float *tables, const float *x, int64_t rows, int64_t k) {
    (void)tables;
    ane_gemv_fp16(y, w, x, rows, k);
}
static void product_int8(float *y, const void *w, const float *tables, const float *x, int64_t rows, int64_t k) {
    gemv_encoded_ok(y, ANE_ENCODING_INT8, w, tables, x, rows, k);
}
static void product_lut4(float *y, const void *w, const float *tables, const float *x, int64_t rows, int64_t k) {
    gemv_encoded_ok(y, ANE_ENCODING_LUT4, w, tables, x, rows, k);
}

/* ane_encoded_matmul of one column with integer activations, as a row_product */
#define INTEGER_PRODUCT(name, encoding, activations)                                                      \
    static void name(float *y, const void *w, const float *tables, const float *x, int64_t rows, int64_t k) { \
        ane_error err;                                                                                    \
        ane_encoded_matmul(y, encoding, w, tables, NULL, x, rows, k, 1, activations, &err);               \
    }
INTEGER_PRODUCT(product_int8_a8, ANE_ENCODING_INT8, ANE_ACTIVATIONS_INT8)
INTEGER_PRODUCT(product_lut4_a8, ANE_ENCODING_LUT4, ANE_ACTIVATIONS_INT8)
INTEGER_PRODUCT(product_int8_a16, ANE_ENCODING_INT8, ANE_ACTIVATIONS_INT16)
INTEGER_PRODUCT(product_lut4_a16, ANE_ENCODING_LUT4, ANE_ACTIVATIONS_INT16)

/* ane_gemv_parts (one column) or ane_gemm_parts (`columns` of x [k, columns]) of `count` parts
 * (rows[p] rows of k each, one encoding) under the activations against each part alone, one
 * column at a time (ane_gemv_fp16; ane_gemv_encoded under float activations, else
 * ane_encoded_matmul of one column): the outputs that differ in any bit. Weights: fp16 bits of
 * uniform values, int8 codes with scales, or nibbles with palettes of 8 significant bits (the
 * bf16 kernel's tables) and, in the first part, one full fp32 palette (its other path). 4-bit
 * parts after the first are given their palettes as the products read them (ane_palette_codes:
 * bf16 words, which must refuse the first part's, or integer codes), the first computes its own;
 * under float activations each is read through ane_encoded_matmul with them too (one column,
 * and three). */
static int parts_differing_alone(ane_weight_encoding encoding, const int64_t *rows, int count, int64_t k,
                                 ane_activations activations, int64_t columns) {
    ane_gemv_part parts[8] = {{0}};
    float *xs = malloc(sizeof(float) * k * columns), *x = malloc(sizeof(float) * k), *alone[8]; /* [k, columns]; one column */
    int differing = 0;
    ane_error err;
    for (int64_t j = 0; j < k * columns; j++) xs[j] = uniform();
    size_t row_bytes = encoding == ANE_ENCODING_INT8 ? (size_t)k : encoding == ANE_ENCODING_LUT4 ? (size_t)k / 2 : 2 * (size_t)k;
    int64_t table_width = encoding == ANE_ENCODING_INT8 ? 1 : ANE_LUT4_ENTRIES;
    for (int p = 0; p < count; p++) {
        unsigned char *data = malloc(row_bytes * rows[p] + 1);
        float *table = malloc(sizeof(float) * table_width * rows[p] + 1);
        for (size_t b = 0; b < row_bytes * rows[p]; b++) data[b] = (unsigned char)(uniform() * 128 + 128);
        if (encoding == ANE_ENCODING_DENSE)
            for (int64_t e = 0; e < k * rows[p]; e++) ((uint16_t *)data)[e] = ane_fp32_to_fp16(uniform());
        for (int64_t e = 0; e < table_width * rows[p]; e++) {
            float v = uniform();
            uint32_t bits;
            memcpy(&bits, &v, sizeof bits);
            if (e >= ANE_LUT4_ENTRIES || p > 0) bits &= 0xFFFF0000u; /* part 0's first palette keeps all its bits */
            memcpy(&v, &bits, sizeof v);
            table[e] = v;
        }
        void *codes = NULL;
        if (encoding == ANE_ENCODING_LUT4 && (p > 0 || activations == ANE_ACTIVATIONS_FLOAT)) {
            codes = malloc(ane_palette_codes_stride(activations) * rows[p] + 1);
            int written = ane_palette_codes(codes, table, rows[p], activations);
            differing += written != (p > 0);
            if (!written) free(codes), codes = NULL;
        }
        parts[p] = (ane_gemv_part){malloc(sizeof(float) * rows[p] * columns + 1), encoding, data, table, rows[p], codes, NULL};
        alone[p] = malloc(sizeof(float) * rows[p] * columns + 1); /* [rows, columns] */
        float *one = malloc(sizeof(float) * rows[p] + 1);
        for (int64_t c = 0; c < columns; c++) {
            for (int64_t j = 0; j < k; j++) x[j] = xs[j * columns + c];
            if (encoding == ANE_ENCODING_DENSE) ane_gemv_fp16(one, (const uint16_t *)data, x, rows[p], k);
            else if (activations == ANE_ACTIVATIONS_FLOAT) gemv_encoded_ok(one, encoding, data, table, x, rows[p], k);
            else differing += ane_encoded_matmul(one, encoding, data, table, NULL, x, rows[p], k, 1, activations, &err) != ANE_OK;
            for (int64_t r = 0; r < rows[p]; r++) alone[p][r * columns + c] = one[r];
        }
        free(one);
        if (codes && activations == ANE_ACTIVATIONS_FLOAT && columns == 1) { /* the matmul entry with the words: one column, and three copies of x */
            float *one = malloc(sizeof(float) * rows[p]), *three = malloc(sizeof(float) * rows[p] * 3);
            float *x3 = malloc(sizeof(float) * k * 3);
            for (int64_t j = 0; j < 3 * k; j++) x3[j] = x[j / 3];
            differing += ane_encoded_matmul(one, encoding, data, table, codes, x, rows[p], k, 1, ANE_ACTIVATIONS_FLOAT, &err) ||
                         memcmp(one, alone[p], sizeof(float) * rows[p]) != 0;
            differing += ane_encoded_matmul(three, encoding, data, table, codes, x3, rows[p], k, 3, ANE_ACTIVATIONS_FLOAT, &err);
            for (int64_t r = 0; r < rows[p]; r++)
                for (int c = 0; c < 3; c++) differing += memcmp(&three[r * 3 + c], &alone[p][r], sizeof(float)) != 0;
            free(one), free(three), free(x3);
        }
    }
    differing += (columns == 1 ? ane_gemv_parts(parts, count, xs, k, activations, &err)
                               : ane_gemm_parts(parts, count, xs, k, columns, activations, &err)) != ANE_OK;
    for (int p = 0; p < count; p++) {
        differing += memcmp(parts[p].y, alone[p], sizeof(float) * rows[p] * columns) != 0;
        free(parts[p].y), free((void *)parts[p].data), free((void *)parts[p].table), free((void *)parts[p].palette_codes),
            free(alone[p]);
    }
    free(x), free(xs);
    return differing;
}

/* Q8_0, Q4_0, Q6_K and Q4_K rows against ane_gemv_fp32 of their dequantized values (see the top). */
static void check_blocks(int64_t rows, int64_t k, const float *x) {
    { /* a table with an entry that is no fp16 value has no fp16 form */
        const float table[3] = {0.5f, 1.0f + 0x1p-20f, -2.0f};
        uint16_t half[3];
        CHECK(!ane_table_as_fp16(half, table, 3), "a table with 1 + 2^-20 taken as fp16");
        CHECK(ane_table_as_fp16(half, table, 1) && half[0] == 0x3800, "0.5 not taken as fp16 0x3800");
    }
    int64_t blocks = k / 32, supers = k / 256; /* Q6_K: blocks of 256 (k % 256 == 0 only) */
    int8_t *q8 = malloc(rows * k), *codes6 = malloc(rows * k);
    uint8_t *q4 = calloc(rows * k / 2, 1), *q6 = calloc(rows * supers * 210 + 1, 1), *q4k = calloc(rows * k / 2, 1);
    /* Q4_K (quantize.h): unsigned 4-bit codes, per block a scale and an offset, w = scale (x - offset)
     * with the subtraction and the product each rounded to fp32 */
    float *pairs = malloc(sizeof(float) * rows * blocks * 2 + 1), *w4k = malloc(sizeof(float) * rows * k);
    /* Q5_K: the same pairs over unsigned 5-bit codes, a byte each */
    uint8_t *q5k = malloc(rows * k + 1);
    float *w5k = malloc(sizeof(float) * rows * k);
    for (int64_t b = 0; b < rows * blocks; b++) {
        pairs[2 * b] = ane_fp16_to_fp32(ane_fp32_to_fp16(0.02f * (1.5f + uniform())));
        /* (not an integer: the general case; an fp16 value, as an fp16 program's: the half table below) */
        pairs[2 * b + 1] = ane_fp16_to_fp32(ane_fp32_to_fp16(6.0f + 5.0f * uniform()));
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            int x4 = (int)floorf(8 * uniform() + 8); /* 0..15 */
            q4k[(r * k + j) / 2] |= (uint8_t)(x4 << (4 * (j & 1)));
            const float *pair = pairs + 2 * (r * blocks + j / 32);
            volatile float shifted = (float)x4 - pair[1]; /* (two roundings) */
            w4k[r * k + j] = pair[0] * shifted;
            int x5 = (int)floorf(16 * uniform() + 16); /* 0..31 */
            q5k[r * k + j] = (uint8_t)x5;
            volatile float shifted5 = (float)x5 - pair[1];
            w5k[r * k + j] = pair[0] * shifted5;
        }
    float *scales = malloc(sizeof(float) * rows * blocks), *scales6 = malloc(sizeof(float) * rows * (k / 16) + 1),
          *w8 = malloc(sizeof(float) * rows * k), *w4 = malloc(sizeof(float) * rows * k), *w6 = malloc(sizeof(float) * rows * k),
          *y = malloc(sizeof(float) * rows * 17), *want = malloc(sizeof(float) * rows * 17),
          *decoded = malloc(sizeof(float) * rows * k), *columns = malloc(sizeof(float) * k * 17);
    for (int64_t b = 0; b < rows * blocks; b++) scales[b] = ane_fp16_to_fp32(ane_fp32_to_fp16(0.02f * (1.5f + uniform())));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            int c8 = (int)lrintf(127 * uniform()), c4 = (int)floorf(8 * uniform()); /* -127..127, -8..7 */
            q8[r * k + j] = (int8_t)c8;
            q4[(r * k + j) / 2] |= (uint8_t)(((unsigned)c4 & 15u) << (4 * (j & 1)));
            float d = scales[r * blocks + j / 32];
            w8[r * k + j] = d * (float)c8, w4[r * k + j] = d * (float)c4;
        }
    /* Q6_K blocks (blocks.h): ql[128], qh[64], int8 scales[16], fp16 d; weight 128 h + 32 p + l of a
     * block has 6-bit x = its nibble (low of ql[64 h + l] for p = 0, of ql[64 h + 32 + l] for 1, high
     * of those for 2 and 3) | bits 2p, 2p + 1 of qh[32 h + l] << 4, and w = (d sc[index / 16]) (x - 32) */
    for (int64_t r = 0; r < rows && supers; r++)
        for (int64_t s = 0; s < supers; s++) {
            uint8_t *block = q6 + (r * supers + s) * 210;
            for (int i = 0; i < 192; i++) block[i] = (uint8_t)(uniform() * 128 + 128);
            for (int g = 0; g < 16; g++) block[192 + g] = (uint8_t)(int8_t)lrintf(100 * uniform());
            uint16_t d = ane_fp32_to_fp16(0.001f * (1.5f + uniform()));
            memcpy(block + 208, &d, 2);
            for (int e = 0; e < 256; e++) {
                int h = e / 128, p = e % 128 / 32, l = e % 32;
                int byte = block[64 * h + 32 * (p & 1) + l], nibble = p < 2 ? byte & 15 : byte >> 4;
                int x6 = nibble | ((block[128 + 32 * h + l] >> (2 * p)) & 3) << 4;
                float group_scale = ane_fp16_to_fp32(d) * (float)(int8_t)block[192 + e / 16];
                codes6[r * k + 256 * s + e] = (int8_t)(x6 - 32);
                scales6[r * (k / 16) + 16 * s + e / 16] = group_scale;
                w6[r * k + 256 * s + e] = group_scale * (float)(x6 - 32);
            }
        }
    /* a program's Q6_K (quantize.h): the same codes in blocks of d and scales zero, the scales the
     * table's alone, here fp16 values that no d x sc gives (as a program's rounded ones) */
    uint8_t *q6p = malloc(rows * supers * 210 + 1);
    float *scales6p = malloc(sizeof(float) * rows * (k / 16) + 1), *w6p = malloc(sizeof(float) * rows * k);
    int whole_supers = k % 256 == 0; /* (Q6_K's rows are whole blocks) */
    memcpy(q6p, q6, (size_t)(rows * supers * 210)); /* the same ql and qh, d and scales zero */
    for (int64_t b = 0; b < rows * supers; b++) memset(q6p + b * 210 + 192, 0, 18);
    for (int64_t g = 0; g < rows * (k / 16) && whole_supers; g++)
        scales6p[g] = ane_fp16_to_fp32(ane_fp32_to_fp16(0.1f * (uniform() + 0.01f)));
    for (int64_t i = 0; i < rows * k && whole_supers; i++) w6p[i] = scales6p[i / 16] * (float)codes6[i];
    /* Q5_K packed (quantize.h): per block of 32, element i's low four bits in byte i / 2 (low nibble
     * first), its fifth bit as bit i % 8 of byte 16 + i / 8 */
    uint8_t *q5kp = calloc((size_t)(rows * blocks * 20 + 1), 1);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < k; j++) {
            uint8_t *block = q5kp + (r * blocks + j / 32) * 20;
            int i = (int)(j % 32), x5 = q5k[r * k + j];
            block[i / 2] |= (uint8_t)((x5 & 15) << (4 * (i & 1)));
            block[16 + i / 8] |= (uint8_t)((x5 >> 4) << (i % 8));
        }
    const struct { ane_weight_encoding encoding; const void *data; const float *scales, *values; int group; const char *name; }
        kinds[] = {{ANE_ENCODING_Q8_0, q8, scales, w8, 32, "q8_0"}, {ANE_ENCODING_Q4_0, q4, scales, w4, 32, "q4_0"},
                   {ANE_ENCODING_Q4_K, q4k, pairs, w4k, 32, "q4_k"}, {ANE_ENCODING_Q5_K, q5kp, pairs, w5k, 32, "q5_k"},
                   {ANE_ENCODING_Q6_K, q6, scales6, w6, 16, "q6_k"}, {ANE_ENCODING_Q6_K, q6p, scales6p, w6p, 16, "q6_k (a program's)"}};
    int nkinds = whole_supers ? 6 : 4;
    for (int t = 0; t < nkinds; t++) {
        const float *scales = kinds[t].scales; /* (each kind's) */
        int group = kinds[t].group;
        ane_dequantize_rows(kinds[t].encoding, kinds[t].data, scales, k, 0, rows, decoded);
        CHECK(memcmp(decoded, kinds[t].values, sizeof(float) * rows * k) == 0, "%s [%lld, %lld] decoded: not scale x code",
              kinds[t].name, (long long)rows, (long long)k);
        ane_gemv_fp32(want, kinds[t].values, x, rows, k);
        gemv_encoded_ok(y, kinds[t].encoding, kinds[t].data, scales, x, rows, k);
        CHECK(memcmp(y, want, sizeof(float) * rows) == 0, "%s [%lld, %lld]: not ane_gemv_fp32's bits for its values",
              kinds[t].name, (long long)rows, (long long)k);
        /* in parts with another weight of the same encoding (ane_gemv_parts: a decode step's q, k, v) */
        ane_gemv_part parts[2] = {{y, kinds[t].encoding, kinds[t].data, scales, rows, NULL, NULL},
                                  {y + rows, kinds[t].encoding, kinds[t].data, scales, rows, NULL, NULL}};
        ane_error err;
        CHECK(ane_gemv_parts(parts, 2, x, k, ANE_ACTIVATIONS_FLOAT, &err) == ANE_OK, "%s in parts: %s", kinds[t].name, err.message);
        CHECK(memcmp(y, want, sizeof(float) * rows) == 0 && memcmp(y + rows, want, sizeof(float) * rows) == 0,
              "%s [%lld, %lld] in parts: not ane_gemv_fp32's bits", kinds[t].name, (long long)rows, (long long)k);
        /* under int8 activations (x quantized once for both): what one product of one column gives */
        CHECK(ane_encoded_matmul(want, kinds[t].encoding, kinds[t].data, scales, NULL, x, rows, k, 1, ANE_ACTIVATIONS_INT8,
                                 &err) == ANE_OK, "%s int8: %s", kinds[t].name, err.message);
        CHECK(ane_gemv_parts(parts, 2, x, k, ANE_ACTIVATIONS_INT8, &err) == ANE_OK, "%s int8 parts: %s", kinds[t].name, err.message);
        CHECK(memcmp(y, want, sizeof(float) * rows) == 0 && memcmp(y + rows, want, sizeof(float) * rows) == 0,
              "%s [%lld, %lld] in parts under int8 activations: not the product's bits alone", kinds[t].name, (long long)rows,
              (long long)k);
        CHECK(ane_gemv_parts(parts, 2, x, k, ANE_ACTIVATIONS_INT16, &err) == ANE_ERR_ARGUMENT && strstr(err.message, "not int16"),
              "%s in parts under int16 activations: not refused", kinds[t].name);
        /* the table as fp16 (every entry here an fp16 value), which the kernels that can read in
         * its place: the same bits (Q6_K's scales come from its blocks or the fp32 table) */
        int64_t entries = rows * ane_encoded_table_width(kinds[t].encoding, k);
        uint16_t *half = malloc(sizeof *half * (size_t)entries + 1);
        int exact = ane_table_as_fp16(half, scales, entries);
        CHECK(exact || kinds[t].encoding == ANE_ENCODING_Q6_K, "%s: its fp16 table refused", kinds[t].name);
        if (exact && kinds[t].encoding != ANE_ENCODING_Q6_K) {
            parts[0].half_table = parts[1].half_table = half;
            CHECK(ane_gemv_parts(parts, 2, x, k, ANE_ACTIVATIONS_INT8, &err) == ANE_OK, "%s half: %s", kinds[t].name, err.message);
            CHECK(memcmp(y, want, sizeof(float) * rows) == 0 && memcmp(y + rows, want, sizeof(float) * rows) == 0,
                  "%s [%lld, %lld] in parts reading the fp16 table: not the fp32 table's bits", kinds[t].name,
                  (long long)rows, (long long)k);
            parts[0].half_table = parts[1].half_table = NULL;
        }
        free(half);
        ane_gemv_fp32(want, kinds[t].values, x, rows, k);
        /* 3 columns (a prompt's few: each column's matrix-vector product) and 17 (decoded panels) */
        for (int count = 3; count <= 17; count += 14) {
            for (int64_t j = 0; j < k; j++)
                for (int c = 0; c < count; c++) columns[j * count + c] = c == 0 ? x[j] : uniform();
            CHECK(ane_encoded_matmul(y, kinds[t].encoding, kinds[t].data, scales, NULL, columns, rows, k, count,
                                     ANE_ACTIVATIONS_FLOAT, &err) == ANE_OK, "%s matmul: %s", kinds[t].name, err.message);
            if (count <= ANE_FEW_COLUMNS) {
                CHECK(ane_gemm_fp32_few_columns(want, kinds[t].values, columns, rows, k, count, &err) == ANE_OK, "fp32 columns");
                CHECK(memcmp(y, want, sizeof(float) * rows * count) == 0, "%s [%lld, %lld] x %d columns: not the fp32 "
                      "product's bits for its values", kinds[t].name, (long long)rows, (long long)k, count);
                continue;
            }
            int outside = 0;
            for (int64_t r = 0; r < rows; r++)
                for (int c = 0; c < count; c++) {
                    double sum = 0, magnitude = 0;
                    for (int64_t j = 0; j < k; j++) {
                        double term = (double)kinds[t].values[r * k + j] * columns[j * count + c];
                        sum += term, magnitude += fabs(term);
                    }
                    outside += fabs(y[r * count + c] - sum) > 2.0 * (double)k * ldexp(1.0, -24) * magnitude + 1e-30;
                }
            CHECK(outside == 0, "%s [%lld, %lld] x %d columns: %d outside the bound", kinds[t].name, (long long)rows,
                  (long long)k, count, outside);
        }
        /* int8 activations (llama.cpp's arithmetic for these blocks, gemv.h): x quantized per block
         * of 32 (scale = max |x| / 127 in fp32, code = round-to-even(x (127 / max |x|))), each
         * block's exact integer dot product times (weight scale x activation scale), added in
         * order: the scalar and NEON levels give these bits; AVX2 sums in lanes (the bound below) */
        int lanes = ane_cpu_has_avx2_fma_f16c();
        const int column_counts[] = {1, 3, 4}; /* (kernels that take two columns at once: 2 + 1, 2 + 2) */
        for (int n = 0; n < 3; n++) {
            const int count = column_counts[n];
            for (int64_t j = 0; j < k; j++)
                for (int c = 0; c < count; c++) columns[j * count + c] = c == 0 ? x[j] : uniform();
            CHECK(ane_encoded_matmul(y, kinds[t].encoding, kinds[t].data, scales, NULL, columns, rows, k, count,
                                     ANE_ACTIVATIONS_INT8, &err) == ANE_OK, "%s int8 matmul: %s", kinds[t].name, err.message);
            int differing = 0;
            for (int c = 0; c < count; c++) {
                int8_t *codes = malloc(k);
                float *block_scales = malloc(sizeof(float) * blocks);
                for (int64_t b = 0; b < blocks; b++) {
                    float largest = 0.0f;
                    for (int64_t j = 32 * b; j < 32 * b + 32; j++) largest = fmaxf(largest, fabsf(columns[j * count + c]));
                    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
                    block_scales[b] = largest / 127.0f;
                    for (int64_t j = 32 * b; j < 32 * b + 32; j++) codes[j] = (int8_t)lrintf(columns[j * count + c] * inverse);
                }
                for (int64_t r = 0; r < rows; r++) {
                    float total = 0.0f;
                    double exact = 0, magnitude = 0;
                    for (int64_t g = 0; g < k / group; g++) { /* each group of a scale */
                        int32_t sum = 0, absolute = 0, code_sum = 0, code_absolute = 0;
                        for (int64_t j = group * g; j < group * g + group; j++) {
                            int code = t == 0 ? q8[r * k + j] : t >= 4 ? codes6[r * k + j] : t == 3 ? q5k[r * k + j]
                                     : t == 2 ? (q4k[(r * k + j) / 2] >> (4 * (j & 1))) & 15
                                              : (int)(((q4[(r * k + j) / 2] >> (4 * (j & 1))) & 15) ^ 8) - 8;
                            sum += code * codes[j], absolute += abs(code * codes[j]);
                            code_sum += codes[j], code_absolute += abs(codes[j]);
                        }
                        if (t == 2 || t == 3) { /* Q4_K, Q5_K: (scale x the activations') x (sum - offset x the codes' sum) */
                            const float *pair = pairs + 2 * (r * blocks + g);
                            float both = pair[0] * block_scales[g];
                            volatile float offset_part = pair[1] * (float)code_sum; /* (each operation rounded) */
                            volatile float shifted = (float)sum - offset_part;
                            volatile float term = both * shifted;
                            total = total + term;
                            exact += (double)both * ((double)sum - (double)pair[1] * code_sum);
                            magnitude += fabs((double)both) * (absolute + fabs((double)pair[1]) * code_absolute);
                            continue;
                        }
                        float both = scales[r * (k / group) + g] * block_scales[g * group / 32];
                        volatile float term = both * (float)sum; /* (two roundings: no fused multiply-add here) */
                        total = total + term;
                        exact += (double)both * sum, magnitude += fabs((double)both) * absolute;
                    }
                    /* AVX2 keeps each block's sum in eight lanes, scaled into eight fp32 accumulators:
                     * one rounding per fused multiply-add, then the lanes' sum, so at most
                     * (k / 32 + 4) u per lane term; held to twice that of the terms' magnitude. Q4_K's
                     * lane terms take two more roundings first (offset x code sum, then the
                     * difference: 2 u of |lane sum| + |offset x code sum|, within the magnitude
                     * counted above), inside the factor 2 since k / 32 + 4 >= 2 */
                    if (lanes)
                        differing += fabs(y[r * count + c] - exact) > 2.0 * (double)(k / group + 4) * ldexp(1.0, -24) * magnitude;
                    else
                        differing += memcmp(&total, &y[r * count + c], sizeof total) != 0;
                }
                free(codes), free(block_scales);
            }
            CHECK(differing == 0, "%s [%lld, %lld] x %d columns on int8 activations: %d results not the blocks' "
                  "arithmetic", kinds[t].name, (long long)rows, (long long)k, count, differing);
            /* and each column's results are its own product's bit for bit, however many columns
             * share the weights (batched decoding changes no token) */
            float *column = malloc(sizeof(float) * k), *alone = malloc(sizeof(float) * rows);
            int not_alone = 0;
            for (int c = 0; count > 1 && c < count; c++) {
                for (int64_t j = 0; j < k; j++) column[j] = columns[j * count + c];
                CHECK(ane_encoded_matmul(alone, kinds[t].encoding, kinds[t].data, scales, NULL, column, rows, k, 1,
                                         ANE_ACTIVATIONS_INT8, &err) == ANE_OK, "%s int8 product: %s", kinds[t].name, err.message);
                for (int64_t r = 0; r < rows; r++) not_alone += memcmp(&alone[r], &y[r * count + c], sizeof(float)) != 0;
            }
            CHECK(not_alone == 0, "%s [%lld, %lld] x %d columns on int8 activations: %d results not their column's own "
                  "product", kinds[t].name, (long long)rows, (long long)k, count, not_alone);
            free(column), free(alone);
        }
        CHECK(ane_encoded_matmul(y, kinds[t].encoding, kinds[t].data, scales, NULL, x, rows, k, 1, ANE_ACTIVATIONS_INT16,
                                 &err) != ANE_OK && strstr(err.message, "not int16"),
              "%s with int16 activations: not refused", kinds[t].name);
    }
    free(q8), free(q4), free(scales), free(w8), free(w4), free(y), free(want), free(decoded), free(columns);
    free(codes6), free(q6), free(scales6), free(w6), free(q4k), free(pairs), free(w4k), free(q5k), free(w5k);
    free(q6p), free(scales6p), free(w6p), free(q5kp);
}

int main(void) {
    const int64_t shapes[][2] = { { 1, 1 }, { 7, 9 }, { 64, 768 }, { 3001, 77 }, { 2048, 768 }, { 33, 4098 },
                                  { 17, 110 } /* an odd number of whole 32-blocks, then a tail */,
                                  { 9, 96 } /* an odd number of blocks of 32 (Q4_0's pairs, then one) */,
                                  { 5, 416 } /* whole steps of 128 and 64, then one block of 32 */ };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t rows = shapes[s][0], k = shapes[s][1];
        float *w = malloc(sizeof(float) * rows * k), *x = malloc(sizeof(float) * k), *y = malloc(sizeof(float) * rows);
        uint16_t *w16 = malloc(2 * rows * k);
        int8_t *codes = malloc(rows * k);
        uint8_t *nibbles = malloc(rows * ((k + 1) / 2));
        float *scales = malloc(sizeof(float) * rows), *palettes = malloc(sizeof(float) * rows * 16);
        double *ref = malloc(sizeof(double) * rows), *magnitude = malloc(sizeof(double) * rows);
        for (int64_t i = 0; i < rows * k; i++) w[i] = uniform();
        for (int64_t j = 0; j < k; j++) x[j] = uniform();

        /* fp32 */
        for (int64_t r = 0; r < rows; r++) {
            ref[r] = magnitude[r] = 0;
            for (int64_t j = 0; j < k; j++) {
                ref[r] += (double)w[r * k + j] * x[j];
                magnitude[r] += fabs((double)w[r * k + j] * x[j]);
            }
        }
        ane_gemv_fp32(y, w, x, rows, k);
        CHECK(rows_within(y, ref, magnitude, rows, k, 0) == 0, "fp32 [%lld, %lld]: rows outside the bound", (long long)rows,
              (long long)k);
        CHECK(rows_differing_alone(product_fp32, w, sizeof(float) * k, NULL, 0, x, rows, k, y) == 0,
              "fp32 [%lld, %lld]: rows differ from their products alone", (long long)rows, (long long)k);

        /* fp16: the reference multiplies the fp16 values themselves */
        for (int64_t i = 0; i < rows * k; i++) w16[i] = ane_fp32_to_fp16(w[i]);
        for (int64_t r = 0; r < rows; r++) {
            ref[r] = magnitude[r] = 0;
            for (int64_t j = 0; j < k; j++) {
                double wv = ane_fp16_to_fp32(w16[r * k + j]);
                ref[r] += wv * x[j];
                magnitude[r] += fabs(wv * x[j]);
            }
        }
        ane_gemv_fp16(y, w16, x, rows, k);
        CHECK(rows_within(y, ref, magnitude, rows, k, 0) == 0, "fp16 [%lld, %lld]: rows outside the bound", (long long)rows,
              (long long)k);
        CHECK(rows_differing_alone(product_fp16, w16, 2 * k, NULL, 0, x, rows, k, y) == 0,
              "fp16 [%lld, %lld]: rows differ from their products alone", (long long)rows, (long long)k);

        /* int8: w = code * scale[row] */
        for (int64_t r = 0; r < rows; r++) {
            scales[r] = 0.01f * (1 + (float)r / (float)rows);
            ref[r] = magnitude[r] = 0;
            for (int64_t j = 0; j < k; j++) {
                codes[r * k + j] = (int8_t)lrintf(127 * uniform());
                double wv = (double)codes[r * k + j] * scales[r];
                ref[r] += wv * x[j];
                magnitude[r] += fabs(wv * x[j]);
            }
        }
        gemv_encoded_ok(y, ANE_ENCODING_INT8, codes, scales, x, rows, k);
        CHECK(rows_within(y, ref, magnitude, rows, k, 0) == 0, "int8 [%lld, %lld]: rows outside the bound", (long long)rows,
              (long long)k);
        CHECK(rows_differing_alone(product_int8, codes, k, scales, 1, x, rows, k, y) == 0,
              "int8 [%lld, %lld]: rows differ from their products alone", (long long)rows, (long long)k);

        if (k % 32 == 0) check_blocks(rows, k, x);

        /* 4-bit palettes (even k only): element j's index in byte j / 2, low nibble first */
        if (k % 2 == 0) {
            for (int64_t i = 0; i < rows * 16; i++) palettes[i] = uniform();
            for (int64_t r = 0; r < rows; r++) {
                ref[r] = magnitude[r] = 0;
                for (int64_t j = 0; j < k; j += 2) {
                    int lo = (int)(state = state * 1664525u + 1013904223u) >> 28 & 15, hi = (int)(state >> 24) & 15;
                    nibbles[r * (k / 2) + j / 2] = (uint8_t)(lo | hi << 4);
                    double a = palettes[r * 16 + lo], b = palettes[r * 16 + hi];
                    ref[r] += a * x[j] + b * x[j + 1];
                    magnitude[r] += fabs(a * x[j]) + fabs(b * x[j + 1]);
                }
            }
            gemv_encoded_ok(y, ANE_ENCODING_LUT4, nibbles, palettes, x, rows, k);
            CHECK(rows_within(y, ref, magnitude, rows, k, 1) == 0, "int4 [%lld, %lld]: rows outside the bound",
                  (long long)rows, (long long)k);
            CHECK(rows_differing_alone(product_lut4, nibbles, k / 2, palettes, 16, x, rows, k, y) == 0,
                  "int4 [%lld, %lld]: rows differ from their products alone", (long long)rows, (long long)k);

            /* the rows decoded (prefill's blocks, q:dequantize()): each element its palette entry, bit
             * for bit, from a row offset on */
            float *decoded = malloc(sizeof(float) * rows * k), *looked_up = malloc(sizeof(float) * rows * k);
            int64_t from = rows > 1 ? 1 : 0;
            for (int64_t r = from; r < rows; r++)
                for (int64_t j = 0; j < k; j++)
                    looked_up[(r - from) * k + j] = palettes[r * 16 + ((nibbles[r * (k / 2) + j / 2] >> (4 * (j & 1))) & 15)];
            ane_dequantize_rows(ANE_ENCODING_LUT4, nibbles, palettes, k, from, rows - from, decoded);
            CHECK(memcmp(decoded, looked_up, sizeof(float) * (rows - from) * k) == 0,
                  "int4 rows %lld.. of [%lld, %lld] decoded: not their palette entries", (long long)from, (long long)rows,
                  (long long)k);
            free(decoded), free(looked_up);

            /* palettes of 8 significant bits, as the quantizer writes them (AVX2 rebuilds such an
             * entry from two bytes), in every row, then in every third row only (the others keep
             * 16 significant bits, more than two bytes hold, and take the fp32 kernel): the same
             * bound */
            float *short_palettes = malloc(sizeof(float) * rows * 16);
            for (int every = 1; every <= 3; every += 2) {
                for (int64_t r = 0; r < rows; r++)
                    for (int e = 0; e < 16; e++) {
                        float v = palettes[r * 16 + e];
                        uint32_t bits;
                        memcpy(&bits, &v, sizeof bits);
                        bits &= r % every == 0 ? 0xFFFF0000u : 0xFFFFFF00u;
                        memcpy(&short_palettes[r * 16 + e], &bits, sizeof bits);
                    }
                for (int64_t r = 0; r < rows; r++) {
                    ref[r] = magnitude[r] = 0;
                    for (int64_t j = 0; j < k; j++) {
                        double term = (double)short_palettes[r * 16 + ((nibbles[r * (k / 2) + j / 2] >> (4 * (j & 1))) & 15)] * x[j];
                        ref[r] += term;
                        magnitude[r] += fabs(term);
                    }
                }
                gemv_encoded_ok(y, ANE_ENCODING_LUT4, nibbles, short_palettes, x, rows, k);
                CHECK(rows_within(y, ref, magnitude, rows, k, 1) == 0,
                      "int4, 8-bit palette entries in %s row [%lld, %lld]: rows outside the bound",
                      every == 1 ? "every" : "every third", (long long)rows, (long long)k);
                CHECK(rows_differing_alone(product_lut4, nibbles, k / 2, short_palettes, 16, x, rows, k, y) == 0,
                      "int4, 8-bit palette entries in %s row [%lld, %lld]: rows differ from their products alone",
                      every == 1 ? "every" : "every third", (long long)rows, (long long)k);
            }
            free(short_palettes);

            /* an inf or a NaN in x: each row what the sum in double makes of it (inf, -inf or
             * NaN: x_split's parts of an inf must not turn it into NaN) */
            for (int bad = 0; bad < 2; bad++) {
                float *xs = malloc(sizeof(float) * k);
                memcpy(xs, x, sizeof(float) * k);
                xs[k / 2] = bad ? NAN : -INFINITY;
                gemv_encoded_ok(y, ANE_ENCODING_LUT4, nibbles, palettes, xs, rows, k);
                int wrong = 0;
                for (int64_t r = 0; r < rows; r++) {
                    double sum = 0;
                    for (int64_t j = 0; j < k; j++)
                        sum += (double)palettes[r * 16 + ((nibbles[r * (k / 2) + j / 2] >> (4 * (j & 1))) & 15)] * xs[j];
                    wrong += isnan(sum) ? !isnan(y[r]) : !(y[r] == (float)sum || !isinf(sum));
                }
                CHECK(wrong == 0, "int4 [%lld, %lld] with %s in x: %d rows not what the double sum gives", (long long)rows,
                      (long long)k, bad ? "NaN" : "-inf", wrong);
                free(xs);
            }
        }

        /* int8 and int16 activations, one and several columns, both encodings */
        for (int a16 = 0; a16 < 2; a16++)
        for (int columns = 1; columns <= ANE_FEW_COLUMNS + 1; columns += columns < 3 ? 2 : columns < 9 ? 6 : ANE_FEW_COLUMNS - 8) { /* 1, 3, 9, then ANE_FEW_COLUMNS + 1: through BLAS */
            const ane_activations activations = a16 ? ANE_ACTIVATIONS_INT16 : ANE_ACTIVATIONS_INT8;
            const float levels = a16 ? 32767.0f : 127.0f, palette_levels = a16 ? 16383.0f : 127.0f; /* largest codes */
            float *xs = malloc(sizeof(float) * k * columns), *ys = malloc(sizeof(float) * rows * columns);
            for (int64_t i = 0; i < k * columns; i++) xs[i] = uniform() * (i % 7 == 3 ? 4.0f : 1.0f); /* some outliers */
            for (int lut = 0; lut <= (k % 2 == 0); lut++) {
                ane_error err;
                CHECK(ane_encoded_matmul(ys, lut ? ANE_ENCODING_LUT4 : ANE_ENCODING_INT8, lut ? (void *)nibbles : (void *)codes,
                                         lut ? palettes : scales, NULL, xs, rows, k, columns, activations, &err) == ANE_OK,
                      "integer-activation matmul");
                if (columns == 1) {
                    row_product alone = lut ? (a16 ? product_lut4_a16 : product_lut4_a8) : (a16 ? product_int8_a16 : product_int8_a8);
                    CHECK(rows_differing_alone(alone, lut ? (void *)nibbles : (void *)codes, lut ? (size_t)k / 2 : (size_t)k,
                                               lut ? palettes : scales, lut ? 16 : 1, xs, rows, k, ys) == 0,
                          "%s x %s activations [%lld, %lld]: rows differ from their products alone", lut ? "int4" : "int8",
                          ane_activations_name(activations), (long long)rows, (long long)k);
                }
                if (lut && rows > 1) { /* the palette codes computed once: the same sums, bit for bit */
                    size_t stride = ane_palette_codes_stride(activations);
                    char *palette_codes = malloc(stride * rows);
                    float *again = malloc(sizeof(float) * rows * columns);
                    ane_palette_codes(palette_codes, palettes, rows, activations);
                    CHECK(ane_encoded_matmul(again, ANE_ENCODING_LUT4, nibbles, palettes, palette_codes, xs, rows, k, columns,
                                             activations, &err) == ANE_OK,
                          "integer-activation matmul with palette codes");
                    CHECK(memcmp(again, ys, sizeof(float) * rows * columns) == 0,
                          "int4 x %s activations [%lld, %lld], %d columns: palette codes computed once give other sums",
                          ane_activations_name(activations), (long long)rows, (long long)k, columns);
                    /* rows 1.. alone, their codes at an offset (the integer kernels, row by row; BLAS
                     * may block other row counts differently) */
                    if (columns <= ANE_FEW_COLUMNS) {
                        CHECK(ane_encoded_matmul(again, ANE_ENCODING_LUT4, nibbles + k / 2, palettes + 16, palette_codes + stride,
                                                 xs, rows - 1, k, columns, activations, &err) == ANE_OK,
                              "integer-activation matmul of a slice of rows");
                        CHECK(memcmp(again, ys + columns, sizeof(float) * (rows - 1) * columns) == 0,
                              "int4 x %s activations [%lld, %lld], %d columns: rows 1.. with their codes at an offset differ",
                              ane_activations_name(activations), (long long)rows, (long long)k, columns);
                    }
                    free(palette_codes), free(again);
                }
                int exact_bad = 0, true_bad = 0;
                for (int c = 0; c < columns; c++) {
                    int32_t *xc = malloc(sizeof(int32_t) * k);
                    float *xd = malloc(sizeof(float) * k); /* each element's block scale */
                    for (int64_t first = 0; first < k; first += 32) {
                        int64_t last = first + 32 < k ? first + 32 : k;
                        float largest = 0;
                        for (int64_t j = first; j < last; j++) largest = fmaxf(largest, fabsf(xs[j * columns + c]));
                        float inverse = largest > 0 ? levels / largest : 0.0f, scale = largest / levels;
                        for (int64_t j = first; j < last; j++) {
                            xc[j] = (int32_t)lrintf(xs[j * columns + c] * inverse);
                            xd[j] = scale;
                        }
                    }
                    for (int64_t r = 0; r < rows; r++) {
                        int32_t entries[16];
                        float s = 1.0f;
                        if (lut) {
                            float largest = 0;
                            for (int e = 0; e < 16; e++) largest = fmaxf(largest, fabsf(palettes[r * 16 + e]));
                            float inverse = largest > 0 ? palette_levels / largest : 0.0f;
                            s = largest / palette_levels;
                            for (int e = 0; e < 16; e++) entries[e] = (int32_t)lrintf(palettes[r * 16 + e] * inverse);
                        }
                        double exact = 0, terms = 0, truth = 0, quantization = 0, magnitude = 0, products = 0;
                        /* |x - d c| <= step d, |p - s e| <= palette_step s (the header's bound) */
                        const double step = 0.5 + 3.01 * levels * ldexp(1.0, -24),
                                     palette_step = 0.5 + 3.01 * palette_levels * ldexp(1.0, -24);
                        for (int64_t first = 0; first < k; first += 32) {
                            int64_t last = first + 32 < k ? first + 32 : k, dot = 0, lane_dot = 0;
                            for (int64_t j = first; j < last; j++) {
                                int index = lut ? (nibbles[r * (k / 2) + j / 2] >> (4 * (j & 1))) & 15 : 0;
                                int code = lut ? entries[index] : codes[r * k + j];
                                double wv = lut ? palettes[r * 16 + index] : (double)codes[r * k + j] * scales[r];
                                double xv = xs[j * columns + c];
                                dot += code * xc[j];
                                lane_dot += code * xc[j];
                                if ((j - first) % 2 == 1 || j == last - 1) { /* pairs: every kernel's lanes join pairs */
                                    terms += fabs((double)xd[first] * (double)lane_dot * (lut ? s : scales[r]));
                                    lane_dot = 0;
                                }
                                products += fabs((double)code * xc[j] * xd[j] * (lut ? s : scales[r]));
                                truth += wv * xv;
                                magnitude += fabs(wv * xv);
                                quantization += lut ? palette_step * s * fabs(xv) + step * (fabs(wv) + palette_step * s) * xd[j]
                                                    : step * fabs(wv) * xd[j];
                            }
                            double term = (double)xd[first] * (double)dot * (lut ? s : scales[r]);
                            exact += term;
                        }
                        double y = ys[r * columns + c], fp32 = 2.0 * (double)(k / 4 + 2) * ldexp(1.0, -24);
                        /* through BLAS (more than ANE_FEW_COLUMNS columns): fp32 products of the
                         * quantized values (each rounded twice, 2u) summed over k terms */
                        double tolerance = columns > ANE_FEW_COLUMNS ? 2.0 * (double)(k + 2) * ldexp(1.0, -24) * products : fp32 * terms;
                        exact_bad += !(fabs(y - exact) <= tolerance + 1e-30);
                        true_bad += !(fabs(y - truth) <= quantization + fp32 * (magnitude + quantization) + 1e-30);
                    }
                    free(xc), free(xd);
                }
                CHECK(exact_bad == 0, "%s x %s activations [%lld, %lld], %d columns: %d rows off the quantized arithmetic",
                      lut ? "int4" : "int8", ane_activations_name(activations), (long long)rows, (long long)k, columns, exact_bad);
                CHECK(true_bad == 0, "%s x %s activations [%lld, %lld], %d columns: %d rows outside the quantization bound",
                      lut ? "int4" : "int8", ane_activations_name(activations), (long long)rows, (long long)k, columns, true_bad);
            }
            free(xs), free(ys);
        }

        /* y = x^T M (ane_vecmat_fp32), M = w viewed as [rows, k]: x has rows elements here */
        {
            float *xr = malloc(sizeof(float) * rows), *yr = malloc(sizeof(float) * k);
            for (int64_t i = 0; i < rows; i++) xr[i] = uniform();
            ane_vecmat_fp32(yr, xr, w, k, rows, k);
            int bad = 0;
            for (int64_t j = 0; j < k; j++) {
                double sum = 0, mag = 0;
                for (int64_t i = 0; i < rows; i++) sum += (double)xr[i] * w[i * k + j], mag += fabs((double)xr[i] * w[i * k + j]);
                bad += !(fabs(yr[j] - sum) <= 2.0 * (double)rows * ldexp(1.0, -24) * mag + 1e-30);
            }
            CHECK(bad == 0, "vecmat [%lld] x [%lld, %lld]: %d outside the bound", (long long)rows, (long long)rows,
                  (long long)k, bad);
            /* fp16 M (a cache sim holds in fp16): the very sums of the fp32 kernel over M's
             * values converted, bit for bit (same order, same fused multiply-adds) */
            float *w16_values = malloc(sizeof(float) * rows * k), *y16 = malloc(sizeof(float) * k);
            for (int64_t i = 0; i < rows * k; i++) w16[i] = ane_fp32_to_fp16(w[i]), w16_values[i] = ane_fp16_to_fp32(w16[i]);
            ane_vecmat_fp32(yr, xr, w16_values, k, rows, k);
            ane_vecmat_fp16(y16, xr, w16, k, rows, k);
            CHECK(memcmp(yr, y16, sizeof(float) * k) == 0, "vecmat fp16 [%lld] x [%lld, %lld]: not the fp32 kernel's sums",
                  (long long)rows, (long long)rows, (long long)k);
            /* the first n columns of rows k apart (a cache's filled positions): those columns'
             * sums of the whole product, bit for bit (a column's sum does not depend on n) */
            for (int64_t n = 1; n < k; n += 37) {
                float *part = malloc(sizeof(float) * (size_t)n);
                ane_vecmat_fp16(part, xr, w16, k, rows, n);
                CHECK(memcmp(part, y16, sizeof(float) * (size_t)n) == 0, "vecmat fp16 [%lld] x [%lld, %lld]: the first %lld "
                      "columns differ from the whole product's", (long long)rows, (long long)rows, (long long)k, (long long)n);
                free(part);
            }
            free(w16_values), free(y16);
            free(xr), free(yr);
        }

        /* Rows with zeros from element `used` on (used a multiple of ANE_GEMV_CHUNK): the
         * product over their first `used` elements, rows k apart, is the whole rows' bit for
         * bit, fp16 and fp32 (the zeros' chunks would add +-0 to sums that start at +0). */
        for (int64_t used = ANE_GEMV_CHUNK; used < k; used += 3 * ANE_GEMV_CHUNK) {
            float *padded = malloc(sizeof(float) * rows * k), *xs = malloc(sizeof(float) * k);
            float *whole = malloc(sizeof(float) * rows), *cut = malloc(sizeof(float) * rows);
            uint16_t *padded16 = malloc(sizeof(uint16_t) * rows * k);
            for (int64_t i = 0; i < rows * k; i++) {
                padded[i] = i % k < used ? w[i] : 0.0f;
                padded16[i] = ane_fp32_to_fp16(padded[i]);
            }
            for (int64_t j = 0; j < k; j++) xs[j] = uniform();
            ane_gemv_fp32(whole, padded, xs, rows, k);
            ane_gemv_fp32_strided(cut, padded, k, xs, rows, used);
            CHECK(memcmp(whole, cut, sizeof(float) * rows) == 0, "gemv fp32 [%lld, %lld] cut at %lld: not the whole rows' sums",
                  (long long)rows, (long long)k, (long long)used);
            ane_gemv_fp16(whole, padded16, xs, rows, k);
            ane_gemv_fp16_strided(cut, padded16, k, xs, rows, used);
            CHECK(memcmp(whole, cut, sizeof(float) * rows) == 0, "gemv fp16 [%lld, %lld] cut at %lld: not the whole rows' sums",
                  (long long)rows, (long long)k, (long long)used);
            free(padded), free(xs), free(whole), free(cut), free(padded16);
        }

        /* integer activations: a NaN or an inf in x makes every product NaN (not a silent number) */
        for (int bad = 0; bad < 4; bad++) {
            const ane_activations activations = bad < 2 ? ANE_ACTIVATIONS_INT8 : ANE_ACTIVATIONS_INT16;
            float *xs = malloc(sizeof(float) * k);
            for (int64_t j = 0; j < k; j++) xs[j] = uniform();
            xs[k / 2] = bad % 2 ? INFINITY : NAN;
            ane_error err;
            CHECK(ane_encoded_matmul(y, ANE_ENCODING_INT8, codes, scales, NULL, xs, rows, k, 1, activations, &err) == ANE_OK,
                  "integer-activation product of a non-finite x");
            int finite = 0;
            for (int64_t r = 0; r < rows; r++) finite += !isnan(y[r]);
            CHECK(finite == 0, "%s activations [%lld, %lld] with %s in x: %d finite outputs", ane_activations_name(activations),
                  (long long)rows, (long long)k, bad % 2 ? "inf" : "NaN", finite);
            free(xs);
        }

        /* several columns: y [rows, columns] = W x for int8, 4-bit, fp32 and fp16 weights; up to
         * ANE_FEW_COLUMNS a column at a time (each column bit for bit its own matrix-vector
         * product; an fp16 weight's bit for bit the fp32 product of its values, which is what
         * lets sim's weights fed as inputs match the same weights as fp16 consts), more through
         * BLAS on the decoded rows; both within the bound above */
        float *w16_as_fp32 = malloc(sizeof(float) * rows * k);
        for (int64_t i = 0; i < rows * k; i++) w16_as_fp32[i] = ane_fp16_to_fp32(w16[i]);
        /* (fp16 on AVX-512: 2 and 3 tiles of four rows a quarter of a share apart, 5 and 8 tiles of
         * two neighbouring rows where their x fit (k <= 768 for eight), else fewer at a time;
         * ANE_FEW_COLUMNS two passes of eight or more of fewer; AVX2 and NEON: pairs and one) */
        const int column_counts[] = {2, 3, 5, 8, ANE_FEW_COLUMNS, ANE_FEW_COLUMNS + 1};
        for (int n = 0; n < 6; n++)
            for (int kind = 0; kind < 4; kind++) {
                const int columns = column_counts[n];
                const char *name = kind == 0 ? "int8" : kind == 1 ? "int4" : kind == 2 ? "fp32" : "fp16";
                if (kind == 1 && k % 2) continue;
                if (kind >= 2 && columns > ANE_FEW_COLUMNS) continue; /* (sim's own BLAS path) */
                float *xs = malloc(sizeof(float) * k * columns), *ys = malloc(sizeof(float) * rows * columns);
                float *column = malloc(sizeof(float) * k), *alone = malloc(sizeof(float) * rows);
                for (int64_t i = 0; i < k * columns; i++) xs[i] = uniform();
                ane_error err;
                ane_status status =
                    kind == 3   ? ane_gemm_fp16_few_columns(ys, w16, xs, rows, k, columns, &err)
                    : kind == 2 ? ane_gemm_fp32_few_columns(ys, w, xs, rows, k, columns, &err)
                              : ane_encoded_matmul(ys, kind ? ANE_ENCODING_LUT4 : ANE_ENCODING_INT8, kind ? (void *)nibbles : (void *)codes,
                                                   kind ? palettes : scales, NULL, xs, rows, k, columns, ANE_ACTIVATIONS_FLOAT, &err);
                CHECK(status == ANE_OK, "%s matmul of %d columns", name, columns);
                int bad = 0, differing = 0;
                for (int c = 0; c < columns; c++) {
                    for (int64_t j = 0; j < k; j++) column[j] = xs[j * columns + c];
                    if (kind == 0) gemv_encoded_ok(alone, ANE_ENCODING_INT8, codes, scales, column, rows, k);
                    else if (kind == 1) gemv_encoded_ok(alone, ANE_ENCODING_LUT4, nibbles, palettes, column, rows, k);
                    else ane_gemv_fp32(alone, kind == 2 ? w : w16_as_fp32, column, rows, k);
                    for (int64_t r = 0; r < rows; r++) {
                        double sum = 0, mag = 0;
                        for (int64_t j = 0; j < k; j++) {
                            double weight = kind == 0 ? (double)codes[r * k + j] * scales[r]
                                            : kind == 1 ? palettes[r * 16 + ((nibbles[r * (k / 2) + j / 2] >> (4 * (j & 1))) & 15)]
                                                        : kind == 2 ? w[r * k + j] : w16_as_fp32[r * k + j];
                            double term = weight * xs[j * columns + c];
                            sum += term;
                            mag += fabs(term);
                        }
                        bad += !(fabs(ys[r * columns + c] - sum) <= bound_factor(k, kind == 1 && columns <= ANE_FEW_COLUMNS) * mag + 1e-30);
                        differing += columns <= ANE_FEW_COLUMNS && memcmp(&ys[r * columns + c], &alone[r], sizeof(float)) != 0;
                    }
                }
                CHECK(bad == 0, "%s matmul [%lld, %lld] x %d columns: %d entries outside the bound", name, (long long)rows,
                      (long long)k, columns, bad);
                CHECK(differing == 0, "%s matmul [%lld, %lld] x %d columns: %d entries not their column's own product", name,
                      (long long)rows, (long long)k, columns, differing);
                free(xs), free(ys), free(column), free(alone);
            }
        free(w16_as_fp32);
        free(w), free(x), free(y), free(w16), free(codes), free(nibbles), free(scales), free(palettes), free(ref),
            free(magnitude);
    }
    /* q, k, v of a Stories110M-sized layer; a GQA layer's [2048 | 1024 | 1024]; parts of odd
     * row counts (row groups and shares that cross from one part into the next); more parts
     * than one loop takes */
    const int64_t part_rows[][6] = { { 768, 768, 768 }, { 2048, 1024, 1024 }, { 37, 5, 64, 1 }, { 9, 300, 7, 130, 2, 41 } };
    const int part_counts[] = { 3, 3, 4, 6 };
    const ane_weight_encoding encodings[] = { ANE_ENCODING_DENSE, ANE_ENCODING_INT8, ANE_ENCODING_LUT4 };
    const ane_activations activations[] = { ANE_ACTIVATIONS_FLOAT, ANE_ACTIVATIONS_INT8, ANE_ACTIVATIONS_INT16 };
    const int64_t part_k[] = { 768, 256, 130 };
    /* one column (a decode step), and a few (a batched step's sessions: the several-column
     * kernels' 3 and 8 at a time, and 16 in two passes of 8), those at the shorter k (the
     * aarch64 row runs this under qemu) */
    const int64_t part_columns[] = { 1, 3, 8, 16 };
    for (size_t c = 0; c < sizeof part_counts / sizeof *part_counts; c++)
        for (size_t e = 0; e < sizeof encodings / sizeof *encodings; e++)
            for (size_t a = 0; a < sizeof activations / sizeof *activations; a++)
                for (size_t kk = 0; kk < sizeof part_k / sizeof *part_k; kk++)
                    for (size_t n = 0; n < sizeof part_columns / sizeof *part_columns; n++) {
                        if (part_columns[n] > 1 && part_k[kk] > 256) continue;
                        int differing = parts_differing_alone(encodings[e], part_rows[c], part_counts[c], part_k[kk],
                                                              activations[a], part_columns[n]);
                        CHECK(differing == 0, "ane_gemm_parts, %d parts of encoding %d under activations %d, k %lld, %lld "
                              "columns: %d outputs not what each part gives alone, column by column", part_counts[c],
                              (int)encodings[e], (int)activations[a], (long long)part_k[kk], (long long)part_columns[n],
                              differing);
                    }
    {
        ane_gemv_part none = {NULL, ANE_ENCODING_DENSE, NULL, NULL, 0, NULL, NULL};
        ane_error err;
        CHECK(ane_gemm_parts(&none, 1, NULL, 8, ANE_FEW_COLUMNS + 1, ANE_ACTIVATIONS_FLOAT, &err) == ANE_ERR_ARGUMENT &&
                  strstr(err.message, "columns"), "ane_gemm_parts of too many columns: %s", err.message);
    }
    return check_summary("gemv");
}
