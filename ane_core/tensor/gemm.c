/* Weight matrices times blocks of activations (gemm.h).
 *
 * The product runs in rounds, a block of 256 columns by a span of 256 of k each, the spans of
 * a block in order. In a round, the rows of W are taken a panel at a time (12 rows with
 * AVX-512, 6 with AVX2; panels split over the threads): the panel's span is decoded into
 * `panel` [panel rows, SPAN] fp32 (12 KB, in L1), then every tile of the block's columns
 * (32 / 16 wide) runs over it: the tile's sums stay in registers (24 / 12 vectors), each step
 * loads one row of x's tile and multiplies it by one weight of each panel row (broadcast). A
 * tile's sums go to y after the span and are loaded again for the next, so each sum is one
 * FMA chain over k in order. Each weight is decoded once per block of columns; the round's
 * part of x (SPAN x 256 floats) is read from memory once and from cache by every panel. */
#include "gemm.h"

#include <string.h>

#include "../base/cpu.h"
#include "../base/fp16.h"
#include "../base/parallel.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

enum { SPAN = 256, MAX_PANEL_ROWS = 12, COLUMN_BLOCK = 256 };

/* y [rows, columns] (+)= panel [rows of the kernel's panel, SPAN] x x [span, columns] for a
 * tile: `rows` <= the kernel's panel rows are stored, `columns` <= its tile width are read
 * and stored; `first`: the sums start at +0, else at y's values. */
typedef void (*tile_kernel)(float *y, int64_t ldy, int rows, int64_t columns, const float *panel, const float *x,
                            int64_t ldx, int64_t span, int first);

typedef struct kernel_shape {
    int panel_rows, tile_columns;
    tile_kernel tile;
} kernel_shape;

#if defined(__x86_64__)
#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))

static __mmask16 lanes_mask(int64_t count) { /* the first min(count, 16) of 16 lanes; none for count <= 0 */
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? (__mmask16)0 : (__mmask16)((1u << count) - 1);
}

AVX512 static void tile_avx512(float *y, int64_t ldy, int rows, int64_t columns, const float *panel, const float *x,
                               int64_t ldx, int64_t span, int first) {
    enum { R = 12 };
    __mmask16 low = lanes_mask(columns), high = lanes_mask(columns - 16);
    __m512 sums[R][2];
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) {
        int load = !first && r < rows;
        sums[r][0] = load ? _mm512_maskz_loadu_ps(low, y + r * ldy) : _mm512_setzero_ps();
        sums[r][1] = load ? _mm512_maskz_loadu_ps(high, y + r * ldy + 16) : _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < span; j++) {
        __m512 x_low = _mm512_maskz_loadu_ps(low, x + j * ldx), x_high = _mm512_maskz_loadu_ps(high, x + j * ldx + 16);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512 weight = _mm512_set1_ps(panel[r * SPAN + j]);
            sums[r][0] = _mm512_fmadd_ps(weight, x_low, sums[r][0]);
            sums[r][1] = _mm512_fmadd_ps(weight, x_high, sums[r][1]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < R; r++) { /* (a loop of fixed count keeps `sums` in registers) */
        if (r >= rows) break;
        _mm512_mask_storeu_ps(y + r * ldy, low, sums[r][0]);
        _mm512_mask_storeu_ps(y + r * ldy + 16, high, sums[r][1]);
    }
}

