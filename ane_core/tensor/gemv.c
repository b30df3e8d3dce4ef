/* The decode matrix-vector products (see gemv.h): the shares of rows over the helper threads of
 * base/parallel.h, the memory a product needs and the activations' codes, with every kernel
 * read from the table of kernels.h. */
#include "gemv.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "blas.h"
#include "gemm.h"
#include "kernels.h"

/* Shares of at least GRAIN_BYTES of weights: below that, handing rows to a helper costs
 * more than it saves. */
#define GRAIN_BYTES ((int64_t)1 << 16)

static int64_t grain_rows(int64_t row_bytes) { return row_bytes > 0 ? GRAIN_BYTES / row_bytes + 1 : 1; }

/* A matrix-vector product's rows over the helper threads (row_bytes: a row's bytes of
 * weights). Rows shorter than SHORT_ROW_BYTES go in two chunks a thread, not four: each chunk
 * starts new streams of weights (in_row_groups: four rows a quarter of the chunk apart), and
 * short rows make short streams, which read slower than better-balanced chunks finish.
 * Stories110M decodes, the chunk counts alternating in one process every 0.25 s: int4 rows
 * (384 B and 1 KB) in two chunks 0.92-0.97x the time per token of four, int8 (768 B) 0.93x;
 * fp16 rows (1.5 KB) in two chunks 1.01-1.05x, so long rows keep four. */
enum { SHORT_ROW_BYTES = 1024 };

static void rows_parallel_for(int64_t rows, int64_t row_bytes, ane_range_body body, void *job) {
    ane_parallel_for_chunks(rows, grain_rows(row_bytes), row_bytes < SHORT_ROW_BYTES ? 2 : 4, body, job);
}

/* The row kernels' index of a weight encoding (fp16 rows: ANE_ENCODING_DENSE). */
static kernel_weights weights_of(ane_weight_encoding encoding) {
    switch (encoding) {
    case ANE_ENCODING_INT8: return WEIGHTS_INT8;
    case ANE_ENCODING_LUT4: return WEIGHTS_LUT4;
    case ANE_ENCODING_Q8_0: return WEIGHTS_Q8_0;
    case ANE_ENCODING_Q4_0: return WEIGHTS_Q4_0;
    case ANE_ENCODING_Q6_K: return WEIGHTS_Q6_K;
    case ANE_ENCODING_Q4_K: return WEIGHTS_Q4_K;
    case ANE_ENCODING_Q5_K: return WEIGHTS_Q5_K;
    case ANE_ENCODING_DENSE: break;
    }
    return WEIGHTS_FP16;
}

static void rows_float(kernel_weights weights, const gemv_job *job, int64_t rows, int64_t row_bytes) {
    rows_parallel_for(rows, row_bytes, ane_kernels()->rows_float[weights], (void *)job);
}

void ane_gemv_fp16_strided(float *y, const uint16_t *w, int64_t row_stride, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k, row_stride, NULL, NULL, NULL};
    rows_float(WEIGHTS_FP16, &job, rows, k * 2);
}

void ane_gemv_fp16(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k) {
    ane_gemv_fp16_strided(y, w, k, x, rows, k);
}

void ane_gemv_fp32_strided(float *y, const float *w, int64_t row_stride, const float *x, int64_t rows, int64_t k) {
    gemv_job job = {y, w, x, k, row_stride, NULL, NULL, NULL};
    rows_float(WEIGHTS_FP32, &job, rows, k * 4);
}

void ane_gemv_fp32(float *y, const float *w, const float *x, int64_t rows, int64_t k) {
    ane_gemv_fp32_strided(y, w, k, x, rows, k);
}

void ane_vecmat_fp32(float *y, const float *x, const float *m, int64_t ld, int64_t k, int64_t n) {
    ane_kernels()->vecmat_fp32(y, x, m, ld, k, n);
}

void ane_vecmat_fp16(float *y, const float *x, const uint16_t *m, int64_t ld, int64_t k, int64_t n) {
    ane_kernels()->vecmat_fp16(y, x, m, ld, k, n);
}


int ane_table_as_fp16(uint16_t *out, const float *table, int64_t n) {
    enum { CHUNK = 1024 };
    float back[CHUNK];
    for (int64_t at = 0; at < n; at += CHUNK) { /* converted there and back a chunk at a time; the same bits
                                                   again, or (a NaN's payload, say) compared entry by entry */
        size_t count = (size_t)(n - at < CHUNK ? n - at : CHUNK);
        ane_fp32_to_fp16_n(out + at, table + at, count);
        ane_fp16_to_fp32_n(back, out + at, count);
        if (!memcmp(back, table + at, count * sizeof *back)) continue;
        for (size_t i = 0; i < count; i++)
            if (back[i] != table[at + i] && !(isnan(table[at + i]) && isnan(back[i]))) return 0;
    }
    return 1;
}

