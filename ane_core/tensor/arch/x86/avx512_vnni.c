/* The AVX-512 VNNI kernels of the kernel table (kernels.h): products of int8 and 4-bit rows with
 * integer activations through byte and word dot products (vpdpbusd, vpdpwssd), four rows at a
 * time, and the codes laid out as they read them. Taken on CPUs with AVX-512F, BW and VNNI
 * (base/cpu.h), over the AVX-512 level. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "../../kernels.h"
#include "x86.h"

enum { Q8_LUT4_VNNI_CHUNK = 128, Q16_LUT4_VNNI_CHUNK = 128 }; /* elements a step of the 4-bit kernels */

#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,f16c")))

/* The palette quantized in registers (the same operations as q8_palette_scalar: an exact
 * maximum, one multiply, round to nearest even). */
VNNI static void q8_palette_vnni(palette8 *p, const float *palette) {
    __m512 entries = _mm512_loadu_ps(palette);
    float largest = _mm512_reduce_max_ps(_mm512_abs_ps(entries));
    float inverse = largest > 0.0f ? 127.0f / largest : 0.0f;
    p->scale = largest / 127.0f;
    _mm_storeu_si128((__m128i *)p->entries, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(entries, _mm512_set1_ps(inverse)))));
}

/* int8 rows, up to four at a time as the float kernels (rows_in_groups' quarters): a chunk's
 * activation codes, lane biases and lane scales are loaded once for all of them. A chunk's
 * 16 lane sums are integer and exact (VNNI's unsigned weights plus 128 against the signed
 * codes, from the lane's bias), then times their block scales; two accumulators a row,
 * alternate chunks, then the tail: a row's dot is the same in any group. dots[r] = row r (at
 * w + r row_bytes) times the codes of v, unscaled by the row, for count 1 or 4; the palette
 * arguments are the 4-bit kernel's (q8_lut4_vnni takes the same), unused here. */
VNNI static inline __attribute__((always_inline)) void q8_int8_vnni_inline(const char *w, int64_t row_bytes,
                                                                            const code_vector *v, float *dots, int count) {
    const char *rows[GEMV_GROUP];
    __m512 a0[GEMV_GROUP], a1[GEMV_GROUP];
    const __m512i plus128 = _mm512_set1_epi8((char)0x80);
    for (int r = 0; r < count; r++) {
        rows[r] = w + r * row_bytes;
        a0[r] = a1[r] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) {
        __m512i bias = _mm512_loadu_si512(v->lane_bias + j / 4), codes = _mm512_loadu_si512(v->codes8 + j);
        __m512 scales = _mm512_loadu_ps(v->lane_scales + j / 4);
        for (int r = 0; r < count; r++) {
            __m512i weights = _mm512_xor_si512(_mm512_loadu_si512(rows[r] + j), plus128);
            __m512 lanes = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, weights, codes));
            if ((j / Q8_CHUNK) % 2 == 0) a0[r] = _mm512_fmadd_ps(lanes, scales, a0[r]);
            else a1[r] = _mm512_fmadd_ps(lanes, scales, a1[r]);
        }
    }
    for (int r = 0; r < count; r++)
        dots[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r])) + q8_int8_from((const int8_t *)rows[r], v, v->chunked);
}

VNNI static void q8_int8_vnni(const void *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes,
                              const code_vector *v, float *dots, int count) {
    (void)palettes, (void)palette_bytes;
    if (count == GEMV_GROUP) q8_int8_vnni_inline(w, row_bytes, v, dots, GEMV_GROUP);
    else q8_int8_vnni_inline(w, row_bytes, v, dots, 1);
}

/* 4-bit rows, 128 weights a step: the 64 packed bytes' two nibble masks are the even and the
 * odd elements' indices, looked up (vpshufb) in the palette's entries plus 128, against the
 * codes in the same order (split8); lane L of both products holds elements 8L .. 8L + 7 of the
 * step, one block's, so two vpdpbusd from the 8 elements' bias (bias8) give each lane's exact
 * sum, which takes its block's scale (chunk_scales). Per 128 weights a row: 9 vector
 * operations, against 14 with the codes in element order (each index widened to its own
 * byte). Grouped as q8_int8_vnni (the same arguments); the elements after the whole steps in
 * scalar code (decode shapes have none: 768, 1024, 2048, 3072 are whole steps). */
