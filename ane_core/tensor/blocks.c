/* Dequantizing llama.cpp's block formats (blocks.h): one function per type, each writing a
 * block's weights in the order the format stores them. Compiled without fused multiply-adds
 * (CMakeLists.txt), so every weight is the fp32 arithmetic blocks.h writes. */
#include "blocks.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/parallel.h"
#include "quantize.h"

static float half_at(const uint8_t *bytes) {
    uint16_t bits;
    memcpy(&bits, bytes, sizeof bits);
    return ane_fp16_to_fp32(bits);
}

static uint32_t u32_at(const uint8_t *bytes) {
    return (uint32_t)bytes[0] | (uint32_t)bytes[1] << 8 | (uint32_t)bytes[2] << 16 | (uint32_t)bytes[3] << 24;
}

/* Each returns 0, or 1 when a scale is not finite (*bad set to it). */
typedef int dequantize_block(const uint8_t *block, float *w, float *bad);

static int scale_is_bad(float d, float *bad) {
    if (isfinite(d)) return 0;
    *bad = d;
    return 1;
}

static int dequantize_q8_0(const uint8_t *block, float *w /* [32] */, float *bad) {
    float d = half_at(block);
    const int8_t *q = (const int8_t *)(block + 2);
    for (int i = 0; i < 32; i++) w[i] = d * (float)q[i];
    return scale_is_bad(d, bad);
}

static int dequantize_q4_0(const uint8_t *block, float *w /* [32] */, float *bad) {
    float d = half_at(block);
    const uint8_t *qs = block + 2;
    for (int j = 0; j < 16; j++) {
        w[j] = d * (float)((qs[j] & 15) - 8);
        w[j + 16] = d * (float)((qs[j] >> 4) - 8);
    }
    return scale_is_bad(d, bad);
}

static int dequantize_q4_1(const uint8_t *block, float *w /* [32] */, float *bad) {
    float d = half_at(block), m = half_at(block + 2);
    const uint8_t *qs = block + 4;
    for (int j = 0; j < 16; j++) {
        w[j] = d * (float)(qs[j] & 15) + m;
        w[j + 16] = d * (float)(qs[j] >> 4) + m;
    }
    return scale_is_bad(d, bad) || scale_is_bad(m, bad);
}

