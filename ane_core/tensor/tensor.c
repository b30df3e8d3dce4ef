/* Host tensors: creation, views, strided copies with dtype conversion, elementwise
 * arithmetic with broadcasting, BLAS matmul, comparisons and seeded random fills. */
#include "tensor.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/interrupt.h"
#include "../base/parallel.h"
#include "blas.h"
#include "gemv.h"
#include "kernels.h"

/* Long loops poll the interrupt flag after about this many elements. */
enum { POLL_EVERY_ELEMENTS = 1 << 20 };

/* ------------------------------------------------------------------ creation */

static ane_status check_shape(int ndim, const int64_t *shape, int64_t *numel, ane_error *err) {
    if (ndim < 0 || ndim > ANE_MAX_DIMS)
        return ane_fail(err, ANE_ERR_ARGUMENT, "a tensor has 0 to %d dimensions, not %d", ANE_MAX_DIMS, ndim);
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0)
            return ane_fail(err, ANE_ERR_ARGUMENT, "dimension %d has negative size %lld", i + 1,
                            (long long)shape[i]);
        if (shape[i] > 0 && count > INT64_MAX / 16 / shape[i])
            return ane_fail(err, ANE_ERR_ARGUMENT, "shape is too large (more than 2^59 elements)");
        count *= shape[i];
    }
    *numel = count;
    return ANE_OK;
}

static void set_contiguous_strides(ane_tensor *t) {
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->strides[i] = stride;
        stride *= t->shape[i];
    }
}

/* A tensor header (no storage yet) after checking the shape; NULL strides = contiguous. */
static ane_status tensor_header(ane_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                                ane_dtype dtype, size_t offset, int64_t *numel, ane_error *err) {
    ane_status status = check_shape(ndim, shape, numel, err);
    if (status) return status;
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    t->offset = offset;
    if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    if (strides && ndim > 0) memcpy(t->strides, strides, (size_t)ndim * sizeof *strides);
    else set_contiguous_strides(t);
    return ANE_OK;
}

enum { UNINITIALIZED, ZEROED, LASTING };

/* A new contiguous tensor: zeroed, (for results written in full next) not, or lasting (zeroed). */
static ane_status new_tensor(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype, int kind,
                             ane_error *err) {
    int64_t numel = 0; /* (set by tensor_header; GCC cannot see it through every caller) */
    ane_tensor t;
    ane_status status = tensor_header(&t, ndim, shape, NULL, dtype, 0, &numel, err);
    if (status) return status;
    size_t bytes = (size_t)numel * ane_dtype_size(dtype);
    status = kind == LASTING ? ane_storage_new_lasting(bytes, &t.storage, err)
             : kind == ZEROED ? ane_storage_new_heap(bytes, &t.storage, err)
                              : ane_storage_new_heap_uninitialized(bytes, &t.storage, err);
    if (status) return status;
    *out = t;
    return ANE_OK;
}

ane_status ane_tensor_zeros(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                            ane_error *err) {
    return new_tensor(out, ndim, shape, dtype, ZEROED, err);
}

ane_status ane_tensor_empty(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype, ane_error *err) {
    return new_tensor(out, ndim, shape, dtype, UNINITIALIZED, err);
}

ane_status ane_tensor_lasting(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype, ane_error *err) {
    return new_tensor(out, ndim, shape, dtype, LASTING, err);
}

ane_status ane_tensor_on_storage(ane_tensor *out, ane_storage *storage, size_t offset, int ndim,
                                 const int64_t *shape, const int64_t *strides, ane_dtype dtype,
                                 ane_error *err) {
    int64_t numel;
    ane_tensor t;
    ane_status status = tensor_header(&t, ndim, shape, strides, dtype, offset, &numel, err);
    if (status) return status;
    /* The last element must lie inside the storage (strides are non-negative here). */
    size_t last = 0;
    for (int i = 0; i < ndim; i++) {
        if (t.strides[i] < 0) return ane_fail(err, ANE_ERR_ARGUMENT, "negative strides are not supported");
        if (shape[i] > 0) last += (size_t)(shape[i] - 1) * (size_t)t.strides[i];
    }
    size_t end = numel ? offset + (last + 1) * ane_dtype_size(dtype) : offset;
    if (end > storage->nbytes)
        return ane_fail(err, ANE_ERR_RANGE, "tensor extends to byte %zu of a %zu-byte storage", end,
                        storage->nbytes);
    ane_storage_retain(storage);
    t.storage = storage;
    *out = t;
    return ANE_OK;
}

void ane_tensor_release(ane_tensor *t) {
    if (!t) return;
    ane_storage_release(t->storage);
    t->storage = NULL;
}

void ane_tensor_share(ane_tensor *out, const ane_tensor *src) {
    *out = *src;
    ane_storage_retain(src->storage);
}

/* ------------------------------------------------------------------ queries */

int64_t ane_tensor_numel(const ane_tensor *t) {
    int64_t count = 1;
    for (int i = 0; i < t->ndim; i++) count *= t->shape[i];
    return count;
}

int ane_tensor_is_contiguous(const ane_tensor *t) {
    int64_t expected = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->strides[i] != expected) return 0;
        expected *= t->shape[i];
    }
    return 1;
}

char *ane_tensor_data(const ane_tensor *t) { return (char *)t->storage->data + t->offset; }

ane_status ane_tensor_element(const ane_tensor *t, const int64_t *index, char **out, ane_error *err) {
    int64_t offset = 0;
    for (int i = 0; i < t->ndim; i++) {
        if (index[i] < 0 || index[i] >= t->shape[i])
            return ane_fail(err, ANE_ERR_RANGE, "index %lld is out of range for dimension %d of size %lld",
                            (long long)index[i] + 1, i + 1, (long long)t->shape[i]);
        offset += index[i] * t->strides[i];
    }
    *out = ane_tensor_data(t) + offset * (int64_t)ane_dtype_size(t->dtype);
    return ANE_OK;
}