VNNI static inline __attribute__((always_inline)) void q8_lut4_vnni_inline(
    const char *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes, const code_vector *v, float *dots,
    int count) {
    const char *rows[GEMV_GROUP];
    const palette8 *row_palettes[GEMV_GROUP];
    __m512i tables[GEMV_GROUP];
    __m512 a0[GEMV_GROUP], a1[GEMV_GROUP];
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int r = 0; r < count; r++) {
        rows[r] = w + r * row_bytes;
        row_palettes[r] = (const palette8 *)(palettes + r * palette_bytes);
        tables[r] = _mm512_broadcast_i32x4(
            _mm_xor_si128(_mm_loadu_si128((const __m128i *)row_palettes[r]->entries), _mm_set1_epi8((char)0x80)));
        a0[r] = a1[r] = _mm512_setzero_ps();
    }
    int64_t whole = v->k / Q8_LUT4_VNNI_CHUNK * Q8_LUT4_VNNI_CHUNK, j = 0;
    for (; j < whole; j += Q8_LUT4_VNNI_CHUNK) {
        __m512i even_codes = _mm512_loadu_si512(v->split8 + j);
        __m512i odd_codes = _mm512_loadu_si512(v->split8 + j + Q8_LUT4_VNNI_CHUNK / 2);
        __m512i bias = _mm512_loadu_si512(v->bias8 + j / 8);
        __m512 scales = _mm512_loadu_ps(v->chunk_scales + j / 8);
        for (int r = 0; r < count; r++) {
            __m512i bytes = _mm512_loadu_si512(rows[r] + j / 2);
            __m512i even = _mm512_shuffle_epi8(tables[r], _mm512_and_si512(bytes, nibble));
            __m512i odd = _mm512_shuffle_epi8(tables[r], _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble));
            __m512i lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias, even, even_codes), odd, odd_codes);
            if ((j / Q8_LUT4_VNNI_CHUNK) % 2 == 0) a0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scales, a0[r]);
            else a1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), scales, a1[r]);
        }
    }
    for (int r = 0; r < count; r++)
        dots[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r])) + q8_lut4_from((const uint8_t *)rows[r], row_palettes[r], v, whole);
}

VNNI static void q8_lut4_vnni(const void *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes,
                              const code_vector *v, float *dots, int count) {
    if (count == GEMV_GROUP) q8_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, GEMV_GROUP);
    else q8_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, 1);
}

/* 4-bit rows with AVX-512 VNNI, 128 weights a step, grouped as q8_lut4_vnni (the same
 * arguments). The 64 packed bytes are 32 words, word p holding the indices of elements
 * 4p .. 4p + 3; vpermw reads an index's low five bits, so with the 16 entries twice in the
 * table the word shifted by 4 s looks up element 4p + s's entry in slot p (s = 0..3), against
 * the codes in the same order (split16). vpdpwssd adds the products of word pairs to 32-bit
 * lanes: lane L of a lookup takes elements 8L + s and 8L + 4 + s, one block's; lookups 0 and 2
 * go to one sum, 1 and 3 to another, so each lane sums 4 exact products (at most 4 x 16383 x
 * 32767 < 2^31), and both, as floats, take their block's scale (chunk_scales). Per 128 weights
 * a row: a load, 3 shifts, 4 lookups and 4 vpdpwssd, against 8 vdpbf16ps and their loads in
 * the float kernel. The elements after the whole steps in scalar code. */
VNNI static inline __attribute__((always_inline)) void q16_lut4_vnni_inline(
    const char *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes, const code_vector *v, float *dots,
    int count) {
    const char *rows[GEMV_GROUP];
    const palette16 *row_palettes[GEMV_GROUP];
    __m512i tables[GEMV_GROUP];
    __m512 sums[GEMV_GROUP];
    for (int r = 0; r < count; r++) {
        rows[r] = w + r * row_bytes;
        row_palettes[r] = (const palette16 *)(palettes + r * palette_bytes);
        __m256i entries = _mm256_loadu_si256((const __m256i *)row_palettes[r]->entries);
        tables[r] = _mm512_inserti64x4(_mm512_castsi256_si512(entries), entries, 1);
        sums[r] = _mm512_setzero_ps();
    }
    int64_t whole = v->k / Q16_LUT4_VNNI_CHUNK * Q16_LUT4_VNNI_CHUNK;
    for (int64_t j = 0; j < whole; j += Q16_LUT4_VNNI_CHUNK) {
        const int16_t *codes = v->split16 + j;
        __m512i c0 = _mm512_loadu_si512(codes), c1 = _mm512_loadu_si512(codes + 32);
        __m512i c2 = _mm512_loadu_si512(codes + 64), c3 = _mm512_loadu_si512(codes + 96);
        __m512 scales = _mm512_loadu_ps(v->chunk_scales + j / 8);
        for (int r = 0; r < count; r++) {
            __m512i packed = _mm512_loadu_si512(rows[r] + j / 2);
            __m512i even = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_permutexvar_epi16(packed, tables[r]), c0);
            __m512i odd = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                              _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 4), tables[r]), c1);
            even = _mm512_dpwssd_epi32(even, _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 8), tables[r]), c2);
            odd = _mm512_dpwssd_epi32(odd, _mm512_permutexvar_epi16(_mm512_srli_epi16(packed, 12), tables[r]), c3);
            __m512 lanes = _mm512_add_ps(_mm512_cvtepi32_ps(even), _mm512_cvtepi32_ps(odd));
            sums[r] = _mm512_fmadd_ps(lanes, scales, sums[r]);
        }
    }
    for (int r = 0; r < count; r++)
        dots[r] = _mm512_reduce_add_ps(sums[r]) + q16_lut4_from((const uint8_t *)rows[r], row_palettes[r], v, whole);
}

