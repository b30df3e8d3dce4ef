/* Reverse-mode differentiation on the graph IR (see autodiff.h).
 *
 * The backward graph replays the forward computation (so it needs only the forward inputs),
 * except for saved activations, which it takes as inputs instead (their producers are
 * then dropped by dead-code elimination unless something else needs them), takes one
 * cotangent input per forward output, walks the nodes in
 * reverse order applying each op's vector-Jacobian product, and outputs the accumulated
 * adjoints of the requested nodes. Only nodes on a path from a requested node get rules
 * applied. Broadcast operands get their gradient summed back to their shape. */
#include "autodiff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct builder {
    ane_graph *g;
    ane_error *err;
    ane_status status;
} builder;

static ane_node *op(builder *b, ane_op kind, ane_node *const *operands, int n, const ane_node_attrs *attrs) {
    if (b->status) return NULL;
    for (int i = 0; i < n; i++)
        if (!operands[i]) return NULL;
    ane_node *node = NULL;
    b->status = ane_graph_op(b->g, kind, NULL, operands, n, attrs, &node, b->err);
    return b->status ? NULL : node;
}

static ane_node *binary(builder *b, ane_op kind, ane_node *x, ane_node *y) {
    ane_node *operands[2] = {x, y};
    return op(b, kind, operands, 2, NULL);
}

static ane_node *unary(builder *b, ane_op kind, ane_node *x) { return op(b, kind, &x, 1, NULL); }

/* A rank-0 const of x's dtype. */
static ane_node *scalar(builder *b, double value, const ane_node *like) {
    if (b->status || !like) return NULL;
    ane_tensor t;
    b->status = ane_tensor_zeros(&t, 0, NULL, like->dtype, b->err);
    if (b->status) return NULL;
    ane_dtype_store(ane_tensor_data(&t), like->dtype, value);
    ane_node *node = NULL;
    b->status = ane_graph_const(b->g, NULL, &t, &node, b->err);
    ane_tensor_release(&t);
    return b->status ? NULL : node;
}

/* A zero const shaped like `like` (a stand-in for broadcasting to a shape). */
static ane_node *zeros_like(builder *b, const ane_node *like) {
    if (b->status || !like) return NULL;
    ane_tensor t;
    b->status = ane_tensor_zeros(&t, like->rank, like->shape, like->dtype, b->err);
    if (b->status) return NULL;
    ane_node *node = NULL;
    b->status = ane_graph_const(b->g, NULL, &t, &node, b->err);
    ane_tensor_release(&t);
    return b->status ? NULL : node;
}

static ane_node *reshape(builder *b, ane_node *x, int rank, const int64_t *shape) {
    ane_node_attrs a;
    memset(&a, 0, sizeof a);
    a.shape.count = rank;
    memcpy(a.shape.values, shape, (size_t)rank * sizeof *shape);
    return op(b, ANE_OP_RESHAPE, &x, 1, &a);
}

/* Sums g over the axes along which `target` was broadcast, back to target's shape. */
static ane_node *unbroadcast(builder *b, ane_node *g, const ane_node *target) {
    if (b->status || !g) return NULL;
    if (g->rank == target->rank && memcmp(g->shape, target->shape, (size_t)g->rank * sizeof g->shape[0]) == 0) return g;
    ane_node_attrs a;
    memset(&a, 0, sizeof a);
    a.keep_dims = 1;
    int shift = g->rank - target->rank;
    for (int i = 0; i < g->rank; i++) {
        int j = i - shift;
        if (j < 0 || (target->shape[j] == 1 && g->shape[i] != 1)) a.axes.values[a.axes.count++] = i;
    }
    ane_node *summed = a.axes.count ? op(b, ANE_OP_REDUCE_SUM, &g, 1, &a) : g;
    return reshape(b, summed, target->rank, target->shape);
}

static ane_node *matmul(builder *b, ane_node *x, ane_node *y, int tx, int ty) {
    ane_node_attrs a;
    memset(&a, 0, sizeof a);
    a.transpose_x = tx;
    a.transpose_y = ty;
    ane_node *operands[2] = {x, y};
    return op(b, ANE_OP_MATMUL, operands, 2, &a);
}

static ane_status no_rule(builder *b, const ane_node *node, const char *why) {
    b->status = ane_fail(b->err, ANE_ERR_ARGUMENT, "autodiff: %s (%s) %s", node->name, ane_op_table[node->op].name, why);
    return b->status;
}

