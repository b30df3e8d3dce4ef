/* The AVX-512F kernels of the kernel table (kernels.h): fp16, fp32, int8, 4-bit, Q8_0 and Q4_0 rows with
 * float activations, four rows at a time, and the products over a cache. Taken on CPUs with
 * AVX-512F whose OS saves its state (base/cpu.h), over the AVX2 level. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../../../base/fp16.h"
#include "../../kernels.h"
#include "x86.h"

#define AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))

/* A vector's sixteen lanes added in one tree: lane i + lane i + 8, then + 4, + 2 and + 1, the
 * left operand the higher lane as in GCC's _mm512_reduce_add_ps, written out so that any
 * compiler adds in this order. sixteen_lanes_sums(v) makes the same additions for sixteen
 * vectors at once: its lane i is lanes_sum(v[i]) (four levels of two permutes and an add per
 * pair). */
AVX512 static inline float lanes_sum(__m512 v) {
    __m256 eight = _mm256_add_ps(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), _mm512_castps512_ps256(v));
    __m128 four = _mm_add_ps(_mm256_extractf128_ps(eight, 1), _mm256_castps256_ps128(eight));
    __m128 two = _mm_add_ps(four, _mm_shuffle_ps(four, four, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, _MM_SHUFFLE(3, 2, 0, 1))));
}

/* One level of sixteen_lanes_sums over a pair of vectors: lanes `upper` and `lower` of a and b
 * (a's in the result's low half, b's in its high half), added, the upper ones the left operand. */
AVX512 static inline __m512 pair_level(__m512 a, __m512 b, __m512i upper, __m512i lower) {
    return _mm512_add_ps(_mm512_permutex2var_ps(a, upper, b), _mm512_permutex2var_ps(a, lower, b));
}