VNNI static void q16_lut4_vnni(const void *w, int64_t row_bytes, const char *palettes, int64_t palette_bytes,
                               const code_vector *v, float *dots, int count) {
    if (count == GEMV_GROUP) q16_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, GEMV_GROUP);
    else q16_lut4_vnni_inline(w, row_bytes, palettes, palette_bytes, v, dots, 1);
}

/* Rows of an integer job through the grouped kernels above, each column's dots times the
 * rows' scales. */
static void integer_group(const void *context, int64_t row, int64_t apart, int count) {
    const integer_job *job = context;
    int lut = job->encoding == ANE_ENCODING_LUT4;
    int64_t row_bytes = lut ? job->k / 2 : job->k;
    int64_t palette_bytes = job->activations == ANE_ACTIVATIONS_INT8 ? sizeof(palette8) : sizeof(palette16);
    const char *w = (const char *)job->data + row * row_bytes;
    const char *palettes = lut ? job->palette_codes + row * palette_bytes : NULL;
    void (*kernel)(const void *, int64_t, const char *, int64_t, const code_vector *, float *, int) =
        !lut ? q8_int8_vnni : job->activations == ANE_ACTIVATIONS_INT8 ? q8_lut4_vnni : q16_lut4_vnni;
    for (int64_t c = 0; c < job->count; c++) {
        float dots[GEMV_GROUP];
        kernel(w, apart * row_bytes, palettes, apart * palette_bytes, &job->columns[c], dots, count);
        for (int g = 0; g < count; g++) {
            int64_t r = row + g * apart;
            /* palette8 and palette16 both start with their scale */
            float scale = lut ? *(const float *)(job->palette_codes + r * palette_bytes) : job->table[r];
            job->y[r * job->count + c] = dots[g] * scale;
        }
    }
}

static void rows_grouped(void *context, int64_t first, int64_t last) { in_row_groups(first, last, integer_group, context); }

/* GGUF's blocks (quantize.h: Q8_0, Q4_0, Q6_K, Q4_K, Q5_K) on int8 activations, grouped as the int8 rows
 * above (the activations' codes, biases and scales loaded once for up to four rows): each lane
 * of four weights gets its exact integer dot product from vpdpbusd (the weights unsigned, the
 * lane's bias taking the offset back), then, as a float, the product of its block's two scales
 * (the weights' times the activations', rounded as blocks_int8 rounds it), into fp32
 * accumulators: blocks_int8's arithmetic summed in lanes, within the bound spec/c/test_gemv.c
 * derives for it. dots[r x columns + c] = row r (at w + r row_bytes, its scales at scales + r width) against
 * v[c], for count 1 or 4 and up to BLOCK_COLUMNS columns: a row's weights are decoded once for
 * all of them, and each column's arithmetic is the one a column alone gets (the same bits).
 * Per 128 weights a row: Q8_0 2 x 7 operations, Q4_0 12, Q6_K 21, less the decoding for a
 * second column. */
typedef void (*block_rows_vnni)(const char *w, int64_t row_bytes, const float *scales, const uint16_t *half,
                                int64_t width, const code_vector *v, int columns, float *dots, int count);

/* Columns a block kernel takes at once (more columns: more registers than there are). */
enum { BLOCK_COLUMNS = 2 };

/* n (2, 4 or 8) table entries of a row at `at` as floats, from the fp16 table where the job has
 * one (use_half: a constant of each kernel's copy), else the fp32 one: the same values. */
#define TABLE_ENTRIES2(table, half, at, use_half) \
    ((use_half) ? _mm_cvtph_ps(_mm_cvtsi32_si128(half_pair(half + (at)))) : _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)((table) + (at)))))
#define TABLE_ENTRIES4(table, half, at, use_half) \
    ((use_half) ? _mm_cvtph_ps(_mm_loadl_epi64((const __m128i *)((half) + (at)))) : _mm_loadu_ps((table) + (at)))
#define TABLE_ENTRIES8(table, half, at, use_half) \
    ((use_half) ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((half) + (at)))) : _mm256_loadu_ps((table) + (at)))

static inline int half_pair(const uint16_t *half) {
    int two;
    memcpy(&two, half, sizeof two);
    return two;
}

/* Q8_0: 64 weights a step in element order plus 128 against the codes (arrange_codes8's lanes:
 * the bias -128 x the lane's code sum, the lane's block scale); lanes 0-7 the first block's. */
