/* The sim backend's CPU kernels (see sim_kernels.h). Buffers are contiguous fp32 arrays in
 * the node's row-major shape; `values[node->id].data` holds every computed or constant value (sim_value). */
#include "sim_kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../tensor/blas.h"
#include "../base/parallel.h"
#include "../tensor/gemm.h"
#include "../tensor/gemv.h"
#include "../tensor/vector_math.h"

#define IN(node, k) (values[(node)->operands[k]->id].data)

static ane_status kernel_fail(const ane_node *node, ane_error *err, const char *what) {
    return ane_fail(err, ANE_ERR_ARGUMENT, "node '%s' (%s): %s", node->name, ane_op_table[node->op].name, what);
}

/* Element strides of operand x broadcast to the shape of `out` (0 on broadcast dims). */
static void broadcast_strides(const ane_node *x, const ane_node *out, int64_t *strides) {
    int shift = out->rank - x->rank;
    int64_t stride = 1;
    for (int i = out->rank - 1; i >= 0; i--) {
        int j = i - shift;
        strides[i] = (j < 0 || x->shape[j] == 1) ? 0 : stride;
        if (j >= 0) stride *= x->shape[j];
    }
}

/* ------------------------------------------------------------------ elementwise */

typedef void (*binary_row)(float *out, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n);

#define DEFINE_BINARY(name, expression)                                                              \
    static void name(float *out, const float *a, int64_t sa, const float *b, int64_t sb, int64_t n) { \
        if (sa == 1 && sb == 1) {                                                                    \
            for (int64_t i = 0; i < n; i++) {                                                        \
                float x = a[i], y = b[i];                                                            \
                out[i] = (expression);                                                               \
            }                                                                                        \
        } else if (sa == 1 && sb == 0) {                                                             \
            float y = b[0];                                                                          \
            for (int64_t i = 0; i < n; i++) {                                                        \
                float x = a[i];                                                                      \
                out[i] = (expression);                                                               \
            }                                                                                        \
        } else {                                                                                     \
            for (int64_t i = 0; i < n; i++) {                                                        \
                float x = a[i * sa], y = b[i * sb];                                                  \
                out[i] = (expression);                                                               \
            }                                                                                        \
        }                                                                                            \
    }

DEFINE_BINARY(row_add, x + y)
DEFINE_BINARY(row_sub, x - y)
DEFINE_BINARY(row_mul, x *y)
DEFINE_BINARY(row_div, x / y)
DEFINE_BINARY(row_max, x > y ? x : (y != y ? y : (x != x ? x : y)))
DEFINE_BINARY(row_min, x < y ? x : (y != y ? y : (x != x ? x : y)))
DEFINE_BINARY(row_pow, powf(x, y))

/* Elements per thread from which the data-parallel kernels below (binary ops, softmax,
 * transposes) share their work with the helper threads: a hand-off costs a few microseconds,
 * 32,768 elements of these ops ten or more. Each element's value does not depend on the split. */
#define SHARE_GRAIN ((int64_t)1 << 15)

typedef struct binary_job {
    const ane_node *node;
    const float *a, *b;
    float *out;
    binary_row row;
    int64_t sa[ANE_IR_MAX_RANK], sb[ANE_IR_MAX_RANK]; /* broadcast strides of a and b */
    int64_t step_b;                                    /* flat ranges: 1 (same shape) or 0 (b a scalar) */
    int rank; /* the output's axes up to its last one longer than 1 (trailing 1s index nothing) */
} binary_job;

static void binary_flat(void *context, int64_t first, int64_t last) { /* elements first .. last - 1 */
    const binary_job *job = context;
    job->row(job->out + first, job->a + first, 1, job->b + first * job->step_b, job->step_b, last - first);
}

static void binary_rows(void *context, int64_t first, int64_t last) { /* rows along the output's last axis */
    const binary_job *job = context;
    const ane_node *node = job->node;
    int last_axis = job->rank - 1;
    int64_t inner = node->shape[last_axis], index[ANE_IR_MAX_RANK] = {0};
    for (int64_t i = last_axis - 1, rest = first; i >= 0; i--) {
        index[i] = rest % node->shape[i];
        rest /= node->shape[i];
    }
    for (int64_t r = first; r < last; r++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < last_axis; i++) oa += index[i] * job->sa[i], ob += index[i] * job->sb[i];
        job->row(job->out + r * inner, job->a + oa, job->sa[last_axis], job->b + ob, job->sb[last_axis], inner);
        for (int i = last_axis - 1; i >= 0 && ++index[i] == node->shape[i]; i--) index[i] = 0;
    }
}

/* out = a (op) b with broadcasting; rows along the last output dimension. */
static void broadcast_binary(const ane_node *node, const float *a, const float *b, float *out, binary_row row) {
    const ane_node *x = node->operands[0], *y = node->operands[1];
    int64_t numel = ane_node_numel(node);
    binary_job job = {.node = node, .a = a, .b = b, .out = out, .row = row};
    if (node->rank == 0) {
        row(out, a, 0, b, 0, 1);
        return;
    }
    if (ane_node_same_shape(x, node) && (ane_node_same_shape(y, node) || ane_node_numel(y) == 1)) {
        job.step_b = ane_node_same_shape(y, node);
        ane_parallel_for(numel, SHARE_GRAIN, binary_flat, &job);
        return;
    }
    broadcast_strides(x, node, job.sa);
    broadcast_strides(y, node, job.sb);
    /* rows along the last axis longer than 1: a decode step's [1, heads, head_dim, 1] times
     * [1, 1, head_dim, 1] is heads rows of head_dim, not heads x head_dim rows of one */
    job.rank = node->rank;
    while (job.rank > 1 && node->shape[job.rank - 1] == 1) job.rank--;
    int64_t inner = node->shape[job.rank - 1];
    ane_parallel_for(inner ? numel / inner : 0, SHARE_GRAIN / (inner + 1) + 1, binary_rows, &job);
}

static void run_binary(const ane_node *node, const sim_value *values, float *out) {
    binary_row row = row_add;
    switch (node->op) {
    case ANE_OP_ADD: row = row_add; break;
    case ANE_OP_SUB: row = row_sub; break;
    case ANE_OP_MUL: row = row_mul; break;
    case ANE_OP_REAL_DIV: row = row_div; break;
    case ANE_OP_MAXIMUM: row = row_max; break;
    case ANE_OP_MINIMUM: row = row_min; break;
    case ANE_OP_POW: row = row_pow; break;
    default: break;
    }
    broadcast_binary(node, IN(node, 0), IN(node, 1), out, row);
}

/* Elements first .. last - 1 of a unary op. */
/* MIL's gelu: EXACT x Phi(x) = x (1 + erf(x / sqrt 2)) / 2; TANH_APPROXIMATION
 * x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (GPT-2's, Gemma's); SIGMOID_APPROXIMATION
 * x sigmoid(1.702 x). out may equal x: the inner values go through a block of their own. */
static void gelu(const char *mode, float *out, const float *x, int64_t n) {
    enum { BLOCK = 256 };
    float inner[BLOCK];
    for (int64_t start = 0; start < n; start += BLOCK) {
        int64_t count = n - start < BLOCK ? n - start : BLOCK;
        const float *xs = x + start;
        float *os = out + start;
        if (mode[0] == 'T') {
            for (int64_t i = 0; i < count; i++) inner[i] = 0.7978845608028654f * (xs[i] + 0.044715f * xs[i] * xs[i] * xs[i]);
            ane_tanh_n(inner, inner, count);
            for (int64_t i = 0; i < count; i++) os[i] = 0.5f * xs[i] * (1.0f + inner[i]);
        } else if (mode[0] == 'S') {
            for (int64_t i = 0; i < count; i++) inner[i] = 1.702f * xs[i];
            ane_sigmoid_n(inner, inner, count);
            for (int64_t i = 0; i < count; i++) os[i] = xs[i] * inner[i];
        } else {
            for (int64_t i = 0; i < count; i++) os[i] = 0.5f * xs[i] * (1.0f + erff(xs[i] * 0.7071067811865476f));
        }
    }
}

