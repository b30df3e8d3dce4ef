/* Weight matrices times blocks of activations, the products of a prefill:
 * y [rows, columns] = W [rows, k] x [k, columns], with W read in the form it is stored in
 * (fp32, fp16 bits, int8 rows and their scales, 4-bit rows and their palettes) and decoded a
 * panel of rows at a time into a cache-sized buffer, never as a whole fp32 copy and without
 * BLAS's packing of it. Columns stay where they are (x and y row-major, columns contiguous).
 * Panels are split over the helper threads of base/parallel.h.
 *
 * Every y element is the fp32 fused multiply-add chain over j = 0 .. k-1 in order, starting at
 * +0: y = fma(w_j, x_j, y). It does not depend on the CPU's kernel, the thread split or the
 * other rows and columns. */
#ifndef ANE_TENSOR_GEMM_H
#define ANE_TENSOR_GEMM_H

#include <stdint.h>

#include "quantize.h"

/* A weight matrix [rows, k] as stored. */
typedef struct ane_weight_rows {
    ane_weight_encoding encoding; /* ANE_ENCODING_DENSE: `data` holds fp32 values, or fp16 bits if `half` */
    int half;
    const void *data;   /* dense [rows, k]; or the codes of quantize.h */
    const float *table; /* int8: scales [rows]; LUT4: palettes [rows, 16]; dense: unused */
    int64_t row_stride; /* dense: elements from one stored row to the next; 0 for k (not when transposed) */
    int transposed;     /* dense fp32 only: `data` holds W^T, k rows of at least `rows` elements */
} ane_weight_rows;

/* Whether this CPU has a kernel for ane_gemm_weights (x86-64 with AVX-512F, or AVX2 + FMA +
 * F16C); without one callers keep their other product. */
int ane_gemm_weights_available(void);

void ane_gemm_weights(float *y /* [rows, columns] */, const ane_weight_rows *w, const float *x /* [k, columns] */,
                      int64_t rows, int64_t k, int64_t columns);

/* The same with x's rows ldx elements apart and y's ldy (both >= columns). */
void ane_gemm_weights_strided(float *y /* [rows, ldy] */, int64_t ldy, const ane_weight_rows *w,
                              const float *x /* [k, ldx] */, int64_t ldx, int64_t rows, int64_t k, int64_t columns);

#endif