/* The five-bit codes of a Q5 block: low nibbles from qs, fifth bits from qh. */
static void five_bit_codes(const uint8_t *qh_bytes, const uint8_t *qs, int codes[32]) {
    uint32_t qh = u32_at(qh_bytes);
    for (int j = 0; j < 16; j++) {
        codes[j] = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        codes[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    }
}

static int dequantize_q5_0(const uint8_t *block, float *w /* [32] */, float *bad) {
    float d = half_at(block);
    int codes[32];
    five_bit_codes(block + 2, block + 6, codes);
    for (int i = 0; i < 32; i++) w[i] = d * (float)(codes[i] - 16);
    return scale_is_bad(d, bad);
}

static int dequantize_q5_1(const uint8_t *block, float *w /* [32] */, float *bad) {
    float d = half_at(block), m = half_at(block + 2);
    int codes[32];
    five_bit_codes(block + 4, block + 8, codes);
    for (int i = 0; i < 32; i++) w[i] = d * (float)codes[i] + m;
    return scale_is_bad(d, bad) || scale_is_bad(m, bad);
}

/* The 6-bit scale and min of sub-block s (0..7) of a Q4_K / Q5_K block's 12 scale bytes:
 * sub-blocks 0-3 in the low six bits of bytes s and s + 4; 4-7 in the nibbles of byte s + 4,
 * their top two bits in the top bits of bytes s - 4 and s. */
static void k_scale_min(const uint8_t *scales, int s, int *scale, int *min) {
    if (s < 4) {
        *scale = scales[s] & 63;
        *min = scales[s + 4] & 63;
    } else {
        *scale = (scales[s + 4] & 15) | (scales[s - 4] >> 6) << 4;
        *min = (scales[s + 4] >> 4) | (scales[s] >> 6) << 4;
    }
}

/* Q4_K and Q5_K: eight sub-blocks of 32 with their own scale and min; qh NULL for Q4_K. */
static int dequantize_k4_k5(const uint8_t *block, const uint8_t *qh, const uint8_t *qs, float *w /* [256] */,
                            float *bad) {
    float d = half_at(block), dmin = half_at(block + 2);
    const uint8_t *scales = block + 4;
    for (int s = 0; s < 8; s++) {
        int scale, min;
        k_scale_min(scales, s, &scale, &min);
        float step = d * (float)scale, offset = dmin * (float)min;
        const uint8_t *bytes = qs + 32 * (s / 2);
        int shift = (s % 2) * 4;
        for (int l = 0; l < 32; l++) {
            int code = (bytes[l] >> shift) & 15;
            if (qh) code |= ((qh[l] >> s) & 1) << 4;
            w[32 * s + l] = step * (float)code - offset;
        }
    }
    return scale_is_bad(d, bad) || scale_is_bad(dmin, bad);
}

static int dequantize_q4_k(const uint8_t *block, float *w, float *bad) {
    return dequantize_k4_k5(block, NULL, block + 16, w, bad);
}

static int dequantize_q5_k(const uint8_t *block, float *w, float *bad) {
    return dequantize_k4_k5(block, block + 16, block + 48, w, bad);
}

static int dequantize_q6_k(const uint8_t *block, float *w /* [256] */, float *bad) {
    const uint8_t *ql = block, *qh = block + 128;
    const int8_t *scales = (const int8_t *)(block + 192);
    float d = half_at(block + 208);
    for (int half = 0; half < 2; half++) {
        for (int l = 0; l < 32; l++) {
            int bits = qh[32 * half + l];
            int codes[4] = {
                (ql[64 * half + l] & 15) | (bits & 3) << 4,
                (ql[64 * half + l + 32] & 15) | ((bits >> 2) & 3) << 4,
                (ql[64 * half + l] >> 4) | ((bits >> 4) & 3) << 4,
                (ql[64 * half + l + 32] >> 4) | ((bits >> 6) & 3) << 4,
            };
            for (int part = 0; part < 4; part++) {
                int index = 128 * half + 32 * part + l; /* its scale covers 16 weights */
                w[index] = d * (float)scales[index / 16] * (float)(codes[part] - 32);
            }
        }
    }
    return scale_is_bad(d, bad);
}

static const struct block_format {
    const char *name;
    int weights, bytes;
    dequantize_block *dequantize;
} FORMATS[] = {
    [ANE_BLOCKS_Q8_0] = {"q8_0", 32, 34, dequantize_q8_0},   [ANE_BLOCKS_Q4_0] = {"q4_0", 32, 18, dequantize_q4_0},
    [ANE_BLOCKS_Q4_1] = {"q4_1", 32, 20, dequantize_q4_1},   [ANE_BLOCKS_Q5_0] = {"q5_0", 32, 22, dequantize_q5_0},
    [ANE_BLOCKS_Q5_1] = {"q5_1", 32, 24, dequantize_q5_1},   [ANE_BLOCKS_Q4_K] = {"q4_k", 256, 144, dequantize_q4_k},
    [ANE_BLOCKS_Q5_K] = {"q5_k", 256, 176, dequantize_q5_k}, [ANE_BLOCKS_Q6_K] = {"q6_k", 256, 210, dequantize_q6_k},
};

int ane_block_type_from_name(const char *name, ane_block_type *out) {
    for (size_t i = 0; i < sizeof FORMATS / sizeof FORMATS[0]; i++) {
        if (strcmp(name, FORMATS[i].name) == 0) {
            *out = (ane_block_type)i;
            return 1;
        }
    }
    return 0;
}

int ane_block_weights(ane_block_type type) { return FORMATS[type].weights; }
int64_t ane_block_bytes(ane_block_type type) { return FORMATS[type].bytes; }

/* The blocks' count for `shape`, checked against the tensor of their bytes. */
static ane_status blocks_fit(const struct block_format *format, const ane_tensor *blocks, int ndim, const int64_t *shape,
                             const char *name, int64_t *nblocks, ane_error *err) {
    if (ndim < 1 || ndim > ANE_MAX_DIMS) return ane_fail(err, ANE_ERR_ARGUMENT, "%s: %d dimensions", name, ndim);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0) return ane_fail(err, ANE_ERR_FORMAT, "%s: dimension %d is %lld", name, i, (long long)shape[i]);
        if (count > INT64_MAX / shape[i]) return ane_fail(err, ANE_ERR_FORMAT, "%s: too many elements", name);
        count *= shape[i];
    }
    if (shape[ndim - 1] % format->weights != 0)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: rows of %lld weights do not split into blocks of %d", name,
                        (long long)shape[ndim - 1], format->weights);
    int64_t size = format->bytes;
    *nblocks = count / format->weights;
    if (blocks->dtype != ANE_UINT8 || !ane_tensor_is_contiguous(blocks) || ane_tensor_numel(blocks) != *nblocks * size)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: %lld bytes of blocks, expected %lld (%lld blocks of %lld)", name,
                        (long long)ane_tensor_numel(blocks), (long long)(*nblocks * size), (long long)*nblocks,
                        (long long)size);
    return ANE_OK;
}

