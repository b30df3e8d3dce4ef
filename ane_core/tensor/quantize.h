/* Weights quantized for inference: per output row, int8 with one symmetric scale per row and
 * 4-bit palettes (16 values per row, each element an index); and in blocks of 32 along a row,
 * llama.cpp's Q8_0 and Q4_0 (GGUF files' blocks, split into codes and scales) and its Q4_K and
 * Q5_K (codes with a scale and an offset per 32) and its Q6_K (blocks with a scale per 16). A weight matrix is
 * [rows, k] (a conv weight [O, I, kh, kw] has rows O, k = I * kh * kw). The encoded bytes
 * are what the MIL program carries (constexpr_affine_dequantize / constexpr_lut_to_dense /
 * constexpr_blockwise_shift_scale),
 * what sim's kernels read, and what quantized checkpoints store. */
#ifndef ANE_TENSOR_QUANTIZE_H
#define ANE_TENSOR_QUANTIZE_H

#include <stdint.h>
#include <string.h>

#include "../base/status.h"
#include "tensor.h"

typedef enum ane_weight_encoding {
    ANE_ENCODING_DENSE = 0, /* the elements themselves, in the tensor's dtype */
    ANE_ENCODING_INT8,      /* data: int8 [rows, k]; table: fp32 [rows] scales; w = q * scale[row] */
    ANE_ENCODING_LUT4,      /* data: uint8 [rows, k / 2], element j's index in byte j / 2, low nibble
                             * first (MIL's uint4 packing); table: fp32 [rows, 16]; w = table[row][index] */
    ANE_ENCODING_Q8_0,      /* data: int8 [rows, k]; table: fp32 [rows, k / 32] block scales (fp16 values);
                             * w = scale[row][j / 32] * q (GGUF's Q8_0) */
    ANE_ENCODING_Q4_0,      /* data: uint8 [rows, k / 2], element j's signed 4-bit code in byte j / 2, low
                             * nibble first (MIL's int4 packing: the nibble is code & 15); table as Q8_0;
                             * w = scale[row][j / 32] * code (GGUF's Q4_0, its x - 8) */
    ANE_ENCODING_Q6_K,      /* data: GGUF's Q6_K blocks, [rows, k / 256 x 210 bytes]; table: fp32 [rows,
                             * k / 16], each 16 weights' scale; w = table * (x - 32), the 6-bit x of
                             * ane_q6_code. A file's blocks as stored, the table their d x scale (exact), or a
                             * program's (constexpr_blockwise_shift_scale: int8 codes x - 32, a scale per 16,
                             * in the program's dtype): blocks of its codes with d and scales zero
                             * (ane_q6_k_pack_codes), the table its scales. A kernel that reads a half
                             * block's scales from the block's d and scales reads the table's where d is
                             * zero (in a file's block of d = 0 both are d x scale, the same) */
    ANE_ENCODING_Q4_K,      /* data: uint8 [rows, k / 2], element j's unsigned 4-bit code x in byte j / 2, low
                             * nibble first (MIL's uint4 packing); table: fp32 [rows, k / 32 x 2], each block
                             * of 32's scale, then its offset; w = scale x (x - offset) (coremltools'
                             * constexpr_blockwise_shift_scale with an offset). GGUF's Q4_K (blocks.h: w =
                             * (d sc) x - dmin m per 32): scale d sc, offset dmin m / (d sc) (blocks.c) */
    ANE_ENCODING_Q5_K,      /* data: uint8 [rows, k / 32 x 20], element j's unsigned 5-bit code x packed per
                             * block of 32 (ane_q5_k_code): the low four bits as Q4_K's (element i of the
                             * block in byte i / 2, low nibble first), then the fifth bits (bit i % 8 of
                             * byte 16 + i / 8); table as Q4_K's; w = scale x (x - offset). A program
                             * carries the codes a byte each (constexpr_blockwise_shift_scale, uint8 data,
                             * an offset): GGUF's Q5_K as Q4_K's */
} ane_weight_encoding;

#define ANE_LUT4_ENTRIES 16
/* Weights per block of the block encodings (Q8_0, Q4_0): rows are whole blocks. */
#define ANE_ENCODING_BLOCK 32

/* Q5_K: bytes per block of ANE_ENCODING_BLOCK weights (16 of low four bits, 4 of fifth bits). */
#define ANE_Q5_K_BYTES 20

/* Element j's 5-bit code in a row of Q5_K's packed blocks. */
static inline int ane_q5_k_code(const uint8_t *row, int64_t j) {
    const uint8_t *block = row + (j / 32) * ANE_Q5_K_BYTES;
    int i = (int)(j % 32);
    return (int)((block[i / 2] >> (4 * (i & 1))) & 15u) | (int)((block[16 + i / 8] >> (i % 8)) & 1u) << 4;
}

