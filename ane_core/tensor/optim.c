/* Optimizer kernels (see optim.h). */
#include "optim.h"

#include <math.h>

#include "../base/fp16.h"
#include "../base/parallel.h"
#include "kernels.h"

static ane_status check_fp32_contiguous(const ane_tensor *t, const char *what, int64_t numel, ane_error *err) {
    if (t->dtype != ANE_FP32 || !ane_tensor_is_contiguous(t) || ane_tensor_numel(t) != numel)
        return ane_fail(err, ANE_ERR_ARGUMENT, "adamw: %s must be a contiguous fp32 tensor of %lld elements", what,
                        (long long)numel);
    if (t->storage->readonly) return ane_fail(err, ANE_ERR_ARGUMENT, "adamw: %s is read-only (copy it first)", what);
    return ANE_OK;
}

/* Gradients are read in blocks of this many elements (fp16 ones converted into a stack
 * buffer, so an fp16 gradient never needs an fp32 copy of its own). */
enum { GRADIENT_BLOCK = 1024 };

/* count elements of contiguous t from `start` as fp32: in place for fp32, converted into
 * `block` for fp16 (half != 0). */
static const float *fp32_block(const ane_tensor *t, int half, int64_t start, int64_t count, float *block) {
    if (!half) return (const float *)ane_tensor_data(t) + start;
    ane_fp16_to_fp32_n(block, (const uint16_t *)ane_tensor_data(t) + start, (size_t)count);
    return block;
}

typedef struct adamw_job {
    float *p, *m, *v;
    const ane_tensor *g; /* contiguous fp32 or fp16 */
    int half;
    adamw_constants constants;
} adamw_job;

/* The update of elements first..last-1 (each element's arithmetic is independent), a block of
 * gradients at a time through the level's kernel (kernels.h). */
static void adamw_range(void *context, int64_t first, int64_t last) {
    const adamw_job *j = context;
    float block[GRADIENT_BLOCK];
    void (*adamw)(const adamw_constants *, float *, float *, float *, const float *, int64_t) = ane_kernels()->adamw;
    for (int64_t start = first; start < last; start += GRADIENT_BLOCK) {
        int64_t count = start + GRADIENT_BLOCK < last ? GRADIENT_BLOCK : last - start;
        adamw(&j->constants, j->p + start, j->m + start, j->v + start, fp32_block(j->g, j->half, start, count, block), count);
    }
}

ane_status ane_adamw_step(ane_tensor *param, const ane_tensor *grad, ane_tensor *m, ane_tensor *v,
                          const ane_adamw_options *o, ane_error *err) {
    int64_t n = ane_tensor_numel(grad);
    ane_status status = check_fp32_contiguous(param, "param", n, err);
    if (!status) status = check_fp32_contiguous(m, "m", n, err);
    if (!status) status = check_fp32_contiguous(v, "v", n, err);
    if (status) return status;
    if (o->step < 1) return ane_fail(err, ANE_ERR_ARGUMENT, "adamw: step must start at 1");
    ane_tensor g32;
    int half = grad->dtype == ANE_FP16 && ane_tensor_is_contiguous(grad);
    if (half || (grad->dtype == ANE_FP32 && ane_tensor_is_contiguous(grad))) ane_tensor_share(&g32, grad);
    else if ((status = ane_tensor_to(&g32, grad, ANE_FP32, err))) return status;
    double c1 = 1.0 - pow(o->beta1, (double)o->step), c2 = 1.0 - pow(o->beta2, (double)o->step);
    adamw_job job = {
        .p = (float *)ane_tensor_data(param), .m = (float *)ane_tensor_data(m), .v = (float *)ane_tensor_data(v),
        .g = &g32, .half = half,
        .constants = {.b1 = (float)o->beta1, .b2 = (float)o->beta2, .lr = (float)o->lr, .eps = (float)o->eps,
                      .wd = (float)o->weight_decay, .inv_c1 = (float)(1.0 / c1), .inv_c2 = (float)(1.0 / c2),
                      .scale = o->grad_scale != 0 ? (float)o->grad_scale : 1.0f},
    };
    ane_parallel_for(n, 1 << 16, adamw_range, &job); /* memory-bound: every core's share of the bandwidth */
    ane_tensor_release(&g32);
    return ANE_OK;
}