VNNI static inline __attribute__((always_inline)) void q8_0_int8_vnni_inline(const char *w, int64_t row_bytes,
    const float *scales, const uint16_t *half, int64_t width, const code_vector *v, int columns, float *dots, int count,
    int use_half) {
    __m512 sums[GEMV_GROUP][BLOCK_COLUMNS];
    const __m512i plus128 = _mm512_set1_epi8((char)0x80), two_blocks = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) sums[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) {
        __m512i bias[BLOCK_COLUMNS], codes[BLOCK_COLUMNS];
        __m512 activation_scales[BLOCK_COLUMNS];
        for (int c = 0; c < columns; c++) {
            bias[c] = _mm512_loadu_si512(v[c].lane_bias + j / 4), codes[c] = _mm512_loadu_si512(v[c].codes8 + j);
            activation_scales[c] = _mm512_loadu_ps(v[c].lane_scales + j / 4);
        }
        for (int r = 0; r < count; r++) {
            __m512i weights = _mm512_xor_si512(_mm512_loadu_si512(w + r * row_bytes + j), plus128);
            __m128 pair = TABLE_ENTRIES2(scales, half, r * width + j / 32, use_half);
            __m512 weight_scales = _mm512_permutexvar_ps(two_blocks, _mm512_castps128_ps512(pair));
            for (int c = 0; c < columns; c++) {
                __m512 both = _mm512_mul_ps(weight_scales, activation_scales[c]);
                sums[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias[c], weights, codes[c])), both, sums[r][c]);
            }
        }
    }
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) {
            float dot = _mm512_reduce_add_ps(sums[r][c]);
            if (v->chunked < v->k) dot += blocks_int8_from(ANE_ENCODING_Q8_0, w + r * row_bytes, scales + r * width, &v[c], v->chunked);
            dots[r * columns + c] = dot;
        }
}

/* Q4_0: 128 weights (64 bytes) a step as the 4-bit rows above read them: the nibbles with their
 * top bit flipped are code + 8, unsigned, against the codes split into even and odd elements;
 * the bias (arrange_q4_0_codes8) is -8 x each 8 codes' sum, so lane L holds elements 8L .. 8L + 7,
 * block L / 4's. The blocks after the whole steps in blocks_int8's scalar order. */
VNNI static inline __attribute__((always_inline)) void q4_0_int8_vnni_inline(const char *w, int64_t row_bytes,
    const float *scales, const uint16_t *half, int64_t width, const code_vector *v, int columns, float *dots, int count,
    int use_half) {
    __m512 sums[GEMV_GROUP][BLOCK_COLUMNS];
    const __m512i nibble = _mm512_set1_epi8(0x0F), flip = _mm512_set1_epi8((char)0x88);
    const __m512i four_blocks = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) sums[r][c] = _mm512_setzero_ps();
    int64_t whole = v->k / Q8_LUT4_VNNI_CHUNK * Q8_LUT4_VNNI_CHUNK;
    for (int64_t j = 0; j < whole; j += Q8_LUT4_VNNI_CHUNK) {
        __m512i even_codes[BLOCK_COLUMNS], odd_codes[BLOCK_COLUMNS], bias[BLOCK_COLUMNS];
        __m512 activation_scales[BLOCK_COLUMNS];
        for (int c = 0; c < columns; c++) {
            even_codes[c] = _mm512_loadu_si512(v[c].split8 + j);
            odd_codes[c] = _mm512_loadu_si512(v[c].split8 + j + Q8_LUT4_VNNI_CHUNK / 2);
            bias[c] = _mm512_loadu_si512(v[c].bias8 + j / 8);
            activation_scales[c] = _mm512_loadu_ps(v[c].chunk_scales + j / 8);
        }
        for (int r = 0; r < count; r++) {
            __m512i bytes = _mm512_xor_si512(_mm512_loadu_si512(w + r * row_bytes + j / 2), flip);
            __m512i even = _mm512_and_si512(bytes, nibble), odd = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
            __m512 weight_scales = _mm512_permutexvar_ps(four_blocks, _mm512_castps128_ps512(TABLE_ENTRIES4(scales, half, r * width + j / 32, use_half)));
            for (int c = 0; c < columns; c++) {
                __m512i lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(bias[c], even, even_codes[c]), odd, odd_codes[c]);
                sums[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(weight_scales, activation_scales[c]), sums[r][c]);
            }
        }
    }
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) {
            float dot = _mm512_reduce_add_ps(sums[r][c]);
            if (whole < v->k) dot += blocks_int8_from(ANE_ENCODING_Q4_0, w + r * row_bytes, scales + r * width, &v[c], whole);
            dots[r * columns + c] = dot;
        }
}

/* Q4_K: as Q4_0, the nibbles x unsigned (no flip) with no bias, so lane L's integer sum is
 * S = sum x a over its 8 elements; its code sum C is bias8 / -8 (arrange_q4_0_codes8: exact, a
 * power of two); the lane's term (scale x the activations') x (S - offset x C). */
