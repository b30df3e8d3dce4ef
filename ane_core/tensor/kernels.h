/* The CPU's hot loops as one table of kernels (internal to ane_core/tensor): the matrix-vector
 * products by weight encoding and activation type, the products over a cache, the integer
 * activations' codes and palettes, e^x and friends, sums and maxima, the AdamW step, the
 * decoding of 4-bit rows and transposes. ane_kernels() builds the table once per process: the
 * scalar reference kernels (kernels_scalar.c), then, level by level as far as the CPU goes,
 * the entries each instruction set's file replaces (arch/x86/: AVX, AVX2, AVX-512, AVX-512 VNNI,
 * AVX-512 BF16; arch/arm/: NEON, then NEON's dot products). ANELUA_CPU caps the level
 * (base/cpu.h). The public functions, the threading and the memory a product needs stay in
 * gemv.c, vector_math.c, optim.c, quantize.c and tensor.c, which read the table.
 *
 * What every level keeps (the specs check each level against the scalar one):
 * - the fp16 and fp32 row kernels of one level sum in the same order, so fp16 weights give the
 *   bits of their values in fp32, and whole chunks of ANE_GEMV_CHUNK zeros add nothing;
 * - a row's result does not depend on which rows share its call (grouped kernels);
 * - products over a cache (vecmat), e^x and friends, sums and maxima, AdamW, the integer codes
 *   and palettes, decoded 4-bit rows and transposes are the scalar kernels' bits;
 * - the other products stay within the error bounds spec/c/test_gemv.c derives. */
#ifndef ANE_TENSOR_KERNELS_H
#define ANE_TENSOR_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/parallel.h"
#include "quantize.h"

/* ------------------------------------------------ float activations */

/* One matrix-vector product's share: y[r] = row r of w times x for r in [first, last). */
typedef struct gemv_job {
    float *y;
    const void *w;        /* [rows, k], fp16 or fp32; or encoded (quantize.h) */
    const float *x;       /* [k] */
    int64_t k;
    int64_t row_stride;   /* elements from one fp16 / fp32 row to the next: k, or more (the first k of longer rows) */
    const float *table;   /* encoded: per-row scales [rows], palettes [rows, 16] or block scales [rows, k / 32] */
    const float *x_split; /* 4-bit rows: x [k] in the order the level's kernel reads (split_lut4), or NULL */
    const uint16_t *words; /* 4-bit rows: their palettes as bf16 words [rows, 16] (ane_palette_codes), or NULL */
} gemv_job;

/* The row kernels' weight types, the first index of kernels.rows_float and rows_integer. */
typedef enum kernel_weights {
    WEIGHTS_FP32, WEIGHTS_FP16, WEIGHTS_INT8, WEIGHTS_LUT4, WEIGHTS_Q8_0, WEIGHTS_Q4_0, WEIGHTS_Q6_K, WEIGHTS_Q4_K,
    WEIGHTS_Q5_K, WEIGHT_KINDS
} kernel_weights;

/* A level's single-row dot products with float activations (int8 rows unscaled: the caller
 * applies the row's scale; a 4-bit row's table is its 16-entry palette; Q8_0, Q4_0 and Q6_K
 * rows (k a multiple of 32, or 256) take each weight as its block's scale times its code, and
 * Q4_K and Q5_K rows as ane_shifted_weight, as dequantizing computes them, in the level's fp32 kernel's
 * order, so they give its bits for the dequantized row). */
typedef struct float_dots {
    float (*fp32)(const float *w, const float *x, int64_t k);
    float (*fp16)(const uint16_t *w, const float *x, int64_t k);
    float (*int8)(const int8_t *q, const float *x, int64_t k);
    float (*lut4)(const uint8_t *packed, const float *palette, const float *x, int64_t k);
    float (*q8_0)(const int8_t *q, const float *scales, const float *x, int64_t k);
    float (*q4_0)(const uint8_t *packed, const float *scales, const float *x, int64_t k);
    float (*q6_k)(const uint8_t *blocks, const float *scales, const float *x, int64_t k);
    float (*q4_k)(const uint8_t *packed, const float *pairs, const float *x, int64_t k);
    float (*q5_k)(const uint8_t *codes, const float *pairs, const float *x, int64_t k);
} float_dots;

/* Rows [first, last) of a gemv_job of the given weights, one row at a time through `dots`
 * (kernels_scalar.c): the row kernels of every level without grouped ones. */