/* One op's vector-Jacobian product. The forward node is `node`; in the backward graph its
 * value is `y` (its replay, or the saved activation fed as an input), its operands' values
 * are x = operand 0 and w = operand 1 (their replays), and g is the adjoint of its output.
 * A rule sets out[k], the contribution to operand k, for each operand that needs one
 * (need[k]); the rest stay NULL. */
typedef struct vjp_context {
    builder *b;
    const ane_node *node;
    const ane_node_attrs *a;
    ane_node *y, *g, *x, *w;
    int need[2];
    ane_node **out;
} vjp_context;

typedef void (*vjp_rule)(vjp_context *c);

static void vjp_add(vjp_context *c) {
    if (c->need[0]) c->out[0] = unbroadcast(c->b, c->g, c->x);
    if (c->need[1]) c->out[1] = unbroadcast(c->b, c->g, c->w);
}

static void vjp_sub(vjp_context *c) {
    if (c->need[0]) c->out[0] = unbroadcast(c->b, c->g, c->x);
    if (c->need[1]) c->out[1] = unbroadcast(c->b, unary(c->b, ANE_OP_NEG, c->g), c->w);
}

static void vjp_mul(vjp_context *c) {
    if (c->need[0]) c->out[0] = unbroadcast(c->b, binary(c->b, ANE_OP_MUL, c->g, c->w), c->x);
    if (c->need[1]) c->out[1] = unbroadcast(c->b, binary(c->b, ANE_OP_MUL, c->g, c->x), c->w);
}

static void vjp_real_div(vjp_context *c) { /* y = x / w: dx = g / w, dw = -g y / w */
    builder *b = c->b;
    if (c->need[0]) c->out[0] = unbroadcast(b, binary(b, ANE_OP_REAL_DIV, c->g, c->w), c->x);
    if (c->need[1])
        c->out[1] = unbroadcast(b, unary(b, ANE_OP_NEG, binary(b, ANE_OP_REAL_DIV, binary(b, ANE_OP_MUL, c->g, c->y), c->w)), c->w);
}

static void vjp_pow(vjp_context *c) { /* y = x^w: dx = g w x^(w-1) = g w y / x, dw = g y log x */
    builder *b = c->b;
    if (c->need[0])
        c->out[0] = unbroadcast(b, binary(b, ANE_OP_REAL_DIV, binary(b, ANE_OP_MUL, binary(b, ANE_OP_MUL, c->g, c->w), c->y), c->x), c->x);
    if (c->need[1]) c->out[1] = unbroadcast(b, binary(b, ANE_OP_MUL, binary(b, ANE_OP_MUL, c->g, c->y), unary(b, ANE_OP_LOG, c->x)), c->w);
}

static void vjp_neg(vjp_context *c) { c->out[0] = unary(c->b, ANE_OP_NEG, c->g); }
static void vjp_exp(vjp_context *c) { c->out[0] = binary(c->b, ANE_OP_MUL, c->g, c->y); }
static void vjp_log(vjp_context *c) { /* d log(x + eps) = 1 / (x + eps) */
    ane_node *shifted = c->a->epsilon > 1e-30 ? binary(c->b, ANE_OP_ADD, c->x, scalar(c->b, c->a->epsilon, c->x)) : c->x;
    c->out[0] = binary(c->b, ANE_OP_REAL_DIV, c->g, shifted);
}
static void vjp_identity(vjp_context *c) { c->out[0] = c->g; }

static void vjp_sqrt(vjp_context *c) { /* d sqrt(x) = 0.5 / y */
    c->out[0] = binary(c->b, ANE_OP_MUL, binary(c->b, ANE_OP_REAL_DIV, c->g, c->y), scalar(c->b, 0.5, c->y));
}

static void vjp_inverse(vjp_context *c) { /* y = 1 / (x + eps): dy/dx = -y^2 */
    builder *b = c->b;
    c->out[0] = binary(b, ANE_OP_MUL, binary(b, ANE_OP_MUL, c->g, binary(b, ANE_OP_MUL, c->y, c->y)), scalar(b, -1.0, c->y));
}