int ane_shapes_equal(const ane_tensor *a, const ane_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

const char *ane_shape_string(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
    return buf;
}

static ane_status check_writable(const ane_tensor *t, ane_error *err) {
    if (t->storage->readonly)
        return ane_fail(err, ANE_ERR_ARGUMENT,
                        "tensor is read-only (it maps a file, or programs share it as a weight); copy() it before writing");
    return ANE_OK;
}

/* ------------------------------------------------------------------ views */

static ane_status check_dim(const ane_tensor *t, int dim, ane_error *err) {
    if (dim < 0 || dim >= t->ndim)
        return ane_fail(err, ANE_ERR_RANGE, "dimension %d does not exist in a %d-D tensor", dim + 1, t->ndim);
    return ANE_OK;
}

ane_status ane_tensor_slice(ane_tensor *out, const ane_tensor *src, int dim, int64_t start,
                            int64_t stop, ane_error *err) {
    ane_status status = check_dim(src, dim, err);
    if (status) return status;
    if (start < 0 || stop < start || stop > src->shape[dim])
        return ane_fail(err, ANE_ERR_RANGE, "slice %lld..%lld is outside dimension %d of size %lld",
                        (long long)start + 1, (long long)stop, dim + 1, (long long)src->shape[dim]);
    ane_tensor_share(out, src);
    out->shape[dim] = stop - start;
    out->offset += (size_t)(start * src->strides[dim]) * ane_dtype_size(src->dtype);
    return ANE_OK;
}

ane_status ane_tensor_transpose(ane_tensor *out, const ane_tensor *src, int dim0, int dim1,
                                ane_error *err) {
    ane_status status = check_dim(src, dim0, err);
    if (!status) status = check_dim(src, dim1, err);
    if (status) return status;
    ane_tensor_share(out, src);
    out->shape[dim0] = src->shape[dim1];
    out->shape[dim1] = src->shape[dim0];
    out->strides[dim0] = src->strides[dim1];
    out->strides[dim1] = src->strides[dim0];
    return ANE_OK;
}

ane_status ane_tensor_reshape(ane_tensor *out, const ane_tensor *src, int ndim,
                              const int64_t *shape_in, ane_error *err) {
    if (ndim < 0 || ndim > ANE_MAX_DIMS)
        return ane_fail(err, ANE_ERR_ARGUMENT, "a tensor has 0 to %d dimensions, not %d", ANE_MAX_DIMS, ndim);
    int64_t shape[ANE_MAX_DIMS], known = 1, numel = ane_tensor_numel(src);
    int inferred = -1;
    for (int i = 0; i < ndim; i++) {
        shape[i] = shape_in[i];
        if (shape[i] == -1) {
            if (inferred >= 0) return ane_fail(err, ANE_ERR_ARGUMENT, "only one dimension can be -1");
            inferred = i;
        } else if (shape[i] < 0) {
            return ane_fail(err, ANE_ERR_ARGUMENT, "dimension %d has negative size %lld", i + 1,
                            (long long)shape[i]);
        } else {
            known *= shape[i];
        }
    }
    if (inferred >= 0) shape[inferred] = known ? numel / known : 0;
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) count *= shape[i];
    char from[128], to[128];
    if (count != numel)
        return ane_fail(err, ANE_ERR_SHAPE, "cannot reshape %s (%lld elements) to %s",
                        ane_shape_string(from, sizeof from, src->ndim, src->shape), (long long)numel,
                        ane_shape_string(to, sizeof to, ndim, shape));
    ane_tensor contiguous;
    if (ane_tensor_is_contiguous(src)) {
        ane_tensor_share(&contiguous, src);
    } else {
        ane_status status = ane_tensor_to(&contiguous, src, src->dtype, err);
        if (status) return status;
    }
    contiguous.ndim = ndim;
    if (ndim > 0) memcpy(contiguous.shape, shape, (size_t)ndim * sizeof *shape);
    set_contiguous_strides(&contiguous);
    *out = contiguous;
    return ANE_OK;
}

/* ------------------------------------------------------------------ walking rows */

/* Visits every innermost row of a shape for up to three operands that share it (after
 * broadcasting), handing the visitor each operand's row address and inner byte stride. */
typedef struct row_walk {
    int ndim;
    int64_t shape[ANE_MAX_DIMS];
    int operands;
    char *base[3];
    int64_t stride_bytes[3][ANE_MAX_DIMS];
} row_walk;

typedef void (*row_visitor)(void *context, char *const *rows, const int64_t *inner_stride_bytes,
                            int64_t n);

static void walk_add_operand(row_walk *walk, const ane_tensor *t) {
    int k = walk->operands++;
    walk->base[k] = ane_tensor_data(t);
    int shift = walk->ndim - t->ndim; /* broadcasting aligns trailing dims */
    size_t size = ane_dtype_size(t->dtype);
    for (int i = 0; i < walk->ndim; i++) {
        int j = i - shift;
        int broadcast = j < 0 || t->shape[j] == 1;
        walk->stride_bytes[k][i] = broadcast ? 0 : t->strides[j] * (int64_t)size;
    }
}

/* Drops size-1 dimensions and merges neighbours that every operand walks contiguously
 * ([3072, 768, 1, 1] becomes one row of 2,359,296), so rows are as long as possible. */
static void walk_coalesce(row_walk *walk) {
    int kept = 0;
    for (int i = 0; i < walk->ndim; i++) {
        if (walk->shape[i] == 1) continue;
        if (kept > 0) {
            int mergeable = 1;
            for (int k = 0; k < walk->operands; k++)
                if (walk->stride_bytes[k][kept - 1] != walk->stride_bytes[k][i] * walk->shape[i]) mergeable = 0;
            if (mergeable) {
                walk->shape[kept - 1] *= walk->shape[i];
                for (int k = 0; k < walk->operands; k++) walk->stride_bytes[k][kept - 1] = walk->stride_bytes[k][i];
                continue;
            }
        }
        walk->shape[kept] = walk->shape[i];
        for (int k = 0; k < walk->operands; k++) walk->stride_bytes[k][kept] = walk->stride_bytes[k][i];
        kept++;
    }
    walk->ndim = kept;
}