/* *first_bad lowered to b unless a thread already put a smaller index there. */
static void lower_first_bad(_Atomic int64_t *first_bad, int64_t b) {
    int64_t seen = atomic_load(first_bad);
    while (b < seen && !atomic_compare_exchange_weak(first_bad, &seen, b)) {
    }
}

/* Blocks dequantized over the helper threads (a file's matrices are most of a load's time):
 * each range's weights, and the least index of a block whose scale is not finite (first_bad;
 * nblocks for none), where its range stops. */
typedef struct dequantize_job {
    const struct block_format *format;
    const uint8_t *bytes; /* [nblocks * size] as stored */
    void *weights;        /* [nblocks * weights] fp32 or fp16 */
    ane_dtype dtype;
    _Atomic int64_t first_bad;
} dequantize_job;

static void dequantize_range(void *context, int64_t first, int64_t last) {
    dequantize_job *job = context;
    int n = job->format->weights;
    float block[256]; /* [n]: one block's fp32 weights on the way to fp16 */
    for (int64_t b = first; b < last; b++) {
        float bad, *w = job->dtype == ANE_FP32 ? (float *)job->weights + b * n : block;
        if (job->format->dequantize(job->bytes + b * job->format->bytes, w, &bad)) {
            lower_first_bad(&job->first_bad, b);
            return;
        }
        if (job->dtype == ANE_FP16) ane_dtype_convert_row((uint16_t *)job->weights + b * n, ANE_FP16, block, ANE_FP32, (size_t)n);
    }
}

ane_status ane_blocks_dequantize(ane_block_type type, const ane_tensor *blocks, int ndim, const int64_t *shape,
                                 ane_dtype dtype, const char *name, ane_tensor *out, ane_error *err) {
    const struct block_format *format = &FORMATS[type];
    int64_t nblocks = 0;
    if (dtype != ANE_FP32 && dtype != ANE_FP16)
        return ane_fail(err, ANE_ERR_ARGUMENT, "%s: blocks dequantize to fp32 or fp16, not %s", name, ane_dtype_name(dtype));
    ane_status status = blocks_fit(format, blocks, ndim, shape, name, &nblocks, err);
    if (status) return status;
    status = ane_tensor_lasting(out, ndim, shape, dtype, err);
    if (status) return status;
    dequantize_job job = {format, (const uint8_t *)ane_tensor_data(blocks), ane_tensor_data(out), dtype, nblocks};
    ane_parallel_for(nblocks, 4096 * 32 / format->weights, dequantize_range, &job);
    int64_t b = atomic_load(&job.first_bad);
    if (b < nblocks) {
        float weights[256], bad = 0.0f; /* (that block again, for its scale) */
        format->dequantize(job.bytes + b * format->bytes, weights, &bad);
        ane_tensor_release(out);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: block %lld (byte %lld of its data) has scale %g", name, (long long)b,
                        (long long)(b * format->bytes), (double)bad);
    }
    return ANE_OK;
}

