/* Shape and dtype rules, one function per rule of the op table. Each error names the node,
 * its op and the shapes involved. Attribute lists with negative axes or -1 sizes are
 * normalized here, so later stages see only resolved, non-negative values. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "graph.h"

#define NODE_FAIL(node, ...) node_fail(node, err, __VA_ARGS__)

__attribute__((format(printf, 3, 4))) static ane_status node_fail(const ane_node *node, ane_error *err, const char *format, ...) {
    char detail[512];
    va_list args;
    va_start(args, format);
    vsnprintf(detail, sizeof detail, format, args);
    va_end(args);
    return ane_fail(err, ANE_ERR_SHAPE, "node '%s' (%s): %s", node->name, ane_op_table[node->op].name, detail);
}

static void set_shape(ane_node *node, ane_dtype dtype, int rank, const int64_t *shape) {
    node->dtype = dtype;
    node->rank = rank;
    if (rank > 0) memcpy(node->shape, shape, (size_t)rank * sizeof *shape);
}

static const char *shape_of(const ane_node *node, char *buf) { return ane_node_shape_string(node, buf, 128); }

/* Turns a possibly negative axis into 0..rank-1. */
static ane_status normalize_axis(const ane_node *node, int64_t *axis, int rank, ane_error *err) {
    int64_t value = *axis < 0 ? *axis + rank : *axis;
    if (value < 0 || value >= rank)
        return NODE_FAIL(node, "axis %lld is outside a rank-%d tensor", (long long)*axis, rank);
    *axis = value;
    return ANE_OK;
}

static ane_status same_dtype(const ane_node *node, const ane_node *a, const ane_node *b, ane_error *err) {
    if (a->dtype != b->dtype)
        return NODE_FAIL(node, "operands '%s' (%s) and '%s' (%s) have different dtypes; cast one first", a->name,
                         ane_dtype_name(a->dtype), b->name, ane_dtype_name(b->dtype));
    return ANE_OK;
}

/* numpy broadcasting of two shapes into out (rank = max). */
static ane_status broadcast(const ane_node *node, const ane_node *a, const ane_node *b, int *rank, int64_t *out,
                            ane_error *err) {
    int n = a->rank > b->rank ? a->rank : b->rank;
    for (int i = 0; i < n; i++) {
        int ia = i - (n - a->rank), ib = i - (n - b->rank);
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[128], sb[128];
            return NODE_FAIL(node, "shapes %s ('%s') and %s ('%s') do not broadcast", shape_of(a, sa), a->name,
                             shape_of(b, sb), b->name);
        }
        out[i] = da == 1 ? db : da;
    }
    *rank = n;
    return ANE_OK;
}

static ane_status rule_broadcast(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0], *y = node->operands[1];
    ane_status status = same_dtype(node, x, y, err);
    if (status) return status;
    int rank = 0;
    int64_t shape[ANE_IR_MAX_RANK];
    if ((status = broadcast(node, x, y, &rank, shape, err))) return status;
    set_shape(node, x->dtype, rank, shape);
    return ANE_OK;
}

static ane_status rule_select(ane_node *node, ane_error *err) {
    ane_node *cond = node->operands[0], *a = node->operands[1], *b = node->operands[2];
    if (cond->dtype != ANE_BOOL) return NODE_FAIL(node, "cond '%s' must be bool, not %s", cond->name, ane_dtype_name(cond->dtype));
    ane_status status = same_dtype(node, a, b, err);
    if (status) return status;
    int rank = 0;
    int64_t shape[ANE_IR_MAX_RANK];
    if ((status = broadcast(node, a, b, &rank, shape, err))) return status;
    ane_node merged = *a;
    merged.rank = rank;
    memcpy(merged.shape, shape, sizeof shape);
    if ((status = broadcast(node, cond, &merged, &rank, shape, err))) return status;
    set_shape(node, a->dtype, rank, shape);
    return ANE_OK;
}

