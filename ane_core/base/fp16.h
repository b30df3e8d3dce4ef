/* Conversions between fp32, IEEE binary16 (fp16) and bfloat16 (bf16).
 *
 * All conversions to a narrower type round to nearest, ties to even, keep subnormals
 * (no flush to zero), overflow to ±inf, and keep NaN a NaN of the same sign (quiet bit
 * set, the top payload bits kept: the rule the x86 F16C and arm64 instructions follow,
 * so the scalar and vector paths give identical bits). The batch functions use F16C on
 * x86-64 and NEON on arm64 when the processor has them, and the scalar code otherwise. */
#ifndef ANE_BASE_FP16_H
#define ANE_BASE_FP16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Single values inline (the kernels' tails and sim's elementwise code call these per element):
 * on arm64 the hardware's conversion (fcvt; round to nearest even, subnormals and NaN payloads
 * kept, as the bit-level code below does), elsewhere the bit-level conversion. */
#if defined(__aarch64__)
static inline uint16_t ane_fp32_to_fp16(float value) {
    __fp16 half = (__fp16)value;
    uint16_t bits;
    memcpy(&bits, &half, sizeof bits);
    return bits;
}

static inline float ane_fp16_to_fp32(uint16_t bits) {
    __fp16 half;
    memcpy(&half, &bits, sizeof half);
    return (float)half;
}
#else
static inline uint16_t ane_fp32_to_fp16(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t exponent = (bits >> 23) & 0xFFu;
    uint32_t mantissa = bits & 0x7FFFFFu;
    if (exponent == 0xFFu) {
        if (mantissa == 0) return sign | 0x7C00u;                     /* +-inf */
        return sign | 0x7C00u | 0x0200u | (uint16_t)(mantissa >> 13); /* quiet NaN */
    }
    int unbiased = (int)exponent - 127;
    if (unbiased > 15) return sign | 0x7C00u; /* too large even before rounding */
    if (unbiased >= -14) {
        /* Normal fp16: keep 10 of the 23 mantissa bits, round the 13 dropped ones. A carry out
         * of the mantissa correctly bumps the exponent (up to inf). */
        uint32_t half_bits = ((uint32_t)(unbiased + 15) << 10) | (mantissa >> 13);
        uint32_t dropped = mantissa & 0x1FFFu;
        if (dropped > 0x1000u || (dropped == 0x1000u && (half_bits & 1u))) half_bits++;
        return sign | (uint16_t)half_bits;
    }
    /* Subnormal fp16 (or zero): the value is significand * 2^(unbiased - 23) and the fp16 unit
     * is 2^-24, so the result is significand >> (-unbiased - 1), rounded. */
    if (exponent == 0) return sign; /* fp32 zero or subnormal: far below 2^-25 */
    uint32_t significand = mantissa | 0x800000u;
    int shift = -unbiased - 1; /* >= 14 */
    if (shift > 24) return sign; /* below half the smallest subnormal */
    uint32_t kept = significand >> shift;
    uint32_t dropped = significand & ((1u << shift) - 1u);
    uint32_t halfway = 1u << (shift - 1);
    if (dropped > halfway || (dropped == halfway && (kept & 1u))) kept++;
    return sign | (uint16_t)kept;
}

static inline float ane_fp16_to_fp32(uint16_t half) {
    uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
    uint32_t exponent = (half >> 10) & 0x1Fu;
    uint32_t mantissa = half & 0x3FFu;
    uint32_t bits;
    if (exponent == 0x1Fu) {
        bits = mantissa == 0 ? sign | 0x7F800000u : sign | 0x7FC00000u | (mantissa << 13);
    } else if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { /* subnormal: normalized so the leading 1 becomes the implicit bit */
            int unbiased = -14;
            while (!(mantissa & 0x400u)) {
                mantissa <<= 1;
                unbiased--;
            }
            bits = sign | ((uint32_t)(unbiased + 127) << 23) | ((mantissa & 0x3FFu) << 13);
        }
    } else {
        bits = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
    }
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}
#endif
uint16_t ane_fp32_to_bf16(float value);
float ane_bf16_to_fp32(uint16_t bits);

void ane_fp32_to_fp16_n(uint16_t *dst /* [n] */, const float *src /* [n] */, size_t n);
void ane_fp16_to_fp32_n(float *dst /* [n] */, const uint16_t *src /* [n] */, size_t n);
void ane_fp32_to_bf16_n(uint16_t *dst /* [n] */, const float *src /* [n] */, size_t n);
void ane_bf16_to_fp32_n(float *dst /* [n] */, const uint16_t *src /* [n] */, size_t n);

/* Rounds every value of a fp32 array to the nearest fp16 value, in place (the sim
 * backend's "every op output is rounded to fp16" step). */
void ane_round_fp32_through_fp16_n(float *values /* [n] */, size_t n);

/* The vector path in use ("f16c", "neon" or "scalar"). */
const char *ane_fp16_simd_name(void);

/* Forces the scalar path (enabled = 0) or restores the best available one (enabled = 1).
 * For tests and benchmarks that compare the two paths. */
void ane_fp16_set_simd(int enabled);

#endif