static void unary_range(const ane_node *node, const float *x, float *out, int64_t first, int64_t last) {
    const ane_node_attrs *a = &node->attrs;
    switch (node->op) {
    case ANE_OP_NEG: for (int64_t i = first; i < last; i++) out[i] = -x[i]; break;
    case ANE_OP_ABS: for (int64_t i = first; i < last; i++) out[i] = fabsf(x[i]); break;
    case ANE_OP_EXP: ane_exp_n(out + first, x + first, last - first); break;
    case ANE_OP_LOG: {
        float epsilon = (float)node->attrs.epsilon; /* 1e-45 rounds to the smallest denormal in fp32 */
        for (int64_t i = first; i < last; i++) out[i] = logf(x[i] + epsilon);
        break;
    }
    case ANE_OP_SQRT: for (int64_t i = first; i < last; i++) out[i] = sqrtf(x[i]); break;
    case ANE_OP_RSQRT: {
        float epsilon = (float)node->attrs.epsilon;
        for (int64_t i = first; i < last; i++) out[i] = 1.0f / sqrtf(x[i] + epsilon);
        break;
    }
    case ANE_OP_INVERSE: {
        float epsilon = (float)node->attrs.epsilon;
        for (int64_t i = first; i < last; i++) out[i] = 1.0f / (x[i] + epsilon);
        break;
    }
    case ANE_OP_TANH: ane_tanh_n(out + first, x + first, last - first); break;
    case ANE_OP_SIGMOID: ane_sigmoid_n(out + first, x + first, last - first); break;
    case ANE_OP_SILU: ane_silu_n(out + first, x + first, last - first); break;
    case ANE_OP_SOFTPLUS: /* log(1 + e^x), without overflow: max(x, 0) + log1p(e^-|x|) */
        for (int64_t i = first; i < last; i++) out[i] = fmaxf(x[i], 0.0f) + log1pf(expf(-fabsf(x[i])));
        break;
    case ANE_OP_RELU: for (int64_t i = first; i < last; i++) out[i] = x[i] > 0 ? x[i] : 0.0f; break;
    case ANE_OP_GELU: gelu(a->mode, out + first, x + first, last - first); break;
    case ANE_OP_CLIP: {
        float lo = (float)a->alpha, hi = (float)a->beta;
        for (int64_t i = first; i < last; i++) out[i] = x[i] < lo ? lo : (x[i] > hi ? hi : x[i]);
        break;
    }
    case ANE_OP_CAST:
        if (a->dtype == ANE_BOOL) {
            for (int64_t i = first; i < last; i++) out[i] = x[i] != 0.0f;
        } else if (a->dtype == ANE_INT32) { /* truncation toward zero, saturating */
            for (int64_t i = first; i < last; i++) {
                float v = truncf(x[i]);
                out[i] = v != v ? 0.0f : v > 2147483520.0f ? 2147483520.0f : v < -2147483648.0f ? -2147483648.0f : v;
            }
        } else {
            memcpy(out + first, x + first, (size_t)(last - first) * sizeof *out);
        }
        break;
    default: memcpy(out + first, x + first, (size_t)(last - first) * sizeof *out); break;
    }
}

typedef struct unary_job {
    const ane_node *node;
    const float *x;
    float *out;
} unary_job;

static void unary_chunk(void *context, int64_t first, int64_t last) {
    const unary_job *job = context;
    unary_range(job->node, job->x, job->out, first, last);
}

/* Elements per helper thread from which a unary op is shared with the helper threads: the
 * ops calling libm per element (tens of nanoseconds each) from 1,024 (a decode step's
 * SoftPlus over 3,072), those of tensor/vector_math.h (a nanosecond or two) from 16,384
 * (prefill's GELU over 256 x 3,072); the rest run alone (0). */
static int64_t unary_grain(ane_op op) {
    switch (op) {
    case ANE_OP_LOG: case ANE_OP_SOFTPLUS: return 1024;
    case ANE_OP_EXP: case ANE_OP_TANH: case ANE_OP_SIGMOID: case ANE_OP_SILU: case ANE_OP_GELU: return 16384;
    default: return 0;
    }
}

static void run_unary(const ane_node *node, const float *x, float *out) {
    int64_t n = ane_node_numel(node), grain = unary_grain(node->op);
    if (!grain) {
        unary_range(node, x, out, 0, n);
        return;
    }
    unary_job job = {node, x, out};
    ane_parallel_for(n, grain, unary_chunk, &job);
}

/* quantize: clamp(round-half-even(x / scale + zero_point)) to int8 or uint8; dequantize:
 * (x - zero_point) * scale; scale and zero_point per tensor or per index of axis. */
static void run_quantize(const ane_node *node, const sim_value *values, float *out) {
    const ane_node *x = node->operands[0];
    const float *input = values[x->id].data, *scale = values[node->operands[1]->id].data;
    const float *zero = node->noperands > 2 ? values[node->operands[2]->id].data : NULL;
    int64_t n = ane_node_numel(x), inner = 1, channels = x->rank ? x->shape[node->attrs.axis] : 1;
    for (int d = (int)node->attrs.axis + 1; d < x->rank; d++) inner *= x->shape[d];
    int per_scale = ane_node_numel(node->operands[1]) > 1, per_zero = zero && ane_node_numel(node->operands[2]) > 1;
    float lo = node->attrs.dtype == ANE_UINT8 ? 0.0f : -128.0f, hi = node->attrs.dtype == ANE_UINT8 ? 255.0f : 127.0f;
    for (int64_t i = 0; i < n; i++) {
        int64_t c = i / inner % channels;
        float s = scale[per_scale ? c : 0], z = zero ? zero[per_zero ? c : 0] : 0.0f;
        if (node->op == ANE_OP_DEQUANTIZE) {
            out[i] = (input[i] - z) * s;
        } else {
            float q = rintf(input[i] / s + z);
            out[i] = q != q ? 0.0f : q < lo ? lo : q > hi ? hi : q;
        }
    }
}

static void run_select(const ane_node *node, const sim_value *values, float *out) {
    int64_t s[3][ANE_IR_MAX_RANK], index[ANE_IR_MAX_RANK] = {0};
    for (int k = 0; k < 3; k++) broadcast_strides(node->operands[k], node, s[k]);
    const float *cond = IN(node, 0), *a = IN(node, 1), *b = IN(node, 2);
    int64_t numel = ane_node_numel(node);
    for (int64_t o = 0; o < numel; o++) {
        int64_t oc = 0, oa = 0, ob = 0;
        for (int i = 0; i < node->rank; i++) oc += index[i] * s[0][i], oa += index[i] * s[1][i], ob += index[i] * s[2][i];
        out[o] = cond[oc] != 0.0f ? a[oa] : b[ob];
        for (int i = node->rank - 1; i >= 0 && ++index[i] == node->shape[i]; i--) index[i] = 0;
    }
}

/* ------------------------------------------------------------------ reductions */

