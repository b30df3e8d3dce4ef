/* The NEON dot-product kernels of the kernel table (kernels.h), for CPUs with FEAT_DotProd
 * (Apple M1 on; base/cpu.h): products of int8, 4-bit, Q8_0 and Q4_0 rows with int8 activations, each 32-code
 * block's products summed exactly by two sdot (four 4-product sums a lane, at most 16 x 128 x 127
 * in 32 bits), then added to the row's sum in the scalar kernels' order, so the results are
 * the scalar bits. Compiled for armv8.2-a+dotprod (CMakeLists.txt); the table takes these only
 * where the CPU reports the feature. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>

#include "neon.h"

static int32_t block_sum(int8x16_t w0, int8x16_t w1, const int8_t *codes) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(codes)), w1, vld1q_s8(codes + 16)));
}

static float q8_int8(const int8_t *q, const code_vector *v) { return q8_int8_with(q, v, block_sum); }
static float q8_lut4(const uint8_t *packed, const void *palette, const code_vector *v) {
    return q8_lut4_with(packed, palette, v, block_sum);
}

static void rows_q8(void *context, int64_t first, int64_t last) { integer_rows_by_dots(context, first, last, q8_int8, q8_lut4); }

BLOCKS_INT8_ROWS(block_sum)

void ane_kernels_arm_dotprod(ane_kernel_table *t) {
    t->rows_integer[0][0] = t->rows_integer[1][0] = rows_q8;
    t->rows_blocks_int8 = rows_blocks_int8;
}
#endif