void rows_by_dots(const gemv_job *job, int64_t first, int64_t last, kernel_weights weights, const float_dots *dots);

/* Defines rows_fp32, rows_fp16, rows_int8, rows_lut4, rows_q8_0, rows_q4_0, rows_q6_k, rows_q4_k and
 * rows_q5_k (ane_range_body) over the float_dots `dots`. */
#define ROWS_BY_DOTS(dots)                                                                                        \
    static void rows_fp32(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_FP32, &(dots)); } \
    static void rows_fp16(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_FP16, &(dots)); } \
    static void rows_int8(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_INT8, &(dots)); } \
    static void rows_lut4(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_LUT4, &(dots)); } \
    static void rows_q8_0(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q8_0, &(dots)); } \
    static void rows_q4_0(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q4_0, &(dots)); } \
    static void rows_q6_k(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q6_K, &(dots)); } \
    static void rows_q4_k(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q4_K, &(dots)); } \
    static void rows_q5_k(void *job, int64_t first, int64_t last) { rows_by_dots(job, first, last, WEIGHTS_Q5_K, &(dots)); }

/* Rows a grouped kernel takes at once (four rows a quarter of a share apart: in_row_groups). */
#define GEMV_GROUP 4

/* Rows first .. last of a share in groups: four rows a quarter of the share apart at a time
 * (row i of each quarter), then the rows left over one by one; body(context, row, apart,
 * count) takes rows row, row + apart, ... (count of them). */
typedef void (*row_group_body)(const void *context, int64_t row, int64_t apart, int count);

static inline void in_row_groups(int64_t first, int64_t last, row_group_body body, const void *context) {
    int64_t quarter = (last - first) / GEMV_GROUP;
    for (int64_t i = 0; i < quarter; i++) body(context, first + i, quarter, GEMV_GROUP);
    for (int64_t r = first + GEMV_GROUP * quarter; r < last; r++) body(context, r, 1, 1);
}

/* Bytes [at, end) a kernel brings into the cache while it computes (the next block of a few
 * columns' product, prefetch_span_share of it per row group), a line at a time between its
 * multiply-adds: the same bytes asked for all at once before the pass fill the memory queues
 * and stall the pass behind them. */
typedef struct prefetch_span {
    const char *at, *end;
} prefetch_span;

/* The next of `parts` equal shares of the span (whole lines), taken from its front. */
static inline prefetch_span prefetch_span_share(prefetch_span *span, int64_t parts) {
    int64_t left = span->end - span->at, share = parts > 1 ? ((left + parts - 1) / parts + 63) / 64 * 64 : left;
    prefetch_span taken = {span->at, share < left ? span->at + share : span->end};
    span->at = taken.end;
    return taken;
}

/* Into the cache (L2, where the kernels read the next block from): the span's next line, while
 * any is left (a kernel's step between its multiply-adds), or all of what is left. */
static inline void prefetch_span_step(prefetch_span *span) {
    if (span->at < span->end) __builtin_prefetch(span->at, 0, 2), span->at += 64;
}
static inline void prefetch_span_rest(prefetch_span *span) {
    for (; span->at < span->end; span->at += 64) __builtin_prefetch(span->at, 0, 2);
}

/* y[first..n) = x^T M's columns, element by element: the one order every vecmat kernel keeps
 * (per column, rows 0..k-1, one fused multiply-add each), so an fp16 matrix gives the very sums
 * of its values converted to fp32, and a column's sum does not depend on how many columns are
 * computed. AT(i, j) reads M[i, j] as fp32. */
#define VECMAT_COLUMNS(y, x, k, first, n, AT)                                                      \
    for (int64_t j_ = (first); j_ < (n); j_++) (y)[j_] = 0.0f;                                      \
    for (int64_t i_ = 0; i_ < (k); i_++)                                                            \
        for (int64_t j_ = (first); j_ < (n); j_++) (y)[j_] = fmaf((x)[i_], AT(i_, j_), (y)[j_]);

/* ------------------------------------------------ integer activations */

/* x quantized per block of 32 consecutive elements (gemv.h); vector loops take whole chunks
 * of 64. */
#define Q8_BLOCK 32
#define Q8_CHUNK 64
#define Q16_BLOCK 32
#define Q16_LEVELS 32767
#define Q16_PALETTE_LEVELS 16383