/* Sizes around `axis`: outer x count x inner. */
static void split_at_axis(const ane_node *x, int64_t axis, int64_t *outer, int64_t *count, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= x->shape[i];
    *count = x->shape[axis];
    for (int i = (int)axis + 1; i < x->rank; i++) *inner *= x->shape[i];
}

void sim_reduce_axis(const float *in, float *out, int rank, int64_t *shape, int64_t axis, int take_max) {
    int64_t outer = 1, inner = 1, count = shape[axis];
    for (int i = 0; i < axis; i++) outer *= shape[i];
    for (int i = (int)axis + 1; i < rank; i++) inner *= shape[i];
    if (inner == 1) {
        /* one contiguous run each (a decode step's [1, C, 1, 1] norms, its scores' maxima) */
        float (*reduce_run)(const float *, int64_t) = take_max ? ane_max_n : ane_sum_n;
        for (int64_t o = 0; o < outer; o++) out[o] = reduce_run(in + o * count, count);
        shape[axis] = 1;
        return;
    }
    for (int64_t o = 0; o < outer; o++) {
        const float *src = in + o * count * inner;
        float *dst = out + o * inner;
        memcpy(dst, src, (size_t)inner * sizeof *dst);
        for (int64_t c = 1; c < count; c++) {
            const float *row = src + c * inner;
            if (take_max)
                for (int64_t i = 0; i < inner; i++) dst[i] = row[i] > dst[i] || row[i] != row[i] ? row[i] : dst[i];
            else
                for (int64_t i = 0; i < inner; i++) dst[i] += row[i];
        }
    }
    shape[axis] = 1;
}

static ane_status run_reduce(const ane_node *node, const sim_value *values, float *out, ane_error *err) {
    const ane_node *x = node->operands[0];
    int64_t shape[ANE_IR_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    int take_max = node->op == ANE_OP_REDUCE_MAX;
    const ane_int_list *axes = &node->attrs.axes;
    /* Axes one at a time, through a temporary when more than one. */
    float *temp = NULL;
    const float *source = IN(node, 0);
    float *squares = NULL; /* reduce_l2_norm: sqrt of the sum of squares */
    if (node->op == ANE_OP_REDUCE_L2_NORM) {
        int64_t n = ane_node_numel(x);
        squares = malloc((size_t)n * sizeof *squares);
        if (!squares) return kernel_fail(node, err, "out of memory");
        for (int64_t i = 0; i < n; i++) squares[i] = source[i] * source[i];
        source = squares;
    }
    int64_t reduced_count = 1;
    for (int k = 0; k < axes->count; k++) {
        int64_t axis = axes->values[k];
        reduced_count *= shape[axis];
        int final = k == axes->count - 1;
        float *target = out;
        if (!final) {
            int64_t remaining = 1;
            for (int i = 0; i < x->rank; i++) remaining *= i == axis ? 1 : shape[i];
            float *next = malloc((size_t)remaining * sizeof *next);
            if (!next) {
                free(temp);
                free(squares);
                return kernel_fail(node, err, "out of memory");
            }
            target = next;
        }
        sim_reduce_axis(source, target, x->rank, shape, axis, take_max);
        if (temp && temp != target) free(temp);
        temp = final ? NULL : target;
        source = target;
    }
    free(squares);
    if (node->op == ANE_OP_REDUCE_MEAN) {
        int64_t n = ane_node_numel(node);
        float scale = 1.0f / (float)reduced_count;
        for (int64_t i = 0; i < n; i++) out[i] *= scale;
    }
    if (node->op == ANE_OP_REDUCE_L2_NORM) {
        int64_t n = ane_node_numel(node);
        for (int64_t i = 0; i < n; i++) out[i] = sqrtf(out[i]);
    }
    return ANE_OK;
}

typedef struct softmax_job {
    const float *x;
    float *out;
    int64_t count, inner;
} softmax_job;

static void softmax_outer(void *context, int64_t first, int64_t last) { /* outer indices first .. last - 1 */
    const softmax_job *job = context;
    int64_t count = job->count, inner = job->inner;
    for (int64_t o = first; o < last; o++) {
        for (int64_t i = 0; i < inner; i++) {
            const float *src = job->x + o * count * inner + i;
            float *dst = job->out + o * count * inner + i;
            float peak = -INFINITY;
            for (int64_t c = 0; c < count; c++) peak = src[c * inner] > peak ? src[c * inner] : peak;
            float sum = 0.0f;
            if (inner == 1) {
                sum = ane_exp_shifted_sum_n(dst, src, peak, count);
            } else { /* along a strided axis: one element at a time */
                for (int64_t c = 0; c < count; c++) sum += ane_exp_shifted_sum_n(&dst[c * inner], &src[c * inner], peak, 1);
            }
            float scale = 1.0f / sum;
            for (int64_t c = 0; c < count; c++) dst[c * inner] *= scale;
        }
    }
}

static void run_softmax(const ane_node *node, const float *x, float *out) {
    softmax_job job = {x, out, 0, 0};
    int64_t outer;
    split_at_axis(node, node->attrs.axis, &outer, &job.count, &job.inner);
    ane_parallel_for(outer, SHARE_GRAIN / (job.count * job.inner + 1) + 1, softmax_outer, &job);
}

/* ------------------------------------------------------------------ conv and matmul */

static int is_pointwise(const ane_node *node) {
    const ane_node *w = node->operands[1];
    const ane_node_attrs *a = &node->attrs;
    return w->shape[2] == 1 && w->shape[3] == 1 && a->strides[0] == 1 && a->strides[1] == 1 && !a->pads[0] &&
           !a->pads[1] && !a->pads[2] && !a->pads[3];
}

/* Rows of a [rows, k] fp16 weight matrix converted per block. */
static int64_t weight_block_rows(int64_t rows, int64_t k) {
    int64_t block = SIM_WEIGHT_BLOCK_FLOATS / (k > 0 ? k : 1);
    if (block < 1) block = 1;
    return block < rows ? block : rows;
}

/* Rows of a matmul's first operand up to which its products are vector products (matmul_batches) */
#define MATMUL_FEW_ROWS 4

size_t sim_scratch_floats(const ane_node *node, int stored_weight) {
    if (node->op == ANE_OP_MATMUL) { /* an fp16 or transposed second operand: one of its matrices in fp32, [k, n] */
        const ane_node *y = node->operands[1];
        int few_rows = !node->attrs.transpose_x && node->shape[node->rank - 2] <= MATMUL_FEW_ROWS; /* vector products */
        int transposed = node->attrs.transpose_y && !few_rows && ane_gemm_weights_available();
        return stored_weight || transposed ? (size_t)(y->shape[y->rank - 2] * y->shape[y->rank - 1]) : 0;
    }
    if (node->op != ANE_OP_CONV) return 0;
    const ane_node *w = node->operands[1];
    int64_t k = w->shape[1] * w->shape[2] * w->shape[3], cout_g = w->shape[0] / (node->attrs.groups ? node->attrs.groups : 1);
    size_t columns = is_pointwise(node) ? 0 : (size_t)k * (size_t)(node->shape[2] * node->shape[3]);
    /* fp16 weights convert a panel at a time in gemm.h's kernels, else a block of rows here */
    size_t weights = stored_weight && !ane_gemm_weights_available() ? (size_t)(weight_block_rows(cout_g, k) * k) : 0;
    return columns + weights;
}

/* o[rows, pixels] = W[rows, k] x columns[k, pixels]; one position is a matrix-vector product. */
static ane_status multiply(const float *w, const float *columns, float *o, int64_t rows, int64_t k, int64_t pixels,
                           ane_error *err) {
    if (pixels == 1) {
        ane_gemv_fp32(o, w, columns, rows, k);
        return ANE_OK;
    }
    if (pixels <= ANE_FEW_COLUMNS) return ane_gemm_fp32_few_columns(o, w, columns, rows, k, pixels, err);
    if (ane_gemm_weights_available()) { /* the panel kernel (tensor/gemm.h), as the other products of sim */
        ane_weight_rows stored = {ANE_ENCODING_DENSE, 0, w, NULL, 0, 0};
        ane_gemm_weights(o, &stored, columns, rows, k, pixels);
        return ANE_OK;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)pixels, (int)k, 1.0f, w, (int)k, columns,
                (int)pixels, 0.0f, o, (int)pixels);
    return ANE_OK;
}