static void vjp_rsqrt(vjp_context *c) { /* y = (x + eps)^-1/2: dy/dx = -0.5 y^3 */
    builder *b = c->b;
    ane_node *cube = binary(b, ANE_OP_MUL, c->y, binary(b, ANE_OP_MUL, c->y, c->y));
    c->out[0] = binary(b, ANE_OP_MUL, binary(b, ANE_OP_MUL, c->g, cube), scalar(b, -0.5, c->y));
}

static void vjp_tanh(vjp_context *c) { /* 1 - y^2 */
    builder *b = c->b;
    c->out[0] = binary(b, ANE_OP_MUL, c->g, binary(b, ANE_OP_SUB, scalar(b, 1, c->y), binary(b, ANE_OP_MUL, c->y, c->y)));
}

static void vjp_sigmoid(vjp_context *c) { /* y (1 - y) */
    builder *b = c->b;
    c->out[0] = binary(b, ANE_OP_MUL, c->g, binary(b, ANE_OP_MUL, c->y, binary(b, ANE_OP_SUB, scalar(b, 1, c->y), c->y)));
}

static void vjp_silu(vjp_context *c) { /* y = x s(x): dy/dx = s (1 + x (1 - s)) */
    builder *b = c->b;
    ane_node *s = unary(b, ANE_OP_SIGMOID, c->x);
    ane_node *slope = binary(b, ANE_OP_MUL, s, binary(b, ANE_OP_ADD, scalar(b, 1, c->x),
                                                      binary(b, ANE_OP_MUL, c->x, binary(b, ANE_OP_SUB, scalar(b, 1, c->x), s))));
    c->out[0] = binary(b, ANE_OP_MUL, c->g, slope);
}

/* gelu's slope by mode (its definitions: sim_kernels.c). TANH_APPROXIMATION, with
 * u = sqrt(2 / pi) (x + 0.044715 x^3) and t = tanh u: (1 + t) / 2 + x (1 - t^2) u' / 2, where
 * u' = sqrt(2 / pi) (1 + 3 x 0.044715 x^2). SIGMOID_APPROXIMATION, with s = sigmoid(1.702 x):
 * s + 1.702 x s (1 - s). EXACT's slope needs erf, which the op set lacks: no rule (the message
 * says to use a form that has one). */
static void vjp_gelu(vjp_context *c) {
    builder *b = c->b;
    ane_node *x = c->x, *slope;
    if (c->a->mode[0] == 'T') {
        const double root_two_over_pi = 0.7978845608028654;
        ane_node *x2 = binary(b, ANE_OP_MUL, x, x);
        ane_node *u = binary(b, ANE_OP_MUL, scalar(b, root_two_over_pi, x),
                             binary(b, ANE_OP_ADD, x, binary(b, ANE_OP_MUL, scalar(b, 0.044715, x), binary(b, ANE_OP_MUL, x2, x))));
        ane_node *t = unary(b, ANE_OP_TANH, u);
        ane_node *du = binary(b, ANE_OP_ADD, scalar(b, root_two_over_pi, x), binary(b, ANE_OP_MUL, scalar(b, root_two_over_pi * 3 * 0.044715, x), x2));
        ane_node *half_one_plus_t = binary(b, ANE_OP_MUL, scalar(b, 0.5, x), binary(b, ANE_OP_ADD, scalar(b, 1, x), t));
        ane_node *one_minus_t2 = binary(b, ANE_OP_SUB, scalar(b, 1, x), binary(b, ANE_OP_MUL, t, t));
        slope = binary(b, ANE_OP_ADD, half_one_plus_t,
                       binary(b, ANE_OP_MUL, binary(b, ANE_OP_MUL, scalar(b, 0.5, x), x), binary(b, ANE_OP_MUL, one_minus_t2, du)));
    } else if (c->a->mode[0] == 'S') {
        ane_node *s = unary(b, ANE_OP_SIGMOID, binary(b, ANE_OP_MUL, scalar(b, 1.702, x), x));
        ane_node *s_one_minus_s = binary(b, ANE_OP_MUL, s, binary(b, ANE_OP_SUB, scalar(b, 1, x), s));
        slope = binary(b, ANE_OP_ADD, s, binary(b, ANE_OP_MUL, binary(b, ANE_OP_MUL, scalar(b, 1.702, x), x), s_one_minus_s));
    } else {
        no_rule(b, c->node, "with mode EXACT has no gradient rule (its slope needs erf, which the op set lacks): "
                            "use mode TANH_APPROXIMATION or SIGMOID_APPROXIMATION to train");
        return;
    }
    c->out[0] = binary(b, ANE_OP_MUL, c->g, slope);
}

