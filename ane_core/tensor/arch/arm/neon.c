/* The NEON (Advanced SIMD) kernels of the kernel table (kernels.h), the level every arm64 CPU
 * has (Apple silicon; compiled with -ffp-contract=off, so a multiply and an add stay two
 * roundings where the scalar kernels keep them apart):
 * - matrix-vector products of fp16, fp32, int8, 4-bit, Q8_0 and Q4_0 rows with float activations: 32
 *   elements an iteration in eight accumulators of four lanes (fp16 weights converted eight at
 *   a time by fcvtl, which arm64 has without FEAT_FP16's arithmetic; 4-bit indices looked up in
 *   the row's 64 bytes of fp32 entries by tbl, exactly); fp16 rows also two columns at once;
 * - products over a cache, 64 columns a tile in sixteen registers: VECMAT_COLUMNS' sums;
 * - integer activations: codes and scales quantized four lanes at a time (fcvtns rounds to
 *   nearest even, as lrintf does), each block's products summed exactly in integers (smull,
 *   sadalp; palettes looked up by tbl) and added to the row's sum in the scalar kernels' order:
 *   the scalar bits;
 * - e^x, tanh, sigmoid, SiLU, sums and maxima, AdamW, decoded 4-bit rows and 4 x 4 transposes:
 *   the scalar kernels' operations in their order, the scalar bits.
 * The dot-product instructions take over the int8 products where the CPU has them (dotprod.c). */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#include "../../../base/fp16.h"
#include "../../kernels.h"
#include "../../vector_math_constants.h"
#include "neon.h"

/* ------------------------------------------------ float activations */

/* The eight accumulators' sum, in one order for every row kernel below. */
static inline float sum8(const float32x4_t a[8]) {
    float32x4_t low = vaddq_f32(vaddq_f32(a[0], a[1]), vaddq_f32(a[2], a[3]));
    float32x4_t high = vaddq_f32(vaddq_f32(a[4], a[5]), vaddq_f32(a[6], a[7]));
    return vaddvq_f32(vaddq_f32(low, high));
}

/* fp16 and fp32 rows take the same chains (32 elements an iteration into a[0..7], then four at a
 * time into a[0], then one at a time into the total), so fp16 weights give the sums of their
 * values in fp32; a chunk of 32 zeros adds +0 to every chain. */
static float dot_fp16(const uint16_t *w, const float *x, int64_t k) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 32 <= k; j += 32)
        for (int h = 0; h < 4; h++) {
            float16x8_t halves = vreinterpretq_f16_u16(vld1q_u16(w + j + 8 * h));
            a[2 * h] = vfmaq_f32(a[2 * h], vcvt_f32_f16(vget_low_f16(halves)), vld1q_f32(x + j + 8 * h));
            a[2 * h + 1] = vfmaq_f32(a[2 * h + 1], vcvt_high_f32_f16(halves), vld1q_f32(x + j + 8 * h + 4));
        }
    for (; j + 4 <= k; j += 4) a[0] = vfmaq_f32(a[0], vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(w + j))), vld1q_f32(x + j));
    float total = sum8(a);
    for (; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

/* dot_fp16 of one row against two columns x and z, each weight converted once for both (a few
 * columns' products: a server's batched step): each column's chains, tail and sum dot_fp16's,
 * so each result is its bits. Per 32 weights: 8 conversions and 16 multiply-adds, against 16
 * and 16 a column at a time. */
static void dot2_fp16(const uint16_t *w, const float *x, const float *z, int64_t k, float *out_x, float *out_z) {
    float32x4_t a[8], b[8];
    for (int i = 0; i < 8; i++) a[i] = b[i] = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 32 <= k; j += 32)
        for (int h = 0; h < 4; h++) {
            float16x8_t halves = vreinterpretq_f16_u16(vld1q_u16(w + j + 8 * h));
            float32x4_t low = vcvt_f32_f16(vget_low_f16(halves)), high = vcvt_high_f32_f16(halves);
            a[2 * h] = vfmaq_f32(a[2 * h], low, vld1q_f32(x + j + 8 * h));
            a[2 * h + 1] = vfmaq_f32(a[2 * h + 1], high, vld1q_f32(x + j + 8 * h + 4));
            b[2 * h] = vfmaq_f32(b[2 * h], low, vld1q_f32(z + j + 8 * h));
            b[2 * h + 1] = vfmaq_f32(b[2 * h + 1], high, vld1q_f32(z + j + 8 * h + 4));
        }
    for (; j + 4 <= k; j += 4) {
        float32x4_t four = vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(w + j)));
        a[0] = vfmaq_f32(a[0], four, vld1q_f32(x + j)), b[0] = vfmaq_f32(b[0], four, vld1q_f32(z + j));
    }
    float total_x = sum8(a), total_z = sum8(b);
    for (; j < k; j++) total_x += ane_fp16_to_fp32(w[j]) * x[j], total_z += ane_fp16_to_fp32(w[j]) * z[j];
    *out_x = total_x, *out_z = total_z;
}