/* Rows [first, first + count) of an encoded weight times columns [k, pixels], read as stored
 * (tensor/gemv.h's ane_encoded_matmul: int8 times the row's scale, 4-bit indices into the
 * row's palette, or codes times their block's scale; integer activations under the cpu
 * profile's option, for the per-row encodings). */
static ane_status run_encoded_rows(const sim_context *context, const ane_node *w, const char *palette_codes,
                                   int64_t first, int64_t count, int64_t k, const float *columns, int64_t pixels, float *o,
                                   ane_error *err) {
    const uint8_t *data = (const uint8_t *)ane_tensor_data(&w->value);
    const float *table = (const float *)ane_tensor_data(&w->table);
    if (palette_codes) palette_codes += (size_t)first * ane_palette_codes_stride(context->activations);
    return ane_encoded_matmul(o, w->encoding, data + ane_encoded_data_bytes(w->encoding, first, k),
                              table + first * ane_encoded_table_width(w->encoding, k), palette_codes, columns, count, k,
                              pixels, context->activations, err);
}

/* palette_codes: the step's for this conv's weight (sim_step). */
static ane_status run_conv(const sim_context *context, const ane_node *node, const void *palette_codes,
                           const sim_value *values, float *out, ane_error *err) {
    const ane_node *x = node->operands[0], *w = node->operands[1];
    const ane_node_attrs *a = &node->attrs;
    const float *input = IN(node, 0);
    const uint16_t *half = values[w->id].half;
    const float *weight = IN(node, 1); /* NULL when kept fp16 or encoded */
    int encoded = w->encoding && !weight && !half;
    int64_t batch = x->shape[0], cin = x->shape[1], h = x->shape[2], wd = x->shape[3];
    int64_t cout = w->shape[0], kh = w->shape[2], kw = w->shape[3], groups = a->groups;
    int64_t ho = node->shape[2], wo = node->shape[3];
    int64_t cin_g = cin / groups, cout_g = cout / groups, k = cin_g * kh * kw, pixels = ho * wo;
    int pointwise = is_pointwise(node);
    float *col = context->scratch;                               /* [k, pixels] im2col */
    float *weight_block = /* [block rows, k]; no scratch at all for a pointwise conv of fp32 weights */
        context->scratch ? context->scratch + (pointwise ? 0 : (size_t)(k * pixels)) : NULL;
    int64_t block_rows = weight_block_rows(cout_g, k);
    for (int64_t n = 0; n < batch; n++) {
        for (int64_t g = 0; g < groups; g++) {
            const float *x_g = input + (n * cin + g * cin_g) * h * wd;
            float *o_g = out + (n * cout + g * cout_g) * pixels;
            const float *columns = x_g;
            if (!pointwise) { /* im2col: [cin_g * kh * kw, ho * wo] */
                for (int64_t c = 0; c < cin_g; c++)
                    for (int64_t i = 0; i < kh; i++)
                        for (int64_t j = 0; j < kw; j++) {
                            float *row = col + ((c * kh + i) * kw + j) * pixels;
                            for (int64_t y = 0; y < ho; y++) {
                                int64_t sy = y * a->strides[0] - a->pads[0] + i * a->dilations[0];
                                for (int64_t xx = 0; xx < wo; xx++) {
                                    int64_t sx = xx * a->strides[1] - a->pads[2] + j * a->dilations[1];
                                    row[y * wo + xx] = (sy >= 0 && sy < h && sx >= 0 && sx < wd) ? x_g[(c * h + sy) * wd + sx] : 0.0f;
                                }
                            }
                        }
                columns = col;
            }
            if (encoded) {
                ane_status status =
                    run_encoded_rows(context, w, palette_codes, g * cout_g, cout_g, k, columns, pixels, o_g, err);
                if (status) return status;
                continue;
            }
            if (!half) {
                ane_status status = multiply(weight + g * cout_g * k, columns, o_g, cout_g, k, pixels, err);
                if (status) return status;
                continue;
            }
            if (pixels == 1) { /* decode: read the fp16 weights once, convert in registers */
                ane_gemv_fp16(o_g, half + g * cout_g * k, columns, cout_g, k);
                continue;
            }
            if (pixels <= ANE_FEW_COLUMNS) { /* a short prefill: the same, once a column (multiply's sums) */
                ane_status status = ane_gemm_fp16_few_columns(o_g, half + g * cout_g * k, columns, cout_g, k, pixels, err);
                if (status) return status;
                continue;
            }
            if (ane_gemm_weights_available()) { /* converted a panel at a time (tensor/gemm.h) */
                ane_weight_rows rows = {ANE_ENCODING_DENSE, 1, half + g * cout_g * k, NULL, 0, 0};
                ane_gemm_weights(o_g, &rows, columns, cout_g, k, pixels);
                continue;
            }
            /* no kernel for this CPU: convert a block of rows (exactly), multiply, next block */
            for (int64_t row = 0; row < cout_g; row += block_rows) {
                int64_t rows = cout_g - row < block_rows ? cout_g - row : block_rows;
                ane_fp16_to_fp32_n(weight_block, half + (g * cout_g + row) * k, (size_t)(rows * k));
                ane_status status = multiply(weight_block, columns, o_g + row * pixels, rows, k, pixels, err);
                if (status) return status;
            }
        }
    }
    return ANE_OK;
}

int sim_part_kind(const ane_node *node, int weight_form) {
    if (node->op != ANE_OP_CONV || node->noperands != 2 || node->attrs.groups != 1 || !is_pointwise(node)) return 0;
    const ane_node *x = node->operands[0];
    if (x->shape[0] != 1 || x->shape[2] * x->shape[3] > ANE_FEW_COLUMNS) return 0; /* a few positions */
    const ane_node *w = node->operands[1];
    if (weight_form == SIM_WEIGHT_HALF) return SIM_PART_HALF;
    if (weight_form != SIM_WEIGHT_ENCODED) return 0;
    return w->encoding ? SIM_PART_ENCODED + (int)w->encoding : 0;
}

/* A group's convs (sim_step.parts) in one loop over their rows; one by one where a weight
 * is held neither as fp16 bits nor encoded (no product reads it as stored). */
