/* Weight quantization (see quantize.h): per row, int8 and 4-bit palettes; per block of 32,
 * Q8_0 and Q4_0. Rows are independent, so the quantizers split rows over the helper threads. */
#include "quantize.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/parallel.h"
#include "kernels.h"

const char *ane_encoding_name(ane_weight_encoding encoding) {
    switch (encoding) {
    case ANE_ENCODING_DENSE: return "dense";
    case ANE_ENCODING_INT8: return "int8";
    case ANE_ENCODING_LUT4: return "int4";
    case ANE_ENCODING_Q8_0: return "q8_0";
    case ANE_ENCODING_Q4_0: return "q4_0";
    case ANE_ENCODING_Q6_K: return "q6_k";
    case ANE_ENCODING_Q4_K: return "q4_k";
    case ANE_ENCODING_Q5_K: return "q5_k";
    }
    return NULL;
}

int ane_encoding_from_name(const char *name, ane_weight_encoding *out) {
    if (strcmp(name, "int8") == 0) *out = ANE_ENCODING_INT8;
    else if (strcmp(name, "int4") == 0) *out = ANE_ENCODING_LUT4;
    else if (strcmp(name, "q8_0") == 0) *out = ANE_ENCODING_Q8_0;
    else if (strcmp(name, "q4_0") == 0) *out = ANE_ENCODING_Q4_0;
    else if (strcmp(name, "q6_k") == 0) *out = ANE_ENCODING_Q6_K;
    else if (strcmp(name, "q4_k") == 0) *out = ANE_ENCODING_Q4_K;
    else if (strcmp(name, "q5_k") == 0) *out = ANE_ENCODING_Q5_K;
    else return 0;
    return 1;
}

const char *ane_activations_name(ane_activations activations) {
    return activations == ANE_ACTIVATIONS_INT8 ? "int8" : activations == ANE_ACTIVATIONS_INT16 ? "int16" : "float";
}

int ane_activations_from_name(const char *name, ane_activations *out) {
    if (strcmp(name, "float") == 0) *out = ANE_ACTIVATIONS_FLOAT;
    else if (strcmp(name, "int8") == 0) *out = ANE_ACTIVATIONS_INT8;
    else if (strcmp(name, "int16") == 0) *out = ANE_ACTIVATIONS_INT16;
    else return 0;
    return 1;
}