/* An activation vector quantized in blocks of 32 for integer products: int8 codes or int16
 * codes, the block scales, and what the level's kernels read besides (arranged by
 * arrange_codes8 / arrange_codes16 in memory code_vector_bytes gives). */
typedef struct code_vector {
    int64_t k, chunked;  /* elements; those in whole 64-element chunks */
    int8_t *codes8;      /* [k] (int8 activations) */
    int16_t *codes16;    /* [k] (int16 activations) */
    float *block_scales; /* [ceil(k / 32)]: NaN where the block holds a NaN or inf */
    float *lane_scales;  /* [chunked / 4]: the scale of each 4-element lane's block (VNNI only) */
    int32_t *lane_bias;  /* [chunked / 4]: -128 x the lane's code sum (VNNI only) */
    int8_t *split8;      /* [chunked]: the codes in the order a level's 4-bit kernel reads them (else NULL) */
    int16_t *split16;    /* [chunked]: the int16 codes likewise (else NULL) */
    float *chunk_scales; /* [chunked / 8]: per 64-element chunk, its first block's scale four times,
                            then its second's: the lanes of 8 elements of AVX2's 4-bit products (else NULL) */
    int32_t *bias8;      /* [chunked / 8]: -128 x the codes' sum of each 8 elements (VNNI's 4-bit
                            products; else NULL) */
} code_vector;

/* A row's palette as integer entries times one scale, quantized like an activation block:
 * int8 entries for int8 activations, 15-bit ones for int16 activations (the scale first in both). */
typedef struct palette8 {
    float scale;
    int8_t entries[ANE_LUT4_ENTRIES];
} palette8;

typedef struct palette16 {
    float scale;
    int16_t entries[ANE_LUT4_ENTRIES];
} palette16;

/* Rows of a product with integer activations: y [rows, count] for count quantized columns. */
typedef struct integer_job {
    float *y; /* [rows, columns] */
    const void *data;
    const float *table;         /* int8 rows: [rows] scales; Q8_0 / Q4_0: [rows, k / 32] block scales */
    const char *palette_codes;  /* 4-bit rows: [rows] palette8 or palette16 */
    const code_vector *columns; /* [columns] */
    int64_t count, k;
    ane_weight_encoding encoding;
    ane_activations activations;
    const uint16_t *half_table; /* Q8_0 / Q4_0 / Q4_K / Q5_K: the table's entries as fp16 (each one an fp16
                                   value: ane_table_as_fp16), which the kernels read in place of `table`,
                                   half its bytes (VNNI's directly, the others' integer_block_rows a row's
                                   converted at a time); or NULL */
} integer_job;

/* The memory a code_vector of k elements takes (quantize_codes_with's `memory`). */
size_t code_vector_bytes(int64_t k, ane_activations activations);

/* x [k] (element j at x[j * stride]) quantized into v through the table's kernels (gemv.c):
 * the codes and block scales, then what its integer kernels read besides (for_lut4: the
 * product's rows are 4-bit, or ARRANGE_FOR_Q4_0: Q4_0 rows, int8 activations). */
struct ane_kernel_table;
void quantize_codes_with(const struct ane_kernel_table *kernels, code_vector *v, void *memory, const float *x,
                         int64_t stride, int64_t k, ane_activations activations, int for_lut4);

/* A level's single-row dot products against one quantized column (unscaled by the row). */
typedef float (*integer_dot_int8)(const int8_t *q, const code_vector *v);
typedef float (*integer_dot_lut4)(const uint8_t *packed, const void *palette, const code_vector *v);

/* An integer job's rows first .. last through one row-by-column dot product of each kind
 * (kernels_scalar.c): every level without grouped kernels runs its dots through this. */
void integer_rows_by_dots(const integer_job *job, int64_t first, int64_t last, integer_dot_int8 dot_int8,
                          integer_dot_lut4 dot_lut4);

/* Q8_0 / Q4_0 / Q6_K rows (integer_job.table: their scales) against int8 activations,
 * llama.cpp's arithmetic for such blocks: per block of 32 (Q6_K: per 16), the exact integer
 * dot product of the weights' and the activations' codes times (the weights' scale x the
 * activations'), added in order (the scalar kernels are this function; NEON gives its bits;
 * AVX2 adds each block's eight lanes into eight accumulators, within test_gemv's bound).
 * Q4_K and Q5_K rows (table: scale, offset pairs): per block of 32, with S the exact integer dot
 * product of the weights' unsigned codes and the activations' codes and C the activations' code
 * sum, (scale x the activations' scale) x (S - offset x C), each operation rounded to fp32. */