/* AVX2's masked loads take a vector of lane masks: the first min(count, 8) of 8 lanes. */
AVX2 static __m256i lanes_mask8(int64_t count) {
    static const int32_t ones_then_zeros[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    int64_t n = count >= 8 ? 8 : count <= 0 ? 0 : count;
    return _mm256_loadu_si256((const __m256i *)(ones_then_zeros + 8 - n));
}

/* (masked: a tile narrower than 16 columns; whole tiles load x unmasked, which leaves AVX2's
 * 16 registers to the 12 sums, x's two vectors and the weight) */
AVX2 static inline __attribute__((always_inline)) void tile_avx2_inline(float *y, int64_t ldy, int rows, int64_t columns,
                                                                        const float *panel, const float *x, int64_t ldx,
                                                                        int64_t span, int first, int masked) {
    enum { R = 6 };
    __m256i low = lanes_mask8(columns), high = lanes_mask8(columns - 8);
    __m256 sums[R][2];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        int load = !first && r < rows;
        sums[r][0] = load ? _mm256_maskload_ps(y + r * ldy, low) : _mm256_setzero_ps();
        sums[r][1] = load ? _mm256_maskload_ps(y + r * ldy + 8, high) : _mm256_setzero_ps();
    }
    for (int64_t j = 0; j < span; j++) {
        __m256 x_low = masked ? _mm256_maskload_ps(x + j * ldx, low) : _mm256_loadu_ps(x + j * ldx);
        __m256 x_high = masked ? _mm256_maskload_ps(x + j * ldx + 8, high) : _mm256_loadu_ps(x + j * ldx + 8);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m256 weight = _mm256_broadcast_ss(panel + r * SPAN + j);
            sums[r][0] = _mm256_fmadd_ps(weight, x_low, sums[r][0]);
            sums[r][1] = _mm256_fmadd_ps(weight, x_high, sums[r][1]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        if (r >= rows) break;
        _mm256_maskstore_ps(y + r * ldy, low, sums[r][0]);
        _mm256_maskstore_ps(y + r * ldy + 8, high, sums[r][1]);
    }
}

AVX2 static void tile_avx2(float *y, int64_t ldy, int rows, int64_t columns, const float *panel, const float *x,
                           int64_t ldx, int64_t span, int first) {
    if (columns >= 16) tile_avx2_inline(y, ldy, rows, columns, panel, x, ldx, span, first, 0);
    else tile_avx2_inline(y, ldy, rows, columns, panel, x, ldx, span, first, 1);
}

static const kernel_shape avx512_shape = {12, 32, tile_avx512};
static const kernel_shape avx2_shape = {6, 16, tile_avx2};
#endif

static const kernel_shape *kernel_for_cpu(void) {
#if defined(__x86_64__)
    if (ane_cpu_has_avx512f()) return &avx512_shape;
    if (ane_cpu_has_avx2_fma_f16c()) return &avx2_shape;
#endif
    return NULL;
}

int ane_gemm_weights_available(void) { return kernel_for_cpu() != NULL; }

/* Elements [from, from + count) of W's row `row` as fp32. */
static void decode_span(const ane_weight_rows *w, int64_t k, int64_t row, int64_t from, int64_t count,
                        float *out /* [count] */) {
    int64_t stride = w->row_stride ? w->row_stride : k; /* dense */
    if (w->encoding != ANE_ENCODING_DENSE) {
        ane_dequantize_span(w->encoding, w->data, w->table, k, row, from, count, out);
    } else if (w->transposed) { /* column `row` of W^T: one element from each of its rows */
        const float *column = (const float *)w->data + from * stride + row;
        for (int64_t j = 0; j < count; j++) out[j] = column[j * stride];
    } else if (w->half) {
        ane_fp16_to_fp32_n(out, (const uint16_t *)w->data + row * stride + from, (size_t)count);
    } else {
        memcpy(out, (const float *)w->data + row * stride + from, (size_t)count * sizeof *out);
    }
}

typedef struct gemm_job {
    const kernel_shape *kernel;
    const ane_weight_rows *w;
    const float *x;
    float *y;
    int64_t ldx, ldy, rows, k;
    int64_t column, columns; /* this round's block of columns */
    int64_t from, span;      /* and of k */
} gemm_job;

/* Panels first .. last - 1 over this round's span and columns. */
static void panels(void *context, int64_t first, int64_t last) {
    const gemm_job *job = context;
    const kernel_shape *kernel = job->kernel;
    float panel[MAX_PANEL_ROWS * SPAN] __attribute__((aligned(64))); /* [panel rows, SPAN] */
    for (int64_t p = first; p < last; p++) {
        int64_t top = p * kernel->panel_rows;
        int rows = (int)(job->rows - top < kernel->panel_rows ? job->rows - top : kernel->panel_rows);
        for (int r = 0; r < kernel->panel_rows; r++) { /* rows past the matrix: zeros, never stored */
            if (r < rows) decode_span(job->w, job->k, top + r, job->from, job->span, panel + r * SPAN);
            else memset(panel + r * SPAN, 0, (size_t)job->span * sizeof *panel);
        }
        for (int64_t c = job->column; c < job->column + job->columns; c += kernel->tile_columns) {
            int64_t width = job->column + job->columns - c < kernel->tile_columns ? job->column + job->columns - c
                                                                                  : kernel->tile_columns;
            kernel->tile(job->y + top * job->ldy + c, job->ldy, rows, width, panel, job->x + job->from * job->ldx + c,
                         job->ldx, job->span, job->from == 0);
        }
    }
}

void ane_gemm_weights_strided(float *y, int64_t ldy, const ane_weight_rows *w, const float *x, int64_t ldx, int64_t rows,
                              int64_t k, int64_t columns) {
    const kernel_shape *kernel = kernel_for_cpu();
    if (!kernel || rows <= 0 || columns <= 0) return;
    if (k <= 0) { /* empty sums */
        for (int64_t r = 0; r < rows; r++) memset(y + r * ldy, 0, (size_t)columns * sizeof *y);
        return;
    }
    /* Rounds of COLUMN_BLOCK columns by SPAN of k, the spans of a block in order: every panel
     * of a round reads the same SPAN x COLUMN_BLOCK floats of x (256 KB), which stay in each
     * core's cache (all columns at once fell from 190 to 80-150 GFLOP/s past ~1,000). */
    gemm_job job = {kernel, w, x, y, ldx, ldy, rows, k, 0, 0, 0, 0};
    for (job.column = 0; job.column < columns; job.column += COLUMN_BLOCK) {
        job.columns = columns - job.column < COLUMN_BLOCK ? columns - job.column : COLUMN_BLOCK;
        for (job.from = 0; job.from < k; job.from += SPAN) {
            job.span = k - job.from < SPAN ? k - job.from : SPAN;
            ane_parallel_for((rows + kernel->panel_rows - 1) / kernel->panel_rows, 1, panels, &job);
        }
    }
}

void ane_gemm_weights(float *y, const ane_weight_rows *w, const float *x, int64_t rows, int64_t k, int64_t columns) {
    ane_gemm_weights_strided(y, columns, w, x, columns, rows, k, columns);
}