AVX512 static inline __m512 sixteen_lanes_sums(const __m512 v[16]) {
    __m512 eights[8], fours[4], twos[2]; /* [i]: groups of 8 (4, 2) lanes, one a vector, in order */
    const __m512i upper8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
    const __m512i lower8 = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
    for (int i = 0; i < 8; i++) eights[i] = pair_level(v[2 * i], v[2 * i + 1], upper8, lower8);
    const __m512i upper4 = _mm512_setr_epi32(4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    const __m512i lower4 = _mm512_setr_epi32(0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27);
    for (int i = 0; i < 4; i++) fours[i] = pair_level(eights[2 * i], eights[2 * i + 1], upper4, lower4);
    /* (lanes_sum's last two levels: lane 0 + lane 2 (1 + 3) of a four, then lane 0 + lane 1) */
    const __m512i first2 = _mm512_setr_epi32(0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29);
    const __m512i second2 = _mm512_setr_epi32(2, 3, 6, 7, 10, 11, 14, 15, 18, 19, 22, 23, 26, 27, 30, 31);
    for (int i = 0; i < 2; i++) twos[i] = pair_level(fours[2 * i], fours[2 * i + 1], first2, second2);
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return pair_level(twos[0], twos[1], even, odd);
}

/* AVX-512: sixteen lanes (one conversion turns 16 halves into floats; the 16-entry palette
 * is one register that vpermps indexes), and four rows at a time, so each load of x serves
 * four rows of weights: fewer loads per byte of weights leave more of them waiting on memory
 * at once (fp16 [8192, 4096] from memory, 2 threads, Zen 4: 24 -> 30 GB/s; the 4-bit
 * kernel's arithmetic below is lighter too). The four rows are far apart (rows_in_groups:
 * the quarters of a thread's share), so each is one long stream the hardware prefetcher
 * follows; four neighbouring rows of a decode-sized matrix are four short streams in the
 * same pages, which it does not follow ([2048, 768]: 26-33 GB/s one row at a time and four
 * quarters apart alike, ~14 four neighbours). A software prefetch, which the single-row
 * kernels had, cost the grouped ones 20% of a Stories110M fp16 decode. A row's sums are the
 * same in any group (two accumulators, elements j .. j + 15 and j + 16 .. j + 31 of each 32,
 * the same tail), so its result does not depend on how the rows were split.
 *
 * ROWS_AVX512(name, type, WEIGHTS32, ELEMENT) defines name(w, row_bytes, k, x, tables,
 * table_stride, y, y_stride, count), a rows_kernel: for r < count (1 or 4), y[r y_stride] = row
 * r (at w + r row_bytes, of `type`) times x, the row's table at tables + r table_stride. In it,
 * WEIGHTS32(row, table, j, w0, w1) sets w0 and w1 to the row's fp32 weights j .. j + 15 and
 * j + 16 .. j + 31 (j a multiple of 32; in the order x is in) and ELEMENT(row, table, j) is one
 * weight (in the tail). */
#define ROWS_AVX512(name, type, WEIGHTS32, ELEMENT)                                                         \
    AVX512 static inline __attribute__((always_inline)) void name##_inline(                                 \
        const char *w, int64_t row_bytes, int64_t k, const float *x, const float *tables, int64_t table_stride, \
        float *y, int64_t y_stride, int count) {                                                            \
        const type *rows[GEMV_GROUP];                                                                       \
        const float *row_tables[GEMV_GROUP]; /* (unused by kernels without tables) */                       \
        __m512 a0[GEMV_GROUP], a1[GEMV_GROUP];                                                              \
        for (int r = 0; r < count; r++) {                                                                   \
            rows[r] = (const type *)(w + r * row_bytes);                                                    \
            row_tables[r] = tables ? tables + r * table_stride : NULL;                                      \
            a0[r] = a1[r] = _mm512_setzero_ps();                                                            \
        }                                                                                                   \
        (void)row_tables;                                                                                   \
        int64_t j = 0;                                                                                      \
        for (; j + 32 <= k; j += 32) {                                                                      \
            __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);                            \
            for (int r = 0; r < count; r++) {                                                               \
                __m512 w0, w1;                                                                              \
                WEIGHTS32(rows[r], row_tables[r], j, w0, w1);                                               \
                a0[r] = _mm512_fmadd_ps(w0, x0, a0[r]);                                                     \
                a1[r] = _mm512_fmadd_ps(w1, x1, a1[r]);                                                     \
            }                                                                                               \
        }                                                                                                   \
        for (int r = 0; r < count; r++) {                                                                   \
            float total = lanes_sum(_mm512_add_ps(a0[r], a1[r]));                                              \
            for (int64_t t = j; t < k; t++) total += ELEMENT(rows[r], row_tables[r], t) * x[t];             \
            y[r * y_stride] = total;                                                                        \
        }                                                                                                   \
    }                                                                                                       \
    AVX512 static void name(const void *w, int64_t row_bytes, int64_t k, const float *x, const float *tables, \
                            int64_t table_stride, float *y, int64_t y_stride, int count) {                  \
        if (count == GEMV_GROUP) name##_inline(w, row_bytes, k, x, tables, table_stride, y, y_stride, GEMV_GROUP); \
        else name##_inline(w, row_bytes, k, x, tables, table_stride, y, y_stride, 1);                       \
    }

#define FP16_WEIGHTS32(row, table, j, w0, w1)                                                               \
    (w0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((row) + (j)))),                               \
     w1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((row) + (j) + 16))))
#define FP16_ELEMENT(row, table, j) ane_fp16_to_fp32((row)[j])
ROWS_AVX512(rows_avx512_fp16, uint16_t, FP16_WEIGHTS32, FP16_ELEMENT)

/* fp32 rows one at a time: grouped, a Stories110M fp32 decode lost 6-10% (paired). */
AVX512 static float dot32_avx512(const float *w, const float *x, int64_t k) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 32 <= k; j += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j), _mm512_loadu_ps(x + j), a0); /* no prefetch: slower here */
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + j + 16), _mm512_loadu_ps(x + j + 16), a1);
    }
    float total = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
    for (; j < k; j++) total += w[j] * x[j];
    return total;
}

/* int8 rows: the codes times x (the caller applies each row's scale). */
#define INT8_SIXTEEN(at) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(at))))
#define INT8_WEIGHTS32(row, table, j, w0, w1) (w0 = INT8_SIXTEEN((row) + (j)), w1 = INT8_SIXTEEN((row) + (j) + 16))
#define INT8_ELEMENT(row, table, j) (float)(row)[j]
ROWS_AVX512(rows_avx512_int8, int8_t, INT8_WEIGHTS32, INT8_ELEMENT)