ane_status ane_sum_of_squares(const ane_tensor *t, double *out, ane_error *err) {
    ane_tensor flat;
    ane_status status = ANE_OK;
    int half = t->dtype == ANE_FP16 && ane_tensor_is_contiguous(t); /* read in blocks, no fp32 copy */
    if (half || (t->dtype == ANE_FP32 && ane_tensor_is_contiguous(t))) ane_tensor_share(&flat, t);
    else if ((status = ane_tensor_to(&flat, t, ANE_FP32, err))) return status;
    /* Eight fp32 lanes over blocks of GRADIENT_BLOCK elements (128 terms per lane: relative
     * rounding error ~1e-5 at worst, far below what clipping needs; the lanes vectorize),
     * each block added up in double. */
    double sum = 0;
    int64_t n = ane_tensor_numel(&flat);
    float block[GRADIENT_BLOCK];
    for (int64_t start = 0; start < n; start += GRADIENT_BLOCK) {
        int64_t count = start + GRADIENT_BLOCK < n ? GRADIENT_BLOCK : n - start;
        const float *x = fp32_block(&flat, half, start, count, block);
        float lanes[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= count; i += 8)
            for (int lane = 0; lane < 8; lane++) lanes[lane] += x[i + lane] * x[i + lane];
        for (; i < count; i++) lanes[0] += x[i] * x[i];
        for (int lane = 0; lane < 8; lane++) sum += lanes[lane];
    }
    ane_tensor_release(&flat);
    *out = sum;
    return ANE_OK;
}

/* n values `stride` elements apart (1: a contiguous row) clamped in place; counts into *over
 * and *bad. */
static void clamp_values(char *base, ane_dtype dtype, int64_t n, int64_t stride, float hi, int64_t *over, int64_t *bad) {
    if (dtype == ANE_FP32) {
        float *x = (float *)base;
        for (int64_t i = 0; i < n * stride; i += stride) {
            float v = x[i];
            if (v != v) { x[i] = 0; (*bad)++; }
            else if (v > hi || v < -hi) { (*over)++; x[i] = v > 0 ? hi : -hi; }
        }
        return;
    }
    uint16_t *x = (uint16_t *)base;
    uint16_t hi16 = ane_fp32_to_fp16(hi);
    for (int64_t i = 0; i < n * stride; i += stride) {
        uint16_t magnitude = x[i] & 0x7FFF, sign = x[i] & 0x8000;
        if (magnitude > 0x7C00) { x[i] = 0; (*bad)++; }                        /* NaN */
        else if (magnitude > (hi16 & 0x7FFF)) {                                /* fp16 order = magnitude order */
            (*over)++;
            x[i] = (uint16_t)(sign | (hi16 & 0x7FFF));
        }
    }
}

/* The leading dims of t (all but the last) as one run of rows `*row_stride` elements apart, when
 * they walk that way (a slice of a one-position program's [1, C, 1, 32] outputs); 0 if not. */
static int rows_in_one_run(const ane_tensor *t, int64_t *rows, int64_t *row_stride) {
    *rows = 1, *row_stride = 0;
    for (int d = t->ndim - 2; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (*rows > 1 && t->strides[d] != *row_stride * *rows) return 0;
        if (*rows == 1) *row_stride = t->strides[d];
        *rows *= t->shape[d];
    }
    return 1;
}

ane_status ane_clamp_activations(ane_tensor *t, double limit, int64_t *clamped, int64_t *nans, ane_error *err) {
    int last = t->ndim - 1;
    int rows_contiguous = t->ndim == 0 || t->strides[last] == 1 || t->shape[last] == 1;
    if (!rows_contiguous || (t->dtype != ANE_FP32 && t->dtype != ANE_FP16))
        return ane_fail(err, ANE_ERR_ARGUMENT, "clamp: the tensor must be fp32 or fp16 with a contiguous last axis");
    if (t->storage->readonly) return ane_fail(err, ANE_ERR_ARGUMENT, "clamp: the tensor is read-only (copy it first)");
    if (!(limit > 0)) return ane_fail(err, ANE_ERR_ARGUMENT, "clamp: the limit must be positive");
    int64_t over = 0, bad = 0, n = ane_tensor_numel(t), rows, row_stride;
    float hi = (float)limit;
    size_t size = ane_dtype_size(t->dtype);
    if (ane_tensor_is_contiguous(t) || n == 0) { /* one row */
        if (n) clamp_values(ane_tensor_data(t), t->dtype, n, 1, hi, &over, &bad);
    } else if (rows_in_one_run(t, &rows, &row_stride) && t->shape[last] == 1) { /* a column */
        clamp_values(ane_tensor_data(t), t->dtype, rows, row_stride, hi, &over, &bad);
    } else { /* row by row along the last axis */
        int64_t index[ANE_MAX_DIMS] = {0};
        for (;;) {
            int64_t offset = 0;
            for (int d = 0; d < last; d++) offset += index[d] * t->strides[d];
            clamp_values(ane_tensor_data(t) + (size_t)offset * size, t->dtype, t->shape[last], 1, hi, &over, &bad);
            int d = last - 1;
            while (d >= 0 && ++index[d] == t->shape[d]) index[d--] = 0;
            if (d < 0) break;
        }
    }
    *clamped = over;
    *nans = bad;
    return ANE_OK;
}
