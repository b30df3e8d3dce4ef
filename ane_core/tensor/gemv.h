/* Matrix-vector products y = W x for decoding, x and y in fp32, W in fp16 (read as 2 bytes,
 * converted in registers with F16C, accumulated with FMA) or in fp32. Rows are split over
 * the helper threads of base/parallel.h rather than BLAS's: BLAS threads keep polling long
 * after a call and would take the second core from the next product. */
#ifndef ANE_TENSOR_GEMV_H
#define ANE_TENSOR_GEMV_H

#include <stdint.h>

#include "../base/status.h"
#include "quantize.h"

/* (The same sums, bit for bit, as ane_gemv_fp32 of the weights converted to fp32.) */
void ane_gemv_fp16(float *y /* [rows] */, const uint16_t *w /* [rows, k] */, const float *x /* [k] */, int64_t rows,
                   int64_t k);

void ane_gemv_fp32(float *y /* [rows] */, const float *w /* [rows, k] */, const float *x /* [k] */, int64_t rows,
                   int64_t k);

/* The same over the first k elements of rows row_stride elements apart (a cache's filled
 * positions); the sums are those of ane_gemv_fp16 / _fp32 over rows of k. */
void ane_gemv_fp16_strided(float *y /* [rows] */, const uint16_t *w /* [rows, row_stride] */, int64_t row_stride,
                           const float *x /* [k] */, int64_t rows, int64_t k);
void ane_gemv_fp32_strided(float *y /* [rows] */, const float *w /* [rows, row_stride] */, int64_t row_stride,
                           const float *x /* [k] */, int64_t rows, int64_t k);

/* Elements a chunk of every fp16 / fp32 row kernel above (AVX-512: 32, AVX2: 32 then 8,
 * scalar: 1): a product over the first k of longer rows whose other elements are zeros, cut
 * at a multiple of this, gives what the whole rows give bit for bit when x is finite there
 * (each skipped chunk would add products of +-0 to sums that start at +0, which leaves them
 * as they are). */
#define ANE_GEMV_CHUNK 32

/* y = x^T M for a row vector x and a row-major M whose rows are ld elements apart, its first n
 * columns (a query times a cache's filled positions); single-threaded, for small products.
 * A column's sum does not depend on n. */
void ane_vecmat_fp32(float *y /* [n] */, const float *x /* [k] */, const float *m /* [k, ld] */, int64_t ld, int64_t k,
                     int64_t n);

/* Columns of y a vecmat kernel holds in registers at once (a tile); narrower tails are slower. */
#define ANE_VECMAT_TILE 64

/* The same with M's elements in fp16 (a cache sim holds in fp16): the sums ane_vecmat_fp32
 * computes from M's values converted to fp32, bit for bit. */
void ane_vecmat_fp16(float *y /* [n] */, const float *x /* [k] */, const uint16_t *m /* [k, ld] */, int64_t ld, int64_t k,
                     int64_t n);

/* y = W x for a quantized W (quantize.h), read as stored: int8 rows times their scale, 4-bit
 * indices looked up in their row's palette, or Q8_0 / Q4_0 codes times their block's scale
 * (each weight scale x code, exact in fp32, then the sums of ane_gemv_fp32 over those values,
 * bit for bit). Fails only for memory (4-bit rows of k > 4096 split x into a new buffer). */
ane_status ane_gemv_encoded(float *y /* [rows] */, ane_weight_encoding encoding, const void *data, const float *table,
                            const float *x /* [k] */, int64_t rows, int64_t k, ane_error *err);

/* One of several products of the same x (a decode step's q, k and v projections; gate and
 * up): y [rows] = W x (ane_gemv_parts; y [rows, columns] for ane_gemm_parts' x [k, columns]),
 * W [rows, k] in fp16 bits (ANE_ENCODING_DENSE) or encoded (quantize.h; table: its scales or
 * palettes). */
typedef struct ane_gemv_part {
    float *y;
    ane_weight_encoding encoding;
    const void *data;
    const float *table;
    int64_t rows;
    const void *palette_codes; /* 4-bit rows: their palettes as the products read them under the
                                  activations (ane_palette_codes: bf16 words, or integer codes), or NULL */
    const uint16_t *half_table; /* GGUF's blocks but Q6_K under int8 activations: the table as fp16
                                   (ane_table_as_fp16), or NULL; the results are the same bits either way */
} ane_gemv_part;

/* A block weight's table [n] as fp16 into out [n], for the products that read it so (a decoding
 * step reads a Q4_0 weight's fp32 scales as a fifth of its bytes, an fp16 copy a ninth): 1 when
 * every entry is an fp16 value (GGUF's Q8_0 / Q4_0 scales always are; Q4_K's and Q5_K's pairs in
 * an fp16 program), else 0 and out is not to be used. */
int ane_table_as_fp16(uint16_t *out, const float *table, int64_t n);

/* Parts one loop over the helper threads takes at most (more run as further loops). */
#define ANE_GEMV_MAX_PARTS 4

/* Every part's product (all of one encoding, k columns each) as one loop over their rows, x
 * split once for 4-bit rows, or quantized once under int8 / int16 activations: each thread's
 * share is one stretch of rows, so its streams of weights are longer, and the threads meet
 * fewer times, than a loop per part. Each y is bit for bit what its part gives alone
 * (ane_gemv_fp16, ane_gemv_encoded, or ane_encoded_matmul of one column under the activations;
 * fp16 rows read x as it is under any). Fails only for memory, or int16 activations with GGUF
 * blocks (as ane_encoded_matmul). */