/* Bit `bit` of eight bytes as one byte, byte i's at bit i: the multiply gathers the eight bits
 * (each alone in its byte) into its top byte. Little-endian bytes, as x86 and Apple silicon are. */
static inline uint8_t ane_gather_bits(const uint8_t *eight, int bit) {
    uint64_t bytes;
    memcpy(&bytes, eight, sizeof bytes);
    return (uint8_t)((((bytes >> bit) & 0x0101010101010101u) * 0x0102040810204080u) >> 56);
}

/* A row of k (a multiple of 32) codes 0..31 packed as Q5_K's blocks (ane_q5_k_code reads them
 * back), and the inverse. */
void ane_q5_k_pack(uint8_t *row /* [k / 32 x 20] */, const uint8_t *codes /* [k] */, int64_t k);
void ane_q5_k_unpack(uint8_t *codes /* [k] */, const uint8_t *row /* [k / 32 x 20] */, int64_t k);

/* Q6_K: weights per block, bytes per block, weights per scale. */
#define ANE_Q6_K_WEIGHTS 256
#define ANE_Q6_K_BYTES 210
#define ANE_Q6_K_GROUP 16

/* Element j's code x - 32 in a row of Q6_K blocks: of each half of 128, the low nibbles of ql[0..31],
 * of ql[32..63], their high nibbles, each with two bits of qh[l] (bits 0-1, 2-3, 4-5, 6-7) above. */