VNNI static inline __attribute__((always_inline)) void q4_k_int8_vnni_inline(const char *w, int64_t row_bytes,
    const float *pairs, const uint16_t *half, int64_t width, const code_vector *v, int columns, float *dots, int count,
    int use_half) {
    __m512 sums[GEMV_GROUP][BLOCK_COLUMNS];
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i scale_of = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6);
    const __m512i offset_of = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 5, 5, 5, 5, 7, 7, 7, 7);
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) sums[r][c] = _mm512_setzero_ps();
    int64_t whole = v->k / Q8_LUT4_VNNI_CHUNK * Q8_LUT4_VNNI_CHUNK;
    for (int64_t j = 0; j < whole; j += Q8_LUT4_VNNI_CHUNK) {
        __m512i even_codes[BLOCK_COLUMNS], odd_codes[BLOCK_COLUMNS];
        __m512 code_sums[BLOCK_COLUMNS], activation_scales[BLOCK_COLUMNS];
        for (int c = 0; c < columns; c++) {
            even_codes[c] = _mm512_loadu_si512(v[c].split8 + j);
            odd_codes[c] = _mm512_loadu_si512(v[c].split8 + j + Q8_LUT4_VNNI_CHUNK / 2);
            code_sums[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(v[c].bias8 + j / 8)), _mm512_set1_ps(-0.125f));
            activation_scales[c] = _mm512_loadu_ps(v[c].chunk_scales + j / 8);
        }
        for (int r = 0; r < count; r++) {
            __m512i bytes = _mm512_loadu_si512(w + r * row_bytes + j / 2);
            __m512i even = _mm512_and_si512(bytes, nibble), odd = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
            __m512 eight = _mm512_castps256_ps512(TABLE_ENTRIES8(pairs, half, r * width + j / 16, use_half)); /* four blocks' pairs */
            __m512 offsets = _mm512_permutexvar_ps(offset_of, eight), weight_scales = _mm512_permutexvar_ps(scale_of, eight);
            for (int c = 0; c < columns; c++) {
                __m512i lanes = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), even, even_codes[c]), odd, odd_codes[c]);
                __m512 shifted = _mm512_sub_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(offsets, code_sums[c]));
                sums[r][c] = _mm512_fmadd_ps(shifted, _mm512_mul_ps(weight_scales, activation_scales[c]), sums[r][c]);
            }
        }
    }
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) {
            float dot = _mm512_reduce_add_ps(sums[r][c]);
            if (whole < v->k) dot += blocks_int8_from(ANE_ENCODING_Q4_K, w + r * row_bytes, pairs + r * width, &v[c], whole);
            dots[r * columns + c] = dot;
        }
}

/* Elements j .. j + 63 (j a multiple of 64) of a row of Q5_K's packed blocks (quantize.h) as 64
 * unsigned bytes in order: the two blocks' 32 nibble bytes widened to words, each word's high
 * nibble moved to its second byte, then 16 added where the two blocks' 64 fifth bits are set. */
VNNI static inline __m512i q5_k_codes64(const uint8_t *row, int64_t j) {
    const uint8_t *block = row + (j / 32) * ANE_Q5_K_BYTES;
    __m256i nibbles = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)block)),
                                              _mm_loadu_si128((const __m128i *)(block + ANE_Q5_K_BYTES)), 1);
    __m512i words = _mm512_cvtepu8_epi16(nibbles);
    __m512i codes = _mm512_or_si512(_mm512_and_si512(words, _mm512_set1_epi16(0x000F)),
                                    _mm512_and_si512(_mm512_slli_epi16(words, 4), _mm512_set1_epi16(0x0F00)));
    uint32_t first, second;
    memcpy(&first, block + 16, sizeof first), memcpy(&second, block + ANE_Q5_K_BYTES + 16, sizeof second);
    return _mm512_mask_add_epi8(codes, _cvtu64_mask64((uint64_t)first | (uint64_t)second << 32), codes, _mm512_set1_epi8(16));
}

/* Q5_K: 64 weights (two blocks) a step in element order against the codes (arrange_codes8's
 * lanes), the codes unpacked (q5_k_codes64), unsigned with no bias, so lane L's integer sum is S = sum x a over
 * its 4 elements; its code sum C is the lane bias / -128 (exact); lanes 0-7 the first block's;
 * the lane's term (scale x the activations') x (S - offset x C). */
