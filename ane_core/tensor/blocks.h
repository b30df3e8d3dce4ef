/* llama.cpp's (GGUF's) block-quantized weights, dequantized to fp32 for loading. Each row of a
 * [rows, k] matrix is k / n blocks of n weights (ggml-common.h's layouts, docs/reference/
 * model-formats.md; fp16 scales, little-endian). With x the stored code of weight i:
 *   Q8_0 (32 weights, 34 bytes): d, int8 q[32]                          w = d * q
 *   Q4_0 (32, 18): d, qs[16]: weight j in qs[j]'s low nibble, j + 16 in its high one
 *                                                                        w = d * (x - 8)
 *   Q4_1 (32, 20): d, m, qs[16] as Q4_0                                 w = d * x + m
 *   Q5_0 (32, 22): d, qh (u32: bit i is weight i's fifth bit), qs[16]   w = d * (x - 16)
 *   Q5_1 (32, 24): d, m, qh, qs[16]                                     w = d * x + m
 *   Q4_K (256, 144): d, dmin, scales[12] (eight 6-bit scale/min pairs, packed), qs[128]: sub-block
 *        2c in the low nibbles of qs[32c..], 2c + 1 in the high ones   w = (d * sc) * x - dmin * mn
 *   Q5_K (256, 176): d, dmin, scales[12], qh[32] (bit s of qh[l]: weight l of sub-block s),
 *        qs[128] as Q4_K                                                w = (d * sc) * x - dmin * mn
 *   Q6_K (256, 210): ql[128], qh[64], int8 scales[16] (one per 16 weights), d at the end; per
 *        half of 128: low nibbles of ql[0..31], ql[32..63], high nibbles of both, each with two
 *        bits of qh[l] (bits 0-1, 2-3, 4-5, 6-7)                        w = (d * sc) * (x - 32)
 * Each weight is computed as written, in fp32, with no fused multiply-add. */
#ifndef ANE_TENSOR_BLOCKS_H
#define ANE_TENSOR_BLOCKS_H

#include <stdint.h>

#include "../base/status.h"
#include "tensor.h"

typedef enum ane_block_type {
    ANE_BLOCKS_Q8_0, ANE_BLOCKS_Q4_0, ANE_BLOCKS_Q4_1, ANE_BLOCKS_Q5_0, ANE_BLOCKS_Q5_1,
    ANE_BLOCKS_Q4_K, ANE_BLOCKS_Q5_K, ANE_BLOCKS_Q6_K
} ane_block_type;

/* "q8_0", "q4_k", ... -> the type; returns 0 for any other name. */
int ane_block_type_from_name(const char *name, ane_block_type *out);
/* Weights in one block (32, or 256 for the K types) and its bytes. */
int ane_block_weights(ane_block_type type);
int64_t ane_block_bytes(ane_block_type type);

/* out: a new tensor of `shape` (ndim dims, the last a multiple of the block's weights) and
 * `dtype` (fp32, or fp16: each fp32 weight rounded to nearest, as a program's conversion rounds
 * it) holding the weights of `blocks` (uint8, exactly the blocks of that many weights,
 * contiguous). Fails naming `name` when the sizes disagree or a scale is not finite. */
ane_status ane_blocks_dequantize(ane_block_type type, const ane_tensor *blocks, int ndim, const int64_t *shape,
                                 ane_dtype dtype, const char *name, ane_tensor *out, ane_error *err);

/* Q8_0, Q4_0, Q6_K, Q4_K and Q5_K blocks of a [rows, k] matrix kept as they are for the products
 * that read them (quantize.h's ANE_ENCODING_Q8_0 / _Q4_0 / _Q6_K / _Q4_K / _Q5_K): data the codes
 * (Q8_0's int8 as stored; Q4_0's nibbles x - 8 and Q4_K's x in MIL's order, element j in byte
 * j / 2; Q5_K's x packed, ane_q5_k_pack; Q6_K's blocks as stored), table the fp32 values of the blocks'
 * fp16 scales [rows, k / 32] (Q6_K: d x each 16's scale, [rows, k / 16]; Q4_K, Q5_K: each 32's
 * scale d sc and offset dmin m / (d sc) rounded to table_dtype, fp16 or fp32, [rows, k / 16]):
 * the same numbers (the offsets within a rounding), no weight dequantized. Fails naming `name` as
 * ane_blocks_dequantize does, for a Q4_K / Q5_K sub-block this form cannot hold ("cannot hold"),
 * and for any other type. */
ane_status ane_blocks_split(ane_block_type type, const ane_tensor *blocks, int64_t rows, int64_t k, ane_dtype table_dtype,
                            const char *name, ane_tensor *data, ane_tensor *table, ane_error *err);

/* The inverse of ane_blocks_split: `blocks` a new uint8 tensor of the GGUF blocks of a kept
 * [rows, k] matrix (its data and table as ane_blocks_split makes them). Fails naming `name` for
 * parts that are not those of such a matrix, or a Q8_0 / Q4_0 scale that is not an fp16 value. */
ane_status ane_blocks_join(ane_block_type type, const ane_tensor *data, const ane_tensor *table, int64_t rows, int64_t k,
                           const char *name, ane_tensor *blocks, ane_error *err);

#endif