/* Q6_K kept: the blocks as stored, and each 16 weights' d x scale (exact in fp32: 11 x 8 bits). */
static ane_status split_q6_k(const ane_tensor *blocks, int64_t rows, int64_t k, int64_t nblocks, const char *name,
                             ane_tensor *data, ane_tensor *table, ane_error *err) {
    int64_t data_shape[2] = {rows, k / 256 * 210}, table_shape[2] = {rows, k / 16};
    ane_status status = ane_tensor_lasting(data, 2, data_shape, ANE_UINT8, err);
    if (!status) status = ane_tensor_lasting(table, 2, table_shape, ANE_FP32, err);
    if (status) {
        ane_tensor_release(data), ane_tensor_release(table);
        return status;
    }
    const uint8_t *bytes = (const uint8_t *)ane_tensor_data(blocks);
    memcpy(ane_tensor_data(data), bytes, (size_t)(nblocks * 210));
    float *scales = (float *)ane_tensor_data(table);
    for (int64_t b = 0; b < nblocks; b++) {
        const uint8_t *block = bytes + b * 210;
        float d = half_at(block + 208);
        if (!isfinite(d)) {
            ane_tensor_release(data), ane_tensor_release(table);
            return ane_fail(err, ANE_ERR_FORMAT, "%s: block %lld (byte %lld of its data) has scale %g", name, (long long)b,
                            (long long)(b * 210), (double)d);
        }
        for (int g = 0; g < 16; g++) scales[b * 16 + g] = d * (float)(int8_t)block[192 + g];
    }
    return ANE_OK;
}

/* Eight values rounded to fp16 and back (the vector converters: a block's sub-blocks at once). */
static void round_through_fp16(float values[8]) {
    uint16_t halves[8];
    ane_fp32_to_fp16_n(halves, values, 8);
    ane_fp16_to_fp32_n(values, halves, 8);
}

/* Q4_K and Q5_K kept (quantize.h's ANE_ENCODING_Q4_K / _Q5_K): each sub-block's codes (Q4_K's in
 * MIL's uint4 order, Q5_K's packed: ane_q5_k_pack), its scale d x sc (exact in fp32: 11 x 6 bits) and
 * offset dmin x m / (d x sc), both rounded to table_dtype (an fp16 program's values), the
 * offset from the rounded scale. A sub-block whose scale is 0 but whose min is not has no such
 * form: refused, naming it (the caller dequantizes). One block into its code bytes (128 or 160)
 * and 16 table entries; returns 0, or 1 for a scale that is not finite (*bad it), or 2 for
 * sub-block *sub that the form cannot hold (*min, *scale). */
static int split_shifted_block(const uint8_t *block, int five_bits, ane_dtype table_dtype, uint8_t *codes, float *pairs,
                               float *bad, int *sub_out, float *min_out, float *scale_out) {
    float d = half_at(block), dmin = half_at(block + 2);
    if (scale_is_bad(d, bad) || scale_is_bad(dmin, bad)) return 1;
    const uint8_t *qh = five_bits ? block + 16 : NULL, *qs = block + (five_bits ? 48 : 16);
    float scales[8], mins[8], offsets[8];
    for (int sub = 0; sub < 8; sub++) {
        int sc, m;
        k_scale_min(block + 4, sub, &sc, &m);
        scales[sub] = d * (float)sc, mins[sub] = dmin * (float)m;
    }
    if (table_dtype == ANE_FP16) round_through_fp16(scales);
    for (int sub = 0; sub < 8; sub++) offsets[sub] = scales[sub] != 0.0f ? mins[sub] / scales[sub] : 0.0f;
    if (table_dtype == ANE_FP16) round_through_fp16(offsets);
    for (int sub = 0; sub < 8; sub++) {
        float scale = scales[sub], min = mins[sub], offset = offsets[sub];
        if ((scale == 0.0f && min != 0.0f) || !isfinite(offset)) {
            *sub_out = sub, *min_out = min, *scale_out = scale;
            return 2;
        }
        pairs[2 * sub] = scale, pairs[2 * sub + 1] = offset;
        /* element 32 sub + l: a nibble of bytes[l] (+ bit sub of qh[l]); kept: elements 2i and 2i + 1's
           four low bits in byte i, Q5_K's fifth bits after (ane_q5_k_pack's places) */
        const uint8_t *bytes = qs + 32 * (sub / 2);
        int shift = 4 * (sub % 2);
        uint8_t *kept = codes + (five_bits ? ANE_Q5_K_BYTES : 16) * sub;
        for (int i = 0; i < 16; i++)
            kept[i] = (uint8_t)(((bytes[2 * i] >> shift) & 15u) | ((bytes[2 * i + 1] >> shift) & 15u) << 4);
        if (five_bits)
            for (int byte = 0; byte < 4; byte++) kept[16 + byte] = ane_gather_bits(qh + 8 * byte, sub);
    }
    return 0;
}