static ane_status k_parts(const sim_context *context, const sim_step *step, const sim_value *values, ane_error *err) {
    ane_gemv_part parts[SIM_MAX_PARTS];
    for (int p = 0; p < step->nparts; p++) {
        const ane_node *conv = step->parts[p], *w = conv->operands[1];
        const uint16_t *half = values[w->id].half;
        if (!half && !w->encoding) {
            for (int c = 0; c < step->nparts; c++) {
                ane_status status = run_conv(context, step->parts[c], step->palette_codes[c], values,
                                             values[step->parts[c]->id].data, err);
                if (status) return status;
            }
            return ANE_OK;
        }
        const void *palette_codes = w->encoding == ANE_ENCODING_LUT4 ? step->palette_codes[p] : NULL;
        parts[p] = half ? (ane_gemv_part){values[conv->id].data, ANE_ENCODING_DENSE, half, NULL, w->shape[0], NULL, NULL}
                        : (ane_gemv_part){values[conv->id].data, w->encoding, ane_tensor_data(&w->value),
                                          (const float *)ane_tensor_data(&w->table), w->shape[0], palette_codes,
                                          step->half_tables[p].storage ? (const uint16_t *)ane_tensor_data(&step->half_tables[p])
                                                                       : NULL};
    }
    const ane_node *x = step->node->operands[0];
    return ane_gemm_parts(parts, step->nparts, IN(step->node, 0), step->node->operands[1]->shape[1], x->shape[2] * x->shape[3],
                          context->activations, err);
}

/* One matmul's batches: matrices x [m, k] (lda) and y [k, n] or [n, k] (ldb) per batch,
 * found through broadcasting strides over the leading dims. y is fp32 values, or fp16 bits
 * (y_half: a cache sim holds in fp16), which BLAS reads converted into `scratch`. Positions
 * of y's last axis from y_filled on are zeros (a cache's unwritten positions): the vector
 * products leave them out (below). */
typedef struct matmul_job {
    const float *x, *y;
    const uint16_t *y_half;
    float *scratch; /* [y_matrix] */
    float *out;
    int64_t m, n, k, lda, ldb, x_matrix, y_matrix, y_filled;
    int tx, ty;
    int few_rows; /* at most MATMUL_FEW_ROWS rows of x, not transposed: vector products */
    const ane_node *batch; /* the output's leading dims */
    const int64_t *sx, *sy;
} matmul_job;

int sim_all_finite(const float *x, int64_t n) {
    uint32_t exponents_all_ones = 0; /* (a branch-free test the compiler vectorizes) */
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, x + i, sizeof bits);
        exponents_all_ones |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    return !exponents_all_ones;
}

/* Elements of rows of k, zeros from `filled` on, that a product with x needs: `filled` rounded
 * up to whole chunks of the row kernels (ANE_GEMV_CHUNK), whose sums then equal the whole
 * rows' bit for bit, where x is finite beyond (inf or NaN times a zero is NaN: all k). */
static int64_t filled_chunks(int64_t filled, int64_t k, const float *x) {
    int64_t used = (filled + ANE_GEMV_CHUNK - 1) / ANE_GEMV_CHUNK * ANE_GEMV_CHUNK;
    return used < k && sim_all_finite(x + used, k - used) ? used : k;
}

static void matmul_batches(void *context, int64_t first, int64_t last) {
    const matmul_job *j = context;
    for (int64_t b = first; b < last; b++) {
        int64_t ox = 0, oy = 0, rest = b;
        for (int i = j->batch->rank - 1; i >= 0; i--) {
            int64_t at = rest % j->batch->shape[i];
            rest /= j->batch->shape[i];
            ox += at * j->sx[i], oy += at * j->sy[i];
        }
        const float *xm = j->x + ox * j->x_matrix, *ym = j->y_half ? NULL : j->y + oy * j->y_matrix;
        const uint16_t *yh = j->y_half ? j->y_half + oy * j->y_matrix : NULL;
        float *om = j->out + b * j->m * j->n;
        if (j->few_rows && j->k == 1 && j->ty) {
            /* an outer product with y as a column (a decode step's own value times its attention
             * weight), which would be a vector product of length 1 per element: one product an
             * element, plus the +0 every vector product's sum starts from (y as a row is the
             * vector-matrix kernel's best case already) */
            for (int64_t i = 0; i < j->m; i++)
                for (int64_t c = 0; c < j->n; c++)
                    om[i * j->n + c] = xm[i * j->lda] * (yh ? ane_fp16_to_fp32(yh[c]) : ym[c]) + 0.0f;
        } else if (j->few_rows) {
            /* a few rows (a decode step's attention: one query per head, or a group of
             * them): vector products, as a BLAS call per head costs more than its arithmetic;
             * over a cache's written positions only */
            for (int64_t i = 0; i < j->m; i++) {
                const float *xi = xm + i * j->lda;
                float *oi = om + i * j->n;
                if (j->ty) { /* y [n, k]: k positions a row, zeros from y_filled on */
                    int64_t used = filled_chunks(j->y_filled, j->k, xi);
                    if (yh) ane_gemv_fp16_strided(oi, yh, j->k, xi, j->n, used);
                    else ane_gemv_fp32_strided(oi, ym, j->k, xi, j->n, used);
                } else { /* y [k, n]: columns from y_filled on are zeros, their sums +0 (whole tiles computed) */
                    int64_t tiles = (j->y_filled + ANE_VECMAT_TILE - 1) / ANE_VECMAT_TILE * ANE_VECMAT_TILE;
                    int64_t used = tiles < j->n && sim_all_finite(xi, j->k) ? tiles : j->n;
                    if (yh) ane_vecmat_fp16(oi, xi, yh, j->n, j->k, used);
                    else ane_vecmat_fp32(oi, xi, ym, j->n, j->k, used);
                    for (int64_t c = used; c < j->n; c++) oi[c] = 0.0f;
                }
            }
        } else if (ane_gemm_weights_available()) {
            /* x's rows (columns, if transposed) as the panel kernel's weights (tensor/gemm.h), y as its [k, n] columns:
             * transposed (and converted from fp16) into the scratch when stored otherwise; batches
             * run one after another here, so the scratch is free */
            const float *columns = ym;
            int64_t ld = j->ldb;
            if (j->ty || yh) {
                float *t = j->scratch; /* [k, n] */
                for (int64_t r = 0; r < j->k; r++)
                    for (int64_t c = 0; c < j->n; c++) {
                        int64_t at = j->ty ? c * j->ldb + r : r * j->ldb + c;
                        t[r * j->n + c] = yh ? ane_fp16_to_fp32(yh[at]) : ym[at];
                    }
                columns = t, ld = j->n;
            }
            ane_weight_rows rows = {ANE_ENCODING_DENSE, 0, xm, NULL, j->lda, j->tx};
            ane_gemm_weights_strided(om, j->n, &rows, columns, ld, j->m, j->k, j->n);
        } else {
            if (yh) { /* batches run one after another here: the scratch is free */
                ane_fp16_to_fp32_n(j->scratch, yh, (size_t)j->y_matrix);
                ym = j->scratch;
            }
            cblas_sgemm(CblasRowMajor, j->tx ? CblasTrans : CblasNoTrans, j->ty ? CblasTrans : CblasNoTrans, (int)j->m,
                        (int)j->n, (int)j->k, 1.0f, xm, (int)j->lda, ym, (int)j->ldb, 0.0f, om, (int)j->n);
        }
    }
}