/* fp16 rows of two columns' jobs (kernels.h: rows_fp16_columns), each row's share of the span
 * ahead asked for before it. */
static void rows_fp16_two_columns(const gemv_job *jobs, int count, int64_t first, int64_t last, prefetch_span ahead) {
    const gemv_job *a = &jobs[0], *b = &jobs[1];
    (void)count; /* (2: fp16_columns_at_once) */
    for (int64_t r = first; r < last; r++) {
        prefetch_span share = prefetch_span_share(&ahead, last - r);
        prefetch_span_rest(&share);
        dot2_fp16((const uint16_t *)a->w + r * a->row_stride, a->x, b->x, a->k, &a->y[r], &b->y[r]);
    }
}

static float dot_fp32(const float *w, const float *x, int64_t k) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 32 <= k; j += 32)
        for (int h = 0; h < 4; h++) {
            a[2 * h] = vfmaq_f32(a[2 * h], vld1q_f32(w + j + 8 * h), vld1q_f32(x + j + 8 * h));
            a[2 * h + 1] = vfmaq_f32(a[2 * h + 1], vld1q_f32(w + j + 8 * h + 4), vld1q_f32(x + j + 8 * h + 4));
        }
    for (; j + 4 <= k; j += 4) a[0] = vfmaq_f32(a[0], vld1q_f32(w + j), vld1q_f32(x + j));
    float total = sum8(a);
    for (; j < k; j++) total += w[j] * x[j];
    return total;
}

/* int8 row: sum q[j] x[j], the codes widened to fp32 exactly (the caller applies the scale). */
static float dot_int8(const int8_t *q, const float *x, int64_t k) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 32 <= k; j += 32)
        for (int h = 0; h < 2; h++) {
            int8x16_t codes = vld1q_s8(q + j + 16 * h);
            int16x8_t low = vmovl_s8(vget_low_s8(codes)), high = vmovl_high_s8(codes);
            const float *xs = x + j + 16 * h;
            float32x4_t *s = a + 4 * h;
            s[0] = vfmaq_f32(s[0], vcvtq_f32_s32(vmovl_s16(vget_low_s16(low))), vld1q_f32(xs));
            s[1] = vfmaq_f32(s[1], vcvtq_f32_s32(vmovl_high_s16(low)), vld1q_f32(xs + 4));
            s[2] = vfmaq_f32(s[2], vcvtq_f32_s32(vmovl_s16(vget_low_s16(high))), vld1q_f32(xs + 8));
            s[3] = vfmaq_f32(s[3], vcvtq_f32_s32(vmovl_high_s16(high)), vld1q_f32(xs + 12));
        }
    float total = sum8(a);
    for (; j < k; j++) total += (float)q[j] * x[j];
    return total;
}

/* The 4-bit lookup: 16 packed bytes are 32 indices (element 2i in byte i's low nibble, 2i + 1 in
 * its high one); zipped, they are the elements' indices in order. Each index i becomes the byte
 * indices 4i .. 4i + 3 of the palette's 64 bytes (tbl on four registers), so the lookup gives
 * the fp32 entries' bits themselves. values[g] holds elements 4g .. 4g + 3. */
