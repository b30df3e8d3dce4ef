/* Host tensors: N-D (up to ANE_MAX_DIMS), row-major with element strides, on refcounted
 * storage. Views (slice, transpose, reshape of contiguous data) share the storage.
 *
 * An ane_tensor is a small value type: copying the struct does not add a reference, so
 * every tensor filled in by a function below owns one reference and must be given back
 * with ane_tensor_release(). Output parameters come first, as in the kernels. */
#ifndef ANE_TENSOR_TENSOR_H
#define ANE_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "dtype.h"
#include "storage.h"

#define ANE_MAX_DIMS 8

typedef struct ane_tensor {
    ane_storage *storage;
    size_t offset;                  /* bytes from storage->data to element [0, ..., 0] */
    ane_dtype dtype;
    int ndim;                       /* 0 for a scalar */
    int64_t shape[ANE_MAX_DIMS];    /* [ndim] */
    int64_t strides[ANE_MAX_DIMS];  /* [ndim], in elements */
} ane_tensor;

typedef enum ane_binary_op { ANE_BINARY_ADD, ANE_BINARY_SUB, ANE_BINARY_MUL, ANE_BINARY_DIV } ane_binary_op;

/* --- creation and lifetime --- */
ane_status ane_tensor_zeros(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                            ane_error *err);
/* Uninitialized contents, for results that are written in full right away (no page
 * faults from fresh zeroed mappings: the memory comes from malloc's free lists). */
ane_status ane_tensor_empty(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype, ane_error *err);
/* Zeroed, in storage that lasts as long as a model (ane_storage_new_lasting: 2 MB pages): for
 * weights, which every decoding step reads again. */
ane_status ane_tensor_lasting(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype, ane_error *err);
/* A tensor over existing storage (takes a new reference); checks the extent fits. */
ane_status ane_tensor_on_storage(ane_tensor *out, ane_storage *storage, size_t offset, int ndim,
                                 const int64_t *shape, const int64_t *strides, ane_dtype dtype,
                                 ane_error *err);
void ane_tensor_release(ane_tensor *t);
/* Another reference to the same view. */
void ane_tensor_share(ane_tensor *out, const ane_tensor *src);

/* --- queries --- */
int64_t ane_tensor_numel(const ane_tensor *t);
int ane_tensor_is_contiguous(const ane_tensor *t);
char *ane_tensor_data(const ane_tensor *t); /* address of element [0, ..., 0] */
/* Checks each index against the shape and returns the element's address. */
ane_status ane_tensor_element(const ane_tensor *t, const int64_t *index, char **out, ane_error *err);
int ane_shapes_equal(const ane_tensor *a, const ane_tensor *b);
/* "[2, 3, 4]" into buf. */
const char *ane_shape_string(char *buf, size_t size, int ndim, const int64_t *shape);

/* --- views (share storage) --- */
/* Elements start..stop-1 (0-based) along dim. */
ane_status ane_tensor_slice(ane_tensor *out, const ane_tensor *src, int dim, int64_t start,
                            int64_t stop, ane_error *err);
ane_status ane_tensor_transpose(ane_tensor *out, const ane_tensor *src, int dim0, int dim1,
                                ane_error *err);
/* A view when src is contiguous, otherwise a contiguous copy. One dim may be -1. */
ane_status ane_tensor_reshape(ane_tensor *out, const ane_tensor *src, int ndim,
                              const int64_t *shape, ane_error *err);

/* --- copies and conversions --- */
/* dst[...] = src[...] converted to dst's dtype; shapes must match, dst must be writable. */
ane_status ane_tensor_copy_into(ane_tensor *dst, const ane_tensor *src, ane_error *err);
/* A new contiguous tensor of `dtype` holding src's values. */
ane_status ane_tensor_to(ane_tensor *out, const ane_tensor *src, ane_dtype dtype, ane_error *err);
ane_status ane_tensor_fill(ane_tensor *t, double value, ane_error *err);

/* --- arithmetic --- */
/* out = a (op) b with numpy broadcasting. The result dtype is the common dtype: the shared
 * one when a and b agree, else fp32 if either is a float, else int64. */
ane_status ane_tensor_binary(ane_tensor *out, const ane_tensor *a, const ane_tensor *b,
                             ane_binary_op op, ane_error *err);
