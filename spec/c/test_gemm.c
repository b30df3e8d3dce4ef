/* tensor/gemm.c against its definition: every element of y = W x must equal, bit for bit, the
 * fp32 fused multiply-add chain over k in order from +0 (fmaf here, one element at a time),
 * with W's values decoded here from their stored form by the formats' own rules (fp16 bits
 * through the scalar conversion, int8 code x row scale, 4-bit index looked up in the row's
 * palette). Shapes leave tails everywhere the kernels cut: rows past a panel (12 / 6), columns
 * past a tile (32 / 16), fewer than one and past a block (256), k past a span (256) and
 * shorter than one. Special
 * values (inf, NaN, -0) in x take the same path through the chain. Strided operands (rows of
 * W, x and y with gaps between them) must give the same, and the gaps of y stay unwritten. Independently, each element
 * must lie within 2 k u sum_j |w_j x_j| of the sum in double (u = 2^-24: a recursive fp32 sum
 * of k products is off by at most ~k u of that; 2x for margin, as test_gemv). Runs again
 * under ANELUA_CPU=avx2 (the AVX2 kernel) and =scalar (no kernel: available() says so). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/cpu.h"
#include "ane_core/base/fp16.h"
#include "ane_core/tensor/gemm.h"
#include "check.h"

static uint32_t state = 77;
static float uniform(void) { /* in [-1, 1) */
    state = state * 1664525u + 1013904223u;
    return (float)((double)(state >> 8) / (1 << 23) - 1.0);
}

/* W's element (row, j) from its stored form, by the format's rule. */
static float weight_value(const ane_weight_rows *w, int64_t k, int64_t row, int64_t j) {
    int64_t at = w->transposed ? j * w->row_stride + row : row * (w->row_stride ? w->row_stride : k) + j; /* dense */
    switch (w->encoding) {
    case ANE_ENCODING_INT8: return (float)((const int8_t *)w->data)[row * k + j] * w->table[row];
    case ANE_ENCODING_LUT4: {
        uint8_t byte = ((const uint8_t *)w->data)[(row * k + j) / 2];
        return w->table[row * ANE_LUT4_ENTRIES + (j % 2 ? byte >> 4 : byte & 15)];
    }
    default: return w->half ? ane_fp16_to_fp32(((const uint16_t *)w->data)[at]) : ((const float *)w->data)[at];
    }
}

static int same_bits_or_both_nan(float a, float b) {
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    uint32_t ua, ub;
    memcpy(&ua, &a, sizeof ua);
    memcpy(&ub, &b, sizeof ub);
    return ua == ub;
}

typedef struct stored {
    ane_weight_rows rows;
    void *data;
    float *table;
} stored;

/* Dense rows are `stride` elements apart (>= k; the gaps hold values the product must not read
 * into its sums); encoded rows are packed. */
static stored make_weights(ane_weight_encoding encoding, int half, int64_t rows, int64_t k, int64_t stride, int transposed) {
    stored s = {{encoding, half, NULL, NULL, encoding == ANE_ENCODING_DENSE ? stride : 0, transposed}, NULL, NULL};
    int64_t n = transposed ? k * stride : encoding == ANE_ENCODING_DENSE ? rows * stride : rows * k;
    if (encoding == ANE_ENCODING_INT8) {
        int8_t *q = malloc((size_t)n);
        s.table = malloc((size_t)rows * sizeof *s.table);
        for (int64_t i = 0; i < n; i++) q[i] = (int8_t)(int)(127.0f * uniform());
        for (int64_t r = 0; r < rows; r++) s.table[r] = 0.01f * (1.0f + uniform());
        s.data = q;
    } else if (encoding == ANE_ENCODING_LUT4) {
        uint8_t *packed = malloc((size_t)(n / 2));
        s.table = malloc((size_t)(rows * ANE_LUT4_ENTRIES) * sizeof *s.table);
        for (int64_t i = 0; i < n / 2; i++) packed[i] = (uint8_t)((state = state * 1664525u + 1013904223u) >> 24);
        for (int64_t i = 0; i < rows * ANE_LUT4_ENTRIES; i++) s.table[i] = uniform();
        s.data = packed;
    } else if (half) {
        uint16_t *h = malloc((size_t)n * sizeof *h);
        for (int64_t i = 0; i < n; i++) h[i] = ane_fp32_to_fp16(uniform());
        s.data = h;
    } else {
        float *f = malloc((size_t)n * sizeof *f);
        for (int64_t i = 0; i < n; i++) f[i] = uniform();
        s.data = f;
    }
    s.rows.data = s.data;
    s.rows.table = s.table;
    return s;
}

enum { GUARD = 64, UNTOUCHED_BITS = 0x7fc01234 }; /* y's padding and the GUARD floats after y hold a NaN of this payload */

static int untouched(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits == UNTOUCHED_BITS;
}

/* Checks one product; `specials` puts inf, NaN and -0 into some of x; `padded` spaces W's dense
 * rows, x's and y's rows apart with gaps (ane_gemm_weights_strided). Returns failures. */