static inline void lut4_values(const uint8_t *packed, const uint8x16x4_t *palette, float32x4_t values[8]) {
    static const uint8_t each_four_times[4][16] = {
        {0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
        {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
        {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
        {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15},
    };
    const uint8x16_t byte_of_entry = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    uint8x16_t bytes = vld1q_u8(packed);
    uint8x16_t low = vandq_u8(bytes, vdupq_n_u8(15)), high = vshrq_n_u8(bytes, 4);
    uint8x16_t quadrupled[2] = {vshlq_n_u8(vzip1q_u8(low, high), 2), vshlq_n_u8(vzip2q_u8(low, high), 2)};
    for (int g = 0; g < 8; g++) {
        uint8x16_t index = vaddq_u8(vqtbl1q_u8(quadrupled[g / 4], vld1q_u8(each_four_times[g % 4])), byte_of_entry);
        values[g] = vreinterpretq_f32_u8(vqtbl4q_u8(*palette, index));
    }
}

static float dot_lut4(const uint8_t *packed, const float *palette, const float *x, int64_t k) {
    uint8x16x4_t table = vld1q_u8_x4((const uint8_t *)palette);
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        float32x4_t w[8];
        lut4_values(packed + j / 2, &table, w);
        for (int g = 0; g < 8; g++) a[g] = vfmaq_f32(a[g], w[g], vld1q_f32(x + j + 4 * g));
    }
    float total = sum8(a);
    for (; j < k; j += 2) total += palette[packed[j / 2] & 15u] * x[j] + palette[packed[j / 2] >> 4] * x[j + 1];
    return total;
}

/* Q8_0, Q4_0, Q6_K and Q4_K rows (k a multiple of 32): each block's codes widened to fp32, less
 * the offset (Q4_K's; 0, exactly, for the others), times its scale, in dot_fp32's chains (a[g]
 * takes elements 4g .. 4g + 3 of each 32), so a row gives dot_fp32's bits for its dequantized
 * values. codes: a block's 32 codes in order. */
static inline void block_fma(int8x16_t first16, int8x16_t second16, float scale, float second_scale, float offset,
                             const float *x, float32x4_t a[8]) {
    int8x16_t halves[2] = {first16, second16};
    for (int h = 0; h < 2; h++) {
        float d = h ? second_scale : scale;
        int16x8_t low = vmovl_s8(vget_low_s8(halves[h])), high = vmovl_high_s8(halves[h]);
        float32x4_t w[4] = {vcvtq_f32_s32(vmovl_s16(vget_low_s16(low))), vcvtq_f32_s32(vmovl_high_s16(low)),
                            vcvtq_f32_s32(vmovl_s16(vget_low_s16(high))), vcvtq_f32_s32(vmovl_high_s16(high))};
        for (int g = 0; g < 4; g++)
            a[4 * h + g] = vfmaq_f32(a[4 * h + g], vmulq_n_f32(vsubq_f32(w[g], vdupq_n_f32(offset)), d),
                                     vld1q_f32(x + 16 * h + 4 * g));
    }
}

static float dot_q8_0(const int8_t *q, const float *scales, const float *x, int64_t k) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j + 32 <= k; j += 32)
        block_fma(vld1q_s8(q + j), vld1q_s8(q + j + 16), scales[j / 32], scales[j / 32], 0.0f, x + j, a);
    return sum8(a);
}

/* Q4_0 (a block's codes in order, q4_codes, a scale each) and Q4_K (its unsigned codes, a scale
 * and an offset each: `pairs`). */
static inline float dot_4bit_blocks(const uint8_t *packed, const float *table, const float *x, int64_t k, int pairs) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        int8x16_t first16, second16;
        if (pairs) q4_unsigned_codes(packed + j / 2, &first16, &second16);
        else q4_codes(packed + j / 2, &first16, &second16);
        float scale = pairs ? table[j / 16] : table[j / 32], offset = pairs ? table[j / 16 + 1] : 0.0f;
        block_fma(first16, second16, scale, scale, offset, x + j, a);
    }
    return sum8(a);
}

static float dot_q4_0(const uint8_t *packed, const float *scales, const float *x, int64_t k) {
    return dot_4bit_blocks(packed, scales, x, k, 0);
}

static float dot_q4_k(const uint8_t *packed, const float *pairs, const float *x, int64_t k) {
    return dot_4bit_blocks(packed, pairs, x, k, 1);
}

/* Q5_K: a block's codes unpacked (q5_k_codes: unsigned, below 32, the same bytes as signed ones). */
static float dot_q5_k(const uint8_t *packed, const float *pairs, const float *x, int64_t k) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        int8x16_t first16, second16;
        q5_k_codes(packed, j, &first16, &second16);
        block_fma(first16, second16, pairs[j / 16], pairs[j / 16], pairs[j / 16 + 1], x + j, a);
    }
    return sum8(a);
}

/* Q6_K (k a multiple of 256): each 32 weights' codes (q6_k_codes), two 16s of a scale each. */
static float dot_q6_k(const uint8_t *blocks, const float *scales, const float *x, int64_t k) {
    float32x4_t a[8];
    for (int i = 0; i < 8; i++) a[i] = vdupq_n_f32(0.0f);
    for (int64_t j = 0; j + 32 <= k; j += 32) {
        int8x16_t first16, second16;
        q6_k_codes(blocks, j, &first16, &second16);
        block_fma(first16, second16, scales[j / 16], scales[j / 16 + 1], 0.0f, x + j, a);
    }
    return sum8(a);
}

