/* The sim backend's fused RMSNorm: a plan pass that finds the chain nn.rms_norm builds and the
 * one step that computes it instead of its seven.
 *
 *   scaled     = x * c                    (c = 1 / sqrt(n), a scalar const: no fp16 overflow)
 *   squared    = scaled * scaled
 *   mean       = reduce_sum(squared, axis)          (the normed axis, kept)
 *   shifted    = mean + eps               (a scalar const)
 *   inverse    = pow(shifted, p)          (a scalar const: -0.5)
 *   normalized = x * inverse              (broadcast along the axis)
 *   y          = normalized * weight      (a const along the axis, broadcast elsewhere)
 *
 * Step by step, each op is a pass over its values and a rounding pass; a decode step's norm of
 * [1, C, 1, W] is seven such passes, the broadcasting ones a call per row of W. The fused step
 * makes the squares (rounded twice, as scaled and squared) in the scratch, sums them with the
 * reduce kernel reduce_sum uses (sim_reduce_axis: the same order, so the same sums), then makes
 * y in one pass: each op's result rounded to fp16 as its own step would round it, so y is the
 * op-by-op evaluation's bit for bit. */
#include <math.h>
#include <string.h>

#include "../base/fp16.h"
#include "sim_program.h"

/* One chain's nodes. */
typedef struct sim_rms_norm {
    const ane_node *x, *scale, *eps, *power, *weight;                      /* what the step reads */
    const ane_node *scaled, *squared, *mean, *shifted, *inverse, *normalized; /* the links */
    const ane_node *y;
    int axis;
} sim_rms_norm;

static int is_scalar_const(const ane_node *node) { return node->op == ANE_OP_CONST && ane_node_numel(node) == 1; }

/* Whether `weight` is a const of x's size along `axis` and 1 elsewhere. */
static int along_axis(const ane_node *weight, const ane_node *x, int axis) {
    if (weight->op != ANE_OP_CONST || weight->rank != x->rank) return 0;
    for (int i = 0; i < x->rank; i++)
        if (weight->shape[i] != (i == axis ? x->shape[i] : 1)) return 0;
    return 1;
}

/* The chain whose first link is `scaled`, filled into *out; 0 when the nodes are not that chain. */
static int match_chain(const sim_compiled *p, const ane_node *scaled, sim_rms_norm *out) {
    const ane_graph *g = p->graph;
    if (scaled->op != ANE_OP_MUL || !is_scalar_const(scaled->operands[1])) return 0;
    const ane_node *x = scaled->operands[0];
    const ane_node *squared = sim_only_reader(g, scaled);
    if (!squared || squared->op != ANE_OP_MUL || squared->operands[0] != scaled || squared->operands[1] != scaled) return 0;
    const ane_node *mean = sim_only_reader(g, squared);
    if (!mean || mean->op != ANE_OP_REDUCE_SUM || !mean->attrs.keep_dims || mean->attrs.axes.count != 1) return 0;
    int axis = (int)mean->attrs.axes.values[0];
    const ane_node *shifted = sim_only_reader(g, mean);
    if (!shifted || shifted->op != ANE_OP_ADD || shifted->operands[0] != mean || !is_scalar_const(shifted->operands[1]))
        return 0;
    const ane_node *inverse = sim_only_reader(g, shifted);
    if (!inverse || inverse->op != ANE_OP_POW || inverse->operands[0] != shifted || !is_scalar_const(inverse->operands[1]))
        return 0;
    const ane_node *normalized = sim_only_reader(g, inverse);
    if (!normalized || normalized->op != ANE_OP_MUL || normalized->operands[0] != x || normalized->operands[1] != inverse)
        return 0;
    const ane_node *y = sim_only_reader(g, normalized);
    if (!y || y->op != ANE_OP_MUL || y->operands[0] != normalized || !along_axis(y->operands[1], x, axis) ||
        !ane_node_same_shape(y, x))
        return 0;
    const ane_node *chain[] = {scaled, squared, mean, shifted, inverse, normalized, y};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        if (chain[i]->dtype != ANE_FP16) return 0;
    *out = (sim_rms_norm){x, scaled->operands[1], shifted->operands[1], inverse->operands[1], y->operands[1],
                          scaled, squared, mean, shifted, inverse, normalized, y, axis};
    return 1;
}

