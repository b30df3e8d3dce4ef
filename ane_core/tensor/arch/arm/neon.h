/* What the arm64 kernel files share (internal to arch/arm). */
#ifndef ANE_TENSOR_ARCH_NEON_H
#define ANE_TENSOR_ARCH_NEON_H

#if defined(__aarch64__)
#include <arm_neon.h>
#include <stdint.h>

/* A 4-bit row's int8 palette entries for 32 elements (16 packed bytes, element 2i in byte i's
 * low nibble, 2i + 1 in its high one), in element order: the zipped nibbles index a tbl lookup. */
static inline void lut4_entries8(const uint8_t *packed, int8x16_t entries, int8x16_t *w0, int8x16_t *w1) {
    uint8x16_t bytes = vld1q_u8(packed);
    uint8x16_t low = vandq_u8(bytes, vdupq_n_u8(15)), high = vshrq_n_u8(bytes, 4);
    *w0 = vqtbl1q_s8(entries, vzip1q_u8(low, high));
    *w1 = vqtbl1q_s8(entries, vzip2q_u8(low, high));
}
#endif

#endif