static const float_dots dots = {dot_fp32, dot_fp16, dot_int8, dot_lut4, dot_q8_0, dot_q4_0, dot_q6_k, dot_q4_k, dot_q5_k};
ROWS_BY_DOTS(dots)

static const float *split_lut4(float *x_split, const float *x, int64_t k) { /* x is read in order */
    (void)x_split, (void)x, (void)k;
    return NULL;
}

/* ------------------------------------------------ products over a cache */

/* 64 columns of y in sixteen registers over all k rows, then four at a time, then one at a
 * time: each column the chain VECMAT_COLUMNS computes (vfmaq_f32(y, x, m) is fmaf(x, m, y)).
 * LOAD4(i, j) loads M[i, j .. j + 3] as fp32. */
#define VECMAT_NEON(y, x, k, n, LOAD4, AT)                                                          \
    int64_t j = 0;                                                                                  \
    for (; j + 64 <= (n); j += 64) {                                                                \
        float32x4_t a[16];                                                                          \
        for (int t = 0; t < 16; t++) a[t] = vdupq_n_f32(0.0f);                                      \
        for (int64_t i = 0; i < (k); i++) {                                                         \
            float32x4_t weight = vdupq_n_f32((x)[i]);                                               \
            for (int t = 0; t < 16; t++) a[t] = vfmaq_f32(a[t], weight, LOAD4(i, j + 4 * t));       \
        }                                                                                           \
        for (int t = 0; t < 16; t++) vst1q_f32((y) + j + 4 * t, a[t]);                              \
    }                                                                                               \
    for (; j + 4 <= (n); j += 4) {                                                                  \
        float32x4_t a = vdupq_n_f32(0.0f);                                                          \
        for (int64_t i = 0; i < (k); i++) a = vfmaq_f32(a, vdupq_n_f32((x)[i]), LOAD4(i, j));       \
        vst1q_f32((y) + j, a);                                                                      \
    }                                                                                               \
    VECMAT_COLUMNS(y, x, k, j, n, AT)

static void vecmat_fp32(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n) {
#define LOAD4(i, j) vld1q_f32(m + (i) * ld + (j))
#define AT(i, j) m[(i) * ld + (j)]
    VECMAT_NEON(y, x, k, n, LOAD4, AT)
#undef LOAD4
#undef AT
}

static void vecmat_fp16(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n) {
#define LOAD4(i, j) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(m + (i) * ld + (j))))
#define AT(i, j) ane_fp16_to_fp32(m[(i) * ld + (j)])
    VECMAT_NEON(y, x, k, n, LOAD4, AT)
#undef LOAD4
#undef AT
}
#undef VECMAT_NEON

/* ------------------------------------------------ integer activations */

/* 32 contiguous values into eight registers, and their largest magnitude; 0 when one of them is
 * a NaN or an inf (not <= FLT_MAX). */
static inline int load_block(const float *x, float32x4_t v[8], float *top) {
    float32x4_t largest = vdupq_n_f32(0.0f);
    uint32x4_t finite = vdupq_n_u32(~0u);
    for (int i = 0; i < 8; i++) {
        v[i] = vld1q_f32(x + 4 * i);
        float32x4_t a = vabsq_f32(v[i]);
        finite = vandq_u32(finite, vcleq_f32(a, vdupq_n_f32(FLT_MAX)));
        largest = vmaxq_f32(largest, a);
    }
    if (vminvq_u32(finite) == 0) return 0;
    *top = vmaxvq_f32(largest);
    return 1;
}

/* One whole block: the scalar scale and codes (|x| x levels / max |x| <= levels: the narrowing
 * cannot saturate). */
static int quantize_block8(const float *x, int8_t *codes, float *scale) {
    float32x4_t v[8];
    float top;
    if (!load_block(x, v, &top)) return 0;
    *scale = top / 127.0f;
    float32x4_t inverse = vdupq_n_f32(top > 0.0f ? 127.0f / top : 0.0f);
    for (int i = 0; i < 8; i += 4) {
        int16x8_t low = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i], inverse))),
                                     vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 1], inverse))));
        int16x8_t high = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 2], inverse))),
                                      vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 3], inverse))));
        vst1q_s8(codes + 4 * i, vcombine_s8(vqmovn_s16(low), vqmovn_s16(high)));
    }
    return 1;
}