static ane_status walk_rows(const row_walk *original, row_visitor visit, void *context, const char *what,
                            ane_error *err) {
    row_walk coalesced = *original;
    walk_coalesce(&coalesced);
    const row_walk *walk = &coalesced;
    int64_t numel = 1;
    for (int i = 0; i < walk->ndim; i++) numel *= walk->shape[i];
    if (numel == 0) return ANE_OK;
    if (walk->ndim == 0) {
        int64_t none[3] = {0, 0, 0};
        visit(context, walk->base, none, 1);
        return ANE_OK;
    }
    int last = walk->ndim - 1;
    int64_t inner = walk->shape[last];
    int64_t inner_stride[3];
    for (int k = 0; k < walk->operands; k++) inner_stride[k] = walk->stride_bytes[k][last];
    int64_t index[ANE_MAX_DIMS] = {0};
    char *rows[3];
    int64_t since_poll = 0;
    for (;;) {
        for (int k = 0; k < walk->operands; k++) {
            char *p = walk->base[k];
            for (int i = 0; i < last; i++) p += index[i] * walk->stride_bytes[k][i];
            rows[k] = p;
        }
        visit(context, rows, inner_stride, inner);
        since_poll += inner;
        if (since_poll >= POLL_EVERY_ELEMENTS) {
            since_poll = 0;
            ane_status status = ane_interrupt_check(err, what);
            if (status) return status;
        }
        int i = last - 1;
        while (i >= 0 && ++index[i] == walk->shape[i]) index[i--] = 0;
        if (i < 0) break;
    }
    return ANE_OK;
}

/* ------------------------------------------------------------------ copies */

typedef struct copy_context {
    ane_dtype dst_dtype, src_dtype;
} copy_context;

/* Strided rows element by element: a decode step writes each layer's new key and value
 * as one column of its [channels, positions] cache (1,024 elements 2-4 KB apart, twice per
 * layer), so the usual pairs are moved here without a call per element. */
#define STRIDED_ROW(DST_TYPE, SRC_TYPE, CONVERT)                                                        \
    for (int64_t i = 0; i < n; i++) {                                                                \
        SRC_TYPE value_;                                                                             \
        memcpy(&value_, rows[1] + i * stride[1], sizeof value_);                                     \
        DST_TYPE converted_ = CONVERT(value_);                                                       \
        memcpy(rows[0] + i * stride[0], &converted_, sizeof converted_);                             \
    }
#define AS_IS(value) (value)
/* A strided row between fp32 and fp16 (a KV cache's position, a column of a step's batch):
 * gathered a chunk at a time, converted by the vector converters (the scalar conversion's bits:
 * base/fp16.h), scattered. */
#define CONVERTED_IN_CHUNKS(DST_TYPE, SRC_TYPE, CONVERT_N)                                               \
    for (int64_t from = 0; from < n; from += 256) {                                                    \
        SRC_TYPE in_[256];                                                                            \
        DST_TYPE out_[256];                                                                           \
        int64_t count_ = n - from < 256 ? n - from : 256;                                             \
        for (int64_t i = 0; i < count_; i++) memcpy(&in_[i], rows[1] + (from + i) * stride[1], sizeof in_[i]); \
        CONVERT_N(out_, in_, (size_t)count_);                                                         \
        for (int64_t i = 0; i < count_; i++) memcpy(rows[0] + (from + i) * stride[0], &out_[i], sizeof out_[i]); \
    }

/* A contiguous row of one element repeated (a fill, or a broadcast source): converted once. */
static void repeat_element(char *row, ane_dtype dtype, const char *element, ane_dtype element_dtype, int64_t n) {
    size_t size = ane_dtype_size(dtype);
    char converted[8];
    ane_dtype_convert_row(converted, dtype, element, element_dtype, 1);
    if (size == 2) {
        uint16_t value, *out = (uint16_t *)row;
        memcpy(&value, converted, sizeof value);
        for (int64_t i = 0; i < n; i++) out[i] = value;
    } else if (size == 4) {
        uint32_t value, *out = (uint32_t *)row;
        memcpy(&value, converted, sizeof value);
        for (int64_t i = 0; i < n; i++) out[i] = value;
    } else {
        for (int64_t i = 0; i < n; i++) memcpy(row + (size_t)i * size, converted, size);
    }
}

static void copy_row(void *context, char *const *rows, const int64_t *stride, int64_t n) {
    const copy_context *c = context;
    int64_t dst_size = (int64_t)ane_dtype_size(c->dst_dtype), src_size = (int64_t)ane_dtype_size(c->src_dtype);
    if (stride[0] == dst_size && stride[1] == 0) {
        repeat_element(rows[0], c->dst_dtype, rows[1], c->src_dtype, n);
    } else if (stride[0] == dst_size && stride[1] == src_size) {
        ane_dtype_convert_row(rows[0], c->dst_dtype, rows[1], c->src_dtype, (size_t)n);
    } else if (c->dst_dtype == c->src_dtype && dst_size == 2) {
        STRIDED_ROW(uint16_t, uint16_t, AS_IS)
    } else if (c->dst_dtype == c->src_dtype && dst_size == 4) {
        STRIDED_ROW(uint32_t, uint32_t, AS_IS)
    } else if (c->dst_dtype == ANE_FP32 && c->src_dtype == ANE_FP16) {
        CONVERTED_IN_CHUNKS(float, uint16_t, ane_fp16_to_fp32_n)
    } else if (c->dst_dtype == ANE_FP16 && c->src_dtype == ANE_FP32) {
        CONVERTED_IN_CHUNKS(uint16_t, float, ane_fp32_to_fp16_n)
    } else {
        for (int64_t i = 0; i < n; i++)
            ane_dtype_convert_row(rows[0] + i * stride[0], c->dst_dtype, rows[1] + i * stride[1], c->src_dtype, 1);
    }
}
#undef STRIDED_ROW
#undef CONVERTED_IN_CHUNKS
#undef AS_IS

