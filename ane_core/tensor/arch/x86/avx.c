/* The AVX kernels of the kernel table (kernels.h): the AdamW step and 32 x 32 transposes, eight
 * lanes of floats without FMA. Taken on CPUs with AVX whose OS saves its state (base/cpu.h:
 * ane_cpu_has_f16c), over the scalar level. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

#include "../../kernels.h"

#define AVX __attribute__((target("avx")))

/* Eight elements at a time with the scalar loop's operations in its order (no FMA, so nothing
 * is contracted and the results are the same bits: IEEE sqrt and division are correctly
 * rounded in both), the rest through the scalar loop. One element at a time, sqrtf and the
 * division made AdamW compute-bound. */
AVX static void adamw(const adamw_constants *c, float *p, float *mm, float *vv, const float *g, int64_t count) {
    const __m256 b1 = _mm256_set1_ps(c->b1), b2 = _mm256_set1_ps(c->b2), one_b1 = _mm256_set1_ps(1.0f - c->b1),
                 one_b2 = _mm256_set1_ps(1.0f - c->b2), inv_c1 = _mm256_set1_ps(c->inv_c1),
                 inv_c2 = _mm256_set1_ps(c->inv_c2), lr = _mm256_set1_ps(c->lr), eps = _mm256_set1_ps(c->eps),
                 wd = _mm256_set1_ps(c->wd), scale = _mm256_set1_ps(c->scale);
    int64_t k = 0;
    for (; k + 8 <= count; k += 8) {
        __m256 gi = _mm256_mul_ps(_mm256_loadu_ps(g + k), scale);
        __m256 m = _mm256_add_ps(_mm256_mul_ps(b1, _mm256_loadu_ps(mm + k)), _mm256_mul_ps(one_b1, gi));
        __m256 v = _mm256_add_ps(_mm256_mul_ps(b2, _mm256_loadu_ps(vv + k)), _mm256_mul_ps(_mm256_mul_ps(one_b2, gi), gi));
        _mm256_storeu_ps(mm + k, m);
        _mm256_storeu_ps(vv + k, v);
        __m256 m_hat = _mm256_mul_ps(m, inv_c1), v_hat = _mm256_mul_ps(v, inv_c2);
        __m256 w = _mm256_loadu_ps(p + k);
        __m256 update = _mm256_add_ps(_mm256_div_ps(m_hat, _mm256_add_ps(_mm256_sqrt_ps(v_hat), eps)), _mm256_mul_ps(wd, w));
        _mm256_storeu_ps(p + k, _mm256_sub_ps(w, _mm256_mul_ps(lr, update)));
    }
    adamw_scalar(c, p + k, mm + k, vv + k, g + k, count - k);
}

/* out rows r .. r + 7, columns c .. c + 7 from the source's 8 rows c .. c + 7 (floats moved
 * as bits: the shuffles do not look at values). */
AVX static void transpose_8x8(const transpose_job *j, int64_t r, int64_t c) {
    __m256 row[8], mix[8];
    for (int i = 0; i < 8; i++) row[i] = _mm256_loadu_ps((const float *)(j->in + r + (c + i) * j->column_step));
    for (int i = 0; i < 8; i += 2) {
        mix[i] = _mm256_unpacklo_ps(row[i], row[i + 1]);
        mix[i + 1] = _mm256_unpackhi_ps(row[i], row[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        row[i] = _mm256_shuffle_ps(mix[i], mix[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        row[i + 1] = _mm256_shuffle_ps(mix[i], mix[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        row[i + 2] = _mm256_shuffle_ps(mix[i + 1], mix[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        row[i + 3] = _mm256_shuffle_ps(mix[i + 1], mix[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; i++) {
        _mm256_storeu_ps((float *)(j->out + (r + i) * j->cols + c), _mm256_permute2f128_ps(row[i], row[i + 4], 0x20));
        _mm256_storeu_ps((float *)(j->out + (r + i + 4) * j->cols + c), _mm256_permute2f128_ps(row[i], row[i + 4], 0x31));
    }
}

static void transpose_tile(const transpose_job *j, int64_t r0, int64_t c0) {
    for (int64_t r = r0; r < r0 + TRANSPOSE_TILE; r += 8)
        for (int64_t c = c0; c < c0 + TRANSPOSE_TILE; c += 8) transpose_8x8(j, r, c);
}

void ane_kernels_x86_avx(ane_kernel_table *t) {
    t->adamw = adamw;
    t->transpose_tile = transpose_tile;
}
#endif
