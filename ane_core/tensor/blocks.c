/* Dequantizing llama.cpp's block formats (blocks.h). */
#include "blocks.h"

#include <math.h>
#include <string.h>

#include "../base/fp16.h"

int ane_block_type_from_name(const char *name, ane_block_type *out) {
    if (strcmp(name, "q8_0") == 0) *out = ANE_BLOCKS_Q8_0;
    else if (strcmp(name, "q4_0") == 0) *out = ANE_BLOCKS_Q4_0;
    else return 0;
    return 1;
}

int64_t ane_block_bytes(ane_block_type type) { return type == ANE_BLOCKS_Q8_0 ? 2 + 32 : 2 + 16; }

static void dequantize_q8_0(const uint8_t *block, float d, float *w /* [32] */) {
    const int8_t *q = (const int8_t *)(block + 2);
    for (int i = 0; i < ANE_BLOCK_WEIGHTS; i++) w[i] = d * (float)q[i];
}

static void dequantize_q4_0(const uint8_t *block, float d, float *w /* [32] */) {
    const uint8_t *qs = block + 2;
    for (int j = 0; j < ANE_BLOCK_WEIGHTS / 2; j++) {
        w[j] = d * (float)((qs[j] & 15) - 8);
        w[j + ANE_BLOCK_WEIGHTS / 2] = d * (float)((qs[j] >> 4) - 8);
    }
}

ane_status ane_blocks_dequantize(ane_block_type type, const ane_tensor *blocks, int ndim, const int64_t *shape,
                                 const char *name, ane_tensor *out, ane_error *err) {
    if (ndim < 1 || ndim > ANE_MAX_DIMS) return ane_fail(err, ANE_ERR_ARGUMENT, "%s: %d dimensions", name, ndim);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) return ane_fail(err, ANE_ERR_FORMAT, "%s: dimension %d is %lld", name, i, (long long)shape[i]);
        if (count > INT64_MAX / shape[i]) return ane_fail(err, ANE_ERR_FORMAT, "%s: too many elements", name);
        count *= shape[i];
    }
    if (shape[ndim - 1] % ANE_BLOCK_WEIGHTS != 0)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: rows of %lld weights do not split into blocks of %d", name,
                        (long long)shape[ndim - 1], ANE_BLOCK_WEIGHTS);
    int64_t nblocks = count / ANE_BLOCK_WEIGHTS, size = ane_block_bytes(type);
    if (blocks->dtype != ANE_UINT8 || !ane_tensor_is_contiguous(blocks) || ane_tensor_numel(blocks) != nblocks * size)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: %lld bytes of blocks, expected %lld (%lld blocks of %lld)", name,
                        (long long)ane_tensor_numel(blocks), (long long)(nblocks * size), (long long)nblocks,
                        (long long)size);
    ane_status status = ane_tensor_empty(out, ndim, shape, ANE_FP32, err);
    if (status) return status;
    const uint8_t *data = (const uint8_t *)ane_tensor_data(blocks);
    float *w = (float *)ane_tensor_data(out);
    for (int64_t b = 0; b < nblocks; b++) {
        const uint8_t *block = data + b * size;
        uint16_t bits;
        memcpy(&bits, block, sizeof bits);
        float d = ane_fp16_to_fp32(bits);
        if (!isfinite(d)) {
            ane_tensor_release(out);
            return ane_fail(err, ANE_ERR_FORMAT, "%s: block %lld (byte %lld of its data) has scale %g", name,
                            (long long)b, (long long)(b * size), (double)d);
        }
        if (type == ANE_BLOCKS_Q8_0) dequantize_q8_0(block, d, w + b * ANE_BLOCK_WEIGHTS);
        else dequantize_q4_0(block, d, w + b * ANE_BLOCK_WEIGHTS);
    }
    return ANE_OK;
}