static void transpose_tile_rows(void *context, int64_t first, int64_t last) {
    const transpose_job *j = context;
    void (*whole_tile)(const transpose_job *, int64_t, int64_t) = ane_kernels()->transpose_tile;
    for (int64_t tile = first; tile < last; tile++) {
        int64_t r0 = tile * TRANSPOSE_TILE, r1 = r0 + TRANSPOSE_TILE < j->rows ? r0 + TRANSPOSE_TILE : j->rows;
        for (int64_t c0 = 0; c0 < j->cols; c0 += TRANSPOSE_TILE) {
            int64_t c1 = c0 + TRANSPOSE_TILE < j->cols ? c0 + TRANSPOSE_TILE : j->cols;
            if (r1 - r0 == TRANSPOSE_TILE && c1 - c0 == TRANSPOSE_TILE) {
                whole_tile(j, r0, c0);
                continue;
            }
            for (int64_t r = r0; r < r1; r++)
                for (int64_t c = c0; c < c1; c++) j->out[r * j->cols + c] = j->in[r + c * j->column_step];
        }
    }
}

/* A contiguous 2-D destination filled from a transposed view of the same 4-byte dtype
 * (e.g. Conv1D [in, out] weights into [out, in], and their gradients back), copied in
 * square tiles so that reads and writes use whole cache lines, whole tiles through the kernel
 * table's transpose (in registers where the CPU has AVX or NEON), bands of tile rows over the helper
 * threads; returns 0 (nothing done) for any other case. */
static int copy_transposed_2d(ane_tensor *dst, const ane_tensor *src) {
    if (dst->ndim != 2 || dst->dtype != src->dtype || ane_dtype_size(dst->dtype) != 4 || !ane_tensor_is_contiguous(dst) ||
        src->strides[0] != 1 || src->strides[1] < src->shape[0] || dst->shape[0] < 2 || dst->shape[1] < 2)
        return 0;
    transpose_job job = {(uint32_t *)ane_tensor_data(dst), (const uint32_t *)ane_tensor_data(src), dst->shape[0],
                         dst->shape[1], src->strides[1]};
    int64_t tile_rows = (job.rows + TRANSPOSE_TILE - 1) / TRANSPOSE_TILE;
    /* a band at least 256 KB of the destination: smaller copies stay on this thread */
    int64_t tile_bytes = TRANSPOSE_TILE * job.cols * 4;
    ane_parallel_for(tile_rows, ((int64_t)1 << 18) / tile_bytes + 1, transpose_tile_rows, &job);
    return 1;
}

/* What writing src into dst element by element needs: the same shape and a writable dst
 * (`verb` names the operation in the message). */
static ane_status check_writes_into(const ane_tensor *dst, const ane_tensor *src, const char *verb, ane_error *err) {
    char a[128], b[128];
    if (!ane_shapes_equal(dst, src))
        return ane_fail(err, ANE_ERR_SHAPE, "cannot %s a %s tensor into a %s tensor", verb,
                        ane_shape_string(b, sizeof b, src->ndim, src->shape),
                        ane_shape_string(a, sizeof a, dst->ndim, dst->shape));
    return check_writable(dst, err);
}

/* Large contiguous copies and conversions (a model's weights at load) in chunks over the
 * helper threads: the conversion, and the first touch of fresh pages that comes with it,
 * run on every core. */
typedef struct contiguous_copy {
    char *dst;
    const char *src;
    ane_dtype dst_dtype, src_dtype;
    int64_t numel;
} contiguous_copy;

/* elements; ranges are whole blocks, so each keeps its start's alignment (the vector paths) */
enum { PARALLEL_COPY_MIN = 1 << 20, PARALLEL_COPY_BLOCK = 64, PARALLEL_COPY_GRAIN_BLOCKS = 1 << 12 };

static void copy_range(void *context, int64_t first_block, int64_t last_block) {
    const contiguous_copy *c = context;
    int64_t first = first_block * PARALLEL_COPY_BLOCK, last = last_block * PARALLEL_COPY_BLOCK;
    if (last > c->numel) last = c->numel;
    ane_dtype_convert_row(c->dst + first * (int64_t)ane_dtype_size(c->dst_dtype), c->dst_dtype,
                          c->src + first * (int64_t)ane_dtype_size(c->src_dtype), c->src_dtype, (size_t)(last - first));
}

static int copy_contiguous_in_parallel(ane_tensor *dst, const ane_tensor *src) {
    int64_t numel = ane_tensor_numel(dst);
    if (numel < PARALLEL_COPY_MIN || dst->ndim != src->ndim || memcmp(dst->shape, src->shape, (size_t)dst->ndim * sizeof *dst->shape) ||
        !ane_tensor_is_contiguous(dst) || !ane_tensor_is_contiguous(src))
        return 0;
    contiguous_copy c = {ane_tensor_data(dst), ane_tensor_data(src), dst->dtype, src->dtype, numel};
    ane_parallel_for((numel + PARALLEL_COPY_BLOCK - 1) / PARALLEL_COPY_BLOCK, PARALLEL_COPY_GRAIN_BLOCKS, copy_range, &c);
    return 1;
}

ane_status ane_tensor_copy_into(ane_tensor *dst, const ane_tensor *src, ane_error *err) {
    ane_status status = check_writes_into(dst, src, "copy", err);
    if (status) return status;
    if (copy_transposed_2d(dst, src)) return ANE_OK;
    if (copy_contiguous_in_parallel(dst, src)) return ane_interrupt_check(err, "a tensor copy");
    row_walk walk = {.ndim = dst->ndim};
    memcpy(walk.shape, dst->shape, sizeof walk.shape);
    walk_add_operand(&walk, dst);
    walk_add_operand(&walk, src);
    copy_context context = {dst->dtype, src->dtype};
    return walk_rows(&walk, copy_row, &context, "a tensor copy", err);
}