static void vjp_softplus(vjp_context *c) { /* d log(1 + e^x) = s(x) */
    c->out[0] = binary(c->b, ANE_OP_MUL, c->g, unary(c->b, ANE_OP_SIGMOID, c->x));
}

static void vjp_clip(vjp_context *c) { /* only as a saturation at the fp16 range: the identity on every finite fp16 value */
    if (c->a->alpha > -65504.0 || c->a->beta < 65504.0) {
        no_rule(c->b, c->node, "has a gradient rule only as a saturation at the fp16 range (bounds beyond +-65504): "
                               "other bounds need a comparison the op set lacks");
        return;
    }
    c->out[0] = c->g;
}

static void vjp_cast(vjp_context *c) {
    ane_node_attrs back;
    memset(&back, 0, sizeof back);
    back.dtype = c->x->dtype;
    c->out[0] = c->x->dtype == c->g->dtype ? c->g : op(c->b, ANE_OP_CAST, &c->g, 1, &back);
}

static void vjp_reshape(vjp_context *c) { c->out[0] = reshape(c->b, c->g, c->x->rank, c->x->shape); }

static void vjp_transpose(vjp_context *c) {
    ane_node_attrs inverse;
    memset(&inverse, 0, sizeof inverse);
    inverse.perm.count = c->a->perm.count;
    for (int i = 0; i < c->a->perm.count; i++) inverse.perm.values[c->a->perm.values[i]] = i;
    c->out[0] = op(c->b, ANE_OP_TRANSPOSE, &c->g, 1, &inverse);
}

static void vjp_slice(vjp_context *c) { /* pad the slice's gradient with zeros back to x's shape */
    ane_node_attrs pad;
    memset(&pad, 0, sizeof pad);
    snprintf(pad.mode, sizeof pad.mode, "constant");
    pad.amounts.count = 2 * c->x->rank;
    for (int i = 0; i < c->x->rank; i++) {
        pad.amounts.values[2 * i] = c->a->begin.values[i];
        pad.amounts.values[2 * i + 1] = c->x->shape[i] - c->a->begin.values[i] - c->y->shape[i];
    }
    c->out[0] = op(c->b, ANE_OP_PAD, &c->g, 1, &pad);
}

/* g spread back over the reduced axes of x (to x's shape). */
static ane_node *spread_over_axes(vjp_context *c, ane_node *g) {
    int64_t keep[ANE_IR_MAX_RANK];
    memcpy(keep, c->x->shape, sizeof keep);
    for (int i = 0; i < c->a->axes.count; i++) keep[c->a->axes.values[i]] = 1;
    return binary(c->b, ANE_OP_ADD, reshape(c->b, g, c->x->rank, keep), zeros_like(c->b, c->x));
}

static void vjp_reduce_sum(vjp_context *c) { c->out[0] = spread_over_axes(c, c->g); }

static void vjp_reduce_mean(vjp_context *c) {
    int64_t count = 1;
    for (int i = 0; i < c->a->axes.count; i++) count *= c->x->shape[c->a->axes.values[i]];
    c->out[0] = binary(c->b, ANE_OP_MUL, spread_over_axes(c, c->g), scalar(c->b, 1.0 / (double)count, c->x));
}

static void vjp_reduce_l2_norm(vjp_context *c) { /* y = sqrt(sum x^2): dx = g x / y (spread) */
    c->out[0] = binary(c->b, ANE_OP_MUL, c->x, spread_over_axes(c, binary(c->b, ANE_OP_REAL_DIV, c->g, c->y)));
}

static void vjp_softmax(vjp_context *c) { /* dx = y (g - sum(g y)) along the axis */
    builder *b = c->b;
    ane_node_attrs sum;
    memset(&sum, 0, sizeof sum);
    sum.axes.count = 1;
    sum.axes.values[0] = c->a->axis;
    sum.keep_dims = 1;
    ane_node *gy = binary(b, ANE_OP_MUL, c->g, c->y);
    c->out[0] = binary(b, ANE_OP_MUL, c->y, binary(b, ANE_OP_SUB, c->g, op(b, ANE_OP_REDUCE_SUM, &gy, 1, &sum)));
}