int64_t ane_encoded_data_bytes(ane_weight_encoding encoding, int64_t rows, int64_t k) {
    if (encoding == ANE_ENCODING_Q6_K) return rows * (k / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES;
    if (encoding == ANE_ENCODING_Q5_K) return rows * (k / ANE_ENCODING_BLOCK) * ANE_Q5_K_BYTES;
    return ane_encoding_is_4bit(encoding) ? rows * (k / 2) : rows * k;
}

int64_t ane_encoded_table_width(ane_weight_encoding encoding, int64_t k) {
    if (encoding == ANE_ENCODING_Q6_K) return k / ANE_Q6_K_GROUP;
    if (ane_encoding_is_shifted(encoding)) return k / ANE_ENCODING_BLOCK * 2;
    return encoding == ANE_ENCODING_LUT4 ? ANE_LUT4_ENTRIES : ane_encoding_is_blockwise(encoding) ? k / ANE_ENCODING_BLOCK : 1;
}

/* (Both per block in loops of fixed length, which the compiler vectorizes: every compile of a
 * program with a Q5_K or Q6_K weight unpacks its codes for the weight file and packs them again.) */
void ane_q5_k_pack(uint8_t *row, const uint8_t *codes, int64_t k) {
    for (int64_t b = 0; b < k / ANE_ENCODING_BLOCK; b++) { /* ane_q5_k_code's places */
        uint8_t *block = row + b * ANE_Q5_K_BYTES;
        const uint8_t *x = codes + b * ANE_ENCODING_BLOCK;
        for (int i = 0; i < 16; i++) block[i] = (uint8_t)((x[2 * i] & 15u) | (x[2 * i + 1] & 15u) << 4);
        for (int byte = 0; byte < 4; byte++) block[16 + byte] = ane_gather_bits(x + 8 * byte, 4); /* eight codes' bit 4 */
    }
}

void ane_q5_k_unpack(uint8_t *codes, const uint8_t *row, int64_t k) {
    for (int64_t b = 0; b < k / ANE_ENCODING_BLOCK; b++) {
        const uint8_t *block = row + b * ANE_Q5_K_BYTES;
        uint8_t *x = codes + b * ANE_ENCODING_BLOCK;
        for (int i = 0; i < 16; i++) x[2 * i] = block[i] & 15u, x[2 * i + 1] = block[i] >> 4;
        for (int byte = 0; byte < 4; byte++) { /* its eight bits spread to bit 4 of eight bytes: byte i keeps
                                                  bit i (the mask), which the add carries to bit 7 */
            uint64_t kept = ((uint64_t)block[16 + byte] * 0x0101010101010101u) & 0x8040201008040201u, eight;
            memcpy(&eight, x + 8 * byte, sizeof eight);
            eight |= ((kept + 0x7F7F7F7F7F7F7F7Fu) >> 3) & 0x1010101010101010u;
            memcpy(x + 8 * byte, &eight, sizeof eight);
        }
    }
}

void ane_q6_k_pack_codes(uint8_t *blocks, const int8_t *codes, int64_t k) {
    for (int64_t b = 0; b < k / ANE_Q6_K_WEIGHTS; b++) { /* ane_q6_code's places: per half, four runs of 32 */
        uint8_t *block = blocks + b * ANE_Q6_K_BYTES;
        memset(block + 192, 0, ANE_Q6_K_BYTES - 192); /* scales and d zero: a program's (quantize.h) */
        for (int half = 0; half < 2; half++) {
            const int8_t *x = codes + b * ANE_Q6_K_WEIGHTS + 128 * half;
            uint8_t *ql = block + 64 * half, *qh = block + 128 + 32 * half;
            for (int l = 0; l < 32; l++) {
                unsigned x0 = (unsigned)(x[l] + 32), x1 = (unsigned)(x[32 + l] + 32);
                unsigned x2 = (unsigned)(x[64 + l] + 32), x3 = (unsigned)(x[96 + l] + 32);
                ql[l] = (uint8_t)((x0 & 15u) | (x2 & 15u) << 4);
                ql[32 + l] = (uint8_t)((x1 & 15u) | (x3 & 15u) << 4);
                qh[l] = (uint8_t)((x0 >> 4) | (x1 >> 4) << 2 | (x2 >> 4) << 4 | (x3 >> 4) << 6);
            }
        }
    }
}

void ane_q6_k_unpack_codes(int8_t *codes, const uint8_t *blocks, int64_t k) {
    for (int64_t b = 0; b < k / ANE_Q6_K_WEIGHTS; b++) {
        const uint8_t *block = blocks + b * ANE_Q6_K_BYTES;
        for (int half = 0; half < 2; half++) {
            int8_t *x = codes + b * ANE_Q6_K_WEIGHTS + 128 * half;
            const uint8_t *ql = block + 64 * half, *qh = block + 128 + 32 * half;
            for (int l = 0; l < 32; l++) {
                x[l] = (int8_t)((int)((ql[l] & 15u) | (qh[l] & 3u) << 4) - 32);
                x[32 + l] = (int8_t)((int)((ql[32 + l] & 15u) | (qh[l] >> 2 & 3u) << 4) - 32);
                x[64 + l] = (int8_t)((int)((ql[l] >> 4) | (qh[l] >> 4 & 3u) << 4) - 32);
                x[96 + l] = (int8_t)((int)((ql[32 + l] >> 4) | (qh[l] >> 6) << 4) - 32);
            }
        }
    }
}

static float table_value(float value, ane_dtype table_dtype) {
    return table_dtype == ANE_FP16 ? ane_fp16_to_fp32(ane_fp32_to_fp16(value)) : value;
}

/* ------------------------------------------------------------------ int8 */

static void int8_row(const float *w, int64_t k, ane_dtype table_dtype, int8_t *q, float *scale) {
    float peak = 0.0f;
    for (int64_t j = 0; j < k; j++) peak = fabsf(w[j]) > peak ? fabsf(w[j]) : peak;
    float s = table_value(peak / 127.0f, table_dtype);
    if (!(s > 0.0f)) s = 1.0f; /* an all-zero row (or one below fp16's range): every q is 0 */
    for (int64_t j = 0; j < k; j++) {
        float r = roundf(w[j] / s);
        q[j] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : r);
    }
    *scale = s;
}