ane_status ane_gemv_parts(const ane_gemv_part *parts, int count, const float *x /* [k] */, int64_t k,
                          ane_activations activations, ane_error *err);

/* The same for 1 to ANE_FEW_COLUMNS columns (a batched decode step's sessions, a short prefill):
 * each part's y [rows, columns] = W x [k, columns], one loop over every part's rows, each y bit
 * for bit what its part gives alone (ane_gemm_fp16_few_columns, ane_encoded_matmul). More
 * columns fail (ANE_ERR_ARGUMENT), as does memory. */
ane_status ane_gemm_parts(const ane_gemv_part *parts, int count, const float *x /* [k, columns] */, int64_t k,
                          int64_t columns, ane_activations activations, ane_error *err);

/* Up to this many columns (a short prompt's prefill), products run the matrix-vector kernel
 * once per column, a block of rows at a time (read from memory once, from cache for the other
 * columns), rather than BLAS, whose product of a few columns costs more here than its
 * arithmetic (Stories110M, 5-token prompt: fp16 195 -> 26 ms, int4 72 -> 25 ms); a quantized
 * weight is read as stored instead of decoded to fp32 first. */
#define ANE_FEW_COLUMNS 16

/* y [rows, columns] = W x for fp32 (fp16) W and x [k, columns], each column ane_gemv_fp32's
 * (ane_gemv_fp16's) sums; fail only when out of memory. */
ane_status ane_gemm_fp32_few_columns(float *y /* [rows, columns] */, const float *w /* [rows, k] */,
                                     const float *x /* [k, columns] */, int64_t rows, int64_t k, int64_t columns,
                                     ane_error *err);
ane_status ane_gemm_fp16_few_columns(float *y /* [rows, columns] */, const uint16_t *w /* [rows, k] */,
                                     const float *x /* [k, columns] */, int64_t rows, int64_t k, int64_t columns,
                                     ane_error *err);
/* The fp16 products with x and y transposed, y [columns, rows] = (W x)^T for x [columns, k]: a
 * few rows times a transposed fp16 matrix, X W^T (a batched step's logits, [sessions,
 * vocabulary], with no copy turning them), each row of y ane_gemv_fp16's sums for that row of x. */
ane_status ane_gemm_fp16_few_columns_t(float *y /* [columns, rows] */, const uint16_t *w /* [rows, k] */,
                                       const float *x /* [columns, k] */, int64_t rows, int64_t k, int64_t columns,
                                       ane_error *err);

/* y [rows, columns] = W x for a quantized W and x [k, columns] (Q8_0 and Q4_0 under float or
 * int8 activations; int16 fails). With int8 activations their blocks are llama.cpp's
 * arithmetic: per block of 32, the exact integer dot product of the codes times the weights'
 * scale x the activations' (kernels.h: blocks_int8), summed in order (Q6_K likewise per 16).
 * ANE_ACTIVATIONS_FLOAT: the matrix-vector product above for each column up to
 * ANE_FEW_COLUMNS, else blocks of rows decoded exactly and multiplied with BLAS; y is the
 * dequantized W times x.
 * ANE_ACTIVATIONS_INT8: each column of x quantized in blocks of 32 consecutive elements
 * (scale = max |x| / 127, code = round(x / scale)), a 4-bit row's palette to int8 the same
 * way, and each block's integer dot product (exact) times its scales summed in fp32 (AVX-512
 * VNNI where the CPU has it, else AVX2's byte products; the same sums in scalar code
 * elsewhere). ANE_ACTIVATIONS_INT16: the same with codes up to 32767 (scale = max |x| /
 * 32767) and palette entries up to 16383 (4-bit rows through AVX-512 VNNI's word products where the
 * CPU has them, else AVX2's; scalar elsewhere). More than
 * ANE_FEW_COLUMNS columns multiply the same quantized values (scale x code, rounded to fp32)
 * with BLAS instead: the same arithmetic up to fp32 rounding. A NaN or inf in a block makes its products NaN. */
ane_status ane_encoded_matmul(float *y /* [rows, columns] */, ane_weight_encoding encoding, const void *data,
                              const float *table, const void *palette_codes, const float *x /* [k, columns] */,
                              int64_t rows, int64_t k, int64_t columns, ane_activations activations, ane_error *err);

/* The palettes of 4-bit rows as the products above read them: per row, its entries quantized
 * to int8 (ANE_ACTIVATIONS_INT8) or 15-bit codes (INT16) and their scale, or under float
 * activations its 16 entries as bf16 words (the AVX-512 BF16 kernel's form; only when every
 * entry is a bf16 value, as the quantizer writes them: else the function returns 0 and the
 * products read the fp32 palettes), in rows of ane_palette_codes_stride bytes. A weight's codes
 * computed once (sim does at compile) and passed as palette_codes (offset by first_row x stride
 * for a slice of rows) spare every product the converting of its palettes and read half the
 * palettes' bytes or less; palette_codes NULL computes integer codes per product (float
 * activations: reads the fp32 palettes). Returns 1 when the codes were written. */
size_t ane_palette_codes_stride(ane_activations activations);
/* Whether this CPU's 4-bit kernel under float activations reads the bf16 words (AVX-512 BF16's). */
int ane_palette_words_read(void);
int ane_palette_codes(void *codes /* [rows x stride bytes] */, const float *table /* [rows, 16] */, int64_t rows,
                      ane_activations activations);

#endif