static void vjp_matmul(vjp_context *c) {
    builder *b = c->b;
    ane_node *g = c->g, *x = c->x, *w = c->w, *dx = NULL, *dy = NULL;
    int tx = c->a->transpose_x, ty = c->a->transpose_y;
    if (!tx && !ty) {
        if (c->need[0]) dx = matmul(b, g, w, 0, 1);
        if (c->need[1]) dy = matmul(b, x, g, 1, 0);
    } else if (!tx && ty) {
        if (c->need[0]) dx = matmul(b, g, w, 0, 0);
        if (c->need[1]) dy = matmul(b, g, x, 1, 0);
    } else if (tx && !ty) {
        if (c->need[0]) dx = matmul(b, w, g, 0, 1);
        if (c->need[1]) dy = matmul(b, x, g, 0, 0);
    } else {
        if (c->need[0]) dx = matmul(b, w, g, 1, 1);
        if (c->need[1]) dy = matmul(b, g, x, 1, 1);
    }
    if (c->need[0]) c->out[0] = unbroadcast(b, dx, x);
    if (c->need[1]) c->out[1] = unbroadcast(b, dy, w);
}

static void vjp_conv(vjp_context *c) {
    builder *b = c->b;
    const ane_node_attrs *a = c->a;
    ane_node *g = c->g, *x = c->x, *w = c->w;
    int pointwise = w->shape[2] == 1 && w->shape[3] == 1 && a->strides[0] == 1 && a->strides[1] == 1 && a->groups == 1 &&
                    !a->pads[0] && !a->pads[1] && !a->pads[2] && !a->pads[3];
    if (!pointwise || x->shape[0] != 1) {
        no_rule(b, c->node, "has a gradient rule only for 1x1 convs with batch 1, yet");
        return;
    }
    int64_t cin = x->shape[1], cout = w->shape[0], pixels = x->shape[2] * x->shape[3];
    if (c->need[0]) { /* dx = W^T g: a matmul reading W transposed, so W is never transposed in memory */
        int64_t wshape[2] = {cout, cin}, gshape[2] = {cout, pixels};
        c->out[0] = reshape(b, matmul(b, reshape(b, w, 2, wshape), reshape(b, g, 2, gshape), 1, 0), x->rank, x->shape);
    }
    if (c->need[1]) { /* dW[co, ci] = sum over positions of g[co, p] x[ci, p] */
        int64_t gshape[2] = {cout, pixels}, xshape[2] = {cin, pixels}, wshape[4] = {cout, cin, 1, 1};
        c->out[1] = reshape(b, matmul(b, reshape(b, g, 2, gshape), reshape(b, x, 2, xshape), 0, 1), 4, wshape);
    }
}

/* The rule of every op flagged ANE_OP_DIFFERENTIABLE in the op table, and of no other
 * (spec/c/test_op_table.c checks both directions). */
static const vjp_rule vjp_rules[ANE_OP_COUNT] = {
    [ANE_OP_ADD] = vjp_add, [ANE_OP_SUB] = vjp_sub, [ANE_OP_MUL] = vjp_mul, [ANE_OP_REAL_DIV] = vjp_real_div,
    [ANE_OP_POW] = vjp_pow, [ANE_OP_NEG] = vjp_neg, [ANE_OP_EXP] = vjp_exp, [ANE_OP_LOG] = vjp_log,
    [ANE_OP_SQRT] = vjp_sqrt, [ANE_OP_RSQRT] = vjp_rsqrt, [ANE_OP_INVERSE] = vjp_inverse, [ANE_OP_TANH] = vjp_tanh, [ANE_OP_SIGMOID] = vjp_sigmoid,
    [ANE_OP_SILU] = vjp_silu, [ANE_OP_GELU] = vjp_gelu, [ANE_OP_SOFTPLUS] = vjp_softplus, [ANE_OP_IDENTITY] = vjp_identity,
    [ANE_OP_CLIP] = vjp_clip, [ANE_OP_CAST] = vjp_cast, [ANE_OP_RESHAPE] = vjp_reshape,
    [ANE_OP_TRANSPOSE] = vjp_transpose, [ANE_OP_SLICE_BY_INDEX] = vjp_slice, [ANE_OP_SLICE_BY_SIZE] = vjp_slice,
    [ANE_OP_REDUCE_SUM] = vjp_reduce_sum, [ANE_OP_REDUCE_MEAN] = vjp_reduce_mean,
    [ANE_OP_REDUCE_L2_NORM] = vjp_reduce_l2_norm, [ANE_OP_SOFTMAX] = vjp_softmax, [ANE_OP_MATMUL] = vjp_matmul,
    [ANE_OP_CONV] = vjp_conv,
};