/* ------------------------------------------------------------------ 4-bit palettes */

/* A palette entry: rounded to 8 significant bits (bf16's, to nearest even), then to the
 * table's dtype, which keeps it (fp16 holds a value of 8 significant bits from 2^-16 to its
 * largest, and rounds smaller ones to subnormals of at most 8 bits). The decode kernels
 * rebuild such an entry from two bytes (tensor/gemv.c). The rounding moves an entry by at
 * most 2^-9 of itself (2^-8 where it is cut toward zero below fp16's largest), far less than
 * the spacing of a row's 16 entries. */
static float palette_value(float value, ane_dtype table_dtype) {
    float rounded = ane_bf16_to_fp32(ane_fp32_to_bf16(value));
    if (!(fabsf(rounded) <= (table_dtype == ANE_FP16 ? 65504.0f : FLT_MAX))) { /* rounding up left the range */
        uint32_t bits;
        memcpy(&bits, &value, sizeof bits);
        rounded = ane_bf16_to_fp32((uint16_t)(bits >> 16)); /* toward zero */
    }
    return table_value(rounded, table_dtype);
}

enum { HISTOGRAM_BINS = 4096, COARSE_BINS = 64, LLOYD_ROUNDS = 40 };

/* A row's values on a coarse histogram (COARSE_BINS equal widths), its occupied bins in order
 * as prefix sums: over bins 0 .. j-1, count[j] values summing to sum[j], their squares to
 * squares[j]. */
typedef struct coarse_histogram {
    int occupied;
    double count[COARSE_BINS + 1], sum[COARSE_BINS + 1], squares[COARSE_BINS + 1];
} coarse_histogram;

/* The squared error of bins i .. j-1 (i < j) about their mean. */
static double cluster_error(const coarse_histogram *h, int i, int j) {
    double n = h->count[j] - h->count[i], s = h->sum[j] - h->sum[i];
    return h->squares[j] - h->squares[i] - s * s / n;
}

/* One layer of the dynamic programme below: error[j] = the least squared error of bins 0 ..
 * j-1 in c clusters, for j in first .. last, given fewer[i] = that of bins 0 .. i-1 in c - 1
 * clusters; cut[j] = where the last cluster starts. The best cut does not move left as j grows
 * (1-D clusters are intervals), so the middle j's cut, searched in [low, high], bounds both
 * halves' searches (divide and conquer: O(bins log bins) a layer). */
static void cluster_layer(const coarse_histogram *h, int c, const double *fewer, double *error, int *cut, int first,
                          int last, int low, int high) {
    if (first > last) return;
    int j = (first + last) / 2, best_cut = low > c - 1 ? low : c - 1;
    double best = INFINITY;
    for (int i = best_cut; i <= high && i < j; i++) {
        double e = fewer[i] + cluster_error(h, i, j);
        if (e < best) best = e, best_cut = i;
    }
    error[j] = best, cut[j] = best_cut;
    cluster_layer(h, c, fewer, error, cut, first, j - 1, low, best_cut);
    cluster_layer(h, c, fewer, error, cut, j + 1, last, best_cut, high);
}

/* The means of the 16 clusters of least squared error on the coarse histogram (at least 16
 * occupied bins), ascending: 1-D k-means solved exactly by dynamic programming over its bins.
 * Lloyd's algorithm started at quantiles stops at a local optimum instead: on rows of 768
 * Gaussian values it left 22% more squared error than the optimum, this start then refined by
 * Lloyd's on the fine histogram 0.7% (numpy, 8 rows). */