static int quantize_block16(const float *x, int16_t *codes, float *scale) {
    float32x4_t v[8];
    float top;
    if (!load_block(x, v, &top)) return 0;
    *scale = top / (float)Q16_LEVELS;
    float32x4_t inverse = vdupq_n_f32(top > 0.0f ? (float)Q16_LEVELS / top : 0.0f);
    for (int i = 0; i < 8; i += 2)
        vst1q_s16(codes + 4 * i, vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i], inverse))),
                                              vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[i + 1], inverse)))));
    return 1;
}

/* The exact integer sum of 32 int8 weights times 32 int8 codes: pairs of products in 16 bits
 * (at most 2 x 128 x 127), then added pairwise into 32 bits. */
static int32_t block_sum8(int8x16_t w0, int8x16_t w1, const int8_t *codes) {
    int8x16_t c0 = vld1q_s8(codes), c1 = vld1q_s8(codes + 16);
    int16x8_t p0 = vmlal_high_s8(vmull_s8(vget_low_s8(w0), vget_low_s8(c0)), w0, c0);
    int16x8_t p1 = vmlal_high_s8(vmull_s8(vget_low_s8(w1), vget_low_s8(c1)), w1, c1);
    return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
}

static float q8_int8(const int8_t *q, const code_vector *v) { return q8_int8_with(q, v, block_sum8); }
static float q8_lut4(const uint8_t *packed, const void *palette, const code_vector *v) {
    return q8_lut4_with(packed, palette, v, block_sum8);
}

/* 32 int16 weights (four registers, in order) of int8 rows times a block's int16 codes,
 * exactly: each lane sums 8 products of at most 128 x 32767 in 32 bits. */
static inline int32_t block_sum16(const int16x8_t w[4], const int16_t *codes) {
    int32x4_t sum = vdupq_n_s32(0);
    for (int i = 0; i < 4; i++) {
        int16x8_t c = vld1q_s16(codes + 8 * i);
        sum = vmlal_s16(sum, vget_low_s16(w[i]), vget_low_s16(c));
        sum = vmlal_high_s16(sum, w[i], c);
    }
    return vaddvq_s32(sum);
}

/* The same for a palette's 15-bit entries: a product (at most 16383 x 32767) fits 32 bits, but
 * not a block's sum of 32 (the scalar kernel sums in 64), so the products are added in pairs
 * into 64-bit lanes. */
static inline int64_t block_sum16_wide(const int16x8_t w[4], const int16_t *codes) {
    int64x2_t sum = vdupq_n_s64(0);
    for (int i = 0; i < 4; i++) {
        int16x8_t c = vld1q_s16(codes + 8 * i);
        sum = vpadalq_s32(sum, vmull_s16(vget_low_s16(w[i]), vget_low_s16(c)));
        sum = vpadalq_s32(sum, vmull_high_s16(w[i], c));
    }
    return vaddvq_s64(sum);
}

static float q16_int8(const int8_t *q, const code_vector *v) {
    int64_t whole = v->k / Q16_BLOCK * Q16_BLOCK, j = 0;
    float total = 0.0f;
    for (; j < whole; j += Q16_BLOCK) {
        int8x16_t q0 = vld1q_s8(q + j), q1 = vld1q_s8(q + j + 16);
        int16x8_t w[4] = {vmovl_s8(vget_low_s8(q0)), vmovl_high_s8(q0), vmovl_s8(vget_low_s8(q1)), vmovl_high_s8(q1)};
        total += v->block_scales[j / Q16_BLOCK] * (float)block_sum16(w, v->codes16 + j);
    }
    return total + q16_int8_from(q, v, j);
}

/* 4-bit rows: the 15-bit entries (32 bytes) looked up by byte pairs 2i, 2i + 1 of each index i. */
static float q16_lut4(const uint8_t *packed, const void *palette, const code_vector *v) {
    const palette16 *p = palette;
    uint8x16x2_t entries = vld1q_u8_x2((const uint8_t *)p->entries);
    int64_t whole = v->k / Q16_BLOCK * Q16_BLOCK, j = 0;
    float total = 0.0f;
    for (; j < whole; j += Q16_BLOCK) {
        uint8x16_t bytes = vld1q_u8(packed + j / 2);
        uint8x16_t low = vandq_u8(bytes, vdupq_n_u8(15)), high = vshrq_n_u8(bytes, 4);
        uint8x16_t indices[2] = {vzip1q_u8(low, high), vzip2q_u8(low, high)}; /* elements 0-15, 16-31 */
        int16x8_t w[4];
        for (int h = 0; h < 2; h++) {
            uint8x16_t first_byte = vshlq_n_u8(indices[h], 1), second_byte = vaddq_u8(first_byte, vdupq_n_u8(1));
            w[2 * h] = vreinterpretq_s16_u8(vqtbl2q_u8(entries, vzip1q_u8(first_byte, second_byte)));
            w[2 * h + 1] = vreinterpretq_s16_u8(vqtbl2q_u8(entries, vzip2q_u8(first_byte, second_byte)));
        }
        total += v->block_scales[j / Q16_BLOCK] * (float)block_sum16_wide(w, v->codes16 + j);
    }
    return total + q16_lut4_from(packed, p, v, j);
}