/* Q4_K / Q5_K blocks split over the helper threads: the least index of a block that fails
 * (first_bad; nblocks for none), where its range stops. */
typedef struct shifted_split_job {
    const uint8_t *bytes; /* [nblocks * size] as stored */
    uint8_t *codes;       /* [nblocks * code_bytes] */
    float *pairs;         /* [nblocks * 16] */
    int64_t size, code_bytes;
    int five_bits;
    ane_dtype table_dtype;
    _Atomic int64_t first_bad;
} shifted_split_job;

static void split_shifted_range(void *context, int64_t first, int64_t last) {
    shifted_split_job *job = context;
    for (int64_t b = first; b < last; b++) {
        float bad, min, scale;
        int sub;
        if (split_shifted_block(job->bytes + b * job->size, job->five_bits, job->table_dtype, job->codes + b * job->code_bytes,
                                job->pairs + b * 16, &bad, &sub, &min, &scale)) {
            lower_first_bad(&job->first_bad, b);
            return;
        }
    }
}

static ane_status split_shifted(const ane_tensor *blocks, int five_bits, int64_t rows, int64_t k, int64_t nblocks,
                                ane_dtype table_dtype, const char *name, ane_tensor *data, ane_tensor *table, ane_error *err) {
    int64_t data_shape[2] = {rows, five_bits ? k / 32 * ANE_Q5_K_BYTES : k / 2}, table_shape[2] = {rows, k / 16};
    int64_t size = five_bits ? 176 : 144;
    ane_status status = ane_tensor_lasting(data, 2, data_shape, ANE_UINT8, err);
    if (!status) status = ane_tensor_lasting(table, 2, table_shape, ANE_FP32, err);
    if (status) {
        ane_tensor_release(data), ane_tensor_release(table);
        return status;
    }
    shifted_split_job job = {(const uint8_t *)ane_tensor_data(blocks), (uint8_t *)ane_tensor_data(data),
                             (float *)ane_tensor_data(table), size, five_bits ? 8 * ANE_Q5_K_BYTES : 128, five_bits, table_dtype, nblocks};
    ane_parallel_for(nblocks, 1024, split_shifted_range, &job);
    int64_t b = atomic_load(&job.first_bad);
    if (b == nblocks) return ANE_OK;
    uint8_t codes[256];
    float pairs[16], bad = 0.0f, min = 0.0f, scale = 0.0f;
    int sub = 0, why = split_shifted_block(job.bytes + b * size, five_bits, table_dtype, codes, pairs, &bad, &sub, &min, &scale);
    ane_tensor_release(data), ane_tensor_release(table);
    if (why == 1)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: block %lld (byte %lld of its data) has scale %g", name, (long long)b,
                        (long long)(b * size), (double)bad);
    return ane_fail(err, ANE_ERR_FORMAT, "%s: sub-block %d of block %lld (byte %lld of its data) has min %g over scale %g, "
                    "which a%s scale and offset cannot hold", name, sub, (long long)b, (long long)(b * size), (double)min,
                    (double)scale, table_dtype == ANE_FP16 ? "n fp16" : "");
}

/* Q8_0 / Q4_0 blocks split over the helper threads (a file's matrices are most of a load's
 * time): each range's codes and scales, and the least index of a block whose scale is not
 * finite (first_bad; nblocks for none), where its range stops. */
typedef struct split_job {
    const uint8_t *bytes; /* [nblocks * size] as stored */
    uint8_t *codes;       /* Q8_0: [nblocks * 32] int8; Q4_0: [nblocks * 16], two codes a byte */
    float *scales;        /* [nblocks] */
    int64_t size;
    int q8;
    _Atomic int64_t first_bad;
} split_job;

