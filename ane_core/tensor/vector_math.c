/* Elementwise e^x, tanh, sigmoid and SiLU, and sums and maxima (see vector_math.h), through the
 * kernel table (kernels.h; the method is described in kernels_scalar.c). Every level runs the
 * same operations in the same order, with the same fused multiply-adds, so they agree bit for
 * bit. */
#include "vector_math.h"

#include <math.h>

#include "kernels.h"

void ane_exp_n(float *out, const float *x, int64_t n) { ane_kernels()->exp(out, x, n); }
void ane_tanh_n(float *out, const float *x, int64_t n) { ane_kernels()->tanh(out, x, n); }
void ane_sigmoid_n(float *out, const float *x, int64_t n) { ane_kernels()->sigmoid(out, x, n); }
void ane_silu_n(float *out, const float *x, int64_t n) { ane_kernels()->silu(out, x, n); }

float ane_exp_shifted_sum_n(float *out, const float *x, float shift, int64_t n) {
    return ane_kernels()->exp_shifted_sum(out, x, shift, n);
}

/* A partial's next step: the sum, or the maximum with NaN passed on. */
static inline float reduce_step(float acc, float v, int take_max) {
    return take_max ? (v > acc || v != v ? v : acc) : acc + v;
}

enum { PARTIALS = 8 };

static float reduce_n(const float *x, int64_t n, int take_max) {
    if (n == 0) return take_max ? -INFINITY : 0.0f;
    float partial[PARTIALS];
    int used = n < PARTIALS ? (int)n : PARTIALS;
    for (int l = 0; l < used; l++) partial[l] = x[l];
    int64_t whole = n / PARTIALS * PARTIALS;
    if (whole > PARTIALS) ane_kernels()->reduce_partials(partial, x, PARTIALS, whole, take_max);
    for (int64_t c = whole > used ? whole : used; c < n; c++) partial[0] = reduce_step(partial[0], x[c], take_max);
    float result = partial[0];
    for (int l = 1; l < used; l++) result = reduce_step(result, partial[l], take_max);
    return result;
}

float ane_sum_n(const float *x, int64_t n) { return reduce_n(x, n, 0); }
float ane_max_n(const float *x, int64_t n) { return reduce_n(x, n, 1); }