/* Q8_0, Q4_0 and Q6_K rows (k a multiple of 32 or 256, a table the row's block scales): each block's
 * weights scale x code, exact in fp32, in the chains every kernel here keeps, so a row gives
 * dot32_avx512's bits for its dequantized values. Q4_0's 16 bytes are interleaved into the
 * block's 32 codes in order (element 2i in byte i's low nibble), each a signed byte. */
#define BLOCK_SIXTEEN(bytes, scale) _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), scale)
#define Q8_0_WEIGHTS32(row, table, j, w0, w1)                                                              \
    do {                                                                                                    \
        __m512 scale_ = _mm512_set1_ps((table)[(j) / 32]);                                                  \
        w0 = BLOCK_SIXTEEN(_mm_loadu_si128((const __m128i *)((row) + (j))), scale_);                         \
        w1 = BLOCK_SIXTEEN(_mm_loadu_si128((const __m128i *)((row) + (j) + 16)), scale_);                    \
    } while (0)
#define Q8_0_ELEMENT(row, table, j) ((table)[(j) / 32] * (float)(row)[j])
ROWS_AVX512(rows_avx512_q8_0, int8_t, Q8_0_WEIGHTS32, Q8_0_ELEMENT)

#define Q4_0_WEIGHTS32(row, table, j, w0, w1)                                                              \
    do {                                                                                                    \
        __m512 scale_ = _mm512_set1_ps((table)[(j) / 32]);                                                  \
        const __m128i nibble_ = _mm_set1_epi8(15), eight_ = _mm_set1_epi8(8);                               \
        __m128i bytes_ = _mm_loadu_si128((const __m128i *)((row) + (j) / 2));                                \
        __m128i low_ = _mm_and_si128(bytes_, nibble_), high_ = _mm_and_si128(_mm_srli_epi16(bytes_, 4), nibble_); \
        w0 = BLOCK_SIXTEEN(_mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(low_, high_), eight_), eight_), scale_); \
        w1 = BLOCK_SIXTEEN(_mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(low_, high_), eight_), eight_), scale_); \
    } while (0)
#define Q4_0_ELEMENT(row, table, j) ((table)[(j) / 32] * (float)ane_q4_code(row, j))
ROWS_AVX512(rows_avx512_q4_0, uint8_t, Q4_0_WEIGHTS32, Q4_0_ELEMENT)

/* Q4_K: the nibbles unsigned, each weight scale x (code - offset) as ane_shifted_weight rounds it. */
#define SHIFTED_SIXTEEN(bytes, offset, scale)                                                                  \
    _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes)), offset), scale)
#define Q4_K_WEIGHTS32(row, table, j, w0, w1)                                                              \
    do {                                                                                                    \
        __m512 scale_ = _mm512_set1_ps((table)[(j) / 16]), offset_ = _mm512_set1_ps((table)[(j) / 16 + 1]);  \
        const __m128i nibble_ = _mm_set1_epi8(15);                                                          \
        __m128i bytes_ = _mm_loadu_si128((const __m128i *)((row) + (j) / 2));                                \
        __m128i low_ = _mm_and_si128(bytes_, nibble_), high_ = _mm_and_si128(_mm_srli_epi16(bytes_, 4), nibble_); \
        w0 = SHIFTED_SIXTEEN(_mm_unpacklo_epi8(low_, high_), offset_, scale_);                                  \
        w1 = SHIFTED_SIXTEEN(_mm_unpackhi_epi8(low_, high_), offset_, scale_);                                  \
    } while (0)
#define Q4_K_ELEMENT(row, table, j) ane_q4_k_weight(row, table, j)
ROWS_AVX512(rows_avx512_q4_k, uint8_t, Q4_K_WEIGHTS32, Q4_K_ELEMENT)

/* Q5_K: the codes unpacked (q5_k_codes_avx2), each weight as Q4_K's. */
#define Q5_K_WEIGHTS32(row, table, j, w0, w1)                                                              \
    do {                                                                                                    \
        __m512 scale_ = _mm512_set1_ps((table)[(j) / 16]), offset_ = _mm512_set1_ps((table)[(j) / 16 + 1]);  \
        __m256i codes_ = q5_k_codes_avx2(row, j);                                                           \
        w0 = SHIFTED_SIXTEEN(_mm256_castsi256_si128(codes_), offset_, scale_);                               \
        w1 = SHIFTED_SIXTEEN(_mm256_extracti128_si256(codes_, 1), offset_, scale_);                          \
    } while (0)