static ane_status rule_conv(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0], *w = node->operands[1];
    ane_node_attrs *a = &node->attrs;
    char sx[128], sw[128];
    if (x->rank != 4 || w->rank != 4)
        return NODE_FAIL(node, "x %s and weight %s must both be rank 4 ([N, C, H, W] and [Cout, Cin/groups, kh, kw])",
                         shape_of(x, sx), shape_of(w, sw));
    ane_status status = same_dtype(node, x, w, err);
    if (status) return status;
    if (a->groups == 0) a->groups = 1;
    for (int i = 0; i < 2; i++) {
        if (a->strides[i] == 0) a->strides[i] = 1;
        if (a->dilations[i] == 0) a->dilations[i] = 1;
        if (a->strides[i] < 1 || a->dilations[i] < 1) return NODE_FAIL(node, "strides and dilations must be positive");
    }
    for (int i = 0; i < 4; i++)
        if (a->pads[i] < 0) return NODE_FAIL(node, "pads must not be negative");
    if (a->groups < 1 || x->shape[1] % a->groups || w->shape[0] % a->groups)
        return NODE_FAIL(node, "groups %lld must divide input channels %lld and output channels %lld", (long long)a->groups,
                         (long long)x->shape[1], (long long)w->shape[0]);
    if (w->shape[1] * a->groups != x->shape[1])
        return NODE_FAIL(node, "x %s has %lld channels but weight %s expects %lld (x %lld groups)", shape_of(x, sx),
                         (long long)x->shape[1], shape_of(w, sw), (long long)(w->shape[1] * a->groups), (long long)a->groups);
    int64_t out[4] = {x->shape[0], w->shape[0], 0, 0};
    for (int i = 0; i < 2; i++) {
        int64_t extent = x->shape[2 + i] + a->pads[2 * i] + a->pads[2 * i + 1] - a->dilations[i] * (w->shape[2 + i] - 1) - 1;
        if (extent < 0)
            return NODE_FAIL(node, "kernel %s does not fit input %s with these pads and dilations", shape_of(w, sw),
                             shape_of(x, sx));
        out[2 + i] = extent / a->strides[i] + 1;
    }
    set_shape(node, x->dtype, 4, out);
    return ANE_OK;
}

static ane_status rule_matmul(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0], *y = node->operands[1];
    char sx[128], sy[128];
    if (x->rank < 2 || y->rank < 2) return NODE_FAIL(node, "x %s and y %s need rank >= 2", shape_of(x, sx), shape_of(y, sy));
    ane_status status = same_dtype(node, x, y, err);
    if (status) return status;
    int tx = node->attrs.transpose_x, ty = node->attrs.transpose_y;
    int64_t m = x->shape[x->rank - (tx ? 1 : 2)], kx = x->shape[x->rank - (tx ? 2 : 1)];
    int64_t ky = y->shape[y->rank - (ty ? 1 : 2)], n = y->shape[y->rank - (ty ? 2 : 1)];
    if (kx != ky)
        return NODE_FAIL(node, "inner dimensions differ: x %s%s gives %lld, y %s%s gives %lld", shape_of(x, sx),
                         tx ? " (transposed)" : "", (long long)kx, shape_of(y, sy), ty ? " (transposed)" : "", (long long)ky);
    /* Batch dims broadcast like elementwise ops. */
    ane_node xb = *x, yb = *y;
    xb.rank -= 2;
    yb.rank -= 2;
    int rank = 0;
    int64_t shape[ANE_IR_MAX_RANK];
    if ((status = broadcast(node, &xb, &yb, &rank, shape, err))) return status;
    if (rank + 2 > ANE_IR_MAX_RANK) return NODE_FAIL(node, "result rank exceeds %d", ANE_IR_MAX_RANK);
    shape[rank] = m;
    shape[rank + 1] = n;
    set_shape(node, x->dtype, rank + 2, shape);
    return ANE_OK;
}

static ane_status rule_reduce(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0];
    ane_node_attrs *a = &node->attrs;
    if (a->axes.count == 0) return NODE_FAIL(node, "axes must name at least one axis");
    int reduced[ANE_IR_MAX_RANK] = {0};
    for (int i = 0; i < a->axes.count; i++) {
        ane_status status = normalize_axis(node, &a->axes.values[i], x->rank, err);
        if (status) return status;
        if (reduced[a->axes.values[i]]++) return NODE_FAIL(node, "axis %lld is listed twice", (long long)a->axes.values[i]);
    }
    /* Sort ascending so equal reductions emit identical text. */
    for (int i = 1; i < a->axes.count; i++)
        for (int j = i; j > 0 && a->axes.values[j - 1] > a->axes.values[j]; j--) {
            int64_t t = a->axes.values[j];
            a->axes.values[j] = a->axes.values[j - 1];
            a->axes.values[j - 1] = t;
        }
    int64_t shape[ANE_IR_MAX_RANK];
    int rank = 0;
    for (int i = 0; i < x->rank; i++) {
        if (!reduced[i]) shape[rank++] = x->shape[i];
        else if (a->keep_dims) shape[rank++] = 1;
    }
    set_shape(node, x->dtype, rank, shape);
    return ANE_OK;
}

