/* y = W x with W in fp16 and x, y in fp32: the decode kernel. It reads each weight once as
 * 2 bytes, converts in registers (F16C) and accumulates in fp32 (FMA), rows split across
 * threads (OpenMP where available). */
#ifndef ANE_TENSOR_GEMV_FP16_H
#define ANE_TENSOR_GEMV_FP16_H

#include <stdint.h>

void ane_gemv_fp16(float *y /* [rows] */, const uint16_t *w /* [rows, k] */, const float *x /* [k] */, int64_t rows,
                   int64_t k);

#endif