#define Q5_K_ELEMENT(row, table, j) ane_shifted_weight(ane_q5_k_code(row, j), table, j)
ROWS_AVX512(rows_avx512_q5_k, uint8_t, Q5_K_WEIGHTS32, Q5_K_ELEMENT)

#define Q6_K_WEIGHTS32(row, table, j, w0, w1)                                                              \
    do {                                                                                                    \
        __m256i codes_ = q6_k_codes_avx2(row, j);                                                           \
        w0 = BLOCK_SIXTEEN(_mm256_castsi256_si128(codes_), _mm512_set1_ps((table)[(j) / 16]));              \
        w1 = BLOCK_SIXTEEN(_mm256_extracti128_si256(codes_, 1), _mm512_set1_ps((table)[(j) / 16 + 1]));     \
    } while (0)
#define Q6_K_ELEMENT(row, table, j) ((table)[(j) / 16] * (float)ane_q6_code(row, j))
ROWS_AVX512(rows_avx512_q6_k, uint8_t, Q6_K_WEIGHTS32, Q6_K_ELEMENT)

/* 4-bit rows (k even; a table is the row's 16-entry palette). vpermps reads only the low four
 * bits of an index, so the 16 bytes of a 32-weight chunk, copied into each 128-bit lane, need
 * one shift per lane to bring a different index into each lane's low bits: dword d holds
 * elements 8d .. 8d + 7 (element 8d + n in nibble n), so lane L of the first vector, shifted
 * by 4 (L / 4), holds element 8 (L % 4) + L / 4, and of the second, shifted 16 bits further,
 * element 8 (L % 4) + 4 + L / 4. x comes in that order (lut4_avx512_slot; x_split, written once
 * per product); the tail, after the whole chunks, in its own. */
enum { LUT4_AVX512_CHUNK = 32 };

static int lut4_avx512_slot(int s) { return 8 * (s % 4) + 4 * (s / 16) + (s % 16) / 4; }

#define LUT4_WEIGHTS32(row, table, j, w0, w1)                                                               \
    do {                                                                                                    \
        __m512 palette_ = _mm512_loadu_ps(table);                                                           \
        __m512i chunk_ = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)((row) + (j) / 2)));         \
        const __m512i shifts_ = _mm512_set_epi32(12, 12, 12, 12, 8, 8, 8, 8, 4, 4, 4, 4, 0, 0, 0, 0);         \
        w0 = _mm512_permutexvar_ps(_mm512_srlv_epi32(chunk_, shifts_), palette_);                           \
        w1 = _mm512_permutexvar_ps(_mm512_srlv_epi32(chunk_, _mm512_add_epi32(shifts_, _mm512_set1_epi32(16))), palette_); \
    } while (0)
#define LUT4_INDEX(row, j) (((row)[(j) / 2] >> 4 * ((j) & 1)) & 15u) /* element j's palette index */
#define LUT4_ELEMENT(row, table, j) (table)[LUT4_INDEX(row, j)]
ROWS_AVX512(rows_avx512_lut4, uint8_t, LUT4_WEIGHTS32, LUT4_ELEMENT)

/* The AVX-512 chunks of x_split: each 32 elements of x permuted by two two-source permutes
 * (the same elements as the scalar gather, a decode step's product wrote them one by one). */
AVX512 static void split_avx512(float *x_split, const float *x, int64_t whole, const int slot_element[LUT4_AVX512_CHUNK]) {
    __m512i first = _mm512_loadu_si512(slot_element), second = _mm512_loadu_si512(slot_element + 16);
    for (int64_t c = 0; c < whole; c += LUT4_AVX512_CHUNK) {
        __m512 low = _mm512_loadu_ps(x + c), high = _mm512_loadu_ps(x + c + 16);
        _mm512_storeu_ps(x_split + c, _mm512_permutex2var_ps(low, first, high));
        _mm512_storeu_ps(x_split + c + 16, _mm512_permutex2var_ps(low, second, high));
    }
}