static ane_status rule_reshape(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0];
    ane_int_list *target = &node->attrs.shape;
    if (target->count > ANE_IR_MAX_RANK) return NODE_FAIL(node, "target rank %d exceeds %d", target->count, ANE_IR_MAX_RANK);
    int64_t known = 1;
    int inferred = -1;
    for (int i = 0; i < target->count; i++) {
        if (target->values[i] == -1 && inferred < 0) inferred = i;
        else if (target->values[i] < 1) return NODE_FAIL(node, "target dimension %d is %lld", i + 1, (long long)target->values[i]);
        else known *= target->values[i];
    }
    int64_t numel = ane_node_numel(x);
    if (inferred >= 0 && known > 0 && numel % known == 0) target->values[inferred] = numel / known;
    int64_t count = 1;
    for (int i = 0; i < target->count; i++) count *= target->values[i];
    if (count != numel) {
        char sx[128], st[128];
        return NODE_FAIL(node, "cannot reshape %s (%lld elements) to %s", shape_of(x, sx), (long long)numel,
                         ane_shape_string(st, sizeof st, target->count, target->values));
    }
    set_shape(node, x->dtype, target->count, target->values);
    return ANE_OK;
}

static ane_status rule_transpose(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0];
    ane_int_list *perm = &node->attrs.perm;
    if (perm->count != x->rank) return NODE_FAIL(node, "perm has %d entries for a rank-%d input", perm->count, x->rank);
    int seen[ANE_IR_MAX_RANK] = {0};
    int64_t shape[ANE_IR_MAX_RANK];
    for (int i = 0; i < perm->count; i++) {
        ane_status status = normalize_axis(node, &perm->values[i], x->rank, err);
        if (status) return status;
        if (seen[perm->values[i]]++) return NODE_FAIL(node, "perm is not a permutation (axis %lld twice)", (long long)perm->values[i]);
        shape[i] = x->shape[perm->values[i]];
    }
    set_shape(node, x->dtype, x->rank, shape);
    return ANE_OK;
}

static ane_status rule_slice(ane_node *node, int by_size, ane_error *err) {
    ane_node *x = node->operands[0];
    ane_int_list *begin = &node->attrs.begin, *second = by_size ? &node->attrs.size : &node->attrs.end;
    if (begin->count != x->rank || second->count != x->rank)
        return NODE_FAIL(node, "begin and %s need %d entries (one per dimension)", by_size ? "size" : "end", x->rank);
    int64_t shape[ANE_IR_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        int64_t dim = x->shape[i], start = begin->values[i];
        if (start < 0) start += dim;
        int64_t stop;
        if (by_size) stop = second->values[i] == -1 ? dim : start + second->values[i];
        else stop = second->values[i] < 0 ? second->values[i] + dim : second->values[i];
        if (start < 0 || stop > dim || stop <= start)
            return NODE_FAIL(node, "dimension %d of size %lld cannot be sliced from %lld to %lld", i + 1, (long long)dim,
                             (long long)start, (long long)stop);
        begin->values[i] = start;
        second->values[i] = by_size ? stop - start : stop;
        shape[i] = stop - start;
    }
    set_shape(node, x->dtype, x->rank, shape);
    return ANE_OK;
}

static ane_status rule_concat(ane_node *node, ane_error *err) {
    ane_node *first = node->operands[0];
    ane_status status = normalize_axis(node, &node->attrs.axis, first->rank, err);
    if (status) return status;
    int64_t shape[ANE_IR_MAX_RANK];
    memcpy(shape, first->shape, sizeof shape);
    for (int k = 1; k < node->noperands; k++) {
        ane_node *other = node->operands[k];
        if ((status = same_dtype(node, first, other, err))) return status;
        char sa[128], sb[128];
        int fits = other->rank == first->rank;
        for (int i = 0; fits && i < first->rank; i++)
            if (i != node->attrs.axis && other->shape[i] != first->shape[i]) fits = 0;
        if (!fits)
            return NODE_FAIL(node, "values %s and %s differ outside axis %lld", shape_of(first, sa), shape_of(other, sb),
                             (long long)node->attrs.axis);
        shape[node->attrs.axis] += other->shape[node->attrs.axis];
    }
    set_shape(node, first->dtype, first->rank, shape);
    return ANE_OK;
}