static void rows_q8(void *context, int64_t first, int64_t last) { integer_rows_by_dots(context, first, last, q8_int8, q8_lut4); }

BLOCKS_INT8_ROWS(block_sum8)
static void rows_q16(void *context, int64_t first, int64_t last) {
    integer_rows_by_dots(context, first, last, q16_int8, q16_lut4);
}

/* ------------------------------------------------ e^x, tanh, sigmoid, SiLU, sums and maxima
 * (kernels_scalar.c's operations in its order, four lanes at a time) */

static inline float32x4_t power_of_two4(int32x4_t n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(n, vdupq_n_s32(127)), 23));
}

static inline float32x4_t reduced_expm1_4(float32x4_t x, int32x4_t *n) {
    float32x4_t whole = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(LOG2_E)));
    float32x4_t r = vfmaq_f32(x, whole, vdupq_n_f32(-LN2_HIGH));
    r = vfmaq_f32(r, whole, vdupq_n_f32(-LN2_LOW));
    float32x4_t p = vdupq_n_f32(TAYLOR[0]);
    for (int i = 1; i < 7; i++) p = vfmaq_f32(vdupq_n_f32(TAYLOR[i]), p, r);
    *n = vcvtq_s32_f32(whole);
    return vfmaq_f32(r, p, vmulq_f32(r, r));
}

/* NaN lanes of x carried into result */
static inline float32x4_t keep_nan4(float32x4_t x, float32x4_t result) { return vbslq_f32(vceqq_f32(x, x), result, x); }

static inline float32x4_t exp4(float32x4_t x) {
    uint32x4_t below = vcltq_f32(x, vdupq_n_f32(EXP_LOWEST));
    float32x4_t clamped = vminq_f32(vmaxq_f32(x, vdupq_n_f32(EXP_LOWEST)), vdupq_n_f32(EXP_HIGHEST));
    int32x4_t n;
    float32x4_t m = reduced_expm1_4(clamped, &n);
    int32x4_t half = vshrq_n_s32(n, 1);
    float32x4_t first = power_of_two4(half);
    float32x4_t value = vmulq_f32(vfmaq_f32(first, first, m), power_of_two4(vsubq_s32(n, half)));
    return keep_nan4(x, vbslq_f32(below, vdupq_n_f32(0.0f), value));
}

static inline float32x4_t tanh4(float32x4_t x) {
    uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(x), vdupq_n_u32(0x80000000u));
    float32x4_t magnitude = vminq_f32(vabsq_f32(x), vdupq_n_f32(TANH_SATURATES));
    int32x4_t n;
    float32x4_t m = reduced_expm1_4(vaddq_f32(magnitude, magnitude), &n);
    float32x4_t scale = power_of_two4(n);
    m = vfmaq_f32(vsubq_f32(scale, vdupq_n_f32(1.0f)), scale, m);
    float32x4_t value = vdivq_f32(m, vaddq_f32(m, vdupq_n_f32(2.0f)));
    return keep_nan4(x, vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(value), sign)));
}

/* e^-|x|, and the lanes where x >= 0 (false for NaN, whose e is NaN) */
static inline float32x4_t exp_negative_magnitude4(float32x4_t x, uint32x4_t *not_negative) {
    *not_negative = vcgeq_f32(x, vdupq_n_f32(0.0f));
    return exp4(vnegq_f32(vabsq_f32(x)));
}

static inline float32x4_t sigmoid4(float32x4_t x) {
    uint32x4_t not_negative;
    float32x4_t e = exp_negative_magnitude4(x, &not_negative);
    return vdivq_f32(vbslq_f32(not_negative, vdupq_n_f32(1.0f), e), vaddq_f32(vdupq_n_f32(1.0f), e));
}