static void rows_fp16(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_fp16, job->row_stride * 2, NULL, 0);
}

/* fp16 rows of up to eight columns' jobs at once (kernels.h: rows_fp16_columns), a tile of rows at
 * a time: each weight converted once for all the columns, each column's chains, tail and sum
 * rows_avx512_fp16's (elements j .. j + 15 and j + 16 .. j + 31 of each 32, lanes_sum), so each
 * result is its bits. Five to eight columns take tiles of 2 neighbouring rows (16 multiply-adds
 * per 2 conversions and 8 loads of x), the rows FP16_NEAR_TILES tiles on asked into L2 as a tile
 * goes, a line per 64 bytes of weights it reads (neighbouring rows are short streams the hardware
 * does not follow; asked into L1 two tiles on, the lines pushed out the 24 KB of x's columns
 * there: eight columns from memory, two cores, alternating builds, [768, 768] 72-77 -> 70-71 us,
 * [2048, 768] 180-189 -> 167-180, [32000, 768] 2600-2660 -> 2290-2310, a Stories110M step of eight
 * sessions 20.7-23.0 -> 19.7-20.8 ms); four or fewer take four rows a quarter of a share apart, as
 * rows_avx512_fp16 does, long streams it follows. Two columns keep both chains of their 4 x 2 in
 * registers; more take the chains in turn over each chunk of k whose x fills FP16_CHUNK_X_BYTES,
 * the chunk's x and weights in L1 for the second turn. The tile's sums are then added across lanes
 * together (sixteen_lanes_sums: sixteen lanes_sum cost a 2 x 8 tile of 768 weights ~20% over its
 * multiply-adds). One core, [256, 768] from L2, eight columns: 30 us (104 GFLOP/s, of ~117 at one
 * multiply-add a cycle); two cores, eight columns from memory, against the kernel this replaced
 * (four columns at a time, rows a quarter apart, each row and column's lanes added apart): [768,
 * 768] 103.7 -> 76.1 us, [2048, 768] 249.8 -> 180.7, [32000, 768] 2920 -> 2800. */
enum { FP16_COLUMNS_AT_ONCE = 8, FP16_CHUNK_X_BYTES = 16 << 10, FP16_NEAR_TILES = 6 };

/* A tile's weights times x for one chain (half 0: elements j .. j + 15 of each 32, half 1: j + 16
 * .. j + 31) over elements [from, to), into sums [rows x columns]. x's vector is held in a
 * register for the tile's rows rather than read once a row as a memory operand. */
#define FP16_TILE_STEP(sums, half, j)                                                                     \
    do {                                                                                                  \
        __m512 weights_[4];                                                                               \
        _Pragma("GCC unroll 4") for (int r = 0; r < rows; r++)                                           \
            weights_[r] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(w + r * stride + (j) + 16 * (half)))); \
        _Pragma("GCC unroll 8") for (int c = 0; c < columns; c++) {                                      \
            __m512 xs_ = _mm512_loadu_ps(x[c] + (j) + 16 * (half));                                       \
            __asm__("" : "+v"(xs_));                                                                     \
            _Pragma("GCC unroll 4") for (int r = 0; r < rows; r++)                                       \
                (sums)[r * columns + c] = _mm512_fmadd_ps(weights_[r], xs_, (sums)[r * columns + c]);     \
        }                                                                                                 \
    } while (0)

