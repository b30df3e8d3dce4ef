/* The exact lookup of 4-bit palette indices in AVX2 registers, shared by the decode products
 * (gemv.c) and the decoding of whole rows (quantize.c). A row's 16 fp32 entries become four
 * byte tables, one per byte of an entry (vpshufb looks up 32 indices in one); two rounds of
 * interleaving put the four bytes of each value back together. The interleaving works within
 * 128-bit lanes, so the indices go in a matching order: lane 0 holds elements 0-3, 8-11,
 * 16-19, 24-27 of the 32, lane 1 the others, and the values then come out as elements 0-7,
 * 8-15, 16-23, 24-31 in order. x86-64 only; callers check ane_cpu_has_avx2_fma_f16c(). */
#ifndef ANE_TENSOR_LUT4_AVX2_H
#define ANE_TENSOR_LUT4_AVX2_H

#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>

__attribute__((target("avx2"))) static inline void lut4_byte_tables_avx2(const float *palette /* [16] */,
                                                                          __m256i tables[4]) {
    const __m128i by_byte = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m128i q[4]; /* q[i]: dword b = byte b of entries 4i .. 4i + 3 */
    for (int i = 0; i < 4; i++) q[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(palette + 4 * i)), by_byte);
    __m128i low01 = _mm_unpacklo_epi32(q[0], q[1]), low23 = _mm_unpacklo_epi32(q[2], q[3]);
    __m128i high01 = _mm_unpackhi_epi32(q[0], q[1]), high23 = _mm_unpackhi_epi32(q[2], q[3]);
    tables[0] = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(low01, low23));
    tables[1] = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(low01, low23));
    tables[2] = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(high01, high23));
    tables[3] = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(high01, high23));
}

/* The values of 32 elements from their 16 packed bytes (two a byte, low nibble first):
 * values[i] holds elements 8i .. 8i + 7. */
__attribute__((target("avx2"))) static inline void lut4_values_avx2(const uint8_t *packed /* [16] */,
                                                                     const __m256i tables[4], __m256 values[4]) {
    /* packed bytes 0 1 4 5 8 9 12 13 feed lane 0, the others lane 1, each byte b doubled into
     * a word b | b << 8 */
    const __m256i lane_order = _mm256_setr_epi8(0, 0, 1, 1, 4, 4, 5, 5, 8, 8, 9, 9, 12, 12, 13, 13, /* lane 0 */
                                                2, 2, 3, 3, 6, 6, 7, 7, 10, 10, 11, 11, 14, 14, 15, 15);
    const __m256i low_nibble = _mm256_set1_epi16(0x000f), high_nibble = _mm256_set1_epi16(0x0f00);
    __m256i words = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)packed)), lane_order);
    /* byte 0: b & 15; byte 1: bits 12-15 of the word, b >> 4 */
    __m256i indices = _mm256_or_si256(_mm256_and_si256(words, low_nibble),
                                      _mm256_and_si256(_mm256_srli_epi16(words, 4), high_nibble));
    __m256i b0 = _mm256_shuffle_epi8(tables[0], indices), b1 = _mm256_shuffle_epi8(tables[1], indices);
    __m256i b2 = _mm256_shuffle_epi8(tables[2], indices), b3 = _mm256_shuffle_epi8(tables[3], indices);
    __m256i low01 = _mm256_unpacklo_epi8(b0, b1), low23 = _mm256_unpacklo_epi8(b2, b3);
    __m256i high01 = _mm256_unpackhi_epi8(b0, b1), high23 = _mm256_unpackhi_epi8(b2, b3);
    values[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(low01, low23));
    values[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(low01, low23));
    values[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(high01, high23));
    values[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(high01, high23));
}
#endif

#endif
