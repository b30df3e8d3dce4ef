/* The decode matrix-vector products (see gemv.h). Large products split their rows over the
 * helper threads of base/parallel.h. */
#include "gemv.h"

#include <stdint.h>

#include "../base/cpu.h"
#include "../base/fp16.h"
#include "../base/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma,f16c"))) static float dot_avx2(const uint16_t *w, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), a1);
    }
    __m256 sum = _mm256_add_ps(a0, a1);
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_shuffle_ps(half, half, 1));
    float total = _mm_cvtss_f32(half);
    for (; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

__attribute__((target("avx2,fma"))) static float dot32_avx2(const float *w, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j), _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + j + 8), _mm256_loadu_ps(x + j + 8), a1);
    }
    __m256 sum = _mm256_add_ps(a0, a1);
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_shuffle_ps(half, half, 1));
    float total = _mm_cvtss_f32(half);
    for (; j < k; j++) total += w[j] * x[j];
    return total;
}
#endif

static float dot32_scalar(const float *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += w[j] * x[j];
    return total;
}

static float dot_scalar(const uint16_t *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

typedef struct gemv_job {
    float *y;
    const void *w; /* [rows, k], fp16 or fp32 */
    const float *x;
    int64_t k;
} gemv_job;

static void rows_fp16(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const uint16_t *, const float *, int64_t) = dot_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_avx2;
#endif
    const uint16_t *w = job->w;
    for (int64_t r = first; r < last; r++) job->y[r] = dot(w + r * job->k, job->x, job->k);
}

static void rows_fp32(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const float *, const float *, int64_t) = dot32_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot32_avx2;
#endif
    const float *w = job->w;
    for (int64_t r = first; r < last; r++) job->y[r] = dot(w + r * job->k, job->x, job->k);
}

/* Shares of at least 2^18 bytes of weights: below that, a helper costs more than it saves. */
static int64_t grain_rows(int64_t k, int64_t bytes_per_weight) {
    return k > 0 ? ((int64_t)1 << 18) / (k * bytes_per_weight) + 1 : 1;
}

void ane_gemv_fp16(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k};
    ane_parallel_for(rows, grain_rows(k, 2), rows_fp16, &job);
}

void ane_gemv_fp32(float *y, const float *w, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k};
    ane_parallel_for(rows, grain_rows(k, 4), rows_fp32, &job);
}