static void best_coarse_clusters(const coarse_histogram *h, double *centroid /* [16] */) {
    double error[ANE_LUT4_ENTRIES][COARSE_BINS + 1];
    int cut[ANE_LUT4_ENTRIES][COARSE_BINS + 1];
    int m = h->occupied;
    for (int j = 1; j <= m; j++) error[0][j] = cluster_error(h, 0, j);
    for (int c = 2; c <= ANE_LUT4_ENTRIES; c++)
        cluster_layer(h, c, error[c - 2], error[c - 1], cut[c - 1], c, m, c - 1, m - 1);
    int end = m;
    for (int c = ANE_LUT4_ENTRIES; c >= 1; c--) {
        int start = c > 1 ? cut[c - 1][end] : 0;
        centroid[c - 1] = (h->sum[end] - h->sum[start]) / (h->count[end] - h->count[start]);
        end = start;
    }
}

/* 16 sorted palette values for one row: the exact best clusters of a coarse histogram of the
 * row, refined by Lloyd's algorithm on a fine one (each bin stands for its values' mean,
 * weighted by their count); a row of fewer than 16 occupied coarse bins starts at its
 * quantiles instead. */
static void palette_row(const float *w, int64_t k, ane_dtype table_dtype, float *palette /* [16] */) {
    float lo = w[0], hi = w[0];
    for (int64_t j = 1; j < k; j++) lo = w[j] < lo ? w[j] : lo, hi = w[j] > hi ? w[j] : hi;
    if (!(hi > lo)) {
        for (int c = 0; c < ANE_LUT4_ENTRIES; c++) palette[c] = palette_value(lo, table_dtype);
        return;
    }
    /* the fine histogram, kept zero between rows: only the bins marked in `used` are touched,
     * read in order into the occupied bins' means and prefix sums (over occupied bins 0 .. b-1:
     * before_count[b] values summing to before_sum[b]), and cleared again */
    static _Thread_local double fine_count[HISTOGRAM_BINS], fine_sum[HISTOGRAM_BINS], fine_squares[HISTOGRAM_BINS];
    static _Thread_local double mean[HISTOGRAM_BINS], before_count[HISTOGRAM_BINS + 1], before_sum[HISTOGRAM_BINS + 1];
    uint64_t used[HISTOGRAM_BINS / 64] = {0};
    double bins_per_unit = HISTOGRAM_BINS / ((double)hi - lo);
    for (int64_t j = 0; j < k; j++) {
        int64_t b = (int64_t)((w[j] - (double)lo) * bins_per_unit);
        b = b >= HISTOGRAM_BINS ? HISTOGRAM_BINS - 1 : b;
        fine_count[b] += 1, fine_sum[b] += w[j], fine_squares[b] += (double)w[j] * w[j];
        used[b / 64] |= (uint64_t)1 << (b % 64);
    }
    coarse_histogram h = {0};
    int occupied = 0, last_coarse = -1; /* (a row of k values occupies <= k fine bins) */
    before_count[0] = before_sum[0] = 0;
    for (int word = 0; word < HISTOGRAM_BINS / 64; word++)
        for (uint64_t bits = used[word]; bits; bits &= bits - 1) {
            int b = 64 * word + __builtin_ctzll(bits), coarse = b / (HISTOGRAM_BINS / COARSE_BINS);
            if (coarse != last_coarse) { /* a new occupied coarse bin */
                h.occupied++, last_coarse = coarse;
                h.count[h.occupied] = h.count[h.occupied - 1];
                h.sum[h.occupied] = h.sum[h.occupied - 1];
                h.squares[h.occupied] = h.squares[h.occupied - 1];
            }
            h.count[h.occupied] += fine_count[b], h.sum[h.occupied] += fine_sum[b];
            h.squares[h.occupied] += fine_squares[b];
            mean[occupied] = fine_sum[b] / fine_count[b];
            before_count[occupied + 1] = before_count[occupied] + fine_count[b];
            before_sum[occupied + 1] = before_sum[occupied] + fine_sum[b], occupied++;
            fine_count[b] = fine_sum[b] = fine_squares[b] = 0;
        }
    double centroid[ANE_LUT4_ENTRIES];
    if (h.occupied >= ANE_LUT4_ENTRIES) best_coarse_clusters(&h, centroid);
    else {
        int c = 0;
        for (int b = 0; b < occupied && c < ANE_LUT4_ENTRIES; b++)
            while (c < ANE_LUT4_ENTRIES && before_count[b + 1] >= (c + 0.5) * (double)k / ANE_LUT4_ENTRIES) centroid[c++] = mean[b];
        for (; c < ANE_LUT4_ENTRIES; c++) centroid[c] = hi;
    }
    /* Lloyd's rounds on the fine bins, as prefix sums: a cluster is the run of bins between two
     * midpoints of the centroids, found by binary search on the bins' means (ascending) */
    for (int round = 0; round < LLOYD_ROUNDS; round++) {
        int start = 0, moved = 0;
        for (int e = 0; e < ANE_LUT4_ENTRIES; e++) {
            int end = occupied; /* bins start .. end-1 are nearest centroid e: their means up to the midpoint */
            if (e < ANE_LUT4_ENTRIES - 1) {
                double midpoint = 0.5 * (centroid[e] + centroid[e + 1]);
                int low = start, high = occupied; /* the first bin past the midpoint, from start on */
                while (low < high) {
                    int middle = (low + high) / 2;
                    if (mean[middle] > midpoint) high = middle;
                    else low = middle + 1;
                }
                end = low;
            }
            if (end > start) { /* an empty cluster keeps its value */
                double updated = (before_sum[end] - before_sum[start]) / (before_count[end] - before_count[start]);
                moved |= updated != centroid[e];
                centroid[e] = updated;
            }
            start = end;
        }
        if (!moved) break;
    }
    for (int e = 0; e < ANE_LUT4_ENTRIES; e++) palette[e] = palette_value((float)centroid[e], table_dtype);
    for (int e = 1; e < ANE_LUT4_ENTRIES; e++) /* rounding keeps the order; an empty cluster may not */
        for (int f = e; f > 0 && palette[f] < palette[f - 1]; f--) {
            float t = palette[f];
            palette[f] = palette[f - 1], palette[f - 1] = t;
        }
}