VNNI static inline __attribute__((always_inline)) void q5_k_int8_vnni_inline(const char *w, int64_t row_bytes,
    const float *pairs, const uint16_t *half, int64_t width, const code_vector *v, int columns, float *dots, int count,
    int use_half) {
    __m512 sums[GEMV_GROUP][BLOCK_COLUMNS];
    const __m512i scale_of = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    const __m512i offset_of = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) sums[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) {
        __m512i codes[BLOCK_COLUMNS];
        __m512 code_sums[BLOCK_COLUMNS], activation_scales[BLOCK_COLUMNS];
        for (int c = 0; c < columns; c++) {
            codes[c] = _mm512_loadu_si512(v[c].codes8 + j);
            code_sums[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(v[c].lane_bias + j / 4)), _mm512_set1_ps(-1.0f / 128));
            activation_scales[c] = _mm512_loadu_ps(v[c].lane_scales + j / 4);
        }
        for (int r = 0; r < count; r++) {
            __m512i row_codes = q5_k_codes64((const uint8_t *)w + r * row_bytes, j);
            __m512 four = _mm512_castps128_ps512(TABLE_ENTRIES4(pairs, half, r * width + j / 16, use_half)); /* both blocks' pairs */
            __m512 offsets = _mm512_permutexvar_ps(offset_of, four), weight_scales = _mm512_permutexvar_ps(scale_of, four);
            for (int c = 0; c < columns; c++) {
                __m512i lanes = _mm512_dpbusd_epi32(_mm512_setzero_si512(), row_codes, codes[c]);
                __m512 shifted = _mm512_sub_ps(_mm512_cvtepi32_ps(lanes), _mm512_mul_ps(offsets, code_sums[c]));
                sums[r][c] = _mm512_fmadd_ps(shifted, _mm512_mul_ps(weight_scales, activation_scales[c]), sums[r][c]);
            }
        }
    }
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) {
            float dot = _mm512_reduce_add_ps(sums[r][c]);
            if (v->chunked < v->k) dot += blocks_int8_from(ANE_ENCODING_Q5_K, w + r * row_bytes, pairs + r * width, &v[c], v->chunked);
            dots[r * columns + c] = dot;
        }
}

/* Q6_K: half a block (128 weights) a step, in element order against the codes: its 64 ql bytes
 * in one register, its 32 qh bytes in both halves; the low nibbles give elements 0-63, the
 * high ones 64-127, with qh's bit pairs moved to bits 4-5 by per-half shifts (quantize.h:
 * ane_q6_code). The 6-bit values are code + 32, unsigned; the bias -32 x the lane's code sum
 * is arrange_codes8's -128 x sum shifted right by 2 (exact). Lane L of each 64 is 16-group
 * L / 4's, whose scale d x sc comes from the block (the table holds the same products: the
 * table's 32 bytes per 128 weights, a quarter more to read than the blocks' 105, stay unread),
 * or from the table for a program's block (d = 0). */
VNNI static inline __attribute__((always_inline)) void q6_k_int8_vnni_inline(const char *w, int64_t row_bytes,
    const float *scales, const uint16_t *half, int64_t width, const code_vector *v, int columns, float *dots, int count,
    int use_half) {
    (void)half, (void)use_half; /* (Q6_K's scales from its blocks, or a program's from the fp32 table) */
    __m512 low_sums[GEMV_GROUP][BLOCK_COLUMNS], high_sums[GEMV_GROUP][BLOCK_COLUMNS];
    const __m512i low4 = _mm512_set1_epi8(15), top2 = _mm512_set1_epi8(0x30);
    const __m512i up = _mm512_setr_epi64(0x0004000400040004, 0x0004000400040004, 0x0004000400040004, 0x0004000400040004,
                                         0x0002000200020002, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002);
    const __m512i down = _mm512_setr_epi64(0, 0, 0, 0, 0x0002000200020002, 0x0002000200020002, 0x0002000200020002,
                                           0x0002000200020002);
    const __m512i first_four = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i last_four = _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) low_sums[r][c] = high_sums[r][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < v->k; j += 128) {
        __m512i low_codes[BLOCK_COLUMNS], high_codes[BLOCK_COLUMNS], low_bias[BLOCK_COLUMNS], high_bias[BLOCK_COLUMNS];
        __m512 low_activations[BLOCK_COLUMNS], high_activations[BLOCK_COLUMNS];
        for (int c = 0; c < columns; c++) {
            low_codes[c] = _mm512_loadu_si512(v[c].codes8 + j), high_codes[c] = _mm512_loadu_si512(v[c].codes8 + j + 64);
            low_bias[c] = _mm512_srai_epi32(_mm512_loadu_si512(v[c].lane_bias + j / 4), 2);
            high_bias[c] = _mm512_srai_epi32(_mm512_loadu_si512(v[c].lane_bias + (j + 64) / 4), 2);
            low_activations[c] = _mm512_loadu_ps(v[c].lane_scales + j / 4);
            high_activations[c] = _mm512_loadu_ps(v[c].lane_scales + (j + 64) / 4);
        }
        int64_t at = (j / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES, half = (j % ANE_Q6_K_WEIGHTS) / 128;
        for (int r = 0; r < count; r++) {
            const uint8_t *block = (const uint8_t *)w + r * row_bytes + at;
            __m512i ql = _mm512_loadu_si512(block + 64 * half);
            __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(block + 128 + 32 * half)));
            __m512i low = _mm512_or_si512(_mm512_and_si512(ql, low4), _mm512_and_si512(_mm512_sllv_epi16(qh, up), top2));
            __m512i high = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4),
                                           _mm512_and_si512(_mm512_srlv_epi16(qh, down), top2));
            __m512 eight = _mm512_castps256_ps512( /* (10 bytes of the block, not 32 of the table) */
                q6_k_half_scales_avx2(block, (int)half, scales + r * width + j / ANE_Q6_K_GROUP));
            __m512 low_scales = _mm512_permutexvar_ps(first_four, eight), high_scales = _mm512_permutexvar_ps(last_four, eight);
            for (int c = 0; c < columns; c++) {
                __m512 low_both = _mm512_mul_ps(low_scales, low_activations[c]);
                __m512 high_both = _mm512_mul_ps(high_scales, high_activations[c]);
                low_sums[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(low_bias[c], low, low_codes[c])), low_both,
                                                 low_sums[r][c]);
                high_sums[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(high_bias[c], high, high_codes[c])),
                                                  high_both, high_sums[r][c]);
            }
        }
    }
    for (int r = 0; r < count; r++)
        for (int c = 0; c < columns; c++) dots[r * columns + c] = _mm512_reduce_add_ps(_mm512_add_ps(low_sums[r][c], high_sums[r][c]));
}