/* Parts as one loop: the parts' rows one after another; a share that crosses from one part into
 * the next runs as a share of each (its rows' results are the part's own loop's). */
typedef struct parts_job {
    const char *jobs; /* [count] each part's job for the row kernel (gemv_job or integer_job) */
    size_t job_size;
    int64_t first_row[ANE_GEMV_MAX_PARTS + 1]; /* part p: rows first_row[p] .. first_row[p + 1] - 1 of the loop */
    int count;
    ane_range_body rows; /* the level's row kernel of the parts' weights */
} parts_job;

static void rows_of_parts(void *context, int64_t first, int64_t last) {
    const parts_job *job = context;
    for (int p = 0; p < job->count; p++) {
        int64_t from = first > job->first_row[p] ? first : job->first_row[p];
        int64_t to = last < job->first_row[p + 1] ? last : job->first_row[p + 1];
        if (from < to) job->rows((void *)(job->jobs + (size_t)p * job->job_size), from - job->first_row[p], to - job->first_row[p]);
    }
}

static ane_status integer_parts(const ane_gemv_part *parts, int count, const float *x, int64_t k, int64_t columns,
                                ane_activations activations, ane_error *err);

/* Refuses activations the encoding's weights do not multiply (GGUF blocks: float or int8, not
 * int16). */
static ane_status check_activations_for(ane_weight_encoding encoding, ane_activations activations, ane_error *err) {
    if (activations != ANE_ACTIVATIONS_INT16 || !ane_encoding_is_gguf_block(encoding)) return ANE_OK;
    return ane_fail(err, ANE_ERR_ARGUMENT, "%s weights are multiplied with float or int8 activations, not int16",
                    ane_encoding_name(encoding));
}

ane_status ane_gemv_parts(const ane_gemv_part *parts, int count, const float *x, int64_t k, ane_activations activations,
                          ane_error *err) {
    for (; count > ANE_GEMV_MAX_PARTS; parts += ANE_GEMV_MAX_PARTS, count -= ANE_GEMV_MAX_PARTS) {
        ane_status status = ane_gemv_parts(parts, ANE_GEMV_MAX_PARTS, x, k, activations, err);
        if (status) return status;
    }
    if (count <= 0) return ANE_OK;
    ane_weight_encoding encoding = parts[0].encoding;
    if (activations != ANE_ACTIVATIONS_FLOAT && encoding != ANE_ENCODING_DENSE) {
        ane_status status = check_activations_for(encoding, activations, err);
        return status ? status : integer_parts(parts, count, x, k, 1, activations, err);
    }
    gemv_job jobs[ANE_GEMV_MAX_PARTS];
    parts_job job = {.jobs = (const char *)jobs, .job_size = sizeof *jobs, .count = count,
                     .rows = ane_kernels()->rows_float[weights_of(encoding)]};
    float stack[4096];
    float *x_split = NULL; /* 4-bit rows: x split once for every part (the level's split_lut4) */
    if (encoding == ANE_ENCODING_LUT4) {
        x_split = k <= (int64_t)(sizeof stack / sizeof *stack) ? stack : malloc((size_t)k * sizeof *x_split);
        if (!x_split) return ane_fail(err, ANE_ERR_NOMEM, "out of memory splitting the activations of a 4-bit product");
    }
    const float *split = encoding == ANE_ENCODING_LUT4 ? ane_kernels()->split_lut4(x_split, x, k) : NULL;
    for (int p = 0; p < count; p++) {
        jobs[p] = (gemv_job){parts[p].y, parts[p].data, x, k, k, parts[p].table, split, parts[p].palette_codes};
        job.first_row[p + 1] = job.first_row[p] + parts[p].rows;
    }
    int64_t row_bytes = encoding == ANE_ENCODING_DENSE ? 2 * k : ane_encoded_data_bytes(encoding, 1, k);
    rows_parallel_for(job.first_row[count], row_bytes, rows_of_parts, &job);
    if (x_split != stack) free(x_split);
    return ANE_OK;
}

ane_status ane_gemv_encoded(float *y, ane_weight_encoding encoding, const void *data, const float *table, const float *x,
                            int64_t rows, int64_t k, ane_error *err) {
    ane_gemv_part alone = {y, encoding, data, table, rows, NULL, NULL};
    return ane_gemv_parts(&alone, 1, x, k, ANE_ACTIVATIONS_FLOAT, err);
}

/* y [rows, columns] = dequantized W x: the panel kernel (gemm.h), or on CPUs without one a block
 * of rows decoded exactly at a time and BLAS's product. */