ane_status ane_tensor_to(ane_tensor *out, const ane_tensor *src, ane_dtype dtype, ane_error *err) {
    ane_tensor result;
    ane_status status = new_tensor(&result, src->ndim, src->shape, dtype, UNINITIALIZED, err);
    if (status) return status;
    status = ane_tensor_copy_into(&result, src, err);
    if (status) {
        ane_tensor_release(&result);
        return status;
    }
    *out = result;
    return ANE_OK;
}

ane_status ane_tensor_fill(ane_tensor *t, double value, ane_error *err) {
    ane_status status = check_writable(t, err);
    if (status) return status;
    char element[8];
    ane_dtype_store(element, t->dtype, value);
    ane_tensor scalar = {0};
    ane_storage pinned = {.refcount = 1, .data = element, .nbytes = sizeof element};
    scalar.storage = &pinned;
    scalar.dtype = t->dtype;
    /* Broadcasting a 0-D tensor over t repeats the one converted element. */
    row_walk walk = {.ndim = t->ndim};
    memcpy(walk.shape, t->shape, sizeof walk.shape);
    walk_add_operand(&walk, t);
    walk_add_operand(&walk, &scalar);
    copy_context context = {t->dtype, t->dtype};
    return walk_rows(&walk, copy_row, &context, "a tensor fill", err);
}

/* ------------------------------------------------------------------ arithmetic */

static ane_dtype common_dtype(ane_dtype a, ane_dtype b) {
    if (a == b) return a;
    if (ane_dtype_kind_of(a) == ANE_KIND_FLOAT || ane_dtype_kind_of(b) == ANE_KIND_FLOAT) return ANE_FP32;
    return ANE_INT64;
}

static ane_status broadcast_shape(const ane_tensor *a, const ane_tensor *b, int *ndim,
                                  int64_t *shape, ane_error *err) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            return ane_fail(err, ANE_ERR_SHAPE, "shapes %s and %s do not broadcast (dimension %d: %lld vs %lld)",
                            ane_shape_string(sa, sizeof sa, a->ndim, a->shape),
                            ane_shape_string(sb, sizeof sb, b->ndim, b->shape), i + 1, (long long)da,
                            (long long)db);
        }
        shape[i] = da == 1 ? db : da;
    }
    *ndim = n;
    return ANE_OK;
}

typedef struct binary_context {
    ane_binary_op op;
    ane_dtype out_dtype, a_dtype, b_dtype;
} binary_context;

static double apply_binary(ane_binary_op op, double x, double y) {
    switch (op) {
    case ANE_BINARY_ADD: return x + y;
    case ANE_BINARY_SUB: return x - y;
    case ANE_BINARY_MUL: return x * y;
    case ANE_BINARY_DIV: return x / y;
    }
    return 0;
}

static int64_t apply_binary_int(ane_binary_op op, int64_t x, int64_t y) {
    /* Wrapping arithmetic, done in unsigned to stay defined. */
    switch (op) {
    case ANE_BINARY_ADD: return (int64_t)((uint64_t)x + (uint64_t)y);
    case ANE_BINARY_SUB: return (int64_t)((uint64_t)x - (uint64_t)y);
    case ANE_BINARY_MUL: return (int64_t)((uint64_t)x * (uint64_t)y);
    case ANE_BINARY_DIV: return y == 0 ? 0 : (x == INT64_MIN && y == -1) ? x : x / y;
    }
    return 0;
}

static void binary_row(void *context, char *const *rows, const int64_t *stride, int64_t n) {
    const binary_context *c = context;
    if (c->out_dtype == ANE_FP32 && c->a_dtype == ANE_FP32 && c->b_dtype == ANE_FP32 &&
        stride[0] == 4 && stride[1] == 4 && stride[2] == 4 && ((uintptr_t)rows[0] | (uintptr_t)rows[1] | (uintptr_t)rows[2]) % 4 == 0) {
        float *out = (float *)rows[0];
        const float *x = (const float *)rows[1], *y = (const float *)rows[2];
        switch (c->op) {
        case ANE_BINARY_ADD: for (int64_t i = 0; i < n; i++) out[i] = x[i] + y[i]; return;
        case ANE_BINARY_SUB: for (int64_t i = 0; i < n; i++) out[i] = x[i] - y[i]; return;
        case ANE_BINARY_MUL: for (int64_t i = 0; i < n; i++) out[i] = x[i] * y[i]; return;
        case ANE_BINARY_DIV: for (int64_t i = 0; i < n; i++) out[i] = x[i] / y[i]; return;
        }
    }
    int integer = ane_dtype_kind_of(c->out_dtype) != ANE_KIND_FLOAT;
    for (int64_t i = 0; i < n; i++) {
        char *o = rows[0] + i * stride[0];
        const char *x = rows[1] + i * stride[1], *y = rows[2] + i * stride[2];
        if (integer)
            ane_dtype_store_int(o, c->out_dtype,
                                apply_binary_int(c->op, ane_dtype_load_int(x, c->a_dtype),
                                                 ane_dtype_load_int(y, c->b_dtype)));
        else /* double arithmetic rounded once gives the same result as fp32 arithmetic */
            ane_dtype_store(o, c->out_dtype,
                            apply_binary(c->op, ane_dtype_load(x, c->a_dtype), ane_dtype_load(y, c->b_dtype)));
    }
}

ane_status ane_tensor_binary(ane_tensor *out, const ane_tensor *a, const ane_tensor *b,
                             ane_binary_op op, ane_error *err) {
    int ndim = 0;
    int64_t shape[ANE_MAX_DIMS];
    ane_status status = broadcast_shape(a, b, &ndim, shape, err);
    if (status) return status;
    ane_tensor result;
    binary_context context = {op, common_dtype(a->dtype, b->dtype), a->dtype, b->dtype};
    status = new_tensor(&result, ndim, shape, context.out_dtype, UNINITIALIZED, err);
    if (status) return status;
    row_walk walk = {.ndim = ndim};
    memcpy(walk.shape, shape, sizeof walk.shape);
    walk_add_operand(&walk, &result);
    walk_add_operand(&walk, a);
    walk_add_operand(&walk, b);
    status = walk_rows(&walk, binary_row, &context, "an elementwise op", err);
    if (status) {
        ane_tensor_release(&result);
        return status;
    }
    *out = result;
    return ANE_OK;
}