float blocks_int8(ane_weight_encoding encoding, const void *codes, const float *scales, const code_vector *v);
/* The same sums of the blocks from element `from` (a block boundary) on: the vector kernels' tails. */
float blocks_int8_from(ane_weight_encoding encoding, const void *codes, const float *scales, const code_vector *v,
                       int64_t from);
typedef float (*block_dot_int8)(const void *codes, const float *scales, const code_vector *v);
/* An integer job of Q8_0 / Q4_0 / Q6_K rows through a level's block dots. */
/* The dots of each encoding, one entry per GGUF block encoding (the rest NULL). */
typedef struct block_dots_int8 {
    block_dot_int8 q8_0, q4_0, q6_k, q4_k, q5_k;
} block_dots_int8;
void integer_block_rows(const integer_job *job, int64_t first, int64_t last, const block_dots_int8 *dots);

/* The scalar sums of blocks from element `from` (a block boundary) on: scale x exact integer
 * sum per block, added in order (the vector kernels' tails). */
float q8_int8_from(const int8_t *q, const code_vector *v, int64_t from);
float q8_lut4_from(const uint8_t *packed, const palette8 *p, const code_vector *v, int64_t from);
float q16_int8_from(const int8_t *q, const code_vector *v, int64_t from);
float q16_lut4_from(const uint8_t *packed, const palette16 *p, const code_vector *v, int64_t from);

/* The scale and int16 codes of one block of values (element j at x[j * stride]), `levels` the
 * largest code: max |x| / levels and round(x levels / max |x|); a NaN scale (and zero codes)
 * for a block with a NaN or inf. */
float block_codes16(const float *x, int64_t stride, int64_t count, float levels, int16_t *codes);

/* Per 64-element chunk, its two blocks' scales as the lanes of AVX2's 4-bit products take them. */
void fill_chunk_scales(code_vector *v);

/* ------------------------------------------------ the rest */

/* AdamW's constants for one step (optim.c): per element, g' = g scale, m = b1 m + (1 - b1) g',
 * v = b2 v + (1 - b2) g' g', p -= lr (m inv_c1 / (sqrt(v inv_c2) + eps) + wd p), in that order
 * and without fused multiply-adds, so every level gives the same bits. */
typedef struct adamw_constants {
    float b1, b2, lr, eps, wd, inv_c1, inv_c2, scale;
} adamw_constants;

/* A transpose of 4-byte elements: out [rows, cols], element (r, c) read at in[r + c * column_step]. */
typedef struct transpose_job {
    uint32_t *out;
    const uint32_t *in;
    int64_t rows, cols, column_step;
} transpose_job;

enum { TRANSPOSE_TILE = 32 };

/* ------------------------------------------------ scalar pieces the vector kernels share */

float exp_scalar(float x); /* the scalar e^x of vector_math.h (its tails) */
void adamw_scalar(const adamw_constants *c, float *p, float *m, float *v, const float *g, int64_t count);
void lut4_decode_scalar(const uint8_t *packed, const float *palette, int64_t count, float *out);

/* ------------------------------------------------ the table */