/* name(w, ..., v, columns, dots, count): name##_inline with count, columns and the fp16 table's
 * presence as constants (a copy for each). */
#define BLOCK_ROWS_VNNI_COLUMNS(name, columns)                                                                      \
    do {                                                                                                            \
        if (half) {                                                                                                 \
            if (count == GEMV_GROUP) name##_inline(w, row_bytes, scales, half, width, v, columns, dots, GEMV_GROUP, 1); \
            else name##_inline(w, row_bytes, scales, half, width, v, columns, dots, 1, 1);                          \
        } else {                                                                                                    \
            if (count == GEMV_GROUP) name##_inline(w, row_bytes, scales, half, width, v, columns, dots, GEMV_GROUP, 0); \
            else name##_inline(w, row_bytes, scales, half, width, v, columns, dots, 1, 0);                          \
        }                                                                                                           \
    } while (0)
#define BLOCK_ROWS_VNNI(name)                                                                                       \
    VNNI static void name(const char *w, int64_t row_bytes, const float *scales, const uint16_t *half, int64_t width, \
                          const code_vector *v, int columns, float *dots, int count) {                              \
        if (columns == 2) BLOCK_ROWS_VNNI_COLUMNS(name, 2);                                                         \
        else BLOCK_ROWS_VNNI_COLUMNS(name, 1);                                                                      \
    }
BLOCK_ROWS_VNNI(q8_0_int8_vnni)
BLOCK_ROWS_VNNI(q4_0_int8_vnni)
BLOCK_ROWS_VNNI(q6_k_int8_vnni)
BLOCK_ROWS_VNNI(q4_k_int8_vnni)
BLOCK_ROWS_VNNI(q5_k_int8_vnni)

static void blocks_group(const void *context, int64_t row, int64_t apart, int count) {
    const integer_job *job = context;
    int64_t row_bytes = ane_encoded_data_bytes(job->encoding, 1, job->k), width = ane_encoded_table_width(job->encoding, job->k);
    block_rows_vnni kernel = job->encoding == ANE_ENCODING_Q8_0   ? q8_0_int8_vnni
                             : job->encoding == ANE_ENCODING_Q4_0 ? q4_0_int8_vnni
                             : job->encoding == ANE_ENCODING_Q6_K ? q6_k_int8_vnni
                             : job->encoding == ANE_ENCODING_Q4_K ? q4_k_int8_vnni
                                                                  : q5_k_int8_vnni;
    for (int64_t c = 0; c < job->count; c += BLOCK_COLUMNS) {
        int columns = job->count - c < BLOCK_COLUMNS ? (int)(job->count - c) : BLOCK_COLUMNS;
        float dots[GEMV_GROUP * BLOCK_COLUMNS]; /* [row of the group, column] */
        kernel((const char *)job->data + row * row_bytes, apart * row_bytes, job->table + row * width,
               job->half_table ? job->half_table + row * width : NULL, apart * width, &job->columns[c], columns, dots, count);
        for (int g = 0; g < count; g++)
            for (int taken = 0; taken < columns; taken++) job->y[(row + g * apart) * job->count + c + taken] = dots[g * columns + taken];
    }
}

static void rows_blocks_grouped(void *context, int64_t first, int64_t last) { in_row_groups(first, last, blocks_group, context); }