/* Each element's index of its nearest palette value (palette sorted): the number of midpoints
 * between neighbouring entries below it (a tie at a midpoint takes the lower entry). */
static void lut4_row(const float *w, int64_t k, ane_dtype table_dtype, uint8_t *packed, float *palette) {
    palette_row(w, k, table_dtype, palette);
    float midpoint[ANE_LUT4_ENTRIES - 1];
    for (int e = 0; e < ANE_LUT4_ENTRIES - 1; e++) midpoint[e] = 0.5f * (palette[e] + palette[e + 1]);
    for (int64_t j = 0; j < k; j += 2) {
        unsigned even = 0, odd = 0;
        for (int e = 0; e < ANE_LUT4_ENTRIES - 1; e++) even += w[j] > midpoint[e], odd += w[j + 1] > midpoint[e];
        packed[j / 2] = (uint8_t)(even | odd << 4);
    }
}

/* ------------------------------------------------------------------ Q8_0, Q4_0 */

/* A row's blocks as ggml's reference quantizers make them (quantize.h); scales [k / 32]. */
static void q8_0_row(const float *w, int64_t k, int8_t *q, float *scales) {
    for (int64_t b = 0; b < k / ANE_ENCODING_BLOCK; b++) {
        const float *x = w + b * ANE_ENCODING_BLOCK;
        float peak = 0.0f;
        for (int j = 0; j < ANE_ENCODING_BLOCK; j++) peak = fabsf(x[j]) > peak ? fabsf(x[j]) : peak;
        float d = peak / 127.0f, inverse = d != 0.0f ? 1.0f / d : 0.0f;
        scales[b] = table_value(d, ANE_FP16);
        for (int j = 0; j < ANE_ENCODING_BLOCK; j++) q[b * ANE_ENCODING_BLOCK + j] = (int8_t)roundf(x[j] * inverse);
    }
}