int ane_autodiff_has_rule(ane_op op) { return op >= 0 && op < ANE_OP_COUNT && vjp_rules[op] != NULL; }

static ane_status vjp(builder *b, const ane_node *node, ane_node *y, ane_node *const *operands, ane_node *g,
                      const unsigned char *needs, ane_node **contributions) {
    vjp_context c = {.b = b, .node = node, .a = &node->attrs, .y = y, .g = g, .out = contributions};
    c.x = node->noperands > 0 ? operands[0] : NULL;
    c.w = node->noperands > 1 ? operands[1] : NULL;
    c.need[0] = c.x && needs[c.x->id];
    c.need[1] = c.w && needs[c.w->id];
    if (!vjp_rules[node->op]) return no_rule(b, node, "has no gradient rule yet");
    vjp_rules[node->op](&c);
    return b->status;
}

/* Whether `name` is one of the saved activations. */
static int is_saved(const char *name, const char *const *saved, int nsaved) {
    for (int k = 0; k < nsaved; k++)
        if (strcmp(name, saved[k]) == 0) return 1;
    return 0;
}

/* A weight gradient [a, b, 1, 1] (conv weight, per-channel vector with a = 1) in the
 * device's I/O layout [1, a, 1, b]: the wide axis last (ANE-20/21). Others stay as they are. */
static ane_node *in_device_layout(builder *b, ane_node *gradient) {
    if (!gradient || gradient->rank != 4 || gradient->shape[2] != 1 || gradient->shape[3] != 1) return gradient;
    if (gradient->shape[0] == 1 && gradient->shape[1] == 1) return gradient;
    int64_t shape[4] = {1, gradient->shape[0], 1, gradient->shape[1]};
    return reshape(b, gradient, 4, shape);
}