static void split_range(void *context, int64_t first, int64_t last) {
    split_job *job = context;
    enum { CHUNK = 64 }; /* blocks whose scales are converted together (the vector converter) */
    for (int64_t from = first; from < last; from += CHUNK) {
        int64_t count = last - from < CHUNK ? last - from : CHUNK;
        uint16_t halves[CHUNK];
        for (int64_t i = 0; i < count; i++) memcpy(&halves[i], job->bytes + (from + i) * job->size, sizeof halves[i]);
        ane_fp16_to_fp32_n(job->scales + from, halves, (size_t)count);
        for (int64_t b = from; b < from + count; b++) {
            const uint8_t *qs = job->bytes + b * job->size + 2;
            if (!isfinite(job->scales[b])) {
                lower_first_bad(&job->first_bad, b);
                return;
            }
            if (job->q8) {
                memcpy(job->codes + b * 32, qs, 32);
                continue;
            }
            /* stored: weight j's x in qs[j]'s low nibble, j + 16's in its high one; kept: x - 8 in order,
               weights 2i and 2i + 1 in byte i (x - 8 as a two's complement nibble is x ^ 8) */
            uint8_t *kept = job->codes + b * 16;
            for (int i = 0; i < 8; i++) kept[i] = (uint8_t)(((qs[2 * i] & 15u) | (qs[2 * i + 1] & 15u) << 4) ^ 0x88u);
            for (int i = 0; i < 8; i++) kept[8 + i] = (uint8_t)(((qs[2 * i] >> 4) | (qs[2 * i + 1] & 0xF0u)) ^ 0x88u);
        }
    }
}

ane_status ane_blocks_split(ane_block_type type, const ane_tensor *blocks, int64_t rows, int64_t k, ane_dtype table_dtype,
                            const char *name, ane_tensor *data, ane_tensor *table, ane_error *err) {
    memset(data, 0, sizeof *data);
    memset(table, 0, sizeof *table);
    if (type != ANE_BLOCKS_Q8_0 && type != ANE_BLOCKS_Q4_0 && type != ANE_BLOCKS_Q6_K && type != ANE_BLOCKS_Q4_K &&
        type != ANE_BLOCKS_Q5_K)
        return ane_fail(err, ANE_ERR_ARGUMENT, "%s: %s blocks are dequantized, not kept (q8_0, q4_0, q6_k, q4_k and q5_k are)",
                        name, FORMATS[type].name);
    const struct block_format *format = &FORMATS[type];
    int64_t shape[2] = {rows, k}, nblocks = 0, size = format->bytes;
    ane_status status = blocks_fit(format, blocks, 2, shape, name, &nblocks, err);
    if (status) return status;
    if (type == ANE_BLOCKS_Q6_K) return split_q6_k(blocks, rows, k, nblocks, name, data, table, err);
    if (type == ANE_BLOCKS_Q4_K || type == ANE_BLOCKS_Q5_K)
        return split_shifted(blocks, type == ANE_BLOCKS_Q5_K, rows, k, nblocks, table_dtype, name, data, table, err);
    int q8 = type == ANE_BLOCKS_Q8_0;
    int64_t data_shape[2] = {rows, q8 ? k : k / 2}, table_shape[2] = {rows, k / 32};
    status = ane_tensor_lasting(data, 2, data_shape, q8 ? ANE_INT8 : ANE_UINT8, err);
    if (!status) status = ane_tensor_lasting(table, 2, table_shape, ANE_FP32, err);
    if (!status) {
        split_job job = {(const uint8_t *)ane_tensor_data(blocks), (uint8_t *)ane_tensor_data(data),
                         (float *)ane_tensor_data(table), size, q8, nblocks};
        ane_parallel_for(nblocks, 4096, split_range, &job);
        int64_t b = atomic_load(&job.first_bad);
        if (b < nblocks)
            status = ane_fail(err, ANE_ERR_FORMAT, "%s: block %lld (byte %lld of its data) has scale %g", name, (long long)b,
                              (long long)(b * size), (double)job.scales[b]);
    }
    if (status) ane_tensor_release(data), ane_tensor_release(table);
    return status;
}