static ane_status decoded_product(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                                  const float *x, int64_t rows, int64_t k, int64_t columns, ane_error *err) {
    if (ane_gemm_weights_available()) { /* decoded a panel at a time (gemm.h) */
        ane_weight_rows w = {encoding, 0, data, table, 0, 0};
        ane_gemm_weights(y, &w, x, rows, k, columns);
        return ANE_OK;
    }
    int64_t block = ((int64_t)1 << 18) / (k > 0 ? k : 1); /* rows decoded at a time: ~1 MB of fp32 */
    block = block < 1 ? 1 : block > rows ? rows : block;
    float *decoded = malloc((size_t)(block * k) * sizeof *decoded + 1);
    if (!decoded) return ane_fail(err, ANE_ERR_NOMEM, "out of memory multiplying a quantized weight");
    for (int64_t row = 0; row < rows; row += block) {
        int64_t count = rows - row < block ? rows - row : block;
        ane_dequantize_rows(encoding, data, table, k, row, count, decoded);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)count, (int)columns, (int)k, 1.0f, decoded, (int)k, x,
                    (int)columns, 0.0f, y + row * columns, (int)columns);
    }
    free(decoded);
    return ANE_OK;
}

/* ------------------------------------------------ integer activations: the codes */

/* x quantized per block of 32 consecutive elements: scale = max |x| / 127, code = round(x /
 * scale) (int8), or max |x| / 32767 and 16-bit codes (int16); what else a level's kernels read
 * follows the codes (kernels.h: code_vector). */
_Static_assert(Q16_BLOCK == Q8_BLOCK, "the BLAS path of integer activations reads one block size");

/* lane scales and biases, block scales, codes8, split8, chunk scales, bias8 */
static size_t q8_bytes(int64_t k) {
    int64_t lanes = k / Q8_CHUNK * Q8_CHUNK / 4, blocks = (k + Q8_BLOCK - 1) / Q8_BLOCK;
    return (size_t)(lanes * 8 + blocks * 4 + 2 * ((k + 3) / 4 * 4) + k + 64);
}

/* block scales, codes16, split16, chunk scales */
static size_t q16_bytes(int64_t k) { return (size_t)(((k + Q16_BLOCK - 1) / Q16_BLOCK) * 4 + k * 4 + k / 2 + 64); }

/* Quantizes x [k] (element j at x[j * stride]) into v, laid out in memory (q8_bytes(k)), whole
 * contiguous blocks through the level's vector kernel; then what the level's kernels read
 * besides (for_lut4: the product's weights are 4-bit rows; ARRANGE_FOR_Q4_0: Q4_0 rows). */
static void q8_quantize(const ane_kernel_table *kernels, code_vector *v, void *memory, const float *x, int64_t stride, int64_t k, int for_lut4) {
    v->k = k;
    v->chunked = k / Q8_CHUNK * Q8_CHUNK;
    v->lane_scales = memory;
    v->lane_bias = (int32_t *)(v->lane_scales + v->chunked / 4);
    v->block_scales = (float *)(v->lane_bias + v->chunked / 4);
    v->codes8 = (int8_t *)(v->block_scales + (k + Q8_BLOCK - 1) / Q8_BLOCK);
    v->split8 = v->codes8 + k;
    v->chunk_scales = (float *)(v->codes8 + 2 * ((k + 3) / 4 * 4)); /* past split8, 4-byte aligned */
    v->bias8 = (int32_t *)(v->chunk_scales + v->chunked / 8);
    v->codes16 = NULL, v->split16 = NULL;
    int vector_blocks = stride == 1 && kernels->quantize_block8;
    for (int64_t first = 0, b = 0; first < k; first += Q8_BLOCK, b++) {
        int64_t last = first + Q8_BLOCK < k ? first + Q8_BLOCK : k;
        if (vector_blocks && last - first == Q8_BLOCK && kernels->quantize_block8(x + first, v->codes8 + first, &v->block_scales[b]))
            continue;
        float largest = 0.0f;
        int not_finite = 0;
        for (int64_t j = first; j < last; j++) {
            float a = fabsf(x[j * stride]);
            not_finite |= !isfinite(a);
            largest = a > largest ? a : largest;
        }
        float inverse = largest > 0.0f && !not_finite ? 127.0f / largest : 0.0f;
        v->block_scales[b] = not_finite ? NAN : largest / 127.0f; /* a NaN or inf makes the products NaN */
        for (int64_t j = first; j < last; j++) v->codes8[j] = (int8_t)lrintf(x[j * stride] * inverse);
    }
    if (for_lut4 == ARRANGE_FOR_Q4_0) kernels->arrange_q4_0_codes8(v);
    else kernels->arrange_codes8(v, for_lut4);
}