static void q4_0_row(const float *w, int64_t k, uint8_t *packed, float *scales) {
    memset(packed, 0, (size_t)(k / 2));
    for (int64_t b = 0; b < k / ANE_ENCODING_BLOCK; b++) {
        const float *x = w + b * ANE_ENCODING_BLOCK;
        float peak = 0.0f, extreme = 0.0f; /* the largest magnitude, and the value that has it */
        for (int j = 0; j < ANE_ENCODING_BLOCK; j++)
            if (fabsf(x[j]) > peak) peak = fabsf(x[j]), extreme = x[j];
        float d = extreme / -8.0f, inverse = d != 0.0f ? 1.0f / d : 0.0f;
        scales[b] = table_value(d, ANE_FP16);
        for (int j = 0; j < ANE_ENCODING_BLOCK; j++) {
            int stored = (int)(int8_t)(x[j] * inverse + 8.5f); /* GGUF's unsigned code, x - 8 the weight's */
            stored = stored < 15 ? stored : 15;
            int64_t e = b * ANE_ENCODING_BLOCK + j;
            packed[e / 2] |= (uint8_t)(((unsigned)(stored - 8) & 15u) << (4 * (e & 1)));
        }
    }
}

/* ------------------------------------------------------------------ all */

typedef struct quantize_job {
    const float *weight; /* [rows, k] */
    int64_t k;
    ane_weight_encoding encoding;
    ane_dtype table_dtype;
    uint8_t *data;
    float *table;
} quantize_job;

static void quantize_range(void *context, int64_t first, int64_t last) {
    const quantize_job *job = context;
    int64_t width = ane_encoded_table_width(job->encoding, job->k), row_bytes = ane_encoded_data_bytes(job->encoding, 1, job->k);
    for (int64_t r = first; r < last; r++) {
        const float *w = job->weight + r * job->k;
        uint8_t *data = job->data + r * row_bytes;
        float *table = job->table + r * width;
        if (job->encoding == ANE_ENCODING_INT8) int8_row(w, job->k, job->table_dtype, (int8_t *)data, table);
        else if (job->encoding == ANE_ENCODING_LUT4) lut4_row(w, job->k, job->table_dtype, data, table);
        else if (job->encoding == ANE_ENCODING_Q8_0) q8_0_row(w, job->k, (int8_t *)data, table);
        else q4_0_row(w, job->k, data, table);
    }
}

ane_status ane_quantize_rows(const ane_tensor *weight, ane_weight_encoding encoding, ane_dtype table_dtype,
                             const char *name, ane_tensor *data, ane_tensor *table, ane_error *err) {
    memset(data, 0, sizeof *data);
    memset(table, 0, sizeof *table);
    if (!ane_encoding_name(encoding) || encoding == ANE_ENCODING_DENSE || encoding == ANE_ENCODING_Q6_K ||
        ane_encoding_is_shifted(encoding))
        return ane_fail(err, ANE_ERR_ARGUMENT, "weight '%s': %s is not an encoding anelua quantizes to (int8, int4, q8_0 "
                        "or q4_0)", name, ane_encoding_name(encoding) ? ane_encoding_name(encoding) : "an unknown encoding");
    if (weight->ndim < 1 || ane_dtype_kind_of(weight->dtype) != ANE_KIND_FLOAT)
        return ane_fail(err, ANE_ERR_ARGUMENT, "weight '%s': quantizing needs a float tensor of rank >= 1", name);
    int64_t rows = weight->shape[0], k = rows ? ane_tensor_numel(weight) / rows : 0;
    if (encoding == ANE_ENCODING_LUT4 && k % 2)
        return ane_fail(err, ANE_ERR_SHAPE, "weight '%s': int4 packs two indices a byte, so rows need an even length "
                        "(this one has %lld)", name, (long long)k);
    if (ane_encoding_is_blockwise(encoding) && (k % ANE_ENCODING_BLOCK || k == 0))
        return ane_fail(err, ANE_ERR_SHAPE, "weight '%s': %s quantizes whole blocks of %d, so rows need a length that is a "
                        "multiple of %d (this one has %lld)", name, ane_encoding_name(encoding), ANE_ENCODING_BLOCK,
                        ANE_ENCODING_BLOCK, (long long)k);
    ane_tensor values;
    ane_status status = ane_tensor_to(&values, weight, ANE_FP32, err);
    if (status) return status;
    const float *w = (const float *)ane_tensor_data(&values);
    int64_t outside;
    double value;
    ane_tensor_first_outside(&values, INFINITY, &outside, &value, NULL); /* contiguous fp32: cannot fail */
    if (outside >= 0) {
        const char *what = isnan(value) ? "NaN" : value > 0 ? "+inf" : "-inf";
        ane_tensor_release(&values);
        return ane_fail(err, ANE_ERR_ARGUMENT, "weight '%s' holds %s at element %lld: only finite weights quantize",
                        name, what, (long long)outside);
    }
    int64_t width = ane_encoded_table_width(encoding, k);
    int64_t data_shape[2] = {rows, ane_encoded_data_bytes(encoding, 1, k)}, table_shape[2] = {rows, width};
    ane_dtype data_dtype = encoding == ANE_ENCODING_INT8 || encoding == ANE_ENCODING_Q8_0 ? ANE_INT8 : ANE_UINT8;
    status = ane_tensor_empty(data, 2, data_shape, data_dtype, err);
    if (!status) status = ane_tensor_empty(table, width == 1 ? 1 : 2, table_shape, ANE_FP32, err);
    if (!status) {
        quantize_job job = {w, k, encoding, table_dtype, (uint8_t *)ane_tensor_data(data), (float *)ane_tensor_data(table)};
        ane_parallel_for(rows, encoding == ANE_ENCODING_LUT4 ? 4 : 64, quantize_range, &job);
    } else {
        ane_tensor_release(data);
        ane_tensor_release(table);
    }
    ane_tensor_release(&values);
    return status;
}