static inline int ane_q6_code(const uint8_t *blocks, int64_t j) {
    const uint8_t *block = blocks + (j / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES;
    int e = (int)(j % ANE_Q6_K_WEIGHTS), half = e / 128, part = e % 128 / 32, l = e % 32;
    unsigned byte = block[64 * half + 32 * (part & 1) + l], high = block[128 + 32 * half + l];
    unsigned nibble = part < 2 ? byte & 15u : byte >> 4;
    return (int)(nibble | ((high >> (2 * part)) & 3u) << 4) - 32;
}

/* A row of k (a multiple of 256) codes x - 32 (-32..31) as Q6_K blocks whose ql and qh hold them
 * (ane_q6_code reads them back) and whose scales and d are zeros: a program's Q6_K, whose scales
 * are its table's alone. */
void ane_q6_k_pack_codes(uint8_t *blocks /* [k / 256 x 210] */, const int8_t *codes /* [k] */, int64_t k);
/* A row's codes x - 32 (ane_q6_code's, in order) from its Q6_K blocks. */
void ane_q6_k_unpack_codes(int8_t *codes /* [k] */, const uint8_t *blocks /* [k / 256 x 210] */, int64_t k);

/* Whether an encoding keeps a scale and an offset per block of ANE_ENCODING_BLOCK weights (Q4_K, Q5_K). */
static inline int ane_encoding_is_shifted(ane_weight_encoding encoding) {
    return encoding == ANE_ENCODING_Q4_K || encoding == ANE_ENCODING_Q5_K;
}

/* Whether an encoding keeps a scale per block of ANE_ENCODING_BLOCK weights (Q8_0, Q4_0, and
 * Q4_K, Q5_K with an offset too: the ones a program carries, as constexpr_blockwise_shift_scale). */
static inline int ane_encoding_is_blockwise(ane_weight_encoding encoding) {
    return encoding == ANE_ENCODING_Q8_0 || encoding == ANE_ENCODING_Q4_0 || ane_encoding_is_shifted(encoding);
}

/* Whether an encoding's data are 4-bit codes, two a byte (int4 palettes' indices, Q4_0, Q4_K). */
static inline int ane_encoding_is_4bit(ane_weight_encoding encoding) {
    return encoding == ANE_ENCODING_LUT4 || encoding == ANE_ENCODING_Q4_0 || encoding == ANE_ENCODING_Q4_K;
}

/* Whether an encoding is one of GGUF's blocks kept as stored (Q8_0, Q4_0, Q6_K, Q4_K, Q5_K): float or int8
 * activations, the block kernels of the table. */
static inline int ane_encoding_is_gguf_block(ane_weight_encoding encoding) {
    return ane_encoding_is_blockwise(encoding) || encoding == ANE_ENCODING_Q6_K;
}

/* How a product with a quantized weight treats its activations: as they are (fp32, so the
 * product equals the dequantized weight's), or quantized in blocks of 32 for integer dot
 * products (tensor/gemv.h; sim's cpu profile only): to int8 (fastest, a small measured
 * drift) or to int16 (each activation within 1/65534 of its block's largest, finer than the
 * fp16 the device computes in; 4-bit rows read with about a third of the shuffles of float's). */
typedef enum ane_activations {
    ANE_ACTIVATIONS_FLOAT = 0,
    ANE_ACTIVATIONS_INT8,
    ANE_ACTIVATIONS_INT16,
} ane_activations;

/* "float" / "int8" / "int16"; from a name returns 0 for any other. */
const char *ane_activations_name(ane_activations activations);
int ane_activations_from_name(const char *name, ane_activations *out);

/* "dense", "int8", "int4" (the user-facing name of LUT4), "q8_0", "q4_0", "q6_k", "q4_k", "q5_k"; NULL for an
 * unknown value. */
const char *ane_encoding_name(ane_weight_encoding encoding);
/* Reads "int8" / "int4" / "q8_0" / "q4_0" / "q6_k" / "q4_k" / "q5_k"; returns 0 for any other name. */
int ane_encoding_from_name(const char *name, ane_weight_encoding *out);

/* Bytes of the data of a [rows, k] matrix in `encoding` (k must be even for LUT4, a multiple
 * of ANE_ENCODING_BLOCK for the block encodings). */
int64_t ane_encoded_data_bytes(ane_weight_encoding encoding, int64_t rows, int64_t k);
/* Entries of the table per row of k weights: 1 (int8 scale), 16 (palette), k / 32 (block scales)
 * or k / 16 (Q6_K's scales; Q4_K's and Q5_K's scales and offsets). */
int64_t ane_encoded_table_width(ane_weight_encoding encoding, int64_t k);
/* Element j's signed code in a row's packed 4-bit codes (Q4_0): its nibble as two's complement. */
static inline int ane_q4_code(const uint8_t *packed, int64_t j) {
    unsigned nibble = ((unsigned)packed[j / 2] >> (4 * (j & 1))) & 15u;
    return (int)(nibble ^ 8u) - 8;
}

/* Element j's unsigned code in a row's packed 4-bit codes (Q4_K): its nibble. */
static inline int ane_q4_unsigned_code(const uint8_t *packed, int64_t j) {
    return (int)(((unsigned)packed[j / 2] >> (4 * (j & 1))) & 15u);
}

/* Element j of a Q4_K or Q5_K row (code x, table entries `pairs` [k / 32 x 2]): scale x (x - offset),
 * the subtraction and the product each rounded to fp32, as every kernel takes it. */
static inline float ane_shifted_weight(int code, const float *pairs, int64_t j) {
    const float *pair = pairs + 2 * (j / ANE_ENCODING_BLOCK);
    return pair[0] * ((float)code - pair[1]);
}

static inline float ane_q4_k_weight(const uint8_t *packed, const float *pairs, int64_t j) {
    return ane_shifted_weight(ane_q4_unsigned_code(packed, j), pairs, j);
}

/* Quantizes `weight` (any float dtype, viewed as [shape[0], rest]) into fresh tensors.
 * int8: scale = max |w| / 127 per row, q = round(w / scale) clamped to [-127, 127].
 * q8_0 / q4_0: per block of 32, ggml's reference quantizers (ggml-quants.c): Q8_0 d = max |w| /
 * 127, q = round(w / d); Q4_0 d = m / -8 for m the block's value of largest magnitude, code =
 * min(15, trunc(w / d + 8.5)) - 8; d rounded to fp16 as GGUF stores it (whatever table_dtype).
 * int4: 16 palette values per row: the exact least-squares clusters of a 64-bin histogram of
 * the row refined by Lloyd's algorithm over a 4096-bin one (within ~1% of the row's optimum),
 * each element the index of its nearest value.
 * table_dtype fp16 rounds the scales / palettes to fp16 first (what an fp16 program
 * stores), so data and table agree exactly with what the program computes. Fails naming
 * `name` on rank < 1, an odd row length for int4 (not whole blocks for q8_0 / q4_0), or a NaN / inf weight. */
ane_status ane_quantize_rows(const ane_tensor *weight, ane_weight_encoding encoding, ane_dtype table_dtype,
                             const char *name, ane_tensor *data, ane_tensor *table, ane_error *err);

/* Elements [from, from + count) of row `row` of an encoded [rows, k] matrix as fp32 values
 * (from even for LUT4). */
void ane_dequantize_span(ane_weight_encoding encoding, const void *data, const float *table, int64_t k, int64_t row,
                         int64_t from, int64_t count, float *out /* [count] */);
/* Rows [first, first + count) of an encoded [rows, k] matrix as fp32 values. */
void ane_dequantize_rows(ane_weight_encoding encoding, const void *data, const float *table, int64_t k, int64_t first,
                         int64_t count, float *out /* [count, k] */);

#endif