int sim_find_column_copies(const float *values, int64_t rows, int64_t columns, int transposed, sim_column_copies *out) {
    int64_t k = transposed ? columns : rows, n = transposed ? rows : columns; /* the product's [k, n] */
    if (k <= 0 || n <= 0 || k > INT32_MAX) return 0;
    int32_t *source = malloc((size_t)n * sizeof *source);
    float *factor = malloc((size_t)n * sizeof *factor);
    int found = source && factor;
    for (int64_t j = 0; found && j < n; j++) {
        source[j] = -1, factor[j] = 0.0f; /* a column of zeros: 0 times any element */
        for (int64_t i = 0; found && i < k; i++) {
            float v = transposed ? values[j * columns + i] : values[i * columns + j];
            if (v == 0.0f) continue; /* +0 and -0 alike: either times a finite x is a zero */
            found = source[j] < 0;
            source[j] = (int32_t)i, factor[j] = v;
        }
        if (source[j] < 0) source[j] = 0;
    }
    if (!found) {
        free(source);
        free(factor);
        return 0;
    }
    int pairs = k == n && n % 2 == 0, halves = pairs;
    for (int64_t j = 0; j < n && (pairs || halves); j++) {
        pairs &= source[j] == (j ^ 1);
        halves &= source[j] == (j + n / 2) % n;
    }
    *out = (sim_column_copies){k, n, source, factor, pairs ? SIM_COPIES_PAIRS : halves ? SIM_COPIES_HALVES : SIM_COPIES_ANY};
    return 1;
}

void sim_column_copies_free(sim_column_copies *copies) {
    if (!copies) return;
    free(copies->source);
    free(copies->factor);
    free(copies);
}

/* x R for such an R: one product an output element. The sum the full product would form is
 * that product plus zeros, the same value in any order, and +0 where the product is a zero of
 * either sign (every kernel's sum starts from +0); a NaN or inf in x would turn the zeros'
 * products into NaN, so such an x takes the full product (returns 0). */
static int run_column_copies(const sim_column_copies *copies, const ane_node *node, const float *x, float *out) {
    int64_t n = copies->n, k = copies->k, rows = ane_node_numel(node) / n;
    if (ane_node_numel(node->operands[0]) != rows * k) return 0; /* (x broadcast over batches: the full product) */
    if (!sim_all_finite(x, rows * k)) return 0;
    const float *factor = copies->factor;
    for (int64_t row = 0; row < rows; row++) {
        const float *in = x + row * k;
        float *o = out + row * n;
        switch (copies->order) { /* (the same products as the gather, in loops the compiler vectorizes) */
        case SIM_COPIES_PAIRS:
            for (int64_t j = 0; j < n; j += 2) o[j] = factor[j] * in[j + 1] + 0.0f, o[j + 1] = factor[j + 1] * in[j] + 0.0f;
            break;
        case SIM_COPIES_HALVES:
            for (int64_t j = 0; j < n / 2; j++) o[j] = factor[j] * in[j + n / 2] + 0.0f;
            for (int64_t j = n / 2; j < n; j++) o[j] = factor[j] * in[j - n / 2] + 0.0f;
            break;
        default:
            for (int64_t j = 0; j < n; j++) o[j] = factor[j] * in[copies->source[j]] + 0.0f;
        }
    }
    return 1;
}

static void run_matmul(const sim_context *context, const ane_node *node, const sim_value *values, float *out) {
    const sim_column_copies *copies = values[node->id].column_copies;
    if (copies && run_column_copies(copies, node, IN(node, 0), out)) return;
    const ane_node *x = node->operands[0], *y = node->operands[1];
    int tx = node->attrs.transpose_x, ty = node->attrs.transpose_y;
    int r = node->rank;
    int64_t m = node->shape[r - 2], n = node->shape[r - 1];
    int64_t k = tx ? x->shape[x->rank - 2] : x->shape[x->rank - 1];
    /* Batch offsets with broadcasting over the leading dims. */
    ane_node xb = *x, yb = *y, ob = *node;
    xb.rank -= 2, yb.rank -= 2, ob.rank -= 2;
    int64_t sx[ANE_IR_MAX_RANK], sy[ANE_IR_MAX_RANK];
    broadcast_strides(&xb, &ob, sx);
    broadcast_strides(&yb, &ob, sy);
    const uint16_t *y_half = values[y->id].half;
    int64_t y_filled = values[y->id].filled;
    matmul_job job = {IN(node, 0), IN(node, 1), y_half, context->scratch, out, m, n, k, x->shape[x->rank - 1], y->shape[y->rank - 1],
                      x->shape[x->rank - 2] * x->shape[x->rank - 1], y->shape[y->rank - 2] * y->shape[y->rank - 1],
                      y_filled, tx, ty, !tx && m <= MATMUL_FEW_ROWS, &ob, sx, sy};
    int64_t batches = ane_node_numel(&ob);
    if (job.few_rows) { /* vector products: heads over the helper threads, 64 KB of y a share at least */
        ane_parallel_for(batches, ((int64_t)1 << 16) / (k * n * (int64_t)sizeof(float) + 1) + 1, matmul_batches, &job);
    } else {
        matmul_batches(&job, 0, batches); /* the panel kernel or BLAS threads these itself */
    }
}

/* ------------------------------------------------------------------ data movement */

static void row_major_strides(const int64_t *shape, int rank, int64_t *strides) {
    int64_t stride = 1;
    for (int i = rank - 1; i >= 0; i--) {
        strides[i] = stride;
        stride *= shape[i];
    }
}

/* out[i...] = in[offset + sum(i_k * in_strides[k])] over out's shape. */
/* Drops unit axes and merges axes that are contiguous in the input, so that a transpose
 * of [out, in, 1, 1] weights becomes a plain 2-D one. Returns the new rank. */
static int simplify_strided(const int64_t *shape, const int64_t *strides, int rank, int64_t *out_shape,
                            int64_t *out_strides) {
    int n = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 1) continue;
        if (n > 0 && out_strides[n - 1] == strides[i] * shape[i]) {
            out_shape[n - 1] *= shape[i];
            out_strides[n - 1] = strides[i];
        } else {
            out_shape[n] = shape[i];
            out_strides[n] = strides[i];
            n++;
        }
    }
    return n;
}

typedef struct gather_job {
    const float *in;
    float *out;
    int64_t offset, dims[ANE_IR_MAX_RANK], steps[ANE_IR_MAX_RANK];
    int rank, leading; /* dims [0, leading) are the ones split (each item of the loop one index of them) */
} gather_job;

/* The input offset of item `item` of the leading dims. */
static int64_t gather_item_offset(const gather_job *job, int64_t item) {
    int64_t o = job->offset;
    for (int i = job->leading - 1; i >= 0; i--) {
        o += item % job->dims[i] * job->steps[i];
        item /= job->dims[i];
    }
    return o;
}

static void gather_rows(void *context, int64_t first, int64_t last) { /* items: rows of the last axis */
    const gather_job *job = context;
    int64_t inner = job->dims[job->rank - 1], step = job->steps[job->rank - 1];
    for (int64_t row = first; row < last; row++) {
        const float *src = job->in + gather_item_offset(job, row);
        float *dst = job->out + row * inner;
        if (step == 1) memcpy(dst, src, (size_t)inner * sizeof *dst);
        else
            for (int64_t i = 0; i < inner; i++) dst[i] = src[i * step];
    }
}

static void gather_planes(void *context, int64_t first, int64_t last) { /* items: planes of the last two axes */
    enum { TILE = 32 };
    const gather_job *job = context;
    int last_axis = job->rank - 1;
    int64_t inner = job->dims[last_axis], step = job->steps[last_axis];
    int64_t rows = job->dims[last_axis - 1], row_step = job->steps[last_axis - 1], plane = rows * inner;
    for (int64_t p = first; p < last; p++) {
        const float *src = job->in + gather_item_offset(job, p);
        float *dst = job->out + p * plane;
        for (int64_t r0 = 0; r0 < rows; r0 += TILE)
            for (int64_t c0 = 0; c0 < inner; c0 += TILE) {
                int64_t r1 = r0 + TILE < rows ? r0 + TILE : rows, c1 = c0 + TILE < inner ? c0 + TILE : inner;
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < c1; c++) dst[r * inner + c] = src[r * row_step + c * step];
            }
    }
}