/* The codes of each 128 elements' even elements, then odd ones (split8), the chunk scales, and
 * `times` x each 8 codes' sum (bias8): what the 4-bit kernels read (times -128: the palettes'
 * entries plus 128; -8: Q4_0's codes plus 8). Per 128 codes: in-lane byte shuffles put each 16
 * bytes' even ones before their odd ones, and 64-bit permutes gather them; vpsadbw sums each 8
 * codes plus 128 as unsigned bytes (exact), less 8 x 128. */
VNNI static void split_codes(code_vector *v, int32_t times) {
    fill_chunk_scales(v);
    const __m512i evens_first = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    const __m512i evens = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14), odds = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    const __m512i plus128 = _mm512_set1_epi8((char)0x80);
    const __m256i offset = _mm256_set1_epi32(8 * 128), factor = _mm256_set1_epi32(-times);
    int64_t whole = v->k / Q8_LUT4_VNNI_CHUNK * Q8_LUT4_VNNI_CHUNK;
    for (int64_t j = 0; j < whole; j += Q8_LUT4_VNNI_CHUNK) {
        __m512i first = _mm512_loadu_si512(v->codes8 + j), second = _mm512_loadu_si512(v->codes8 + j + 64);
        __m512i a = _mm512_shuffle_epi8(first, evens_first), b = _mm512_shuffle_epi8(second, evens_first);
        _mm512_storeu_si512(v->split8 + j, _mm512_permutex2var_epi64(a, evens, b));
        _mm512_storeu_si512(v->split8 + j + Q8_LUT4_VNNI_CHUNK / 2, _mm512_permutex2var_epi64(a, odds, b));
        __m256i sums_first = _mm512_cvtepi64_epi32(_mm512_sad_epu8(_mm512_xor_si512(first, plus128), _mm512_setzero_si512()));
        __m256i sums_second = _mm512_cvtepi64_epi32(_mm512_sad_epu8(_mm512_xor_si512(second, plus128), _mm512_setzero_si512()));
        _mm256_storeu_si256((__m256i *)(v->bias8 + j / 8), _mm256_mullo_epi32(_mm256_sub_epi32(offset, sums_first), factor));
        _mm256_storeu_si256((__m256i *)(v->bias8 + j / 8 + 8), _mm256_mullo_epi32(_mm256_sub_epi32(offset, sums_second), factor));
    }
}

/* Per 4 codes (a vpdpbusd lane) of the whole chunks: its block's scale and -128 x its codes'
 * sum (vpdpbusd of the codes with ones), 64 codes a step. */
VNNI static void arrange_lanes(code_vector *v) {
    const __m512i ones = _mm512_set1_epi8(1), two_blocks = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    for (int64_t j = 0; j < v->chunked; j += Q8_CHUNK) {
        __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(v->codes8 + j));
        _mm512_storeu_si512(v->lane_bias + j / 4, _mm512_mullo_epi32(sums, _mm512_set1_epi32(-128)));
        __m128 pair = _mm_castsi128_ps(_mm_loadl_epi64((const __m128i *)(v->block_scales + j / Q8_BLOCK)));
        _mm512_storeu_ps(v->lane_scales + j / 4, _mm512_permutexvar_ps(two_blocks, _mm512_castps128_ps512(pair)));
    }
}

/* int8 rows read the lanes (arrange_lanes); 4-bit rows split_codes's. */
static void arrange_codes8(code_vector *v, int for_lut4) {
    if (for_lut4) split_codes(v, -128);
    else arrange_lanes(v);
}

/* 4-bit rows: q16_lut4_vnni's order, per 128 elements element 4 p + s in slot 32 s + p (int8
 * rows read the codes as they are, through AVX2's word products). */
static void arrange_codes16(code_vector *v, int for_lut4) {
    if (!for_lut4) return;
    fill_chunk_scales(v);
    for (int64_t j = 0; j + Q16_LUT4_VNNI_CHUNK <= v->k; j += Q16_LUT4_VNNI_CHUNK)
        for (int slot = 0; slot < Q16_LUT4_VNNI_CHUNK; slot++)
            v->split16[j + slot] = v->codes16[j + 4 * (slot % 32) + slot / 32];
}

/* Q4_0 rows (q4_0_int8_vnni) read the 4-bit rows' order and chunk scales, with -8 x each 8
 * codes' sum as the bias (the nibbles are code + 8); Q4_K rows the same (their code sums). */
static void arrange_q4_0_codes8(code_vector *v) { split_codes(v, -8); }

void ane_kernels_x86_avx512_vnni(ane_kernel_table *t) {
    t->rows_integer[0][0] = t->rows_integer[1][0] = t->rows_integer[1][1] = rows_grouped;
    t->rows_blocks_int8 = rows_blocks_grouped;
    t->arrange_q4_0_codes8 = arrange_q4_0_codes8;
    t->arrange_codes8 = arrange_codes8;
    t->arrange_codes16 = arrange_codes16;
    t->palette8 = q8_palette_vnni;
}
#endif