static inline float32x4_t silu4(float32x4_t x) {
    uint32x4_t not_negative;
    float32x4_t e = exp_negative_magnitude4(x, &not_negative);
    return vdivq_f32(vbslq_f32(not_negative, x, vmulq_f32(x, e)), vaddq_f32(vdupq_n_f32(1.0f), e));
}

/* OP4 over whole groups of four, then the tail through a padded group (the same path). */
#define MAP4(name, OP4)                                                                        \
    static void name(float *out, const float *x, int64_t n) {                                  \
        int64_t i = 0;                                                                         \
        for (; i + 4 <= n; i += 4) vst1q_f32(out + i, OP4(vld1q_f32(x + i)));                  \
        if (i < n) {                                                                           \
            float tail[4] = { 0 };                                                             \
            memcpy(tail, x + i, (size_t)(n - i) * sizeof *tail);                               \
            vst1q_f32(tail, OP4(vld1q_f32(tail)));                                             \
            memcpy(out + i, tail, (size_t)(n - i) * sizeof *tail);                             \
        }                                                                                      \
    }
MAP4(exp_neon, exp4)
MAP4(tanh_neon, tanh4)
MAP4(sigmoid_neon, sigmoid4)
MAP4(silu_neon, silu4)
#undef MAP4

/* Eight lanes in two registers (element i into lane i % 8), as the scalar kernel sums them. */
static float exp_shifted_sum(float *out, const float *x, float shift, int64_t n) {
    float32x4_t by = vdupq_n_f32(shift), low = vdupq_n_f32(0.0f), high = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float32x4_t e0 = exp4(vsubq_f32(vld1q_f32(x + i), by)), e1 = exp4(vsubq_f32(vld1q_f32(x + i + 4), by));
        vst1q_f32(out + i, e0);
        vst1q_f32(out + i + 4, e1);
        low = vaddq_f32(low, e0);
        high = vaddq_f32(high, e1);
    }
    float lanes[8], total = 0.0f;
    vst1q_f32(lanes, low);
    vst1q_f32(lanes + 4, high);
    for (int lane = 0; lane < 8; lane++) total += lanes[lane];
    for (; i < n; i++) total += out[i] = exp_scalar(x[i] - shift);
    return total;
}

static void reduce_partials(float *partial, const float *x, int64_t from, int64_t whole, int take_max) {
    float32x4_t acc[2] = {vld1q_f32(partial), vld1q_f32(partial + 4)};
    for (int64_t c = from; c < whole; c += 8)
        for (int h = 0; h < 2; h++) {
            float32x4_t v = vld1q_f32(x + c + 4 * h);
            if (take_max) {
                uint32x4_t take = vorrq_u32(vcgtq_f32(v, acc[h]), vmvnq_u32(vceqq_f32(v, v)));
                acc[h] = vbslq_f32(take, v, acc[h]);
            } else {
                acc[h] = vaddq_f32(acc[h], v);
            }
        }
    vst1q_f32(partial, acc[0]);
    vst1q_f32(partial + 4, acc[1]);
}

/* ------------------------------------------------ AdamW, 4-bit rows, transposes */

/* Four elements at a time with the scalar loop's operations in its order (IEEE sqrt and
 * division are correctly rounded in both), the rest through the scalar loop. */
static void adamw(const adamw_constants *c, float *p, float *mm, float *vv, const float *g, int64_t count) {
    const float32x4_t b1 = vdupq_n_f32(c->b1), b2 = vdupq_n_f32(c->b2), one_b1 = vdupq_n_f32(1.0f - c->b1),
                      one_b2 = vdupq_n_f32(1.0f - c->b2), inv_c1 = vdupq_n_f32(c->inv_c1), inv_c2 = vdupq_n_f32(c->inv_c2),
                      lr = vdupq_n_f32(c->lr), eps = vdupq_n_f32(c->eps), wd = vdupq_n_f32(c->wd),
                      scale = vdupq_n_f32(c->scale);
    int64_t k = 0;
    for (; k + 4 <= count; k += 4) {
        float32x4_t gi = vmulq_f32(vld1q_f32(g + k), scale);
        float32x4_t m = vaddq_f32(vmulq_f32(b1, vld1q_f32(mm + k)), vmulq_f32(one_b1, gi));
        float32x4_t v = vaddq_f32(vmulq_f32(b2, vld1q_f32(vv + k)), vmulq_f32(vmulq_f32(one_b2, gi), gi));
        vst1q_f32(mm + k, m);
        vst1q_f32(vv + k, v);
        float32x4_t m_hat = vmulq_f32(m, inv_c1), v_hat = vmulq_f32(v, inv_c2);
        float32x4_t w = vld1q_f32(p + k);
        float32x4_t update = vaddq_f32(vdivq_f32(m_hat, vaddq_f32(vsqrtq_f32(v_hat), eps)), vmulq_f32(wd, w));
        vst1q_f32(p + k, vsubq_f32(w, vmulq_f32(lr, update)));
    }
    adamw_scalar(c, p + k, mm + k, vv + k, g + k, count - k);
}