static ane_status rule_split(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0];
    ane_node_attrs *a = &node->attrs;
    ane_status status = normalize_axis(node, &a->axis, x->rank, err);
    if (status) return status;
    int64_t total = 0;
    for (int i = 0; i < a->sizes.count; i++) {
        if (a->sizes.values[i] < 1) return NODE_FAIL(node, "split sizes must be positive");
        total += a->sizes.values[i];
    }
    if (a->sizes.count < 1 || total != x->shape[a->axis])
        return NODE_FAIL(node, "split sizes add up to %lld but axis %lld has %lld", (long long)total, (long long)a->axis,
                         (long long)x->shape[a->axis]);
    if (a->index < 0 || a->index >= a->sizes.count) return NODE_FAIL(node, "piece %d of %d does not exist", (int)a->index + 1, a->sizes.count);
    int64_t shape[ANE_IR_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    shape[a->axis] = a->sizes.values[a->index];
    set_shape(node, x->dtype, x->rank, shape);
    return ANE_OK;
}

static ane_status rule_pad(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0];
    ane_node_attrs *a = &node->attrs;
    if (a->amounts.count % 2 || a->amounts.count / 2 > x->rank || a->amounts.count == 0)
        return NODE_FAIL(node, "pad needs (before, after) pairs for up to %d trailing dimensions, got %d numbers", x->rank,
                         a->amounts.count);
    if (!a->mode[0]) snprintf(a->mode, sizeof a->mode, "constant");
    if (strcmp(a->mode, "constant") && strcmp(a->mode, "reflect") && strcmp(a->mode, "replicate"))
        return NODE_FAIL(node, "pad mode '%s' is not constant, reflect or replicate", a->mode);
    int64_t shape[ANE_IR_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    int first = x->rank - a->amounts.count / 2;
    for (int i = first; i < x->rank; i++) {
        int64_t before = a->amounts.values[2 * (i - first)], after = a->amounts.values[2 * (i - first) + 1];
        if (before < 0 || after < 0) return NODE_FAIL(node, "pad amounts must not be negative");
        if (strcmp(a->mode, "reflect") == 0 && (before >= x->shape[i] || after >= x->shape[i]))
            return NODE_FAIL(node, "reflect padding of dimension %d (size %lld) must be below the size, got %lld and %lld",
                             i + 1, (long long)x->shape[i], (long long)before, (long long)after);
        shape[i] += before + after;
    }
    set_shape(node, x->dtype, x->rank, shape);
    return ANE_OK;
}

static ane_status rule_gather(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0], *indices = node->operands[1];
    ane_status status = normalize_axis(node, &node->attrs.axis, x->rank, err);
    if (status) return status;
    if (indices->dtype != ANE_INT32 && indices->dtype != ANE_UINT16 && indices->dtype != ANE_INT16)
        return NODE_FAIL(node, "indices must be an integer tensor, not %s", ane_dtype_name(indices->dtype));
    int rank = x->rank - 1 + indices->rank;
    if (rank > ANE_IR_MAX_RANK) return NODE_FAIL(node, "result rank %d exceeds %d", rank, ANE_IR_MAX_RANK);
    int64_t shape[ANE_IR_MAX_RANK];
    int n = 0;
    for (int i = 0; i < node->attrs.axis; i++) shape[n++] = x->shape[i];
    for (int i = 0; i < indices->rank; i++) shape[n++] = indices->shape[i];
    for (int i = (int)node->attrs.axis + 1; i < x->rank; i++) shape[n++] = x->shape[i];
    set_shape(node, x->dtype, rank, shape);
    return ANE_OK;
}

static ane_status rule_sdpa(ane_node *node, ane_error *err) {
    ane_node *q = node->operands[0], *k = node->operands[1], *v = node->operands[2];
    char sq[128], sk[128], sv[128];
    if (q->rank < 2 || q->rank != k->rank || q->rank != v->rank)
        return NODE_FAIL(node, "query %s, key %s and value %s need one rank >= 2", shape_of(q, sq), shape_of(k, sk), shape_of(v, sv));
    ane_status status = same_dtype(node, q, k, err);
    if (!status) status = same_dtype(node, q, v, err);
    if (status) return status;
    int r = q->rank;
    if (q->shape[r - 1] != k->shape[r - 1] || k->shape[r - 2] != v->shape[r - 2])
        return NODE_FAIL(node, "query %s, key %s and value %s disagree ([..., L, E], [..., S, E], [..., S, Ev])",
                         shape_of(q, sq), shape_of(k, sk), shape_of(v, sv));
    int64_t shape[ANE_IR_MAX_RANK];
    memcpy(shape, q->shape, sizeof shape);
    shape[r - 1] = v->shape[r - 1];
    set_shape(node, q->dtype, r, shape);
    return ANE_OK;
}