static void round_n(float *values, int64_t n) { ane_round_fp32_through_fp16_n(values, (size_t)n); }

/* y = x * inverse, x [outer, count, inner] and inverse [outer, inner]: loops over runs of
 * contiguous elements (a decode step's norm over C channels of one position is one run). */
static void normalize(float *y, const float *x, const float *inverse, int64_t outer, int64_t count, int64_t inner) {
    for (int64_t o = 0; o < outer; o++) {
        const float *row = inverse + o * inner;
        if (inner == 1) {
            for (int64_t a = 0; a < count; a++) y[o * count + a] = x[o * count + a] * row[0];
            continue;
        }
        for (int64_t a = 0; a < count; a++)
            for (int64_t i = 0, at = (o * count + a) * inner; i < inner; i++) y[at + i] = x[at + i] * row[i];
    }
}

/* y *= weight along the normed axis (weight [count]). */
static void weigh(float *y, const float *weight, int64_t outer, int64_t count, int64_t inner) {
    for (int64_t o = 0; o < outer; o++) {
        if (inner == 1) {
            for (int64_t a = 0; a < count; a++) y[o * count + a] *= weight[a];
            continue;
        }
        for (int64_t a = 0; a < count; a++)
            for (int64_t i = 0, at = (o * count + a) * inner; i < inner; i++) y[at + i] *= weight[a];
    }
}

static ane_status rms_norm(const sim_context *context, const sim_step *step, const sim_value *values, ane_error *err) {
    (void)err;
    const sim_rms_norm *c = step->chain;
    const ane_node *x = c->x;
    int64_t n = ane_node_numel(x), outer = 1, count = x->shape[c->axis], inner = 1;
    for (int i = 0; i < c->axis; i++) outer *= x->shape[i];
    for (int i = c->axis + 1; i < x->rank; i++) inner *= x->shape[i];
    const float *in = values[x->id].data, *weight = values[c->weight->id].data;
    float *squares = context->scratch, *sums = context->scratch + n; /* [n], [outer x inner] */
    float *y = values[c->y->id].data;
    float scale = values[c->scale->id].data[0], eps = values[c->eps->id].data[0], power = values[c->power->id].data[0];
    for (int64_t i = 0; i < n; i++) squares[i] = in[i] * scale;
    round_n(squares, n);
    for (int64_t i = 0; i < n; i++) squares[i] *= squares[i];
    round_n(squares, n);
    int64_t shape[ANE_IR_MAX_RANK];
    memcpy(shape, x->shape, sizeof shape);
    sim_reduce_axis(squares, sums, x->rank, shape, c->axis, 0);
    int64_t m = outer * inner;
    round_n(sums, m);
    for (int64_t i = 0; i < m; i++) sums[i] += eps;
    round_n(sums, m);
    for (int64_t i = 0; i < m; i++) sums[i] = powf(sums[i], power);
    round_n(sums, m); /* the inverse norms */
    normalize(y, in, sums, outer, count, inner);
    round_n(y, n);
    weigh(y, weight, outer, count, inner);
    round_n(y, n);
    return ANE_OK;
}

ane_status sim_fuse_rms_norms(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    ane_status status = ANE_OK;
    for (int i = 0; !status && i < g->count; i++) {
        sim_rms_norm found;
        if (g->nodes[i]->op != ANE_OP_MUL || !match_chain(p, g->nodes[i], &found)) continue;
        void *kept;
        status = sim_add_chain(p, &found, sizeof found, &kept, err);
        if (status) break;
        const sim_rms_norm *chain = kept;
        const ane_node *links[] = {chain->scaled, chain->squared, chain->mean, chain->shifted, chain->inverse,
                                   chain->normalized};
        for (size_t k = 0; k < sizeof links / sizeof links[0]; k++) sim_mark_link(p, links[k], SIM_LINK_UNHELD);
        sim_read_at(p, chain->x, chain->y);
        int64_t n = ane_node_numel(chain->x);
        sim_fused_step step = {chain->y, rms_norm, chain, 1, (size_t)(n + n / chain->x->shape[chain->axis])};
        status = sim_add_fused_step(p, &step, err);
    }
    return status;
}