/* out (row-major, `shape`) = the elements of `in` at offset + sum(index[i] * in_strides[i]).
 * Rows whose last axis is contiguous are copied whole; otherwise the last two axes are
 * copied in square tiles, so a transpose reads and writes whole cache lines. Rows or planes
 * are shared with the helper threads. */
static void gather_strided(const float *in, int64_t offset, const int64_t *in_strides, const int64_t *shape, int rank,
                           float *out) {
    gather_job job = {.in = in, .out = out, .offset = offset};
    job.rank = simplify_strided(shape, in_strides, rank, job.dims, job.steps);
    if (job.rank == 0) {
        out[0] = in[offset];
        return;
    }
    int64_t inner = job.dims[job.rank - 1];
    if (job.steps[job.rank - 1] == 1 || job.rank == 1) {
        job.leading = job.rank - 1;
        int64_t rows = 1;
        for (int i = 0; i < job.leading; i++) rows *= job.dims[i];
        ane_parallel_for(rows, SHARE_GRAIN / inner + 1, gather_rows, &job);
        return;
    }
    job.leading = job.rank - 2;
    int64_t planes = 1, plane = job.dims[job.rank - 2] * inner;
    for (int i = 0; i < job.leading; i++) planes *= job.dims[i];
    ane_parallel_for(planes, SHARE_GRAIN / plane + 1, gather_planes, &job);
}

static void run_transpose(const ane_node *node, const float *x, float *out) {
    const ane_node *in = node->operands[0];
    int64_t in_strides[ANE_IR_MAX_RANK], strides[ANE_IR_MAX_RANK];
    row_major_strides(in->shape, in->rank, in_strides);
    for (int i = 0; i < node->rank; i++) strides[i] = in_strides[node->attrs.perm.values[i]];
    gather_strided(x, 0, strides, node->shape, node->rank, out);
}

/* A box of x starting at begin[] with the node's shape. */
static void run_slice(const ane_node *node, const float *x, const int64_t *begin, float *out) {
    const ane_node *in = node->operands[0];
    int64_t strides[ANE_IR_MAX_RANK], offset = 0;
    row_major_strides(in->shape, in->rank, strides);
    for (int i = 0; i < in->rank; i++) offset += begin[i] * strides[i];
    gather_strided(x, offset, strides, node->shape, node->rank, out);
}

/* Each operand's runs (its extent along the axis x what follows it) into their places in out,
 * an operand at a time: a run of a few elements (a batched decode step's columns, one each) is
 * copied in a loop, where a memcpy per run cost a call per element. */
static void run_concat(const ane_node *node, const sim_value *values, float *out) {
    int64_t outer, count, inner;
    split_at_axis(node, node->attrs.axis, &outer, &count, &inner);
    int64_t row = count * inner, at = 0; /* out [outer, row]: an operand's runs start `at` into each row */
    for (int k = 0; k < node->noperands; k++) {
        int64_t chunk = node->operands[k]->shape[node->attrs.axis] * inner;
        const float *src = values[node->operands[k]->id].data; /* [outer, chunk] */
        for (int64_t o = 0; o < outer; o++) {
            float *dst = out + o * row + at;
            if (chunk >= 16) memcpy(dst, src + o * chunk, (size_t)chunk * sizeof *dst);
            else for (int64_t i = 0; i < chunk; i++) dst[i] = src[o * chunk + i];
        }
        at += chunk;
    }
}

static void run_split(const ane_node *node, const float *x, float *out) {
    int64_t begin[ANE_IR_MAX_RANK] = {0};
    for (int i = 0; i < node->attrs.index; i++) begin[node->attrs.axis] += node->attrs.sizes.values[i];
    run_slice(node, x, begin, out);
}

static void run_pad(const ane_node *node, const float *x, float *out) {
    const ane_node *in = node->operands[0];
    const ane_node_attrs *a = &node->attrs;
    int first = in->rank - a->amounts.count / 2;
    int mode = strcmp(a->mode, "reflect") == 0 ? 1 : strcmp(a->mode, "replicate") == 0 ? 2 : 0;
    int64_t in_strides[ANE_IR_MAX_RANK], index[ANE_IR_MAX_RANK] = {0};
    row_major_strides(in->shape, in->rank, in_strides);
    int64_t numel = ane_node_numel(node);
    if (mode == 0 && node->rank > 0) { /* constant: whole rows of the last axis, copied or filled */
        int last = node->rank - 1;
        int64_t width = node->shape[last], in_width = in->shape[last];
        int64_t before = last >= first ? a->amounts.values[2 * (last - first)] : 0;
        for (int64_t row = 0; row * width < numel; row++) {
            float *o = out + row * width;
            int64_t source = 0;
            int inside = 1;
            for (int i = 0; i < last; i++) {
                int64_t c = index[i] - (i >= first ? a->amounts.values[2 * (i - first)] : 0);
                inside &= c >= 0 && c < in->shape[i];
                source += c * in_strides[i];
            }
            for (int64_t j = 0; j < width; j++) o[j] = (float)a->alpha;
            if (inside) { /* the input's row lands at [before, before + in_width), cut to the output */
                int64_t from = before < 0 ? -before : 0, to = before + in_width > width ? width - before : in_width;
                if (to > from) memcpy(o + before + from, x + source + from, (size_t)(to - from) * sizeof *o);
            }
            for (int i = last - 1; i >= 0 && ++index[i] == node->shape[i]; i--) index[i] = 0;
        }
        return;
    }
    for (int64_t o = 0; o < numel; o++) {
        int64_t source = 0;
        int outside = 0;
        for (int i = 0; i < node->rank; i++) {
            int64_t before = i >= first ? a->amounts.values[2 * (i - first)] : 0;
            int64_t c = index[i] - before, size = in->shape[i];
            if (c < 0 || c >= size) {
                if (mode == 0) outside = 1;
                else if (mode == 2) c = c < 0 ? 0 : size - 1;
                else {
                    int64_t period = size > 1 ? 2 * (size - 1) : 1;
                    c = ((c % period) + period) % period;
                    if (c >= size) c = period - c;
                }
            }
            source += c * in_strides[i];
        }
        out[o] = outside ? (float)a->alpha : x[source];
        for (int i = node->rank - 1; i >= 0 && ++index[i] == node->shape[i]; i--) index[i] = 0;
    }
}

static ane_status run_gather(const ane_node *node, const sim_value *values, float *out, ane_error *err) {
    const ane_node *x = node->operands[0], *indices = node->operands[1];
    int64_t outer, count, inner;
    split_at_axis(x, node->attrs.axis, &outer, &count, &inner);
    int64_t n = ane_node_numel(indices);
    const float *data = IN(node, 0), *ids = IN(node, 1);
    for (int64_t j = 0; j < n; j++) {
        float raw = ids[j];
        int64_t id = (raw >= -(float)count && raw < (float)count) ? (int64_t)raw : INT64_MIN; /* NaN and inf too */
        if (id < 0 && id != INT64_MIN) id += count;
        if (id < 0 || id >= count) {
            char message[128];
            snprintf(message, sizeof message, "index %g is outside 0..%lld", (double)raw, (long long)count - 1);
            return kernel_fail(node, err, message);
        }
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < n; j++) {
            int64_t id = (int64_t)ids[j];
            if (id < 0) id += count;
            memcpy(out + (o * n + j) * inner, data + (o * count + id) * inner, (size_t)inner * sizeof *out);
        }
    return ANE_OK;
}

