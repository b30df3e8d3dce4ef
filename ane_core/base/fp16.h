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

uint16_t ane_fp32_to_fp16(float value);
float ane_fp16_to_fp32(uint16_t bits);
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