/* The inverse of ane_blocks_split: GGUF's bytes of a kept matrix (a GGUF writer's tensor data).
 * Q6_K's data are its blocks as stored; Q8_0 and Q4_0 are rebuilt from codes and scales, each
 * scale written as the fp16 it must be (a scale fp16 cannot hold exactly fails, naming the block:
 * the file would not hold these weights). */
ane_status ane_blocks_join(ane_block_type type, const ane_tensor *data, const ane_tensor *table, int64_t rows, int64_t k,
                           const char *name, ane_tensor *blocks, ane_error *err) {
    memset(blocks, 0, sizeof *blocks);
    if (type == ANE_BLOCKS_Q4_K || type == ANE_BLOCKS_Q5_K)
        return ane_fail(err, ANE_ERR_ARGUMENT, "%s: %s blocks are kept as a scale and an offset per 32, which do not "
                        "give back the file's 6-bit scales and mins: write its weights dequantized", name, FORMATS[type].name);
    if (type != ANE_BLOCKS_Q8_0 && type != ANE_BLOCKS_Q4_0 && type != ANE_BLOCKS_Q6_K)
        return ane_fail(err, ANE_ERR_ARGUMENT, "%s: %s blocks are not kept, so not joined (q8_0, q4_0 and q6_k are)", name,
                        FORMATS[type].name);
    const struct block_format *format = &FORMATS[type];
    if (rows <= 0 || k <= 0 || k % format->weights != 0)
        return ane_fail(err, ANE_ERR_SHAPE, "%s: [%lld, %lld] is not rows of whole %s blocks", name, (long long)rows,
                        (long long)k, format->name);
    int q8 = type == ANE_BLOCKS_Q8_0;
    int64_t nblocks = rows * (k / format->weights), size = format->bytes;
    int64_t data_bytes = type == ANE_BLOCKS_Q6_K ? nblocks * size : q8 ? rows * k : rows * k / 2;
    if (!ane_tensor_is_contiguous(data) || ane_tensor_numel(data) * (int64_t)ane_dtype_size(data->dtype) != data_bytes ||
        (type != ANE_BLOCKS_Q6_K && (!ane_tensor_is_contiguous(table) || table->dtype != ANE_FP32 ||
                                     ane_tensor_numel(table) != nblocks)))
        return ane_fail(err, ANE_ERR_SHAPE, "%s: its codes and scales are not those of a [%lld, %lld] %s matrix", name,
                        (long long)rows, (long long)k, format->name);
    int64_t shape[1] = {nblocks * size};
    ane_status status = ane_tensor_empty(blocks, 1, shape, ANE_UINT8, err);
    if (status) return status;
    uint8_t *out = (uint8_t *)ane_tensor_data(blocks);
    const uint8_t *codes = (const uint8_t *)ane_tensor_data(data);
    if (type == ANE_BLOCKS_Q6_K) {
        memcpy(out, codes, (size_t)data_bytes);
        return ANE_OK;
    }
    const float *scales = (const float *)ane_tensor_data(table);
    for (int64_t b = 0; b < nblocks; b++) {
        uint8_t *block = out + b * size;
        uint16_t d = ane_fp32_to_fp16(scales[b]);
        if (ane_fp16_to_fp32(d) != scales[b] && !(isnan(scales[b]) && isnan(ane_fp16_to_fp32(d)))) {
            ane_tensor_release(blocks);
            return ane_fail(err, ANE_ERR_FORMAT, "%s: block %lld's scale %.9g is not an fp16 value, which GGUF's %s "
                            "blocks store", name, (long long)b, (double)scales[b], format->name);
        }
        block[0] = (uint8_t)(d & 0xff), block[1] = (uint8_t)(d >> 8);
        if (q8) {
            memcpy(block + 2, codes + b * 32, 32);
        } else { /* kept: x - 8 in order, element j in byte j / 2 (low nibble first); stored: j in qs[j]'s low nibble, j + 16 in its high one */
            unsigned x[32];
            for (int j = 0; j < 32; j += 2) {
                uint8_t pair = codes[b * 16 + j / 2];
                x[j] = (pair & 15u) ^ 8u, x[j + 1] = (pair >> 4) ^ 8u;
            }
            for (int j = 0; j < 16; j++) block[2 + j] = (uint8_t)(x[j] | x[j + 16] << 4);
        }
    }
    return ANE_OK;
}