ane_status ane_tensor_add_into(ane_tensor *dst, const ane_tensor *src, ane_error *err) {
    ane_status status = check_writes_into(dst, src, "add", err);
    if (status) return status;
    binary_context context = {ANE_BINARY_ADD, dst->dtype, dst->dtype, src->dtype};
    row_walk walk = {.ndim = dst->ndim};
    memcpy(walk.shape, dst->shape, sizeof walk.shape);
    walk_add_operand(&walk, dst); /* written: out[i] = dst[i] + src[i], element by element */
    walk_add_operand(&walk, dst);
    walk_add_operand(&walk, src);
    return walk_rows(&walk, binary_row, &context, "an in-place add", err);
}

ane_status ane_tensor_scale(ane_tensor *out, const ane_tensor *a, double factor, ane_error *err) {
    /* The factor is a 0-D fp32 tensor broadcast over a. fp16/bf16 inputs keep their dtype
     * (the fp32 product is converted back); integer inputs give fp32. */
    float factor_value = (float)factor;
    ane_storage pinned = {.refcount = 1, .data = &factor_value, .nbytes = sizeof factor_value};
    ane_tensor scalar = {.storage = &pinned, .dtype = ANE_FP32};
    ane_tensor product;
    ane_status status = ane_tensor_binary(&product, a, &scalar, ANE_BINARY_MUL, err);
    if (status) return status;
    if (product.dtype == a->dtype || ane_dtype_kind_of(a->dtype) != ANE_KIND_FLOAT) {
        *out = product;
        return ANE_OK;
    }
    status = ane_tensor_to(out, &product, a->dtype, err);
    ane_tensor_release(&product);
    return status;
}

/* ------------------------------------------------------------------ matmul */

/* A contiguous fp32 version of t: t itself (shared) when it already is one. */
ane_status ane_tensor_contiguous_fp32(ane_tensor *out, const ane_tensor *t, ane_error *err) {
    if (t->dtype == ANE_FP32 && ane_tensor_is_contiguous(t) && ((uintptr_t)ane_tensor_data(t) % 4) == 0) {
        ane_tensor_share(out, t);
        return ANE_OK;
    }
    return ane_tensor_to(out, t, ANE_FP32, err);
}

/* Rows of the output per sgemm call: blocks of about 2^31 multiply-adds (~10 ms here), so
 * Ctrl-C is noticed between them, but never fewer than 512 rows: thin calls waste most of
 * sgemm's speed (5-row blocks of a [256, 32000] x [32000, 768] product ran 5x slower). */
static int64_t matmul_rows_per_block(int64_t m, int64_t k, int64_t n) {
    int64_t rows = k * n > 0 ? ((int64_t)1 << 31) / (k * n) : m;
    return rows < 512 ? 512 : rows;
}

/* How BLAS can read a 2-D fp32 operand [rows, cols] where it lies: row-major with leading
 * dimension *ld (NoTrans), or as the transpose of a row-major matrix (a transposed view,
 * Trans); returns 0 when it must be copied first. Transposed views then cost no copy. */
static int blas_layout(const ane_tensor *t, int64_t rows, int64_t cols, CBLAS_TRANSPOSE *trans, int64_t *ld,
                       int64_t *row_step) {
    if (t->dtype != ANE_FP32 || t->ndim != 2 || ((uintptr_t)ane_tensor_data(t) % 4) != 0) return 0;
    int64_t s0 = t->strides[0], s1 = t->strides[1];
    if ((s1 == 1 || cols == 1) && s0 >= (cols > 1 ? cols : 1) && s0 <= INT32_MAX) {
        *trans = CblasNoTrans, *ld = s0, *row_step = s0;
        return 1;
    }
    if ((s0 == 1 || rows == 1) && s1 >= (rows > 1 ? rows : 1) && s1 <= INT32_MAX) {
        *trans = CblasTrans, *ld = s1, *row_step = 1;
        return 1;
    }
    return 0;
}

/* An fp16 matrix w [rows, k] (stored row-major) times `columns` columns of `x`, through the
 * few-column products of gemv.h: x [k, columns] and the result [rows, columns], or with
 * `transposed` x [columns, k] and the result [columns, rows]. x is read as contiguous fp32. */
static ane_status fp16_few_columns(ane_tensor *out, const ane_tensor *w, const ane_tensor *x, int64_t rows, int64_t k,
                                   int64_t columns, int transposed, ane_error *err) {
    ane_tensor x32, y32;
    ane_status status = ane_tensor_contiguous_fp32(&x32, x, err);
    if (status) return status;
    int64_t shape[2] = {transposed ? columns : rows, transposed ? rows : columns};
    status = ane_tensor_empty(&y32, 2, shape, ANE_FP32, err);
    if (!status) {
        float *y = (float *)ane_tensor_data(&y32);
        const uint16_t *half = (const uint16_t *)ane_tensor_data(w);
        const float *values = (const float *)ane_tensor_data(&x32);
        status = transposed ? ane_gemm_fp16_few_columns_t(y, half, values, rows, k, columns, err)
                            : ane_gemm_fp16_few_columns(y, half, values, rows, k, columns, err);
        if (status) ane_tensor_release(&y32);
        else *out = y32;
    }
    ane_tensor_release(&x32);
    return status;
}