AVX512 static inline __attribute__((always_inline)) void fp16_columns_tile(const gemv_job *jobs, int64_t row, int64_t apart,
                                                                           int rows, int columns, prefetch_span *ahead,
                                                                           prefetch_span *near) {
    enum { MOST = 16 }; /* rows x columns */
    const uint16_t *w = (const uint16_t *)jobs[0].w + row * jobs[0].row_stride;
    const int64_t k = jobs[0].k, whole = k / 32 * 32, stride = jobs[0].row_stride * apart;
    const float *x[FP16_COLUMNS_AT_ONCE];
    for (int c = 0; c < columns; c++) x[c] = jobs[c].x;
    prefetch_span far = *ahead, close = *near; /* (locals: a store through a char pointer would
                                                 * make the compiler read x's pointers again) */
    const int lines = (rows + 1) / 2; /* of the rows ahead, per 16 elements of the tile's rows */
    __m512 chains[2][MOST];           /* [half][r columns + c]: the sums so far */
#pragma GCC unroll 32
    for (int i = 0; i < 2 * MOST; i++) chains[i / MOST][i % MOST] = _mm512_setzero_ps();
    if (2 * rows * columns <= MOST) { /* both chains at once, in one sweep */
        for (int64_t j = 0; j < whole; j += 32) {
            prefetch_span_step(&far);
#pragma GCC unroll 4
            for (int line = 0; line < 2 * lines; line++) prefetch_span_step(&close);
            FP16_TILE_STEP(chains[0], 0, j);
            FP16_TILE_STEP(chains[1], 1, j);
        }
    } else {
        const int64_t chunk = FP16_CHUNK_X_BYTES / (int64_t)(sizeof(float) * columns) / 32 * 32;
        for (int64_t from = 0; from < whole; from += chunk) {
            const int64_t to = whole - from < chunk ? whole : from + chunk;
#pragma GCC unroll 2
            for (int half = 0; half < 2; half++) {
                __m512 sums[MOST];
#pragma GCC unroll 16
                for (int i = 0; i < rows * columns; i++) sums[i] = chains[half][i];
                for (int64_t j = from; j < to; j += 32) {
                    prefetch_span_step(&far);
#pragma GCC unroll 4
                    for (int line = 0; line < lines; line++) prefetch_span_step(&close);
                    FP16_TILE_STEP(sums, half, j);
                }
#pragma GCC unroll 16
                for (int i = 0; i < rows * columns; i++) chains[half][i] = sums[i];
            }
        }
    }
    *ahead = far, *near = close;
    __m512 both[MOST];
#pragma GCC unroll 16
    for (int i = 0; i < MOST; i++) both[i] = i < rows * columns ? _mm512_add_ps(chains[0][i], chains[1][i]) : _mm512_setzero_ps();
    float totals[MOST];
    _mm512_storeu_ps(totals, sixteen_lanes_sums(both));
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < columns; c++) {
            float total = totals[r * columns + c];
            for (int64_t t = whole; t < k; t++) total += ane_fp16_to_fp32(w[r * stride + t]) * x[c][t];
            jobs[c].y[row + r * apart] = total;
        }
}
#undef FP16_TILE_STEP

/* The tiles of rows [first, last): `rows` at a time, then one at a time. */
AVX512 static inline __attribute__((always_inline)) void fp16_columns_tiles(const gemv_job *jobs, int64_t first, int64_t last,
                                                                            int rows, int columns, prefetch_span *ahead) {
    int64_t row = first, tiles = (last - first) / rows + (last - first) % rows;
    const int64_t row_bytes = jobs[0].row_stride * (int64_t)sizeof(uint16_t);
    const char *weights = jobs[0].w;
    int64_t near_from = first + FP16_NEAR_TILES * rows < last ? first + FP16_NEAR_TILES * rows : last;
    prefetch_span near = {weights + near_from * row_bytes, weights + last * row_bytes};
    for (; row + rows <= last; row += rows) {
        prefetch_span share = prefetch_span_share(ahead, tiles--);
        fp16_columns_tile(jobs, row, 1, rows, columns, &share, &near);
    }
    for (; row < last; row++) {
        prefetch_span share = prefetch_span_share(ahead, tiles--);
        fp16_columns_tile(jobs, row, 1, 1, columns, &share, &near);
    }
    prefetch_span_rest(ahead); /* (rows shorter than the span) */
}

typedef struct fp16_column_groups {
    const gemv_job *jobs;
    int count;
    prefetch_span *ahead; /* what is left of it */
    int64_t groups_left;
} fp16_column_groups;

AVX512 static void fp16_column_group(const void *context, int64_t row, int64_t apart, int rows) {
    fp16_column_groups *job = (fp16_column_groups *)context;
    prefetch_span share = prefetch_span_share(job->ahead, job->groups_left--), none = {NULL, NULL};
    switch (job->count * (rows == GEMV_GROUP ? 1 : -1)) {
    case 2: fp16_columns_tile(job->jobs, row, apart, GEMV_GROUP, 2, &share, &none); break;
    case 3: fp16_columns_tile(job->jobs, row, apart, GEMV_GROUP, 3, &share, &none); break;
    case 4: fp16_columns_tile(job->jobs, row, apart, GEMV_GROUP, 4, &share, &none); break;
    case -2: fp16_columns_tile(job->jobs, row, apart, 1, 2, &share, &none); break;
    case -3: fp16_columns_tile(job->jobs, row, apart, 1, 3, &share, &none); break;
    default: fp16_columns_tile(job->jobs, row, apart, 1, 4, &share, &none); break;
    }
}

