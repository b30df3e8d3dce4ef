/* What the x86 kernel files share (internal to arch/x86): the grouped row kernels' driver and
 * the AVX2 4-bit rows the AVX-512 levels fall back on for rows shorter than their chunks. */
#ifndef ANE_TENSOR_ARCH_X86_H
#define ANE_TENSOR_ARCH_X86_H

#include <stdint.h>

#include "../../kernels.h"

/* A kernel of ROWS_AVX512 over a job's rows (x: the job's x, or x_split); a row's weights are
 * row_bytes apart, its table entries table_stride. */
typedef void (*rows_kernel)(const void *w, int64_t row_bytes, int64_t k, const float *x, const float *tables,
                            int64_t table_stride, float *y, int64_t y_stride, int count);

typedef struct float_groups {
    const gemv_job *job;
    const float *x;
    rows_kernel kernel;
    int64_t row_bytes;
    const float *tables; /* the rows' tables (the job's, or its palettes' bf16 words), or NULL */
    int64_t table_stride;
} float_groups;

static inline void float_group(const void *context, int64_t row, int64_t apart, int count) {
    const float_groups *g = context;
    const float *tables = g->tables ? g->tables + row * g->table_stride : NULL;
    g->kernel((const char *)g->job->w + row * g->row_bytes, apart * g->row_bytes, g->job->k, g->x, tables,
              apart * g->table_stride, g->job->y + row, apart, count);
}

static inline void rows_in_groups(const gemv_job *job, const float *x, int64_t first, int64_t last, rows_kernel kernel,
                           int64_t row_bytes, const float *tables, int64_t table_stride) {
    float_groups groups = {job, x, kernel, row_bytes, tables, table_stride};
    in_row_groups(first, last, float_group, &groups);
}

/* 4-bit rows through AVX2: with x_split (AVX2's split order) the two-byte kernel, else the exact lookup. */
void x86_rows_lut4_avx2(void *context, int64_t first, int64_t last);

#endif