ane_status ane_tensor_matmul(ane_tensor *out, const ane_tensor *a, const ane_tensor *b,
                             ane_error *err) {
    char sa[128], sb[128];
    if (ane_dtype_kind_of(a->dtype) != ANE_KIND_FLOAT || ane_dtype_kind_of(b->dtype) != ANE_KIND_FLOAT)
        return ane_fail(err, ANE_ERR_ARGUMENT, "matmul needs float tensors, not %s and %s",
                        ane_dtype_name(a->dtype), ane_dtype_name(b->dtype));
    int batched = a->ndim == 3;
    int shapes_ok = (a->ndim == 2 && b->ndim == 2) || (a->ndim == 3 && b->ndim == 3 && a->shape[0] == b->shape[0]);
    if (!shapes_ok || a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
        return ane_fail(err, ANE_ERR_SHAPE, "matmul needs [m, k] x [k, n] or [B, m, k] x [B, k, n], got %s x %s",
                        ane_shape_string(sa, sizeof sa, a->ndim, a->shape),
                        ane_shape_string(sb, sizeof sb, b->ndim, b->shape));
    int64_t batches = batched ? a->shape[0] : 1;
    int64_t m = a->shape[a->ndim - 2], k = a->shape[a->ndim - 1], n = b->shape[b->ndim - 1];
    if (m > INT32_MAX || k > INT32_MAX || n > INT32_MAX)
        return ane_fail(err, ANE_ERR_ARGUMENT, "matmul dimensions must fit BLAS's 32-bit sizes");

    ane_tensor a32, b32, c32;
    CBLAS_TRANSPOSE trans_a, trans_b;
    int64_t lda, ldb, a_row_step, b_row_step;
    if (!batched && n > 1 && blas_layout(a, m, k, &trans_a, &lda, &a_row_step) &&
        blas_layout(b, k, n, &trans_b, &ldb, &b_row_step)) {
        /* 2-D, possibly transposed views: straight to sgemm, no copies */
        ane_status status = ane_tensor_empty(&c32, 2, (int64_t[]){m, n}, ANE_FP32, err);
        if (status) return status;
        int64_t rows_per_block = matmul_rows_per_block(m, k, n);
        const float *pa = (const float *)ane_tensor_data(a), *pb = (const float *)ane_tensor_data(b);
        float *pc = (float *)ane_tensor_data(&c32);
        for (int64_t row = 0; row < m && !status; row += rows_per_block) {
            int64_t rows = m - row < rows_per_block ? m - row : rows_per_block;
            cblas_sgemm(CblasRowMajor, trans_a, trans_b, (int)rows, (int)n, (int)k, 1.0f, pa + row * a_row_step, (int)lda,
                        pb, (int)ldb, 0.0f, pc + row * n, (int)n);
            status = ane_interrupt_check(err, "matmul");
        }
        if (status) ane_tensor_release(&c32);
        else *out = c32;
        return status;
    }
    if (!batched && n > 1 && n <= ANE_FEW_COLUMNS && a->dtype == ANE_FP16 && ane_tensor_is_contiguous(a)) {
        /* an fp16 matrix times a few columns: read once as stored, each column the
         * matrix-vector product's sums (gemv.h), so a column's result does not depend on the
         * columns beside it (decode steps of several sessions classified together each get
         * their own step's logits) */
        return fp16_few_columns(out, a, b, m, k, n, 0, err);
    }
    if (!batched && m >= 1 && m <= ANE_FEW_COLUMNS && k >= 1 && b->dtype == ANE_FP16 && b->strides[0] == 1 && b->strides[1] == k &&
        ((uintptr_t)ane_tensor_data(b) % 2) == 0) {
        /* a few rows times the transpose of a row-major fp16 matrix W [n, k] (a batched step's
         * final columns times the classifier, X W^T): W read once as stored, each row of the
         * result the matrix-vector product's sums of that row of a (gemv.h), already in [m, n] */
        return fp16_few_columns(out, b, a, n, k, m, 1, err);
    }
    if (!batched && n == 1 && a->dtype == ANE_FP16 && ane_tensor_is_contiguous(a)) {
        /* an fp16 matrix times a vector: read as stored, two bytes a weight (gemv.h), not
         * converted to an fp32 copy first */
        ane_status status = ane_tensor_contiguous_fp32(&b32, b, err);
        if (status) return status;
        status = ane_tensor_empty(&c32, 2, (int64_t[]){m, 1}, ANE_FP32, err);
        if (!status) {
            ane_gemv_fp16((float *)ane_tensor_data(&c32), (const uint16_t *)ane_tensor_data(a),
                          (const float *)ane_tensor_data(&b32), m, k);
            *out = c32;
        }
        ane_tensor_release(&b32);
        return status;
    }
    ane_status status = ane_tensor_contiguous_fp32(&a32, a, err);
    if (status) return status;
    status = ane_tensor_contiguous_fp32(&b32, b, err);
    if (status) {
        ane_tensor_release(&a32);
        return status;
    }
    int64_t out_shape[3] = {batches, m, n};
    status = ane_tensor_empty(&c32, batched ? 3 : 2, batched ? out_shape : out_shape + 1, ANE_FP32, err); /* beta = 0 */
    if (!status) {
        int64_t rows_per_block = n == 1 ? m : matmul_rows_per_block(m, k, n);
        const float *pa = (const float *)ane_tensor_data(&a32), *pb = (const float *)ane_tensor_data(&b32);
        float *pc = (float *)ane_tensor_data(&c32);
        for (int64_t batch = 0; batch < batches && !status; batch++) {
            for (int64_t row = 0; row < m && !status; row += rows_per_block) {
                int64_t rows = m - row < rows_per_block ? m - row : rows_per_block;
                if (n == 1) /* matrix-vector: streams the matrix without packing it (gemv.h) */
                    ane_gemv_fp32(pc + (batch * m + row), pa + (batch * m + row) * k, pb + batch * k, rows, k);
                else
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)n, (int)k, 1.0f,
                                pa + (batch * m + row) * k, (int)k, pb + batch * k * n, (int)n, 0.0f,
                                pc + (batch * m + row) * n, (int)n);
                status = ane_interrupt_check(err, "matmul");
            }
        }
    }
    ane_tensor_release(&a32);
    ane_tensor_release(&b32);
    if (status) {
        ane_tensor_release(&c32);
        return status;
    }
    ane_dtype out_dtype = common_dtype(a->dtype, b->dtype);
    if (out_dtype == ANE_FP32) {
        *out = c32;
        return ANE_OK;
    }
    status = ane_tensor_to(out, &c32, out_dtype, err);
    ane_tensor_release(&c32);
    return status;
}

