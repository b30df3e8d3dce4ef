/* tensor/gemv.c against products summed here in double: fp16 and fp32 weights, int8 and
 * 4-bit palette encodings, row counts that split over the helper threads and row lengths
 * that leave vector tails, and the multi-column ane_encoded_matmul. Tolerance: fp32
 * accumulation of k products has a forward error of at most ~k u sum_j |w_j x_j| (u = 2^-24,
 * recursive summation; blocked or FMA sums do better), so each row is held to
 * 2 k u sum_j |w_j x_j|, plus 1e-30 for an all-zero row. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "ane_core/base/fp16.h"
#include "ane_core/tensor/gemv.h"
#include "check.h"

static uint32_t state = 2024;
static float uniform(void) { /* in [-1, 1) */
    state = state * 1664525u + 1013904223u;
    return (float)((double)(state >> 8) / (1 << 23) - 1.0);
}

static int rows_within(const float *y, const double *ref, const double *magnitude, int64_t rows, int64_t k) {
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        double bound = 2.0 * (double)k * ldexp(1.0, -24) * magnitude[r] + 1e-30;
        bad += !(fabs(y[r] - ref[r]) <= bound);
    }
    return bad;
}

int main(void) {
    const int64_t shapes[][2] = { { 1, 1 }, { 7, 9 }, { 64, 768 }, { 3001, 77 }, { 2048, 768 }, { 33, 4098 } };
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
        CHECK(rows_within(y, ref, magnitude, rows, k) == 0, "fp32 [%lld, %lld]: rows outside the bound", (long long)rows,
              (long long)k);

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
        CHECK(rows_within(y, ref, magnitude, rows, k) == 0, "fp16 [%lld, %lld]: rows outside the bound", (long long)rows,
              (long long)k);

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
        ane_gemv_encoded(y, ANE_ENCODING_INT8, codes, scales, x, rows, k);
        CHECK(rows_within(y, ref, magnitude, rows, k) == 0, "int8 [%lld, %lld]: rows outside the bound", (long long)rows,
              (long long)k);

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
            ane_gemv_encoded(y, ANE_ENCODING_LUT4, nibbles, palettes, x, rows, k);
            CHECK(rows_within(y, ref, magnitude, rows, k) == 0, "int4 [%lld, %lld]: rows outside the bound",
                  (long long)rows, (long long)k);
        }

        /* several columns: y [rows, columns] = W x, int8 */
        enum { COLUMNS = 5 };
        float *xs = malloc(sizeof(float) * k * COLUMNS), *ys = malloc(sizeof(float) * rows * COLUMNS);
        for (int64_t i = 0; i < k * COLUMNS; i++) xs[i] = uniform();
        ane_error err;
        CHECK(ane_encoded_matmul(ys, ANE_ENCODING_INT8, codes, scales, xs, rows, k, COLUMNS, &err) == ANE_OK,
              "encoded matmul");
        int bad = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int c = 0; c < COLUMNS; c++) {
                double sum = 0, mag = 0;
                for (int64_t j = 0; j < k; j++) {
                    double term = (double)codes[r * k + j] * scales[r] * xs[j * COLUMNS + c];
                    sum += term;
                    mag += fabs(term);
                }
                bad += !(fabs(ys[r * COLUMNS + c] - sum) <= 2.0 * (double)k * ldexp(1.0, -24) * mag + 1e-30);
            }
        CHECK(bad == 0, "int8 matmul [%lld, %lld] x %d columns: %d entries outside the bound", (long long)rows,
              (long long)k, COLUMNS, bad);
        free(xs), free(ys);
        free(w), free(x), free(y), free(w16), free(codes), free(nibbles), free(scales), free(palettes), free(ref),
            free(magnitude);
    }
    return check_summary("gemv");
}