AVX512 static void rows_fp16_columns(const gemv_job *jobs, int count, int64_t first, int64_t last, prefetch_span ahead) {
    if (count <= 4) {
        fp16_column_groups job = {jobs, count, &ahead, (last - first) / GEMV_GROUP + (last - first) % GEMV_GROUP};
        in_row_groups(first, last, fp16_column_group, &job);
        prefetch_span_rest(&ahead);
        return;
    }
    switch (count) {
    case 5: fp16_columns_tiles(jobs, first, last, 2, 5, &ahead); break;
    case 6: fp16_columns_tiles(jobs, first, last, 2, 6, &ahead); break;
    case 7: fp16_columns_tiles(jobs, first, last, 2, 7, &ahead); break;
    default: fp16_columns_tiles(jobs, first, last, 2, 8, &ahead); break;
    }
}

static void rows_fp32(void *job, int64_t first, int64_t last) {
    static const float_dots dots = {.fp32 = dot32_avx512};
    rows_by_dots(job, first, last, WEIGHTS_FP32, &dots);
}

static void rows_int8(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_int8, job->k, NULL, 0);
    for (int64_t r = first; r < last; r++) job->y[r] *= job->table[r];
}

static void rows_lut4(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    if (!job->x_split) { /* rows shorter than a chunk */
        x86_rows_lut4_avx2(context, first, last);
        return;
    }
    rows_in_groups(job, job->x_split, first, last, rows_avx512_lut4, job->k / 2, job->table, ANE_LUT4_ENTRIES);
}

static void rows_q8_0(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_q8_0, job->k, job->table, job->k / 32);
}

static void rows_q4_0(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_q4_0, job->k / 2, job->table, job->k / 32);
}

static void rows_q4_k(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_q4_k, job->k / 2, job->table, job->k / 16);
}

static void rows_q5_k(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_q5_k, ane_encoded_data_bytes(ANE_ENCODING_Q5_K, 1, job->k),
                   job->table, job->k / 16);
}

static void rows_q6_k(void *context, int64_t first, int64_t last) {
    const gemv_job *job = context;
    rows_in_groups(job, job->x, first, last, rows_avx512_q6_k, ane_encoded_data_bytes(ANE_ENCODING_Q6_K, 1, job->k),
                   job->table, job->k / 16);
}

/* x's whole 32-element chunks in lut4_avx512_slot's order, the tail as it is. */
static const float *split_lut4(float *x_split, const float *x, int64_t k) {
    if (!x_split || k < LUT4_AVX512_CHUNK) return NULL;
    int64_t whole = k / LUT4_AVX512_CHUNK * LUT4_AVX512_CHUNK;
    int slot_element[LUT4_AVX512_CHUNK];
    for (int s = 0; s < LUT4_AVX512_CHUNK; s++) slot_element[s] = lut4_avx512_slot(s);
    split_avx512(x_split, x, whole, slot_element);
    memcpy(x_split + whole, x + whole, (size_t)(k - whole) * sizeof *x_split);
    return x_split;
}

/* ------------------------------------------------ products over a cache */

/* AVX-512, for a decode step's products over a cache, which it reads from memory (the last
 * step read that layer's cache a whole token of weights ago): such a product is bound by the
 * memory's latency, not its arithmetic. So each panel of up to 128 columns is one pass down
 * the rows, in order (a row's columns at once, eight registers), with the row
 * VECMAT_PREFETCH_ROWS ahead asked for: [128, 128 of 256] fp16 from memory 3.1-3.5 -> ~1.8 us
 * (a throwaway driver; from cache the same ~0.4 us); decodes at 1,000 positions (Stories110M
 * int4) 0.96x the time, at ~70 within noise. Narrower panels (64, then 16 columns) take what
 * is left; each column's sum is the chain VECMAT_COLUMNS computes. */