ane_status ane_autodiff(const ane_graph *forward, const ane_autodiff_options *options, ane_graph **out, ane_error *err) {
    const char *const *wrt = options->wrt, *const *saved = options->saved;
    int nwrt = options->nwrt, nsaved = options->nsaved;
    char name[ANE_NAME_MAX];
    snprintf(name, sizeof name, "%.*s_grad", ANE_NAME_MAX - 6, forward->name);
    builder b = {NULL, err, ANE_OK};
    b.status = ane_graph_new(name, &b.g, err);
    if (b.status) return b.status;
    int count = forward->count;
    ane_node **replay = calloc((size_t)count + 1, sizeof *replay);
    ane_node **adjoint = calloc((size_t)count + 1, sizeof *adjoint);
    unsigned char *needs = calloc((size_t)count + 1, 1);
    if (!replay || !adjoint || !needs) b.status = ane_fail(err, ANE_ERR_NOMEM, "autodiff: out of memory");

    /* Which nodes depend on a requested one (only they need adjoints). */
    for (int k = 0; k < nwrt && !b.status; k++) {
        ane_node *target = ane_graph_find(forward, wrt[k]);
        if (!target || (target->op != ANE_OP_INPUT && target->op != ANE_OP_CONST))
            b.status = ane_fail(err, ANE_ERR_ARGUMENT, "autodiff: '%s' is not an input or const of graph '%s'", wrt[k], forward->name);
        else if (target->encoding)
            b.status = ane_fail(err, ANE_ERR_ARGUMENT, "autodiff: weight '%s' of graph '%s' is %s-quantized; quantized "
                                "weights are for inference (train the dense weights, or LoRA adapters beside them)",
                                wrt[k], forward->name, ane_encoding_name(target->encoding));
        else needs[target->id] = 1;
    }
    for (int i = 0; i < count && !b.status; i++)
        for (int k = 0; k < forward->nodes[i]->noperands; k++)
            if (needs[forward->nodes[i]->operands[k]->id]) needs[i] = 1;

    for (int k = 0; k < nsaved && !b.status; k++) {
        ane_node *activation = ane_graph_find(forward, saved[k]);
        if (!activation || activation->op == ANE_OP_INPUT || activation->op == ANE_OP_CONST)
            b.status = ane_fail(err, ANE_ERR_ARGUMENT, "autodiff: saved activation '%s' is not a computed node of graph '%s'",
                                saved[k], forward->name);
    }

    /* Replay the forward graph under the same names; saved activations become inputs. */
    for (int i = 0; i < count && !b.status; i++) {
        const ane_node *node = forward->nodes[i];
        if (node->op == ANE_OP_INPUT || is_saved(node->name, saved, nsaved)) {
            b.status = ane_graph_input(b.g, node->name, node->dtype, node->rank, node->shape, &replay[i], err);
        } else if (node->op == ANE_OP_CONST && node->encoding) {
            b.status = ane_graph_const_encoded(b.g, node->name, node->dtype, node->rank, node->shape, node->encoding,
                                               &node->value, &node->table, &replay[i], err);
        } else if (node->op == ANE_OP_CONST) {
            b.status = ane_graph_const(b.g, node->name, &node->value, &replay[i], err);
        } else {
            ane_node *operands[64];
            for (int k = 0; k < node->noperands; k++) operands[k] = replay[node->operands[k]->id];
            b.status = ane_graph_op(b.g, node->op, node->name, operands, node->noperands, &node->attrs, &replay[i], err);
        }
    }
    /* One cotangent input per forward output. */
    for (int i = 0; i < forward->noutputs && !b.status; i++) {
        const ane_node *node = forward->outputs[i].node;
        char cotangent[ANE_NAME_MAX + 8];
        snprintf(cotangent, sizeof cotangent, "grad_%s", forward->outputs[i].name);
        ane_node *input = NULL;
        b.status = ane_graph_input(b.g, cotangent, node->dtype, node->rank, node->shape, &input, err);
        if (b.status) break;
        adjoint[node->id] = adjoint[node->id] ? binary(&b, ANE_OP_ADD, adjoint[node->id], input) : input;
    }
    /* Reverse sweep. The rules see replayed nodes, whose ids are the backward graph's; map
     * the `needs` marks over to them. */
    unsigned char *needs_replayed = b.status ? NULL : calloc((size_t)b.g->count + 4096, 1);
    for (int i = 0; i < count && needs_replayed; i++) needs_replayed[replay[i]->id] = needs[i];
    for (int i = count - 1; i >= 0 && !b.status; i--) {
        const ane_node *node = forward->nodes[i];
        if (!adjoint[i] || !needs[i] || node->op == ANE_OP_INPUT || node->op == ANE_OP_CONST) continue;
        if (!(ane_op_table[node->op].flags & ANE_OP_DIFFERENTIABLE)) {
            no_rule(&b, node, "has no gradient rule yet"); /* (not flagged differentiable in the op table) */
            break;
        }
        ane_node *contributions[64] = {0}, *operands[64];
        for (int k = 0; k < node->noperands; k++) operands[k] = replay[node->operands[k]->id];
        if (vjp(&b, node, replay[i], operands, adjoint[i], needs_replayed, contributions)) break;
        for (int k = 0; k < node->noperands && !b.status; k++) {
            if (!contributions[k]) continue;
            int operand = node->operands[k]->id;
            adjoint[operand] = adjoint[operand] ? binary(&b, ANE_OP_ADD, adjoint[operand], contributions[k]) : contributions[k];
        }
    }
    free(needs_replayed);
    /* Outputs: grad_<name>, zeros where no path leads to an output. */
    for (int k = 0; k < nwrt && !b.status; k++) {
        ane_node *target = ane_graph_find(forward, wrt[k]);
        ane_node *gradient = adjoint[target->id] ? adjoint[target->id] : zeros_like(&b, replay[target->id]);
        if (options->device_layout) gradient = in_device_layout(&b, gradient);
        char output[ANE_NAME_MAX + 8];
        snprintf(output, sizeof output, "grad_%s", wrt[k]);
        if (!b.status) b.status = ane_graph_output_node(b.g, output, gradient, err);
    }
    free(replay);
    free(adjoint);
    free(needs);
    if (b.status) {
        ane_graph_free(b.g);
        return b.status;
    }
    *out = b.g;
    return ANE_OK;
}
