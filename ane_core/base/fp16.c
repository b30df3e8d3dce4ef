/* fp32 <-> fp16 <-> bf16 conversions of arrays (F16C / NEON vector paths and a scalar one) and
 * bf16 values (fp16.h has the rounding rules and the single fp16 values). */
#include "fp16.h"

#include "cpu.h"
#include "parallel.h"

#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ANE_HAVE_X86 1
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#define ANE_HAVE_NEON 1
#endif

static uint32_t float_bits(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float bits_float(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

uint16_t ane_fp32_to_bf16(float value) {
    uint32_t bits = float_bits(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((bits >> 16) | 0x0040u);
    uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)((bits + rounding) >> 16);
}

float ane_bf16_to_fp32(uint16_t bits) { return bits_float((uint32_t)bits << 16); }

/* ---- scalar batch paths ---- */

static void fp32_to_fp16_scalar(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ane_fp32_to_fp16(src[i]);
}

static void fp16_to_fp32_scalar(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ane_fp16_to_fp32(src[i]);
}

static void round_through_fp16_scalar(float *values, size_t n) {
    for (size_t i = 0; i < n; i++) values[i] = ane_fp16_to_fp32(ane_fp32_to_fp16(values[i]));
}

/* ---- vector paths ---- */

#ifdef ANE_HAVE_X86
__attribute__((target("avx,f16c"))) static void fp32_to_fp16_f16c(uint16_t *dst, const float *src,
                                                                  size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m128i lo = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
        __m128i hi = _mm256_cvtps_ph(_mm256_loadu_ps(src + i + 8), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(dst + i), lo);
        _mm_storeu_si128((__m128i *)(dst + i + 8), hi);
    }
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    fp32_to_fp16_scalar(dst + i, src + i, n - i);
}

__attribute__((target("avx,f16c"))) static void fp16_to_fp32_f16c(float *dst, const uint16_t *src,
                                                                  size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i)));
        __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i + 8)));
        _mm256_storeu_ps(dst + i, lo);
        _mm256_storeu_ps(dst + i + 8, hi);
    }
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    fp16_to_fp32_scalar(dst + i, src + i, n - i);
}

/* In place, in registers: one pass over the values where a store of the fp16 bits and a
 * second pass to read them back took twice the memory traffic. */
__attribute__((target("avx,f16c"))) static void round_through_fp16_f16c(float *values, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(values + i,
                         _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(values + i), _MM_FROUND_TO_NEAREST_INT)));
    round_through_fp16_scalar(values + i, n - i);
}

#endif

#ifdef ANE_HAVE_NEON
static void fp32_to_fp16_neon(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x4_t lo = vcvt_f16_f32(vld1q_f32(src + i));
        float16x4_t hi = vcvt_f16_f32(vld1q_f32(src + i + 4));
        vst1q_u16(dst + i, vreinterpretq_u16_f16(vcombine_f16(lo, hi)));
    }
    fp32_to_fp16_scalar(dst + i, src + i, n - i);
}

static void fp16_to_fp32_neon(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t h = vreinterpretq_f16_u16(vld1q_u16(src + i));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(h)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(h));
    }
    fp16_to_fp32_scalar(dst + i, src + i, n - i);
}

static void round_through_fp16_neon(float *values, size_t n) {
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(values + i, vcvt_f32_f16(vcvt_f16_f32(vld1q_f32(values + i))));
    round_through_fp16_scalar(values + i, n - i);
}
#endif

typedef struct conversion_paths {
    const char *name;
    void (*to_fp16)(uint16_t *, const float *, size_t);
    void (*to_fp32)(float *, const uint16_t *, size_t);
    void (*round)(float *, size_t); /* in place: each value to fp16 and back */
} conversion_paths;

static const conversion_paths scalar_paths = {"scalar", fp32_to_fp16_scalar, fp16_to_fp32_scalar,
                                              round_through_fp16_scalar};
static int simd_disabled = 0;

static const conversion_paths *active_paths(void) {
    if (simd_disabled) return &scalar_paths;
#ifdef ANE_HAVE_X86
    static const conversion_paths f16c_paths = {"f16c", fp32_to_fp16_f16c, fp16_to_fp32_f16c,
                                                 round_through_fp16_f16c};
    if (ane_cpu_has_f16c()) return &f16c_paths;
#endif
#ifdef ANE_HAVE_NEON
    static const conversion_paths neon_paths = {"neon", fp32_to_fp16_neon, fp16_to_fp32_neon,
                                                 round_through_fp16_neon};
    return &neon_paths;
#endif
    return &scalar_paths;
}

void ane_fp16_set_simd(int enabled) { simd_disabled = !enabled; }
const char *ane_fp16_simd_name(void) { return active_paths()->name; }

void ane_fp32_to_fp16_n(uint16_t *dst, const float *src, size_t n) {
    active_paths()->to_fp16(dst, src, n);
}

void ane_fp16_to_fp32_n(float *dst, const uint16_t *src, size_t n) {
    active_paths()->to_fp32(dst, src, n);
}

/* The bf16 loops are branch-free integer code that compilers vectorize on their own. */
void ane_fp32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ane_fp32_to_bf16(src[i]);
}

void ane_bf16_to_fp32_n(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = ane_bf16_to_fp32(src[i]);
}

static void round_through_fp16(void *context, int64_t first, int64_t last) { /* values[first .. last - 1] */
    float *values = context;
    active_paths()->round(values + first, (size_t)(last - first));
}

void ane_round_fp32_through_fp16_n(float *values, size_t n) {
    /* shared with the helper threads from 32,768 elements a thread (a prefill's activations) */
    ane_parallel_for((int64_t)n, (int64_t)1 << 15, round_through_fp16, values);
}