static int check_product(ane_weight_encoding encoding, int half, int64_t rows, int64_t k, int64_t columns, int specials,
                         int padded, int transposed) {
    int64_t length = transposed ? rows : k; /* of a stored row */
    int64_t stride = padded ? length + 3 : length, ldx = padded ? columns + 5 : columns, ldy = padded ? columns + 2 : columns;
    stored w = make_weights(encoding, half, rows, k, stride, transposed);
    float *x = malloc((size_t)(k * ldx + 1) * sizeof *x), *y = malloc((size_t)(rows * ldy + GUARD) * sizeof *y);
    for (int64_t i = 0; i < k * ldx; i++) x[i] = uniform();
    if (specials && k * columns > 8) {
        x[3 % columns] = INFINITY;
        x[(k / 2) * ldx + columns / 2] = NAN;
        x[(k - 1) * ldx + columns - 1] = -0.0f;
    }
    uint32_t marker = UNTOUCHED_BITS;
    for (int64_t i = 0; i < rows * ldy + GUARD; i++) memcpy(y + i, &marker, sizeof marker);
    if (padded) ane_gemm_weights_strided(y, ldy, &w.rows, x, ldx, rows, k, columns);
    else ane_gemm_weights(y, &w.rows, x, rows, k, columns);
    int bad_chain = 0, bad_bound = 0, written = 0;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < columns; c++) {
            float chain = 0.0f;
            double exact = 0.0, magnitude = 0.0;
            for (int64_t j = 0; j < k; j++) {
                float wj = weight_value(&w.rows, k, r, j), xj = x[j * ldx + c];
                chain = fmaf(wj, xj, chain);
                exact += (double)wj * xj;
                magnitude += fabs((double)wj * xj);
            }
            float got = y[r * ldy + c];
            bad_chain += !same_bits_or_both_nan(got, chain) || untouched(got);
            if (isfinite(chain)) bad_bound += !(fabs(got - exact) <= 2.0 * (double)k * ldexp(1.0, -24) * magnitude + 1e-30);
        }
        for (int64_t c = columns; c < ldy; c++) written += !untouched(y[r * ldy + c]);
    }
    for (int64_t i = rows * ldy; i < rows * ldy + GUARD; i++) written += !untouched(y[i]);
    CHECK(written == 0, "[%lld, %lld] x [%lld, %lld]%s: %d floats written outside y's elements", (long long)rows,
          (long long)k, (long long)k, (long long)columns, padded ? " padded" : "", written);
    CHECK(bad_chain == 0, "encoding %d half %d [%lld, %lld] x [%lld, %lld]%s%s: %d elements differ from the fma chain",
          (int)encoding, half, (long long)rows, (long long)k, (long long)k, (long long)columns, padded ? " padded" : "",
          transposed ? " transposed" : "", bad_chain);
    CHECK(bad_bound == 0, "encoding %d half %d [%lld, %lld] x [%lld, %lld]%s: %d elements outside the bound",
          (int)encoding, half, (long long)rows, (long long)k, (long long)k, (long long)columns, padded ? " padded" : "",
          bad_bound);
    free(w.data);
    free(w.table);
    free(x);
    free(y);
    return bad_chain + bad_bound + written;
}

int main(void) {
    int expected = ane_cpu_has_avx2_fma_f16c() || ane_cpu_has_avx512f();
    CHECK(ane_gemm_weights_available() == expected, "available() is %d on a CPU with%s AVX2/AVX-512",
          ane_gemm_weights_available(), expected ? "" : "out");
    if (!ane_gemm_weights_available()) {
        printf("test_gemm: no kernel on this CPU (%s); the products are not called\n",
               getenv("ANELUA_CPU") ? getenv("ANELUA_CPU") : "no AVX2");
        return check_summary("test_gemm");
    }
    /* rows: below, at and past a panel (12 / 6) and many panels (helper threads);
     * k: 1, odd, a span's tail, whole spans; columns: 1, tails of a tile, several tiles,
     * blocks of 256 and a tail of one */
    static const int64_t shapes[][3] = {
        {1, 1, 1},    {5, 2, 3},     {6, 17, 16},    {7, 256, 17},    {12, 300, 32},  {13, 64, 33},
        {25, 513, 40}, {100, 768, 64}, {37, 1030, 100}, {300, 96, 256},  {2, 2, 7},    {20, 520, 600},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int64_t rows = shapes[s][0], k = shapes[s][1], columns = shapes[s][2];
        int padded = s % 2;
        check_product(ANE_ENCODING_DENSE, 0, rows, k, columns, s % 3 == 1, padded, 0);
        check_product(ANE_ENCODING_DENSE, 0, rows, k, columns, s % 3 == 2, 1, 1); /* (W^T needs its stride) */
        check_product(ANE_ENCODING_DENSE, 1, rows, k, columns, 0, !padded, 0);
        check_product(ANE_ENCODING_INT8, 0, rows, k, columns, 0, padded, 0);
        if (k % 2 == 0) check_product(ANE_ENCODING_LUT4, 0, rows, k, columns, s % 3 == 2, !padded, 0);
    }
    /* k = 0: empty sums are +0 */
    float y[6] = {1, 2, 3, 4, 5, 6}, w = 0.0f, x = 0.0f;
    ane_weight_rows empty = {ANE_ENCODING_DENSE, 0, &w, NULL, 0, 0};
    ane_gemm_weights(y, &empty, &x, 2, 0, 3);
    int zeros = 0;
    for (int i = 0; i < 6; i++) zeros += y[i] == 0.0f && !signbit(y[i]);
    CHECK(zeros == 6, "k = 0 left %d of 6 elements +0", zeros);
    return check_summary("test_gemm");
}