ane_status ane_tensor_scale(ane_tensor *out, const ane_tensor *a, double factor, ane_error *err);
/* dst += src in place (gradients summed over sequences without a new tensor per sum): shapes
 * must match, dst must be writable, the sum is stored in dst's dtype; src is either dst
 * itself or does not overlap it. */
ane_status ane_tensor_add_into(ane_tensor *dst, const ane_tensor *src, ane_error *err);
/* [m, k] x [k, n] -> [m, n], or batched [B, m, k] x [B, k, n]; float tensors, computed by BLAS
 * sgemm in fp32 and stored in a's dtype. */
ane_status ane_tensor_matmul(ane_tensor *out, const ane_tensor *a, const ane_tensor *b,
                             ane_error *err);

/* --- comparisons (same shape) --- */
/* NaN when either side has a NaN where the other has not. */
ane_status ane_tensor_max_abs_diff(const ane_tensor *a, const ane_tensor *b, double *out,
                                   ane_error *err);
/* |a - b| <= atol + rtol * |b| everywhere; equal infinities are close, NaN never is. */
ane_status ane_tensor_allclose(const ane_tensor *a, const ane_tensor *b, double rtol, double atol,
                               int *out, ane_error *err);

/* The first element (flat row-major index) that is NaN or of magnitude at least `limit`
 * (INFINITY: the first non-finite one; 65520: the first that fp16 cannot hold, since
 * round-to-nearest takes every smaller magnitude to at most 65504), or -1 when none is;
 * *value is that element. Integer tensors have none. Loaders check weights with it. */
ane_status ane_tensor_first_outside(const ane_tensor *t, double limit, int64_t *index, double *value, ane_error *err);

/* --- selection --- */
/* out[i, ...] = src[ids[i], ...]: rows of src (dim 0) by 0-based ids, a new tensor. */
ane_status ane_tensor_gather_rows(ane_tensor *out, const ane_tensor *src, const int64_t *ids, int64_t count,
                                  ane_error *err);
/* --- ranking (rank.c) --- */
/* The k largest elements of a tensor (flattened), largest first; ties keep the lower index;
 * NaN counts as smallest. indices are 0-based flat positions. */
ane_status ane_tensor_topk(const ane_tensor *t, int64_t k, int64_t *indices, double *values, ane_error *err);
/* One 0-based flat index drawn from softmax(t / temperature) (temperature > 0) over the top_k
 * largest values (0: all) in topk's order, cut to the shortest prefix whose probability reaches
 * top_p (1: no cut), with u in [0, 1): the first index whose running sum of weights passes u
 * times their total. min_p (0: off) first leaves out the values whose probability at
 * temperature 1 is below min_p times the largest's (value < largest + ln min_p), as llama.cpp's
 * min-p sampler does before its temperature. NaN is never drawn while anything else can be. */
ane_status ane_tensor_sample(const ane_tensor *t, double temperature, int64_t top_k, double top_p, double min_p, double u,
                             int64_t *index, ane_error *err);

/* --- losses --- */
/* Mean cross-entropy of logits [N, V] (fp32) against targets [N] (0-based classes), and its
 * gradient with respect to the logits, scaled by `scale` (e.g. 1 / total positions):
 * grad[n, v] = (softmax(logits[n])[v] - [v == target[n]]) * scale. Returns the summed loss
 * (not averaged) in *loss_sum. Computed in fp64 per row. */
/* A contiguous fp32 view of t (t itself when it is one, else a converted copy). */
ane_status ane_tensor_contiguous_fp32(ane_tensor *out, const ane_tensor *t, ane_error *err);

/* loss.c */
ane_status ane_cross_entropy(const ane_tensor *logits, const int64_t *targets, double scale, double *loss_sum,
                             ane_tensor *grad, ane_error *err);

/* --- random tensors (deterministic for a seed, on every machine) --- */
/* random.c */
ane_status ane_tensor_randn(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                            uint64_t seed, double mean, double std, ane_error *err);
ane_status ane_tensor_rand(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                           uint64_t seed, double low, double high, ane_error *err);
/* A seed no earlier call returned in this process, nor (very likely) in another: for a draw
 * the caller gave no seed (fresh values, not reproducible). Thread-safe. */
uint64_t ane_random_fresh_seed(void);

#endif
