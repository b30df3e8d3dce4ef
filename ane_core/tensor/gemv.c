/* The decode matrix-vector products (see gemv.h). Large products split their rows over the
 * helper threads of base/parallel.h. */
#include "gemv.h"

#include <stdint.h>

#include "../base/cpu.h"
#include "../base/fp16.h"
#include "../base/parallel.h"
#include "blas.h"

#include <stdlib.h>

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"))) static inline float horizontal_sum(__m256 sum) {
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_shuffle_ps(half, half, 1));
    return _mm_cvtss_f32(half);
}

__attribute__((target("avx2,fma,f16c"))) static float dot_avx2(const uint16_t *w, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), a1);
    }
    float total = horizontal_sum(_mm256_add_ps(a0, a1));
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
    float total = horizontal_sum(_mm256_add_ps(a0, a1));
    for (; j < k; j++) total += w[j] * x[j];
    return total;
}

/* int8 row: sum q[j] x[j] (the row's scale is applied by the caller). */
__attribute__((target("avx2,fma"))) static float dot_int8_avx2(const int8_t *q, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(q + j));
        __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
        __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(bytes, 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), a1);
    }
    float total = horizontal_sum(_mm256_add_ps(a0, a1));
    for (; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

/* 4-bit row: sum palette[index j] x[j]; the 16 entries sit in two registers, looked up with
 * a permute each and chosen by the index's bit 3. */
__attribute__((target("avx2,fma"))) static float dot_lut4_avx2(const uint8_t *packed, const float *palette,
                                                                const float *x, int64_t k) {
    __m256 low = _mm256_loadu_ps(palette), high = _mm256_loadu_ps(palette + 8);
    __m128i nibble = _mm_set1_epi8(15);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m128i bytes = _mm_loadl_epi64((const __m128i *)(packed + j / 2)); /* 8 bytes: 16 indices */
        __m128i indices = _mm_unpacklo_epi8(_mm_and_si128(bytes, nibble), _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble));
        __m256i i0 = _mm256_cvtepu8_epi32(indices), i1 = _mm256_cvtepu8_epi32(_mm_srli_si128(indices, 8));
        __m256 w0 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, i0), _mm256_permutevar8x32_ps(high, i0),
                                     _mm256_castsi256_ps(_mm256_slli_epi32(i0, 28)));
        __m256 w1 = _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, i1), _mm256_permutevar8x32_ps(high, i1),
                                     _mm256_castsi256_ps(_mm256_slli_epi32(i1, 28)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), a1);
    }
    float total = horizontal_sum(_mm256_add_ps(a0, a1));
    for (; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

/* AVX-512: sixteen lanes (one conversion turns 16 halves into floats), and the 16-entry
 * palette is one register that vpermps indexes. */
__attribute__((target("avx512f,avx2,fma,f16c"))) static float dot_avx512(const uint16_t *w, const float *x, int64_t k) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + j)));
        __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + j + 16)));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + j), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + j + 16), a1);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

__attribute__((target("avx512f,avx2,fma"))) static float dot_int8_avx512(const int8_t *q, const float *x, int64_t k) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + j))));
        __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + j + 16))));
        a0 = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + j), a0);
        a1 = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + j + 16), a1);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

__attribute__((target("avx512f,avx2,fma"))) static float dot_lut4_avx512(const uint8_t *packed, const float *palette,
                                                                          const float *x, int64_t k) {
    __m512 table = _mm512_loadu_ps(palette);
    __m128i nibble = _mm_set1_epi8(15);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        __m128i bytes = _mm_loadu_si128((const __m128i *)(packed + j / 2)); /* 16 bytes: 32 indices */
        __m128i low = _mm_and_si128(bytes, nibble), high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
        __m512i i0 = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(low, high)); /* elements j .. j + 15 */
        __m512i i1 = _mm512_cvtepu8_epi32(_mm_unpackhi_epi8(low, high)); /* j + 16 .. j + 31 */
        a0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(i0, table), _mm512_loadu_ps(x + j), a0);
        a1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(i1, table), _mm512_loadu_ps(x + j + 16), a1);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}
