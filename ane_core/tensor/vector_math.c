/* Elementwise e^x, tanh, sigmoid and SiLU (see vector_math.h).
 *
 * e^x: n = round(x log2 e), r = x - n ln 2 (ln 2 in two parts, |r| <= ln 2 / 2), e^r - 1 by
 * its Taylor series to r^8 / 8! (the first term left out is under 0.06 ulp there), and
 * e^x = 2^n (1 + (e^r - 1)), the power of two applied as two factors so that results
 * below 2^-126 round once, as subnormals. tanh |x| = m / (m + 2) with m = e^(2|x|) - 1
 * computed as 2^n (e^r - 1) + (2^n - 1), which keeps small |x| exact to the last bits
 * (no 1 - 2 / (e^2x + 1) cancellation); |x| >= 9 gives 1 (tanh 9 rounds to 1 in fp32).
 *
 * The scalar and AVX2 paths run the same operations in the same order, with fused
 * multiply-adds written out (this file is compiled with -ffp-contract=off, so the compiler
 * fuses nothing else), so they agree bit for bit. */
#include "vector_math.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../base/cpu.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define LOG2_E 1.44269504088896341f
#define LN2_HIGH 0.693145751953125f         /* ln 2 to 15 bits */
#define LN2_LOW 1.42860682030941723212e-6f  /* ln 2 - LN2_HIGH */
#define EXP_LOWEST (-104.0f)                /* e^-104 < 2^-150: 0 in fp32 */
#define EXP_HIGHEST 88.8f                   /* e^88.8 > FLT_MAX: infinity */
#define TANH_SATURATES 9.0f                 /* 1 - tanh 9 < 2^-25: tanh rounds to 1 */

/* 1/k! for k = 8 .. 2, the coefficients of (e^r - 1 - r) / r^2 from its highest power */
static const float TAYLOR[7] = { 1.0f / 40320, 1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f };

/* ------------------------------------------------------------------ scalar */

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

static float exp_scalar(float x) {
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

/* ------------------------------------------------------------------ AVX2 */

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma")))

AVX2 static inline __m256 power_of_two8(__m256i n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23));
}

AVX2 static inline __m256 reduced_expm1_8(__m256 x, __m256i *n) {
    __m256 whole = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2_E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fmadd_ps(whole, _mm256_set1_ps(-LN2_HIGH), x);
    r = _mm256_fmadd_ps(whole, _mm256_set1_ps(-LN2_LOW), r);
    __m256 p = _mm256_set1_ps(TAYLOR[0]);
    for (int i = 1; i < 7; i++) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(TAYLOR[i]));
    *n = _mm256_cvtps_epi32(whole);
    return _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
}

/* NaN lanes of x carried into result */
AVX2 static inline __m256 keep_nan8(__m256 x, __m256 result) {
    return _mm256_blendv_ps(result, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

AVX2 static inline __m256 exp8(__m256 x) {
    __m256 below = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_LOWEST), _CMP_LT_OQ);
    __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(EXP_LOWEST)), _mm256_set1_ps(EXP_HIGHEST));
    __m256i n;
    __m256 m = reduced_expm1_8(clamped, &n);
    __m256i half = _mm256_srai_epi32(n, 1);
    __m256 first = power_of_two8(half);
    __m256 value = _mm256_mul_ps(_mm256_fmadd_ps(first, m, first), power_of_two8(_mm256_sub_epi32(n, half)));
    return keep_nan8(x, _mm256_andnot_ps(below, value));
}

AVX2 static inline __m256 tanh8(__m256 x) {
    __m256 sign = _mm256_and_ps(x, _mm256_set1_ps(-0.0f));
    __m256 magnitude = _mm256_min_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), x), _mm256_set1_ps(TANH_SATURATES));
    __m256i n;
    __m256 m = reduced_expm1_8(_mm256_add_ps(magnitude, magnitude), &n);
    __m256 scale = power_of_two8(n);
    m = _mm256_fmadd_ps(scale, m, _mm256_sub_ps(scale, _mm256_set1_ps(1.0f)));
    __m256 value = _mm256_or_ps(_mm256_div_ps(m, _mm256_add_ps(m, _mm256_set1_ps(2.0f))), sign);
    return keep_nan8(x, value);
}

/* e^-|x|, and the lanes where x >= 0 (false for NaN, whose e is NaN) */
AVX2 static inline __m256 exp_negative_magnitude8(__m256 x, __m256 *not_negative) {
    *not_negative = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
    return exp8(_mm256_or_ps(x, _mm256_set1_ps(-0.0f)));
}