static ane_status run_sdpa(const sim_context *context, const ane_node *node, const sim_value *values, float *out,
                           ane_error *err) {
    const ane_node *q = node->operands[0], *k = node->operands[1], *v = node->operands[2];
    int r = q->rank;
    int64_t l = q->shape[r - 2], e = q->shape[r - 1], s = k->shape[r - 2], ev = v->shape[r - 1];
    int64_t batches = ane_node_numel(q) / (l * e);
    if (ane_node_numel(k) / (s * e) != batches || ane_node_numel(v) / (s * ev) != batches)
        return kernel_fail(node, err, "query, key and value need the same batch dimensions");
    float *scores = malloc((size_t)(l * s) * sizeof *scores);
    if (!scores) return kernel_fail(node, err, "out of memory");
    /* The mask, when applied, broadcasts to [..., L, S]. */
    const ane_node *mask = node->noperands == 4 && context->apply_sdpa_mask ? node->operands[3] : NULL;
    ane_node scores_shape = *q;
    scores_shape.shape[r - 1] = s;
    int64_t ms[ANE_IR_MAX_RANK];
    if (mask) broadcast_strides(mask, &scores_shape, ms);
    float scale = 1.0f / sqrtf((float)e);
    for (int64_t b = 0; b < batches; b++) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)l, (int)s, (int)e, scale, IN(node, 0) + b * l * e, (int)e,
                    IN(node, 1) + b * s * e, (int)e, 0.0f, scores, (int)s);
        if (mask) {
            /* batch index -> offsets over the leading dims */
            int64_t rest = b, base = 0;
            for (int i = r - 3; i >= 0 && !context->sdpa_mask_one_plane; i--) {
                base += (rest % q->shape[i]) * ms[i];
                rest /= q->shape[i];
            }
            const float *m = values[mask->id].data + base;
            for (int64_t i = 0; i < l; i++)
                for (int64_t j = 0; j < s; j++) scores[i * s + j] += m[i * ms[r - 2] + j * ms[r - 1]];
        }
        for (int64_t i = 0; i < l; i++) {
            float *row = scores + i * s, peak = -INFINITY, sum = 0.0f;
            for (int64_t j = 0; j < s; j++) peak = row[j] > peak ? row[j] : peak;
            sum = ane_exp_shifted_sum_n(row, row, peak, s);
            for (int64_t j = 0; j < s; j++) row[j] /= sum;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)l, (int)ev, (int)s, 1.0f, scores, (int)s,
                    IN(node, 2) + b * s * ev, (int)ev, 0.0f, out + b * l * ev, (int)ev);
    }
    free(scores);
    return ANE_OK;
}

/* ------------------------------------------------------------------ dispatch */

/* Every kernel through one signature, so the plan takes each step's from a table indexed by op. */
#define OUT(step) (values[(step)->node->id].data)
#define KERNEL(name, call)                                                                           \
    static ane_status name(const sim_context *context, const sim_step *step, const sim_value *values, \
                           ane_error *err) {                                                         \
        const ane_node *node = step->node;                                                           \
        float *out = OUT(step);                                                                      \
        (void)context;                                                                               \
        (void)err;                                                                                   \
        (void)node;                                                                                  \
        call;                                                                                        \
    }
KERNEL(k_matmul, run_matmul(context, node, values, out); return ANE_OK)
KERNEL(k_binary, run_binary(node, values, out); return ANE_OK)
KERNEL(k_unary, run_unary(node, IN(node, 0), out); return ANE_OK)
KERNEL(k_quantize, run_quantize(node, values, out); return ANE_OK)
KERNEL(k_softmax, run_softmax(node, IN(node, 0), out); return ANE_OK)
KERNEL(k_transpose, run_transpose(node, IN(node, 0), out); return ANE_OK)
KERNEL(k_slice, run_slice(node, IN(node, 0), node->attrs.begin.values, out); return ANE_OK)
KERNEL(k_select, run_select(node, values, out); return ANE_OK)
KERNEL(k_concat, run_concat(node, values, out); return ANE_OK)
KERNEL(k_split, run_split(node, IN(node, 0), out); return ANE_OK)
KERNEL(k_pad, run_pad(node, IN(node, 0), out); return ANE_OK)
KERNEL(k_conv, return run_conv(context, node, step->palette_codes[0], values, out, err))
KERNEL(k_reduce, return run_reduce(node, values, out, err))
KERNEL(k_gather, return run_gather(node, values, out, err))
KERNEL(k_sdpa, return run_sdpa(context, node, values, out, err))
#undef KERNEL

/* The kernel of every op of the op table but the sources (inputs and consts are filled at
 * eval and load); a row without one is an error at compile, and spec/ops_spec.lua. */
static const sim_kernel kernels[ANE_OP_COUNT] = {
    [ANE_OP_CONV] = k_conv, [ANE_OP_MATMUL] = k_matmul,
    [ANE_OP_ADD] = k_binary, [ANE_OP_SUB] = k_binary, [ANE_OP_MUL] = k_binary, [ANE_OP_REAL_DIV] = k_binary,
    [ANE_OP_MAXIMUM] = k_binary, [ANE_OP_MINIMUM] = k_binary, [ANE_OP_POW] = k_binary,
    [ANE_OP_NEG] = k_unary, [ANE_OP_ABS] = k_unary, [ANE_OP_EXP] = k_unary, [ANE_OP_LOG] = k_unary,
    [ANE_OP_SQRT] = k_unary, [ANE_OP_RSQRT] = k_unary, [ANE_OP_INVERSE] = k_unary,
    [ANE_OP_QUANTIZE] = k_quantize, [ANE_OP_DEQUANTIZE] = k_quantize, [ANE_OP_TANH] = k_unary, [ANE_OP_SIGMOID] = k_unary,
    [ANE_OP_SILU] = k_unary, [ANE_OP_GELU] = k_unary, [ANE_OP_SOFTPLUS] = k_unary, [ANE_OP_RELU] = k_unary, [ANE_OP_CLIP] = k_unary,
    [ANE_OP_CAST] = k_unary, [ANE_OP_IDENTITY] = k_unary, [ANE_OP_RESHAPE] = k_unary,
    [ANE_OP_SOFTMAX] = k_softmax,
    [ANE_OP_REDUCE_SUM] = k_reduce, [ANE_OP_REDUCE_MEAN] = k_reduce, [ANE_OP_REDUCE_L2_NORM] = k_reduce,
    [ANE_OP_REDUCE_MAX] = k_reduce,
    [ANE_OP_TRANSPOSE] = k_transpose, [ANE_OP_SLICE_BY_INDEX] = k_slice, [ANE_OP_SLICE_BY_SIZE] = k_slice,
    [ANE_OP_SELECT] = k_select, [ANE_OP_CONCAT] = k_concat, [ANE_OP_SPLIT] = k_split, [ANE_OP_PAD] = k_pad,
    [ANE_OP_GATHER] = k_gather, [ANE_OP_SDPA] = k_sdpa,
};

ane_status sim_kernel_for(const ane_node *node, int as_parts, sim_kernel *out, ane_error *err) {
    if (node->op < 0 || node->op >= ANE_OP_COUNT) return ane_fail(err, ANE_ERR_ARGUMENT, "node '%s' has an invalid op", node->name);
    if (!kernels[node->op])
        return ane_fail(err, ANE_ERR_ARGUMENT, "node '%s' (%s): the sim backend has no kernel for this op", node->name,
                        ane_op_table[node->op].name);
    *out = as_parts ? k_parts : kernels[node->op];
    return ANE_OK;
}