/* Quantizes x as q8_quantize does, to int16 codes (memory: q16_bytes(k)). */
static void q16_quantize(const ane_kernel_table *kernels, code_vector *v, void *memory, const float *x, int64_t stride, int64_t k, int for_lut4) {
    v->k = k;
    v->chunked = k / Q8_CHUNK * Q8_CHUNK;
    v->block_scales = memory;
    v->codes16 = (int16_t *)(v->block_scales + (k + Q16_BLOCK - 1) / Q16_BLOCK);
    v->split16 = v->codes16 + k;
    v->chunk_scales = (float *)(v->split16 + (k + 1) / 2 * 2); /* 4-byte aligned */
    v->codes8 = NULL, v->split8 = NULL, v->lane_scales = NULL, v->lane_bias = NULL, v->bias8 = NULL;
    int vector_blocks = stride == 1 && kernels->quantize_block16;
    for (int64_t first = 0, b = 0; first < k; first += Q16_BLOCK, b++) {
        int64_t count = k - first < Q16_BLOCK ? k - first : Q16_BLOCK;
        if (vector_blocks && count == Q16_BLOCK && kernels->quantize_block16(x + first, v->codes16 + first, &v->block_scales[b]))
            continue;
        v->block_scales[b] = block_codes16(x + first * stride, stride, count, (float)Q16_LEVELS, v->codes16 + first);
    }
    kernels->arrange_codes16(v, for_lut4);
}

size_t code_vector_bytes(int64_t k, ane_activations activations) {
    return activations == ANE_ACTIVATIONS_INT8 ? q8_bytes(k) : q16_bytes(k);
}

void quantize_codes_with(const ane_kernel_table *kernels, code_vector *v, void *memory, const float *x, int64_t stride,
                         int64_t k, ane_activations activations, int for_lut4) {
    if (activations == ANE_ACTIVATIONS_INT8) q8_quantize(kernels, v, memory, x, stride, k, for_lut4);
    else q16_quantize(kernels, v, memory, x, stride, k, for_lut4);
}

static void quantize_codes(code_vector *v, void *memory, const float *x, int64_t stride, int64_t k,
                           ane_activations activations, int for_lut4) {
    quantize_codes_with(ane_kernels(), v, memory, x, stride, k, activations, for_lut4);
}

/* ------------------------------------------------ integer activations: the palettes */

size_t ane_palette_codes_stride(ane_activations activations) {
    return activations == ANE_ACTIVATIONS_INT8    ? sizeof(palette8)
           : activations == ANE_ACTIVATIONS_INT16 ? sizeof(palette16)
                                                  : ANE_LUT4_ENTRIES * sizeof(uint16_t);
}

int ane_palette_words_read(void) { return ane_kernels()->lut4_reads_words; }

int ane_palette_codes(void *codes, const float *table, int64_t rows, ane_activations activations) {
    if (activations == ANE_ACTIVATIONS_FLOAT) { /* bf16 words, when every entry is one */
        uint16_t *words = codes;
        for (int64_t i = 0; i < rows * ANE_LUT4_ENTRIES; i++) {
            uint32_t bits;
            memcpy(&bits, table + i, sizeof bits);
            if (bits & 0xFFFFu) return 0;
            words[i] = (uint16_t)(bits >> 16);
        }
        return 1;
    }
    const ane_kernel_table *kernels = ane_kernels();
    if (activations == ANE_ACTIVATIONS_INT8)
        for (int64_t r = 0; r < rows; r++) kernels->palette8((palette8 *)codes + r, table + r * ANE_LUT4_ENTRIES);
    else
        for (int64_t r = 0; r < rows; r++) kernels->palette16((palette16 *)codes + r, table + r * ANE_LUT4_ENTRIES);
    return 1;
}

/* A product's palette codes: the caller's, or (NULL) computed into *owned (freed by the caller). */
static const void *palette_codes_for(const void *given, void **owned, const float *table, int64_t rows,
                                     ane_activations activations) {
    *owned = NULL;
    if (given) return given;
    *owned = malloc((size_t)rows * ane_palette_codes_stride(activations) + 1);
    if (*owned) ane_palette_codes(*owned, table, rows, activations);
    return *owned;
}

/* ------------------------------------------------ integer activations: the products */

/* Each part's y [rows, columns] with the activations x [k, columns] quantized once per column
 * for every part (all of one encoding), the parts' rows as one loop. */
