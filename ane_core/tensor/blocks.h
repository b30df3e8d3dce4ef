/* llama.cpp's (GGUF's) block-quantized weights: each row of a [rows, k] matrix is k / 32
 * blocks of 32 weights with one fp16 scale d each (ggml-common.h's layouts, docs/reference/
 * model-formats.md):
 *   Q8_0 (34 bytes): d, then int8 q[32];                w[i] = d * q[i]
 *   Q4_0 (18 bytes): d, then uint8 qs[16];              w[j] = d * ((qs[j] & 15) - 8),
 *                                                       w[j + 16] = d * ((qs[j] >> 4) - 8)
 * Dequantized here to fp32 (the exact products, as float), for loading. */
#ifndef ANE_TENSOR_BLOCKS_H
#define ANE_TENSOR_BLOCKS_H

#include <stdint.h>

#include "../base/status.h"
#include "tensor.h"

typedef enum ane_block_type { ANE_BLOCKS_Q8_0, ANE_BLOCKS_Q4_0 } ane_block_type;

#define ANE_BLOCK_WEIGHTS 32

/* "q8_0" / "q4_0" -> the type; returns 0 for any other name. */
int ane_block_type_from_name(const char *name, ane_block_type *out);
/* Bytes of one block of 32 weights. */
int64_t ane_block_bytes(ane_block_type type);

/* out: a new fp32 tensor of `shape` (ndim dims, the last a multiple of 32) holding the
 * weights of `blocks` (uint8, exactly the blocks of that many weights, contiguous). Fails
 * naming `name` when the sizes disagree or a scale is not finite. */
ane_status ane_blocks_dequantize(ane_block_type type, const ane_tensor *blocks, int ndim, const int64_t *shape,
                                 const char *name, ane_tensor *out, ane_error *err);

#endif