typedef struct ane_kernel_table {
    const char *level; /* the instruction sets in use, e.g. "avx512-vnni-bf16", "neon-dotprod", "scalar" */

    /* Float activations: the rows [first, last) of a gemv_job (an ane_range_body over it). */
    ane_range_body rows_float[WEIGHT_KINDS];
    /* fp16 rows [first, last) of `count` columns' jobs at once, 2 <= count <= fp16_columns_at_once
     * (a few columns' products: each weight converted once for all of them), each column's
     * results the bits rows_float[WEIGHTS_FP16] gives it, bringing the bytes of `ahead` into the
     * cache as it goes (prefetch_span); NULL and 1 where a level has none (a level that replaces
     * the fp16 row kernel resets them). */
    void (*rows_fp16_columns)(const gemv_job *jobs, int count, int64_t first, int64_t last, prefetch_span ahead);
    int fp16_columns_at_once;
    /* x_split [k] for this level's 4-bit kernel (memory for k floats): x's whole chunks in its
     * order; returns x_split, or NULL where the kernel reads x as it is. */
    const float *(*split_lut4)(float *x_split, const float *x, int64_t k);
    int lut4_reads_words; /* the 4-bit kernel reads palettes as bf16 words (ane_palette_codes under float activations) */

    /* y [n] = x^T M over the first n columns of M [k, ld] (VECMAT_COLUMNS' sums). */
    void (*vecmat_fp32)(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n);
    void (*vecmat_fp16)(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n);

    /* Integer activations: rows [first, last) of an integer_job, by [int8 rows, 4-bit rows]
     * and [int8, int16 activations]. */
    ane_range_body rows_integer[2][2];
    /* Q8_0 / Q4_0 / Q6_K / Q4_K / Q5_K rows of an integer_job on int8 activations (blocks_int8's sums),
     * and what its Q4_0 and Q4_K kernels read besides the codes, arranged once per vector in the
     * memory past them (set together: a level's 4-bit block kernels read its own arrangement). */
    ane_range_body rows_blocks_int8;
    void (*arrange_q4_0_codes8)(code_vector *v);
    /* One whole block of 32 contiguous values quantized (the scalar codes and scale); returns 0
     * for a block with a NaN or inf (the caller's scalar loop takes it). NULL: no vector form. */
    int (*quantize_block8)(const float *x, int8_t *codes, float *scale);
    int (*quantize_block16)(const float *x, int16_t *codes, float *scale);
    /* After the codes: what the level's integer kernels read besides (lanes, split orders,
     * chunk scales), in the memory past the codes; for_lut4: the rows are 4-bit. */
    void (*arrange_codes8)(code_vector *v, int for_lut4);
#define ARRANGE_FOR_Q4_0 2 /* quantize_codes_with's for_lut4 for Q4_0 and Q4_K rows: arrange_q4_0_codes8 instead */
    void (*arrange_codes16)(code_vector *v, int for_lut4);
    void (*palette8)(palette8 *p, const float *palette /* [16] */);
    void (*palette16)(palette16 *p, const float *palette /* [16] */);

    /* Elementwise maps (vector_math.h; out may equal x) and a softmax row's numerators. */
    void (*exp)(float *out, const float *x, int64_t n);
    void (*tanh)(float *out, const float *x, int64_t n);
    void (*sigmoid)(float *out, const float *x, int64_t n);
    void (*silu)(float *out, const float *x, int64_t n);
    float (*exp_shifted_sum)(float *out, const float *x, float shift, int64_t n);
    /* partial[l] (8 of them) over elements l, l + 8, ... of x from `from` to `whole` (multiples
     * of 8): the sum, or the maximum with NaN passed on (take_max). */
    void (*reduce_partials)(float *partial, const float *x, int64_t from, int64_t whole, int take_max);

    /* AdamW over count elements from `start` of p, m and v with gradients g [count]. */
    void (*adamw)(const adamw_constants *c, float *p, float *m, float *v, const float *g, int64_t count);

    /* A 4-bit row's count elements decoded exactly: out[j] = palette[index j]. */
    void (*lut4_decode)(const uint8_t *packed, const float *palette, int64_t count, float *out);

    /* The whole 32 x 32 tile of out at rows r, columns c. */
    void (*transpose_tile)(const transpose_job *j, int64_t r, int64_t c);
} ane_kernel_table;

/* The table for this CPU (built at first use; safe from any thread). */
const ane_kernel_table *ane_kernels(void);

/* Each file's entries over the table so far. */
void ane_kernels_scalar(ane_kernel_table *t);
void ane_kernels_x86_avx(ane_kernel_table *t);         /* arch/x86/avx.c */
void ane_kernels_x86_avx2(ane_kernel_table *t);        /* arch/x86/avx2.c */
void ane_kernels_x86_avx512(ane_kernel_table *t);      /* arch/x86/avx512.c */
void ane_kernels_x86_avx512_vnni(ane_kernel_table *t); /* arch/x86/avx512_vnni.c */
void ane_kernels_x86_avx512_bf16(ane_kernel_table *t); /* arch/x86/avx512_bf16.c */
void ane_kernels_arm_neon(ane_kernel_table *t);        /* arch/arm/neon.c */
void ane_kernels_arm_dotprod(ane_kernel_table *t);     /* arch/arm/dotprod.c */

#endif