static ane_status integer_parts(const ane_gemv_part *parts, int count, const float *x, int64_t k, int64_t columns,
                                ane_activations activations, ane_error *err) {
    ane_weight_encoding encoding = parts[0].encoding;
    size_t bytes = (code_vector_bytes(k, activations) + 63) / 64 * 64;
    char stack[32768];
    char *memory = (size_t)columns * (bytes + sizeof(code_vector)) <= sizeof stack ? stack : malloc((size_t)columns * (bytes + sizeof(code_vector)));
    void *owned[ANE_GEMV_MAX_PARTS] = {NULL};
    integer_job jobs[ANE_GEMV_MAX_PARTS];
    parts_job job = {.jobs = (const char *)jobs, .job_size = sizeof *jobs, .count = count,
                     .rows = ane_encoding_is_gguf_block(encoding)
                                 ? ane_kernels()->rows_blocks_int8
                                 : ane_kernels()->rows_integer[encoding == ANE_ENCODING_LUT4][activations == ANE_ACTIVATIONS_INT16]};
    int missing = !memory;
    code_vector *vectors = (code_vector *)memory;
    for (int p = 0; p < count; p++) {
        const void *palette_codes = parts[p].palette_codes;
        if (encoding == ANE_ENCODING_LUT4)
            missing |= !(palette_codes = palette_codes_for(palette_codes, &owned[p], parts[p].table, parts[p].rows, activations));
        jobs[p] = (integer_job){parts[p].y, parts[p].data, parts[p].table, palette_codes, vectors, columns, k, encoding, activations,
                                activations == ANE_ACTIVATIONS_INT8 ? parts[p].half_table : NULL};
        job.first_row[p + 1] = job.first_row[p] + parts[p].rows;
    }
    ane_status status = ANE_OK;
    if (missing) {
        status = ane_fail(err, ANE_ERR_NOMEM, "out of memory quantizing the activations of a quantized product");
        goto done;
    }
    char *buffers = memory + (size_t)columns * sizeof(code_vector);
    for (int64_t c = 0; c < columns; c++) {
        quantize_codes(&vectors[c], buffers + (size_t)c * bytes, x + c, columns, k, activations,
                       encoding == ANE_ENCODING_LUT4                                  ? 1
                       : encoding == ANE_ENCODING_Q4_0 || encoding == ANE_ENCODING_Q4_K ? ARRANGE_FOR_Q4_0
                                                                                        : 0);
    }
    ane_parallel_for(job.first_row[count], grain_rows(ane_encoded_data_bytes(encoding, 1, k) * columns), rows_of_parts, &job);
done:
    if (memory != stack) free(memory);
    for (int p = 0; p < count; p++) free(owned[p]);
    return status;
}

/* Many columns with int8 or int16 activations: the same quantized values multiplied by
 * BLAS. Each element of x becomes its block's scale times its code, a 4-bit row's palette its
 * integer entries times their scale; the fp32 product then differs from the integer one by
 * rounding only, so a prefill and the decode steps after it compute the same arithmetic. */
static ane_status encoded_matmul_codes_blas(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                                            const void *palette_codes, const float *x, int64_t rows, int64_t k,
                                            int64_t columns, ane_activations activations, ane_error *err) {
    int int8 = activations == ANE_ACTIVATIONS_INT8;
    float *values = malloc((size_t)(k * columns) * sizeof *values + 1);                   /* [k, columns] */
    void *memory = malloc(code_vector_bytes(k, activations));
    float *palettes = encoding == ANE_ENCODING_LUT4 ? malloc((size_t)rows * ANE_LUT4_ENTRIES * sizeof *palettes) : NULL;
    void *owned = NULL;
    if (encoding == ANE_ENCODING_LUT4) palette_codes = palette_codes_for(palette_codes, &owned, table, rows, activations);
    ane_status status = ANE_OK;
    if (!values || !memory || (encoding == ANE_ENCODING_LUT4 && (!palettes || !palette_codes))) {
        status = ane_fail(err, ANE_ERR_NOMEM, "out of memory quantizing the activations of a quantized product");
        goto done;
    }
    for (int64_t c = 0; c < columns; c++) {
        code_vector v;
        quantize_codes(&v, memory, x + c, columns, k, activations, 0);
        for (int64_t j = 0; j < k; j++)
            values[j * columns + c] = v.block_scales[j / Q8_BLOCK] * (float)(int8 ? v.codes8[j] : v.codes16[j]);
    }
    if (palettes)
        for (int64_t r = 0; r < rows; r++) {
            const palette8 *p8 = (const palette8 *)palette_codes + r;
            const palette16 *p16 = (const palette16 *)palette_codes + r;
            for (int i = 0; i < ANE_LUT4_ENTRIES; i++)
                palettes[r * ANE_LUT4_ENTRIES + i] = int8 ? p8->scale * (float)p8->entries[i] : p16->scale * (float)p16->entries[i];
        }
    status = decoded_product(y, encoding, data, palettes ? palettes : table, values, rows, k, columns, err);
done:
    free(values), free(memory), free(palettes), free(owned);
    return status;
}