#endif

static float dot_int8_scalar(const int8_t *q, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

static float dot_lut4_scalar(const uint8_t *packed, const float *palette, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

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
    const void *w; /* [rows, k], fp16 or fp32; or encoded (quantize.h) */
    const float *x;
    int64_t k;
    const float *table; /* encoded: per-row scales [rows] or palettes [rows, 16] */
} gemv_job;

static void rows_fp16(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const uint16_t *, const float *, int64_t) = dot_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_avx2;
    if (ane_cpu_has_avx512f()) dot = dot_avx512;
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

static void rows_int8(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const int8_t *, const float *, int64_t) = dot_int8_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_int8_avx2;
    if (ane_cpu_has_avx512f()) dot = dot_int8_avx512;
#endif
    const int8_t *q = job->w;
    for (int64_t r = first; r < last; r++) job->y[r] = dot(q + r * job->k, job->x, job->k) * job->table[r];
}

static void rows_lut4(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    float (*dot)(const uint8_t *, const float *, const float *, int64_t) = dot_lut4_scalar;
#if defined(__x86_64__)
    if (ane_cpu_has_avx2_fma_f16c()) dot = dot_lut4_avx2;
    if (ane_cpu_has_avx512f()) dot = dot_lut4_avx512;
#endif
    const uint8_t *packed = job->w;
    for (int64_t r = first; r < last; r++)
        job->y[r] = dot(packed + r * (job->k / 2), job->table + r * ANE_LUT4_ENTRIES, job->x, job->k);
}

/* Shares of at least 2^18 bytes of weights: below that, a helper costs more than it saves. */
static int64_t grain_rows(int64_t k, int64_t bytes_per_weight) {
    return k > 0 ? ((int64_t)1 << 18) / (k * bytes_per_weight) + 1 : 1;
}

void ane_gemv_fp16(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k, NULL};
    ane_parallel_for(rows, grain_rows(k, 2), rows_fp16, &job);
}

void ane_gemv_fp32(float *y, const float *w, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k, NULL};
    ane_parallel_for(rows, grain_rows(k, 4), rows_fp32, &job);
}

void ane_gemv_encoded(float *y, ane_weight_encoding encoding, const void *data, const float *table, const float *x,
                      int64_t rows, int64_t k) {
    gemv_job job = {y, data, x, k, table};
    if (encoding == ANE_ENCODING_INT8) ane_parallel_for(rows, grain_rows(k, 1), rows_int8, &job);
    else ane_parallel_for(rows, grain_rows(k / 2 > 0 ? k / 2 : 1, 1), rows_lut4, &job);
}

ane_status ane_encoded_matmul(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                              const float *x, int64_t rows, int64_t k, int64_t columns, ane_error *err) {
    if (columns == 1) {
        ane_gemv_encoded(y, encoding, data, table, x, rows, k);
        return ANE_OK;
    }
    int64_t block = ((int64_t)1 << 18) / (k > 0 ? k : 1); /* rows decoded at a time: ~1 MB of fp32 */
    block = block < 1 ? 1 : block > rows ? rows : block;
    float *decoded = malloc((size_t)(block * k) * sizeof *decoded + 1);
    if (!decoded) return ane_fail(err, ANE_ERR_NOMEM, "out of memory multiplying a quantized weight");
    for (int64_t row = 0; row < rows; row += block) {
        int64_t count = rows - row < block ? rows - row : block;
        ane_dequantize_rows(encoding, data, table, k, row, count, decoded);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)count, (int)columns, (int)k, 1.0f, decoded, (int)k, x,
                    (int)columns, 0.0f, y + row * columns, (int)columns);
    }
    free(decoded);
    return ANE_OK;
}
