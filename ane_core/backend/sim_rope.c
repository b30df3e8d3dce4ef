/* The sim backend's fused rotary embedding: a plan pass that finds the chain nn.rope builds and
 * the one step that computes it instead of its four.
 *
 *   rotated     = matmul(x, R)            (R a const: nn.rope_rotation's signed permutation)
 *   x_cos       = x * cos                 (cos [S, D] against x [..., S, D])
 *   rotated_sin = rotated * sin           (sin likewise)
 *   y           = x_cos + rotated_sin
 *
 * Step by step, each op is a kernel call and a rounding pass over x's values (a decode step's
 * q or k: [1, heads, 1, depth]). The fused step runs the matmul's own kernel into its place
 * (its column copies of R, or the whole product where x holds an inf or a NaN) and rounds it,
 * then makes y in three passes over the same values, each op's result rounded to fp16 as its
 * own step would round it: y is the op-by-op evaluation's bits. */
#include "../base/fp16.h"
#include "sim_program.h"

/* One chain's nodes, and the matmul's kernel (sim_kernel_for's, found once). */
typedef struct sim_rope {
    const ane_node *x, *rotation, *cos, *sin; /* what the step reads */
    const ane_node *rotated;                  /* a held link: the step writes it */
    const ane_node *x_cos, *rotated_sin;      /* unheld links */
    const ane_node *y;
    sim_kernel product;
} sim_rope;

/* The chain whose first link is `rotated`, filled into *out; 0 when the nodes are not that chain. */
static int match_chain(const sim_compiled *p, const ane_node *rotated, sim_rope *out) {
    const ane_graph *g = p->graph;
    if (rotated->op != ANE_OP_MATMUL || rotated->attrs.transpose_x || rotated->attrs.transpose_y) return 0;
    const ane_node *x = rotated->operands[0], *rotation = rotated->operands[1];
    if (g->nodes[sim_value_source(g, rotation->id)]->op != ANE_OP_CONST || !ane_node_same_shape(rotated, x)) return 0;
    const ane_node *rotated_sin = sim_only_reader(g, rotated);
    if (!rotated_sin || rotated_sin->op != ANE_OP_MUL || rotated_sin->operands[0] != rotated) return 0;
    const ane_node *y = sim_only_reader(g, rotated_sin);
    if (!y || y->op != ANE_OP_ADD || y->operands[1] != rotated_sin) return 0;
    const ane_node *x_cos = y->operands[0];
    if (x_cos->op != ANE_OP_MUL || x_cos->operands[0] != x || sim_only_reader(g, x_cos) != y) return 0;
    const ane_node *cos = x_cos->operands[1], *sin = rotated_sin->operands[1];
    if (!sim_per_position(cos, x) || !sim_per_position(sin, x) || !ane_node_same_shape(y, x)) return 0;
    const ane_node *chain[] = {x, rotated, x_cos, rotated_sin, y};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        if (chain[i]->dtype != ANE_FP16) return 0;
    *out = (sim_rope){x, rotation, cos, sin, rotated, x_cos, rotated_sin, y, NULL};
    return 1;
}

static void round_n(float *values, int64_t n) { ane_round_fp32_through_fp16_n(values, (size_t)n); }

static ane_status rope(const sim_context *context, const sim_step *step, const sim_value *values, ane_error *err) {
    const sim_rope *c = step->chain;
    ane_status status = sim_run_link(c->product, c->rotated, context, values, err);
    if (status) return status;
    int64_t n = ane_node_numel(c->x), period = ane_node_numel(c->cos); /* x [n / period rows of period] */
    const float *x = values[c->x->id].data, *cos = values[c->cos->id].data, *sin = values[c->sin->id].data;
    float *rotated = values[c->rotated->id].data, *y = values[c->y->id].data;
    for (int64_t row = 0; row < n; row += period)
        for (int64_t i = 0; i < period; i++) y[row + i] = x[row + i] * cos[i];
    round_n(y, n); /* x_cos */
    for (int64_t row = 0; row < n; row += period)
        for (int64_t i = 0; i < period; i++) rotated[row + i] *= sin[i];
    round_n(rotated, n); /* rotated_sin, in the rotated link's place (read by no one else) */
    for (int64_t i = 0; i < n; i++) y[i] += rotated[i];
    round_n(y, n);
    return ANE_OK;
}

ane_status sim_fuse_ropes(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    ane_status status = ANE_OK;
    for (int i = 0; !status && i < g->count; i++) {
        sim_rope found;
        if (g->nodes[i]->op != ANE_OP_MATMUL || !match_chain(p, g->nodes[i], &found)) continue;
        status = sim_kernel_for(found.rotated, 0, &found.product, err);
        if (status) break;
        void *kept;
        status = sim_add_chain(p, &found, sizeof found, &kept, err);
        if (status) break;
        const sim_rope *chain = kept;
        sim_mark_link(p, chain->rotated, SIM_LINK_HELD);
        sim_mark_link(p, chain->x_cos, SIM_LINK_UNHELD);
        sim_mark_link(p, chain->rotated_sin, SIM_LINK_UNHELD);
        const ane_node *read[] = {chain->x, chain->rotation, chain->cos, chain->sin, chain->rotated};
        for (size_t k = 0; k < sizeof read / sizeof read[0]; k++) sim_read_at(p, read[k], chain->y);
        sim_fused_step step = {chain->y, rope, chain, 1, sim_node_scratch_floats(p, chain->rotated)};
        status = sim_add_fused_step(p, &step, err);
    }
    return status;
}