AVX2 static inline __m256 sigmoid8(__m256 x) {
    __m256 not_negative, e = exp_negative_magnitude8(x, &not_negative);
    return _mm256_div_ps(_mm256_blendv_ps(e, _mm256_set1_ps(1.0f), not_negative), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

AVX2 static inline __m256 silu8(__m256 x) {
    __m256 not_negative, e = exp_negative_magnitude8(x, &not_negative);
    return _mm256_div_ps(_mm256_blendv_ps(_mm256_mul_ps(x, e), x, not_negative), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* Applies OP8 to whole groups of eight, then to the tail through a padded group (so the
 * tail takes the same path). */
#define MAP8(name, OP8)                                                                        \
    AVX2 static void name(float *out, const float *x, int64_t n) {                             \
        int64_t i = 0;                                                                         \
        for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, OP8(_mm256_loadu_ps(x + i)));     \
        if (i < n) {                                                                           \
            float tail[8] = { 0 };                                                             \
            memcpy(tail, x + i, (size_t)(n - i) * sizeof *tail);                               \
            _mm256_storeu_ps(tail, OP8(_mm256_loadu_ps(tail)));                                \
            memcpy(out + i, tail, (size_t)(n - i) * sizeof *tail);                             \
        }                                                                                      \
    }
MAP8(exp_avx2, exp8)
MAP8(tanh_avx2, tanh8)
MAP8(sigmoid_avx2, sigmoid8)
MAP8(silu_avx2, silu8)
#undef MAP8

AVX2 static float exp_shifted_sum_avx2(float *out, const float *x, float shift, int64_t n) {
    __m256 by = _mm256_set1_ps(shift), sum = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), by));
        _mm256_storeu_ps(out + i, e);
        sum = _mm256_add_ps(sum, e);
    }
    float lanes[8];
    _mm256_storeu_ps(lanes, sum);
    float total = 0.0f;
    for (int lane = 0; lane < 8; lane++) total += lanes[lane];
    for (; i < n; i++) total += out[i] = exp_scalar(x[i] - shift);
    return total;
}
#endif

/* ------------------------------------------------------------------ sums and maxima */

/* A partial's next step: the sum, or the maximum with NaN passed on. */
static inline float reduce_step(float acc, float v, int take_max) {
    return take_max ? (v > acc || v != v ? v : acc) : acc + v;
}

enum { PARTIALS = 8 };

/* partial[l] over elements l, l + 8, ... of the whole eights, from `from` on (the partials
 * hold elements 0 .. from - 1 already). */
static void reduce_partials_scalar(float *partial, const float *x, int64_t from, int64_t whole, int take_max) {
    for (int64_t c = from; c < whole; c += PARTIALS)
        for (int l = 0; l < PARTIALS; l++) partial[l] = reduce_step(partial[l], x[c + l], take_max);
}

#if defined(__x86_64__)
AVX2 static void reduce_partials_avx2(float *partial, const float *x, int64_t from, int64_t whole, int take_max) {
    __m256 acc = _mm256_loadu_ps(partial);
    for (int64_t c = from; c < whole; c += PARTIALS) {
        __m256 v = _mm256_loadu_ps(x + c);
        if (take_max) {
            __m256 take = _mm256_or_ps(_mm256_cmp_ps(v, acc, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
            acc = _mm256_blendv_ps(acc, v, take);
        } else {
            acc = _mm256_add_ps(acc, v);
        }
    }
    _mm256_storeu_ps(partial, acc);
}
#endif

static float reduce_n(const float *x, int64_t n, int take_max) {
    if (n == 0) return take_max ? -INFINITY : 0.0f;
    float partial[PARTIALS];
    int used = n < PARTIALS ? (int)n : PARTIALS;
    for (int l = 0; l < used; l++) partial[l] = x[l];
    int64_t whole = n / PARTIALS * PARTIALS;
#if defined(__x86_64__)
    if (whole > PARTIALS && ane_cpu_has_avx2_fma_f16c()) reduce_partials_avx2(partial, x, PARTIALS, whole, take_max);
    else
#endif
        reduce_partials_scalar(partial, x, PARTIALS, whole, take_max);
    for (int64_t c = whole > used ? whole : used; c < n; c++) partial[0] = reduce_step(partial[0], x[c], take_max);
    float result = partial[0];
    for (int l = 1; l < used; l++) result = reduce_step(result, partial[l], take_max);
    return result;
}

float ane_sum_n(const float *x, int64_t n) { return reduce_n(x, n, 0); }
float ane_max_n(const float *x, int64_t n) { return reduce_n(x, n, 1); }

/* ------------------------------------------------------------------ entry points */

#define MAP_SCALAR(out, x, n, op)                                  \
    for (int64_t i_ = 0; i_ < (n); i_++) (out)[i_] = op((x)[i_])

#if defined(__x86_64__)
#define DISPATCH(out, x, n, avx2, scalar)                          \
    do {                                                           \
        if (ane_cpu_has_avx2_fma_f16c()) {                         \
            avx2(out, x, n);                                       \
            return;                                                \
        }                                                          \
        MAP_SCALAR(out, x, n, scalar);                             \
    } while (0)
#else
#define DISPATCH(out, x, n, avx2, scalar) MAP_SCALAR(out, x, n, scalar)
#endif

void ane_exp_n(float *out, const float *x, int64_t n) { DISPATCH(out, x, n, exp_avx2, exp_scalar); }
void ane_tanh_n(float *out, const float *x, int64_t n) { DISPATCH(out, x, n, tanh_avx2, tanh_scalar); }
void ane_sigmoid_n(float *out, const float *x, int64_t n) { DISPATCH(out, x, n, sigmoid_avx2, sigmoid_scalar); }
void ane_silu_n(float *out, const float *x, int64_t n) { DISPATCH(out, x, n, silu_avx2, silu_scalar); }

float ane_exp_shifted_sum_n(float *out, const float *x, float shift, int64_t n) {
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) return exp_shifted_sum_avx2(out, x, shift, n);
#endif
    float lanes[8] = { 0 }, total = 0.0f; /* summed as the eight AVX2 lanes are */
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int lane = 0; lane < 8; lane++) lanes[lane] += out[i + lane] = exp_scalar(x[i + lane] - shift);
    for (int lane = 0; lane < 8; lane++) total += lanes[lane];
    for (; i < n; i++) total += out[i] = exp_scalar(x[i] - shift);
    return total;
}