/* ------------------------------------------------ a few columns, one at a time */

/* Rows taken per block: ~256 KB of weights, read from memory by a block's first column and
 * from cache by the others. */
#define FEW_COLUMNS_BLOCK_BYTES ((int64_t)1 << 18)

/* A pass takes the most columns, of the level's kernel's and their halves, whose x fit in
 * PASS_X_BYTES of L1 (but two): x is read again for each tile of rows, from L2 once it does not
 * fit. Eight columns from memory, AVX-512, two cores: [768, 768] 72-77 us eight at once (in a
 * Stories110M step; 90-92 four at a time with the kernel before); [3072, 1024] 418-434 us eight
 * at once, 304-400 four, 328-360 two; [2048, 1024] 296-300 / 210-212 / 223-265; [768, 2048] in a
 * Stories110M step 201-218 two at a time, 240-272 four. Passes of equal width (ten columns five
 * and five, not eight and two). */
enum { PASS_X_BYTES = 24 << 10 };

typedef struct columns_job {
    ane_range_body rows; /* the level's row kernel of the weights */
    void (*columns_at_once)(const gemv_job *jobs, int count, int64_t first, int64_t last, prefetch_span ahead); /* or NULL */
    int at_once;                                               /* the columns it takes (up to) */
    gemv_job *columns;                                         /* [parts, count]: a part's column's x and its y [rows] */
    int64_t count, block_rows;
    const char *data[ANE_GEMV_MAX_PARTS];                      /* each part's rows, row_bytes each */
    float *out[ANE_GEMV_MAX_PARTS];                            /* each part's y [rows, count], or NULL: its
                                                                * columns' y are the part's own */
    int64_t first_row[ANE_GEMV_MAX_PARTS + 1];                 /* part p: rows first_row[p] .. first_row[p + 1] - 1 */
    int parts;
    int64_t row_bytes;
} columns_job;

/* The part that row `row` of the loop (below its end) is in. */
static int part_of(const columns_job *job, int64_t row) {
    int p = 0;
    while (p + 1 < job->parts && row >= job->first_row[p + 1]) p++;
    return p;
}

/* The weights of the loop's rows from `from` to at most `to`, within one part: where a block of
 * the next rows lies (a block that crosses into the next part: its rows in this one). */
static prefetch_span rows_span(const columns_job *job, int64_t from, int64_t to) {
    if (from >= to) return (prefetch_span){NULL, NULL};
    int p = part_of(job, from);
    if (to > job->first_row[p + 1]) to = job->first_row[p + 1];
    const char *rows = job->data[p];
    return (prefetch_span){rows + (from - job->first_row[p]) * job->row_bytes, rows + (to - job->first_row[p]) * job->row_bytes};
}

/* Part p's rows from..to (the loop's numbering, all in p) for the columns c .. c + taken - 1;
 * then, for a part with an `out`, those results into their places there by the thread that made
 * them, while they are in its cache (on the caller's thread alone, the copy of eight columns'
 * outputs was ~0.5 ms of a 20 ms Stories110M step of eight sessions). */
static void part_rows(const columns_job *job, int p, int64_t c, int64_t taken, int64_t from, int64_t to, prefetch_span ahead) {
    const gemv_job *columns = &job->columns[p * job->count + c];
    int64_t first = from - job->first_row[p], last = to - job->first_row[p];
    if (taken > 1) {
        job->columns_at_once(columns, (int)taken, first, last, ahead);
    } else {
        prefetch_span_rest(&ahead);
        job->rows((void *)columns, first, last);
    }
    float *out = job->out[p]; /* [rows of p, count] */
    if (!out) return;
    for (int64_t r = first; r < last; r++)
        for (int64_t t = 0; t < taken; t++) out[r * job->count + c + t] = columns[t].y[r];
}

/* A block's first pass waits on memory, its others do not; so each pass over a block brings
 * its share of the next block's rows into the cache, and the memory streams while the
 * products compute (the several-column kernels a line at a time as they go). A share or block
 * that crosses from one part into the next runs as one of each. */