void ane_dequantize_span(ane_weight_encoding encoding, const void *data, const float *table, int64_t k, int64_t row,
                         int64_t from, int64_t count, float *out) {
    if (encoding == ANE_ENCODING_INT8) {
        const int8_t *q = (const int8_t *)data + row * k + from;
        float scale = table[row];
        for (int64_t j = 0; j < count; j++) out[j] = (float)q[j] * scale;
        return;
    }
    if (encoding == ANE_ENCODING_Q6_K) { /* each weight its 16's scale times its code, as blocks.c computes it */
        const float *scales = table + row * (k / ANE_Q6_K_GROUP);
        const uint8_t *blocks = (const uint8_t *)data + row * (k / ANE_Q6_K_WEIGHTS) * ANE_Q6_K_BYTES;
        for (int64_t j = from; j < from + count; j++) out[j - from] = scales[j / ANE_Q6_K_GROUP] * (float)ane_q6_code(blocks, j);
        return;
    }
    if (encoding == ANE_ENCODING_Q4_K) {
        const uint8_t *packed = (const uint8_t *)data + row * (k / 2);
        for (int64_t j = from; j < from + count; j++) out[j - from] = ane_q4_k_weight(packed, table + row * (k / 16), j);
        return;
    }
    if (encoding == ANE_ENCODING_Q5_K) {
        const uint8_t *codes = (const uint8_t *)data + ane_encoded_data_bytes(encoding, row, k);
        for (int64_t j = from; j < from + count; j++)
            out[j - from] = ane_shifted_weight(ane_q5_k_code(codes, j), table + row * (k / 16), j);
        return;
    }
    if (ane_encoding_is_blockwise(encoding)) { /* each weight its block's scale times its code, exact in fp32 */
        const float *scales = table + row * (k / ANE_ENCODING_BLOCK);
        const int8_t *q = (const int8_t *)data + row * k;
        const uint8_t *packed = (const uint8_t *)data + row * (k / 2);
        for (int64_t j = from; j < from + count; j++)
            out[j - from] = scales[j / ANE_ENCODING_BLOCK] * (float)(encoding == ANE_ENCODING_Q8_0 ? q[j] : ane_q4_code(packed, j));
        return;
    }
    ane_kernels()->lut4_decode((const uint8_t *)data + (row * k + from) / 2, table + row * ANE_LUT4_ENTRIES, count, out);
}

void ane_dequantize_rows(ane_weight_encoding encoding, const void *data, const float *table, int64_t k, int64_t first,
                         int64_t count, float *out) {
    for (int64_t r = 0; r < count; r++) ane_dequantize_span(encoding, data, table, k, first + r, 0, k, out + r * k);
}
