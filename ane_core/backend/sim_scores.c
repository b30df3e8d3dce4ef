/* The sim backend's fused attention scores: a plan pass that finds the chain nn.cached_attention
 * builds for the keys that are not a cache (a decode step's own key: [1, heads, 1, 1] scores)
 * and the one step that computes it instead of its three or four.
 *
 *   product = q x keys                (any matmul; its own kernel)
 *   scaled  = product * scale         (a scalar const)
 *   masked  = scaled + mask           (mask [rows, keys] against product [..., rows, keys])
 *   clipped = clip(masked)            (optional)
 *
 * sim_attention.c fuses the chain over a cache (and runs first); this one takes what is left.
 * Step by step each op is a kernel call and a rounding pass over a few values. The fused step
 * runs the matmul's kernel into its place and rounds it, then scales, masks and clips in
 * passes over the same values, each op's result rounded to fp16 as its own step would round
 * it: the logits are the op-by-op evaluation's bits. */

#include "../base/fp16.h"
#include "sim_program.h"

/* Scores this chain's step takes at most: larger ones (a prefill's [heads, S, S]) keep their
 * steps, whose elementwise kernels share the values with the helper threads. */
#define MOST_SCORES 4096

/* One chain's nodes, and the matmul's kernel (sim_kernel_for's, found once). */
typedef struct sim_scores {
    const ane_node *scale, *mask;   /* what the step reads besides the product's operands */
    const ane_node *product;        /* a held link: the step writes it */
    const ane_node *scaled, *masked; /* unheld links (masked: when a clip follows) */
    const ane_node *clipped;        /* clip(masked), or NULL */
    const ane_node *logits;         /* clipped, or masked without a clip: the step's node */
    sim_kernel kernel;
} sim_scores;

/* The chain whose product is `product`, filled into *out; 0 when the nodes are not that chain. */
static int match_chain(const sim_compiled *p, const ane_node *product, sim_scores *out) {
    const ane_graph *g = p->graph;
    if (product->op != ANE_OP_MATMUL || p->links[product->id] != SIM_NOT_A_LINK || ane_node_numel(product) > MOST_SCORES)
        return 0;
    const ane_node *scaled = sim_only_reader(g, product);
    if (!scaled || scaled->op != ANE_OP_MUL || scaled->operands[0] != product || scaled->operands[1]->op != ANE_OP_CONST ||
        ane_node_numel(scaled->operands[1]) != 1)
        return 0;
    const ane_node *masked = sim_only_reader(g, scaled);
    if (!masked || masked->op != ANE_OP_ADD || masked->operands[0] != scaled || !sim_per_position(masked->operands[1], product) ||
        !ane_node_same_shape(masked, product))
        return 0;
    const ane_node *after = sim_only_reader(g, masked);
    const ane_node *clipped = after && after->op == ANE_OP_CLIP ? after : NULL;
    const ane_node *chain[] = {product, scaled, masked, clipped ? clipped : masked};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        if (chain[i]->dtype != ANE_FP16) return 0;
    *out = (sim_scores){scaled->operands[1], masked->operands[1], product, scaled, masked, clipped,
                        clipped ? clipped : masked, NULL};
    return 1;
}

static void round_n(float *values, int64_t n) { ane_round_fp32_through_fp16_n(values, (size_t)n); }

static ane_status scores(const sim_context *context, const sim_step *step, const sim_value *values, ane_error *err) {
    const sim_scores *c = step->chain;
    ane_status status = sim_run_link(c->kernel, c->product, context, values, err);
    if (status) return status;
    int64_t n = ane_node_numel(c->product), period = ane_node_numel(c->mask); /* [n / period rows of period] */
    const float *in = values[c->product->id].data, *mask = values[c->mask->id].data;
    float *logits = values[c->logits->id].data, scale = values[c->scale->id].data[0];
    for (int64_t i = 0; i < n; i++) logits[i] = in[i] * scale;
    round_n(logits, n);
    for (int64_t row = 0; row < n; row += period)
        for (int64_t i = 0; i < period; i++) logits[row + i] += mask[i];
    round_n(logits, n);
    if (c->clipped) {
        float lo = (float)c->clipped->attrs.alpha, hi = (float)c->clipped->attrs.beta;
        for (int64_t i = 0; i < n; i++) logits[i] = logits[i] < lo ? lo : (logits[i] > hi ? hi : logits[i]);
        round_n(logits, n);
    }
    return ANE_OK;
}

ane_status sim_fuse_scores(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    ane_status status = ANE_OK;
    for (int i = 0; !status && i < g->count; i++) {
        sim_scores found;
        if (g->nodes[i]->op != ANE_OP_MATMUL || !match_chain(p, g->nodes[i], &found)) continue;
        status = sim_kernel_for(found.product, 0, &found.kernel, err);
        if (status) break;
        void *kept;
        status = sim_add_chain(p, &found, sizeof found, &kept, err);
        if (status) break;
        const sim_scores *chain = kept;
        sim_mark_link(p, chain->product, SIM_LINK_HELD);
        sim_mark_link(p, chain->scaled, SIM_LINK_UNHELD);
        if (chain->clipped) sim_mark_link(p, chain->masked, SIM_LINK_UNHELD);
        const ane_node *product = chain->product;
        const ane_node *read[] = {product->operands[0], product->operands[1], chain->scale, chain->mask, product};
        for (size_t k = 0; k < sizeof read / sizeof read[0]; k++) sim_read_at(p, read[k], chain->logits);
        sim_fused_step step = {chain->logits, scores, chain, 1, sim_node_scratch_floats(p, product)};
        status = sim_add_fused_step(p, &step, err);
    }
    return status;
}