enum { VECMAT_PREFETCH_ROWS = 16 };

#define VECMAT_AVX512_PANEL(y, x, k, j, VECTORS, LOAD16, ROW_ADDRESS, ROW_BYTES)                    \
    {                                                                                               \
        __m512 a[VECTORS];                                                                          \
        for (int t = 0; t < (VECTORS); t++) a[t] = _mm512_setzero_ps();                             \
        for (int64_t i = 0; i < (k); i++) {                                                         \
            if (i + VECMAT_PREFETCH_ROWS < (k))                                                     \
                for (int b = 0; b < (ROW_BYTES); b += 64)                                           \
                    _mm_prefetch((const char *)ROW_ADDRESS(i + VECMAT_PREFETCH_ROWS, j) + b, _MM_HINT_T0); \
            __m512 weight = _mm512_set1_ps((x)[i]);                                                 \
            for (int t = 0; t < (VECTORS); t++) a[t] = _mm512_fmadd_ps(weight, LOAD16(i, (j) + 16 * t), a[t]); \
        }                                                                                           \
        for (int t = 0; t < (VECTORS); t++) _mm512_storeu_ps((y) + (j) + 16 * t, a[t]);             \
    }

#define VECMAT_AVX512(y, x, k, n, LOAD16, AT, ROW_ADDRESS, ELEMENT_BYTES)                           \
    int64_t j = 0;                                                                                  \
    for (; j + 128 <= (n); j += 128) VECMAT_AVX512_PANEL(y, x, k, j, 8, LOAD16, ROW_ADDRESS, 128 * (ELEMENT_BYTES)) \
    for (; j + 64 <= (n); j += 64) VECMAT_AVX512_PANEL(y, x, k, j, 4, LOAD16, ROW_ADDRESS, 64 * (ELEMENT_BYTES))     \
    for (; j + 16 <= (n); j += 16) VECMAT_AVX512_PANEL(y, x, k, j, 1, LOAD16, ROW_ADDRESS, 16 * (ELEMENT_BYTES))     \
    VECMAT_COLUMNS(y, x, k, j, n, AT)

AVX512 static void vecmat_avx512(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n) {
#define ROW_ADDRESS(i, j) (m + (i) * ld + (j))
#define LOAD16(i, j) _mm512_loadu_ps(ROW_ADDRESS(i, j))
#define AT(i, j) m[(i) * ld + (j)]
    VECMAT_AVX512(y, x, k, n, LOAD16, AT, ROW_ADDRESS, 4)
#undef ROW_ADDRESS
#undef LOAD16
#undef AT
}

AVX512 static void vecmat_fp16_avx512(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n) {
#define ROW_ADDRESS(i, j) (m + (i) * ld + (j))
#define LOAD16(i, j) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)ROW_ADDRESS(i, j)))
#define AT(i, j) ane_fp16_to_fp32(m[(i) * ld + (j)])
    VECMAT_AVX512(y, x, k, n, LOAD16, AT, ROW_ADDRESS, 2)
#undef ROW_ADDRESS
#undef LOAD16
#undef AT
}
#undef VECMAT_AVX512
#undef VECMAT_AVX512_PANEL

void ane_kernels_x86_avx512(ane_kernel_table *t) {
    t->rows_float[WEIGHTS_FP32] = rows_fp32;
    t->rows_float[WEIGHTS_FP16] = rows_fp16;
    t->rows_fp16_columns = rows_fp16_columns, t->fp16_columns_at_once = FP16_COLUMNS_AT_ONCE;
    t->rows_float[WEIGHTS_INT8] = rows_int8;
    t->rows_float[WEIGHTS_LUT4] = rows_lut4;
    t->rows_float[WEIGHTS_Q8_0] = rows_q8_0;
    t->rows_float[WEIGHTS_Q4_0] = rows_q4_0;
    t->rows_float[WEIGHTS_Q6_K] = rows_q6_k;
    t->rows_float[WEIGHTS_Q4_K] = rows_q4_k;
    t->rows_float[WEIGHTS_Q5_K] = rows_q5_k;
    t->split_lut4 = split_lut4;
    t->vecmat_fp32 = vecmat_avx512;
    t->vecmat_fp16 = vecmat_fp16_avx512;
}
#endif