static void rows_of_columns(void *context, int64_t first, int64_t last) {
    const columns_job *job = context;
    int64_t passes = (job->count + job->at_once - 1) / job->at_once;
    if (passes == 1 && job->count > 1) { /* one pass: the share at once, its kernel reading ahead in it */
        prefetch_span none = {NULL, NULL};
        for (int p = part_of(job, first); p < job->parts && job->first_row[p] < last; p++) {
            int64_t from = first > job->first_row[p] ? first : job->first_row[p];
            int64_t to = last < job->first_row[p + 1] ? last : job->first_row[p + 1];
            part_rows(job, p, 0, job->count, from, to, none);
        }
        return;
    }
    for (int64_t from = first; from < last;) {
        int p = part_of(job, from);
        int64_t end = last < job->first_row[p + 1] ? last : job->first_row[p + 1]; /* the block's part's rows */
        int64_t to = end - from < job->block_rows ? end : from + job->block_rows;
        int64_t next_to = last - to < job->block_rows ? last : to + job->block_rows;
        prefetch_span next = rows_span(job, to, next_to);
        int64_t ahead = next.at ? next.end - next.at : 0, pass = 0; /* bytes of the next block */
        for (int64_t c = 0, taken; c < job->count; c += taken, pass++) {
            taken = job->count - c < job->at_once ? job->count - c : job->at_once;
            prefetch_span share = ahead ? (prefetch_span){next.at + ahead * pass / passes, next.at + ahead * (pass + 1) / passes} : next;
            part_rows(job, p, c, taken, from, to, share);
        }
        from = to;
    }
}

/* Each part's y [rows, columns] = W x [k, columns] (W: the part's data and table as a gemv_job
 * holds them, rows of row_bytes; every part's of one encoding), through a matrix-vector
 * product's row kernel: the parts' rows as one split over the helpers, each taking its rows a
 * block at a time, every column per block. A row's result does not depend on how the rows were
 * split, so a column's sums are its matrix-vector product's. */
static ane_status by_columns(const ane_gemv_part *parts, int count, ane_range_body rows_kernel, int64_t row_bytes, int lut4,
                             const float *x, int64_t k, int64_t columns, int transposed, ane_error *err) {
    /* x's columns side by side, each padded by a line: a kernel taking several reads them all (eight
     * columns of [768, 768], one core: 30 us 784 floats apart, 53 us 2064 apart); then x_split's
     * and each part's columns' y's, which part_rows copies to their places (transposed: x
     * [columns, k], and each y [columns, rows] written in place) */
    const int64_t x_stride = (k + 15) / 16 * 16 + 16;
    columns_job job = {.rows = rows_kernel, .count = columns, .parts = count, .row_bytes = row_bytes};
    for (int p = 0; p < count; p++) {
        job.data[p] = parts[p].data;
        job.out[p] = transposed ? NULL : parts[p].y;
        job.first_row[p + 1] = job.first_row[p] + parts[p].rows;
    }
    int64_t rows = job.first_row[count];
    float *memory = malloc((size_t)(columns * (2 * x_stride + (transposed ? 0 : rows))) * sizeof *memory);
    gemv_job *jobs = malloc((size_t)(count * columns) * sizeof *jobs);
    if (!memory || !jobs) {
        free(memory), free(jobs);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory multiplying %lld columns", (long long)columns);
    }
    if (!transposed) /* (x read once, in order: [k, columns]) */
        for (int64_t j = 0; j < k; j++)
            for (int64_t c = 0; c < columns; c++) memory[c * x_stride + j] = x[j * columns + c];
    for (int64_t c = 0; c < columns; c++) {
        float *column = memory + c * x_stride, *split = memory + (columns + c) * x_stride;
        if (transposed) memcpy(column, x + c * k, (size_t)k * sizeof *column);
        const float *x_split = lut4 ? ane_kernels()->split_lut4(split, column, k) : NULL;
        for (int p = 0; p < count; p++) {
            float *out = transposed ? parts[p].y + c * parts[p].rows
                                    : memory + 2 * columns * x_stride + c * rows + job.first_row[p]; /* [rows of p] */
            jobs[p * columns + c] = (gemv_job){out, parts[p].data, column, k, k, parts[p].table, x_split, parts[p].palette_codes};
        }
    }
    /* fp16 rows several columns at a time where the level has that kernel (the same bits) */
    const ane_kernel_table *kernels = ane_kernels();
    int at_once = rows_kernel == kernels->rows_float[WEIGHTS_FP16] && kernels->rows_fp16_columns ? kernels->fp16_columns_at_once : 1;
    while (at_once > 2 && at_once * k * (int64_t)sizeof(float) > PASS_X_BYTES) at_once /= 2;
    if (at_once > 1) { /* passes of equal width: ten columns five and five, not eight and two */
        int64_t passes = (columns + at_once - 1) / at_once;
        at_once = (int)((columns + passes - 1) / passes);
    }
    job.columns_at_once = at_once > 1 ? kernels->rows_fp16_columns : NULL;
    job.at_once = at_once;
    job.columns = jobs;
    job.block_rows = row_bytes > 0 ? FEW_COLUMNS_BLOCK_BYTES / row_bytes + 1 : rows;
    /* one share a thread, so that all its blocks but the first are fetched ahead (four a thread:
     * half the blocks of [2048, 768] start cold; eight columns of it 2 threads, with the fine
     * prefetch: 202 -> 185 us, [768, 2048] 206 -> 179, [768, 768] 73 -> 70) */
    ane_parallel_for_chunks(rows, grain_rows(row_bytes * columns), 1, rows_of_columns, &job);
    free(memory), free(jobs);
    return ANE_OK;
}