/* quantize / dequantize: the input's shape; scale (and zero_point) one value, or one per
 * index of axis; quantize gives output_dtype (int8 or uint8), dequantize the scale's dtype. */
static ane_status rule_quantize(ane_node *node, ane_error *err) {
    ane_node *x = node->operands[0], *scale = node->operands[1];
    ane_status status = normalize_axis(node, &node->attrs.axis, x->rank ? x->rank : 1, err);
    if (status) return status;
    int64_t channels = x->rank ? x->shape[node->attrs.axis] : 1;
    for (int k = 1; k < node->noperands; k++) {
        int64_t n = ane_node_numel(node->operands[k]);
        if (node->operands[k]->rank > 1 || (n != 1 && n != channels))
            return NODE_FAIL(node, "%s has %lld values; it needs 1 (per tensor) or %lld (one per index of axis %lld)",
                             k == 1 ? "scale" : "zero_point", (long long)n, (long long)channels, (long long)node->attrs.axis);
    }
    if (ane_dtype_kind_of(scale->dtype) != ANE_KIND_FLOAT)
        return NODE_FAIL(node, "scale must be fp16 or fp32, not %s", ane_dtype_name(scale->dtype));
    if (node->op == ANE_OP_QUANTIZE) {
        if (node->attrs.dtype != ANE_INT8 && node->attrs.dtype != ANE_UINT8)
            return NODE_FAIL(node, "quantize gives int8 or uint8, not %s", ane_dtype_name(node->attrs.dtype));
        set_shape(node, node->attrs.dtype, x->rank, x->shape);
    } else {
        set_shape(node, scale->dtype, x->rank, x->shape);
    }
    return ANE_OK;
}

ane_status ane_infer_shape(ane_node *node, ane_error *err) {
    ane_node *x = node->noperands ? node->operands[0] : NULL;
    switch (ane_op_table[node->op].shape_rule) {
    case SHAPE_SOURCE: return ANE_OK;
    case SHAPE_SAME:
        if (node->op == ANE_OP_GELU) {
            ane_node_attrs *a = &node->attrs;
            if (!a->mode[0]) snprintf(a->mode, sizeof a->mode, "EXACT");
            if (strcmp(a->mode, "EXACT") && strcmp(a->mode, "TANH_APPROXIMATION") && strcmp(a->mode, "SIGMOID_APPROXIMATION"))
                return NODE_FAIL(node, "gelu mode '%s' is not EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION", a->mode);
        }
        set_shape(node, x->dtype, x->rank, x->shape);
        break;
    case SHAPE_BROADCAST: return rule_broadcast(node, err);
    case SHAPE_CONV: return rule_conv(node, err);
    case SHAPE_MATMUL: return rule_matmul(node, err);
    case SHAPE_REDUCE: return rule_reduce(node, err);
    case SHAPE_RESHAPE: return rule_reshape(node, err);
    case SHAPE_TRANSPOSE: return rule_transpose(node, err);
    case SHAPE_SLICE_INDEX: return rule_slice(node, 0, err);
    case SHAPE_SLICE_SIZE: return rule_slice(node, 1, err);
    case SHAPE_CAST: {
        ane_dtype target = node->attrs.dtype;
        if (target != ANE_FP16 && target != ANE_FP32 && target != ANE_INT32 && target != ANE_BOOL)
            return NODE_FAIL(node, "cast to %s is not supported (fp16, fp32, int32, bool)", ane_dtype_name(target));
        set_shape(node, target, x->rank, x->shape);
        break;
    }
    case SHAPE_QUANTIZE: return rule_quantize(node, err);
    case SHAPE_SELECT: return rule_select(node, err);
    case SHAPE_CONCAT: return rule_concat(node, err);
    case SHAPE_SPLIT: return rule_split(node, err);
    case SHAPE_PAD: return rule_pad(node, err);
    case SHAPE_GATHER: return rule_gather(node, err);
    case SHAPE_SDPA: return rule_sdpa(node, err);
    }
    if (node->op == ANE_OP_SOFTMAX) return normalize_axis(node, &node->attrs.axis, node->rank, err);
    if (node->op == ANE_OP_CLIP && node->attrs.alpha > node->attrs.beta)
        return NODE_FAIL(node, "clip bounds [%g, %g] are empty", node->attrs.alpha, node->attrs.beta);
    return ANE_OK;
}
