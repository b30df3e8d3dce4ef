/* Optimizer kernels on fp32 host tensors (master weights stay fp32 on the CPU). */
#ifndef ANE_TENSOR_OPTIM_H
#define ANE_TENSOR_OPTIM_H

#include "tensor.h"

typedef struct ane_adamw_options {
    double lr, beta1, beta2, eps, weight_decay;
    double grad_scale;       /* g is multiplied by this first (gradient clipping); 0 means 1 */
    int64_t step;            /* 1-based, for the bias correction */
} ane_adamw_options;

/* One AdamW step (decoupled weight decay, bias-corrected moments), in place on contiguous
 * fp32 param, m and v of the same size as grad:
 *   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
 *   p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd p) */
ane_status ane_adamw_step(ane_tensor *param, const ane_tensor *grad, ane_tensor *m, ane_tensor *v,
                          const ane_adamw_options *options, ane_error *err);

/* The sum of squares of a tensor (fp64 accumulation), for global-norm clipping. */
ane_status ane_sum_of_squares(const ane_tensor *t, double *out, ane_error *err);

/* Training stability: in place on a contiguous fp32 or fp16 tensor, values beyond +-limit
 * (infinities included) become +-limit and NaN becomes 0; counts both kinds. */
ane_status ane_clamp_activations(ane_tensor *t, double limit, int64_t *clamped, int64_t *nans, ane_error *err);

#endif