/* by_columns of one product of fp32 or fp16 rows (element_bytes). */
static ane_status by_columns_alone(float *y, kernel_weights weights, const void *w, int64_t element_bytes, const float *x,
                                   int64_t rows, int64_t k, int64_t columns, int transposed, ane_error *err) {
    ane_gemv_part alone = {y, ANE_ENCODING_DENSE, w, NULL, rows, NULL, NULL};
    return by_columns(&alone, 1, ane_kernels()->rows_float[weights], k * element_bytes, 0, x, k, columns, transposed, err);
}

ane_status ane_gemm_fp32_few_columns(float *y, const float *w, const float *x, int64_t rows, int64_t k, int64_t columns,
                                     ane_error *err) {
    return by_columns_alone(y, WEIGHTS_FP32, w, sizeof(float), x, rows, k, columns, 0, err);
}

ane_status ane_gemm_fp16_few_columns(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k, int64_t columns,
                                     ane_error *err) {
    return by_columns_alone(y, WEIGHTS_FP16, w, sizeof(uint16_t), x, rows, k, columns, 0, err);
}

ane_status ane_gemm_fp16_few_columns_t(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k, int64_t columns,
                                       ane_error *err) {
    return by_columns_alone(y, WEIGHTS_FP16, w, sizeof(uint16_t), x, rows, k, columns, 1, err);
}

ane_status ane_encoded_matmul(float *y, ane_weight_encoding encoding, const void *data, const float *table,
                              const void *palette_codes, const float *x, int64_t rows, int64_t k, int64_t columns,
                              ane_activations activations, ane_error *err) {
    ane_status refused = check_activations_for(encoding, activations, err);
    if (refused) return refused;
    if (activations != ANE_ACTIVATIONS_FLOAT && columns > ANE_FEW_COLUMNS)
        return encoded_matmul_codes_blas(y, encoding, data, table, palette_codes, x, rows, k, columns, activations, err);
    ane_gemv_part alone = {y, encoding, data, table, rows, encoding == ANE_ENCODING_LUT4 ? palette_codes : NULL, NULL};
    if (activations != ANE_ACTIVATIONS_FLOAT) return integer_parts(&alone, 1, x, k, columns, activations, err);
    if (columns == 1) return ane_gemv_parts(&alone, 1, x, k, activations, err);
    if (columns <= ANE_FEW_COLUMNS) return ane_gemm_parts(&alone, 1, x, k, columns, activations, err);
    return decoded_product(y, encoding, data, table, x, rows, k, columns, err);
}

ane_status ane_gemm_parts(const ane_gemv_part *parts, int count, const float *x, int64_t k, int64_t columns,
                          ane_activations activations, ane_error *err) {
    if (columns < 1 || columns > ANE_FEW_COLUMNS)
        return ane_fail(err, ANE_ERR_ARGUMENT, "products of parts take 1 to %d columns, not %lld", ANE_FEW_COLUMNS,
                        (long long)columns);
    if (columns == 1) return ane_gemv_parts(parts, count, x, k, activations, err);
    for (; count > ANE_GEMV_MAX_PARTS; parts += ANE_GEMV_MAX_PARTS, count -= ANE_GEMV_MAX_PARTS) {
        ane_status status = ane_gemm_parts(parts, ANE_GEMV_MAX_PARTS, x, k, columns, activations, err);
        if (status) return status;
    }
    if (count <= 0) return ANE_OK;
    ane_weight_encoding encoding = parts[0].encoding;
    if (encoding != ANE_ENCODING_DENSE && activations != ANE_ACTIVATIONS_FLOAT) {
        ane_status status = check_activations_for(encoding, activations, err);
        return status ? status : integer_parts(parts, count, x, k, columns, activations, err);
    }
    int64_t row_bytes = encoding == ANE_ENCODING_DENSE ? 2 * k : ane_encoded_data_bytes(encoding, 1, k);
    return by_columns(parts, count, ane_kernels()->rows_float[weights_of(encoding)], row_bytes, encoding == ANE_ENCODING_LUT4,
                      x, k, columns, 0, err);
}
