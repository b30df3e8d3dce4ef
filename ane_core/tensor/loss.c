/* Losses on host tensors: the mean cross-entropy of a batch of logits and its gradient
 * (see tensor.h). */
#include <math.h>

#include "tensor.h"
#include "vector_math.h"

ane_status ane_cross_entropy(const ane_tensor *logits, const int64_t *targets, double scale, double *loss_sum,
                             ane_tensor *grad, ane_error *err) {
    if (logits->ndim != 2) return ane_fail(err, ANE_ERR_SHAPE, "cross_entropy needs logits [N, V]");
    int64_t n = logits->shape[0], v = logits->shape[1];
    ane_tensor flat;
    ane_status status = ane_tensor_contiguous_fp32(&flat, logits, err);
    if (status) return status;
    ane_tensor result;
    status = ane_tensor_empty(&result, 2, logits->shape, ANE_FP32, err);
    if (status) {
        ane_tensor_release(&flat);
        return status;
    }
    const float *z = (const float *)ane_tensor_data(&flat);
    float *g = (float *)ane_tensor_data(&result);
    double total = 0;
    for (int64_t row = 0; row < n && !status; row++) {
        int64_t target = targets[row];
        if (target < 0 || target >= v) {
            status = ane_fail(err, ANE_ERR_RANGE, "target %lld at position %lld is outside 0..%lld", (long long)target,
                              (long long)row + 1, (long long)v - 1);
            break;
        }
        const float *zr = z + row * v;
        float *gr = g + row * v;
        float peak = zr[0];
        for (int64_t j = 1; j < v; j++) peak = zr[j] > peak ? zr[j] : peak;
        /* e_j = exp(z_j - peak) once, kept in the gradient row; the sum in double */
        ane_exp_shifted_sum_n(gr, zr, peak, v);
        double sum = 0;
        for (int64_t j = 0; j < v; j++) sum += gr[j];
        double log_sum = log(sum) + peak;
        total += log_sum - zr[target];
        float softmax_scale = (float)(scale / sum); /* dz_j = (softmax_j - [j == target]) * scale */
        for (int64_t j = 0; j < v; j++) gr[j] *= softmax_scale;
        gr[target] -= (float)scale;
    }
    ane_tensor_release(&flat);
    if (status) {
        ane_tensor_release(&result);
        return status;
    }
    *loss_sum = total;
    *grad = result;
    return ANE_OK;
}
