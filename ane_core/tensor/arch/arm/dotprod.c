/* The NEON dot-product kernels of the kernel table (kernels.h), for CPUs with FEAT_DotProd
 * (Apple M1 on; base/cpu.h): products of int8 and 4-bit rows with int8 activations, each 32-code
 * block's products summed exactly by two sdot (four 4-product sums a lane, at most 16 x 128 x 127
 * in 32 bits), then added to the row's sum in the scalar kernels' order, so the results are
 * the scalar bits. Compiled for armv8.2-a+dotprod (CMakeLists.txt); the table takes these only
 * where the CPU reports the feature. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>

#include "../../kernels.h"
#include "neon.h"

static inline int32_t block_sum(int8x16_t w0, int8x16_t w1, const int8_t *codes) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(codes)), w1, vld1q_s8(codes + 16)));
}

static float q8_int8(const int8_t *q, const code_vector *v) {
    int64_t whole = v->k / Q8_BLOCK * Q8_BLOCK, j = 0;
    float total = 0.0f;
    for (; j < whole; j += Q8_BLOCK)
        total += v->block_scales[j / Q8_BLOCK] * (float)block_sum(vld1q_s8(q + j), vld1q_s8(q + j + 16), v->codes8 + j);
    return total + q8_int8_from(q, v, j);
}

static float q8_lut4(const uint8_t *packed, const void *palette, const code_vector *v) {
    const palette8 *p = palette;
    int8x16_t entries = vld1q_s8(p->entries);
    int64_t whole = v->k / Q8_BLOCK * Q8_BLOCK, j = 0;
    float total = 0.0f;
    for (; j < whole; j += Q8_BLOCK) {
        int8x16_t w0, w1;
        lut4_entries8(packed + j / 2, entries, &w0, &w1);
        total += v->block_scales[j / Q8_BLOCK] * (float)block_sum(w0, w1, v->codes8 + j);
    }
    return total + q8_lut4_from(packed, p, v, j);
}

static void rows_q8(void *context, int64_t first, int64_t last) { integer_rows_by_dots(context, first, last, q8_int8, q8_lut4); }

void ane_kernels_arm_dotprod(ane_kernel_table *t) { t->rows_integer[0][0] = t->rows_integer[1][0] = rows_q8; }
#endif