/* ------------------------------------------------------------------ comparisons */

typedef struct compare_context {
    ane_dtype a_dtype, b_dtype;
    double rtol, atol;
    double max_abs_diff; /* NaN once a NaN mismatch is seen */
    int all_close;
} compare_context;

static void compare_row(void *context, char *const *rows, const int64_t *stride, int64_t n) {
    compare_context *c = context;
    for (int64_t i = 0; i < n; i++) {
        double x = ane_dtype_load(rows[0] + i * stride[0], c->a_dtype);
        double y = ane_dtype_load(rows[1] + i * stride[1], c->b_dtype);
        double diff;
        if (isnan(x) || isnan(y)) diff = NAN; /* a NaN is a difference, even against a NaN */
        else if (x == y) diff = 0; /* also equal infinities */
        else diff = fabs(x - y);
        if (isnan(diff)) c->max_abs_diff = NAN;
        else if (diff > c->max_abs_diff) c->max_abs_diff = diff; /* false once it is NaN */
        int close = !isnan(x) && !isnan(y) && (x == y || diff <= c->atol + c->rtol * fabs(y));
        if (!close) c->all_close = 0;
    }
}

static ane_status compare(const ane_tensor *a, const ane_tensor *b, compare_context *context,
                          ane_error *err) {
    char sa[128], sb[128];
    if (!ane_shapes_equal(a, b))
        return ane_fail(err, ANE_ERR_SHAPE, "cannot compare a %s tensor with a %s tensor",
                        ane_shape_string(sa, sizeof sa, a->ndim, a->shape),
                        ane_shape_string(sb, sizeof sb, b->ndim, b->shape));
    context->a_dtype = a->dtype;
    context->b_dtype = b->dtype;
    context->max_abs_diff = 0;
    context->all_close = 1;
    row_walk walk = {.ndim = a->ndim};
    memcpy(walk.shape, a->shape, sizeof walk.shape);
    walk_add_operand(&walk, a);
    walk_add_operand(&walk, b);
    return walk_rows(&walk, compare_row, context, "a tensor comparison", err);
}

ane_status ane_tensor_max_abs_diff(const ane_tensor *a, const ane_tensor *b, double *out,
                                   ane_error *err) {
    compare_context context = {0};
    ane_status status = compare(a, b, &context, err);
    if (!status) *out = context.max_abs_diff;
    return status;
}

ane_status ane_tensor_allclose(const ane_tensor *a, const ane_tensor *b, double rtol, double atol,
                               int *out, ane_error *err) {
    compare_context context = {.rtol = rtol, .atol = atol};
    ane_status status = compare(a, b, &context, err);
    if (!status) *out = context.all_close;
    return status;
}

ane_status ane_tensor_first_outside(const ane_tensor *t, double limit, int64_t *index, double *value, ane_error *err) {
    *index = -1;
    *value = 0;
    if (ane_dtype_kind_of(t->dtype) != ANE_KIND_FLOAT) return ANE_OK;
    ane_tensor flat; /* contiguous: read in blocks converted to fp32 (exact for fp16, bf16) */
    ane_status status = ANE_OK;
    if (ane_tensor_is_contiguous(t)) ane_tensor_share(&flat, t);
    else if ((status = ane_tensor_to(&flat, t, ANE_FP32, err))) return status;
    enum { BLOCK = 4096 };
    float block[BLOCK];
    const char *data = ane_tensor_data(&flat);
    size_t element = ane_dtype_size(flat.dtype);
    int64_t n = ane_tensor_numel(&flat);
    const float bound = limit > FLT_MAX ? INFINITY : (float)limit; /* exact for the limits used */
    for (int64_t start = 0; start < n && *index < 0; start += BLOCK) {
        size_t count = (size_t)(start + BLOCK < n ? BLOCK : n - start);
        ane_dtype_convert_row(block, ANE_FP32, data + (size_t)start * element, flat.dtype, count);
        int outside = 0; /* a branch-free pass first */
        for (size_t i = 0; i < count; i++) outside |= !(fabsf(block[i]) < bound); /* NaN: never < */
        for (size_t i = 0; outside && i < count; i++)
            if (!(fabsf(block[i]) < bound)) {
                *index = start + (int64_t)i;
                *value = block[i];
                break;
            }
    }
    ane_tensor_release(&flat);
    return ANE_OK;
}

/* ------------------------------------------------------------------ selection */

ane_status ane_tensor_gather_rows(ane_tensor *out, const ane_tensor *src, const int64_t *ids, int64_t count,
                                  ane_error *err) {
    if (src->ndim < 1) return ane_fail(err, ANE_ERR_SHAPE, "gather_rows needs a tensor of rank >= 1");
    int64_t shape[ANE_MAX_DIMS];
    memcpy(shape, src->shape, sizeof shape);
    shape[0] = count;
    ane_tensor result;
    ane_status status = new_tensor(&result, src->ndim, shape, src->dtype, UNINITIALIZED, err);
    if (status) return status;
    for (int64_t i = 0; i < count && !status; i++) {
        if (ids[i] < 0 || ids[i] >= src->shape[0]) {
            status = ane_fail(err, ANE_ERR_RANGE, "row id %lld (position %lld) is outside 0..%lld", (long long)ids[i],
                              (long long)i + 1, (long long)src->shape[0] - 1);
            break;
        }
        ane_tensor from, to;
        status = ane_tensor_slice(&from, src, 0, ids[i], ids[i] + 1, err);
        if (status) break;
        status = ane_tensor_slice(&to, &result, 0, i, i + 1, err);
        if (!status) status = ane_tensor_copy_into(&to, &from, err);
        ane_tensor_release(&from);
        ane_tensor_release(&to);
    }
    if (status) {
        ane_tensor_release(&result);
        return status;
    }
    *out = result;
    return ANE_OK;
}
