/* Matrix-vector products y = W x for decoding, x and y in fp32, W in fp16 (read as 2 bytes,
 * converted in registers with F16C, accumulated with FMA) or in fp32. Rows are split over
 * the helper threads of base/parallel.h rather than BLAS's: BLAS threads keep polling long
 * after a call and would take the second core from the next product. */
#ifndef ANE_TENSOR_GEMV_H
#define ANE_TENSOR_GEMV_H

#include <stdint.h>

void ane_gemv_fp16(float *y /* [rows] */, const uint16_t *w /* [rows, k] */, const float *x /* [k] */, int64_t rows,
                   int64_t k);

void ane_gemv_fp32(float *y /* [rows] */, const float *w /* [rows, k] */, const float *x /* [k] */, int64_t rows,
                   int64_t k);

#endif