static void lut4_decode(const uint8_t *packed, const float *palette, int64_t count, float *out) {
    uint8x16x4_t table = vld1q_u8_x4((const uint8_t *)palette);
    int64_t j = 0;
    for (; j + 32 <= count; j += 32) {
        float32x4_t values[8];
        lut4_values(packed + j / 2, &table, values);
        for (int g = 0; g < 8; g++) vst1q_f32(out + j + 4 * g, values[g]);
    }
    lut4_decode_scalar(packed + j / 2, palette, count - j, out + j);
}

/* out rows r .. r + 3, columns c .. c + 3 from the source's columns c .. c + 3 (bits moved as
 * they are): two rounds of transposing pairs, of 32-bit and then 64-bit elements. */
static inline void transpose_4x4(const transpose_job *j, int64_t r, int64_t c) {
    uint32x4_t a[4];
    for (int i = 0; i < 4; i++) a[i] = vld1q_u32(j->in + r + (c + i) * j->column_step);
    uint32x4_t t0 = vtrn1q_u32(a[0], a[1]), t1 = vtrn2q_u32(a[0], a[1]);
    uint32x4_t t2 = vtrn1q_u32(a[2], a[3]), t3 = vtrn2q_u32(a[2], a[3]);
#define PAIRS(trn, x, y) vreinterpretq_u32_u64(trn(vreinterpretq_u64_u32(x), vreinterpretq_u64_u32(y)))
    vst1q_u32(j->out + (r + 0) * j->cols + c, PAIRS(vtrn1q_u64, t0, t2));
    vst1q_u32(j->out + (r + 1) * j->cols + c, PAIRS(vtrn1q_u64, t1, t3));
    vst1q_u32(j->out + (r + 2) * j->cols + c, PAIRS(vtrn2q_u64, t0, t2));
    vst1q_u32(j->out + (r + 3) * j->cols + c, PAIRS(vtrn2q_u64, t1, t3));
#undef PAIRS
}

static void transpose_tile(const transpose_job *j, int64_t r0, int64_t c0) {
    for (int64_t r = r0; r < r0 + TRANSPOSE_TILE; r += 4)
        for (int64_t c = c0; c < c0 + TRANSPOSE_TILE; c += 4) transpose_4x4(j, r, c);
}

void ane_kernels_arm_neon(ane_kernel_table *t) {
    t->rows_float[WEIGHTS_FP32] = rows_fp32;
    t->rows_float[WEIGHTS_FP16] = rows_fp16;
    t->rows_fp16_columns = rows_fp16_two_columns, t->fp16_columns_at_once = 2;
    t->rows_float[WEIGHTS_INT8] = rows_int8;
    t->rows_float[WEIGHTS_LUT4] = rows_lut4;
    t->rows_float[WEIGHTS_Q8_0] = rows_q8_0;
    t->rows_float[WEIGHTS_Q4_0] = rows_q4_0;
    t->rows_float[WEIGHTS_Q6_K] = rows_q6_k;
    t->rows_float[WEIGHTS_Q4_K] = rows_q4_k;
    t->rows_float[WEIGHTS_Q5_K] = rows_q5_k;
    t->split_lut4 = split_lut4;
    t->vecmat_fp32 = vecmat_fp32;
    t->vecmat_fp16 = vecmat_fp16;
    t->rows_integer[0][0] = t->rows_integer[1][0] = rows_q8;
    t->rows_blocks_int8 = rows_blocks_int8;
    t->rows_integer[0][1] = t->rows_integer[1][1] = rows_q16;
    t->quantize_block8 = quantize_block8;
    t->quantize_block16 = quantize_block16;
    t->exp = exp_neon;
    t->tanh = tanh_neon;
    t->sigmoid = sigmoid_neon;
    t->silu = silu_neon;
    t->exp_shifted_sum = exp_shifted_sum;
    t->reduce_partials = reduce_partials;
    t->adamw = adamw;
    t->lut4_decode = lut4_decode;
    t->transpose_tile = transpose_tile;
}
#endif
