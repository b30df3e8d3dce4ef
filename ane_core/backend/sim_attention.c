/* The sim backend's fused decode attention: a plan pass that finds the chain
 * nn.cached_attention builds over a KV cache sim holds in fp16 (a half input whose positions
 * from `filled` on are zeros), and the two steps that compute it instead of its seven.
 *
 *   product  = q x keys                  [.., m, S]  keys [.., D, S]: a head's cached keys
 *   scaled   = product * scale           (a scalar const)
 *   masked   = scaled + mask             (mask [1, .., 1, S], one row for every head)
 *   clipped  = clip(masked)              (optional)
 *   row_max  = reduce_max(logits, last axis)      logits: clipped, or masked without a clip
 *   ...        peak = maximum(row_max, the own keys' maximum)   (not fused)
 *   shifted  = logits - peak
 *   weights  = exp(shifted)
 *
 * Step by step, every op runs over the cache's whole width S (256 or 512), written or not.
 * The fused steps compute each row over its first `prefix` positions: the product's written
 * tiles (exactly the positions the matmul kernel multiplies), rounded up to whole blocks of
 * PREFIX_BLOCK. Beyond them:
 *   - the product is +0 in every row, so each logit there is the one a +0 product gives at that
 *     position, the same for every row: `tail`, computed once an evaluation;
 *   - a weight there is exp(logit - peak) rounded to fp16; where every such logit is at least
 *     20 below its row's peak, e^-20 = 2.1e-9 lies below half of fp16's smallest subnormal
 *     (2^-25 = 3.0e-8), and the exp kernels (tensor/vector_math.h, accurate to a few ulps, 0
 *     below their range) give +0 for each; otherwise the row is computed whole.
 * Each op's result is rounded to fp16 as its own step would round it, so `logits` and `weights`
 * hold the step-by-step evaluation's values bit for bit, and what reads them (reduce_sum, the
 * product with the value cache, the own keys' branch) runs unchanged. Only fp16 precision in
 * the cpu profile: the ane profile applies the chip's numeric cliffs op by op. */
#include <math.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/parallel.h"
#include "../tensor/gemv.h"
#include "../tensor/vector_math.h"
#include "sim_program.h"

/* One chain's nodes, in its order. */
typedef struct sim_cached_attention {
    const ane_node *q, *keys, *scale, *mask;   /* what the scores step reads */
    const ane_node *product, *scaled, *masked; /* q x keys, * scale, + mask */
    const ane_node *clipped;                   /* clip(masked), or NULL */
    const ane_node *logits;                    /* clipped, or masked without a clip */
    const ane_node *row_max;                   /* reduce_max(logits): the scores step's node */
    const ane_node *peak, *shifted, *weights;  /* exp(logits - peak): the weights step's node */
} sim_cached_attention;

static ane_status attention_scores(const sim_context *context, const sim_step *step, const sim_value *values,
                                   ane_error *err);
static ane_status attention_weights(const sim_context *context, const sim_step *step, const sim_value *values,
                                    ane_error *err);

/* Prefixes are whole blocks of this many positions: the vector kernels' widths divide it, so
 * no element goes through a remainder path the whole row would not take. */
#define PREFIX_BLOCK 64

/* A weight's logit at least this far below its row's peak rounds to +0 (see above). */
#define NEGLIGIBLE_SHIFT -20.0f

/* ------------------------------------------------------------------ finding the chains */

static int same_leading(const ane_node *a, const ane_node *b) {
    if (a->rank != b->rank || a->rank < 2) return 0;
    for (int i = 0; i < a->rank - 2; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static int last_axis_reduction(const ane_node *node) {
    return node->attrs.keep_dims && node->attrs.axes.count == 1 && node->attrs.axes.values[0] == node->rank - 1;
}

/* The chain whose product is `product`, filled into *out; 0 when the nodes are not that chain. */
static int match_chain(const sim_compiled *p, const ane_node *product, sim_cached_attention *out) {
    const ane_graph *g = p->graph;
    const ane_node *q = product->operands[0], *keys = product->operands[1];
    if (product->op != ANE_OP_MATMUL || product->attrs.transpose_x || product->attrs.transpose_y) return 0;
    if (!p->slots[sim_value_source(g, keys->id)].half_input) return 0; /* (fp16 precision: see find_half_inputs) */
    int r = product->rank;
    if (!same_leading(product, q) || !same_leading(product, keys) || q->shape[r - 2] != product->shape[r - 2] ||
        keys->shape[r - 1] != product->shape[r - 1])
        return 0;
    int64_t positions = product->shape[r - 1];
    const ane_node *scaled = sim_only_reader(g, product);
    if (!scaled || scaled->op != ANE_OP_MUL || scaled->operands[0] != product || scaled->operands[1]->op != ANE_OP_CONST ||
        ane_node_numel(scaled->operands[1]) != 1)
        return 0;
    const ane_node *masked = sim_only_reader(g, scaled), *mask = masked ? masked->operands[1] : NULL;
    if (!masked || masked->op != ANE_OP_ADD || masked->operands[0] != scaled || ane_node_numel(mask) != positions ||
        mask->shape[mask->rank - 1] != positions || !ane_node_same_shape(masked, product))
        return 0;
    const ane_node *clipped = NULL, *logits = masked, *first, *second;
    const ane_node *after = sim_only_reader(g, masked);
    if (after && after->op == ANE_OP_CLIP) clipped = logits = after;
    const ane_node *readers[2];
    if (sim_readers(g, logits, readers, 2) != 2 || ane_graph_is_output(g, logits)) return 0;
    first = readers[0], second = readers[1];
    const ane_node *row_max = first->op == ANE_OP_REDUCE_MAX ? first : second;
    const ane_node *shifted = row_max == first ? second : first;
    if (row_max->op != ANE_OP_REDUCE_MAX || !last_axis_reduction(row_max) || shifted->op != ANE_OP_SUB ||
        shifted->operands[0] != logits || !ane_node_same_shape(shifted, logits))
        return 0;
    const ane_node *peak = shifted->operands[1], *weights = sim_only_reader(g, shifted);
    if (ane_node_numel(peak) != ane_node_numel(row_max) || !same_leading(peak, product) || peak->shape[r - 1] != 1 ||
        peak->shape[r - 2] != product->shape[r - 2] || !weights || weights->op != ANE_OP_EXP)
        return 0;
    const ane_node *chain[] = {product, scaled, masked, clipped ? clipped : masked, row_max, shifted, weights};
    for (size_t i = 0; i < sizeof chain / sizeof chain[0]; i++)
        if (chain[i]->dtype != ANE_FP16) return 0;
    *out = (sim_cached_attention){.q = q, .keys = keys, .scale = scaled->operands[1], .mask = mask, .product = product,
                                  .scaled = scaled, .masked = masked, .clipped = clipped, .logits = logits,
                                  .row_max = row_max, .peak = peak, .shifted = shifted, .weights = weights};
    return 1;
}

/* Registers one chain: its links, the values its steps read late, its two steps. */
static ane_status fuse(sim_compiled *p, const sim_cached_attention *found, ane_error *err) {
    void *kept;
    ane_status status = sim_add_chain(p, found, sizeof *found, &kept, err);
    if (status) return status;
    const sim_cached_attention *chain = kept;
    const ane_node *unheld[] = {chain->product, chain->scaled, chain->masked, chain->shifted};
    for (size_t i = 0; i < sizeof unheld / sizeof unheld[0]; i++) sim_mark_link(p, unheld[i], SIM_LINK_UNHELD);
    sim_mark_link(p, chain->logits, SIM_LINK_HELD); /* (masked itself, without a clip) */
    sim_read_at(p, chain->q, chain->row_max);
    sim_read_at(p, chain->keys, chain->row_max); /* (the cache: an append waits for it, sim_appends.c) */
    sim_read_at(p, chain->logits, chain->weights);
    sim_read_at(p, chain->peak, chain->weights);
    const ane_node *logits = chain->logits;
    sim_fused_step scores = {chain->row_max, attention_scores, chain, 0, (size_t)logits->shape[logits->rank - 1]};
    sim_fused_step weights = {chain->weights, attention_weights, chain, 1, 0};
    status = sim_add_fused_step(p, &scores, err);
    return status ? status : sim_add_fused_step(p, &weights, err);
}

ane_status sim_fuse_cached_attentions(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    ane_status status = ANE_OK;
    for (int i = 0; !status && i < g->count; i++) {
        sim_cached_attention found;
        if (g->nodes[i]->op == ANE_OP_MATMUL && match_chain(p, g->nodes[i], &found)) status = fuse(p, &found, err);
    }
    return status;
}

/* ------------------------------------------------------------------ the steps */

/* The cache's written positions rounded up to whole tiles of the vector products. */
static int64_t written_tiles(int64_t filled, int64_t positions) {
    int64_t tiles = (filled + ANE_VECMAT_TILE - 1) / ANE_VECMAT_TILE * ANE_VECMAT_TILE;
    return tiles < positions ? tiles : positions;
}

/* Positions of a row of the product the matmul kernel computes (sim_kernels.c's vector
 * products: the written tiles, all of them for a q with an inf or NaN). */
static int64_t product_positions(int64_t filled, int64_t positions, const float *q, int64_t depth) {
    return sim_all_finite(q, depth) ? written_tiles(filled, positions) : positions;
}

static int64_t whole_blocks(int64_t n, int64_t positions) {
    int64_t blocks = (n + PREFIX_BLOCK - 1) / PREFIX_BLOCK * PREFIX_BLOCK;
    return blocks < positions ? blocks : positions;
}

static void round_n(float *values, int64_t n) { ane_round_fp32_through_fp16_n(values, (size_t)n); }

/* The logits of products `product` [n] (already rounded), in place: scaled, masked, clipped,
 * each rounded. */
static void logits_from_products(const sim_cached_attention *at, float *row, const float *mask, float scale, int64_t n) {
    for (int64_t i = 0; i < n; i++) row[i] *= scale;
    round_n(row, n);
    for (int64_t i = 0; i < n; i++) row[i] += mask[i];
    round_n(row, n);
    if (at->clipped) {
        float lo = (float)at->clipped->attrs.alpha, hi = (float)at->clipped->attrs.beta;
        for (int64_t i = 0; i < n; i++) row[i] = row[i] < lo ? lo : (row[i] > hi ? hi : row[i]);
        round_n(row, n);
    }
}

typedef struct scores_job {
    const sim_cached_attention *at;
    const float *q;        /* [batches, m, depth] */
    const uint16_t *keys;  /* [batches, depth, positions] fp16 bits */
    const float *mask;     /* [positions] */
    const float *tail;     /* [positions]: the logits of +0 products */
    float *logits;         /* [batches, m, positions] */
    float *row_max;        /* [batches, m] */
    float scale;
    int64_t m, depth, positions, filled;
} scores_job;

static void scores_batches(void *context, int64_t first, int64_t last) {
    const scores_job *j = context;
    for (int64_t b = first; b < last; b++)
        for (int64_t i = 0; i < j->m; i++) {
            int64_t row = b * j->m + i;
            const float *q = j->q + row * j->depth;
            float *logits = j->logits + row * j->positions;
            int64_t used = product_positions(j->filled, j->positions, q, j->depth);
            int64_t prefix = whole_blocks(used, j->positions);
            ane_vecmat_fp16(logits, q, j->keys + b * j->depth * j->positions, j->positions, j->depth, used);
            for (int64_t c = used; c < prefix; c++) logits[c] = 0.0f;
            round_n(logits, prefix);
            logits_from_products(j->at, logits, j->mask, j->scale, prefix);
            memcpy(logits + prefix, j->tail + prefix, (size_t)(j->positions - prefix) * sizeof *logits);
            j->row_max[row] = ane_max_n(logits, j->positions); /* (reduce_max's own call) */
        }
}

static ane_status attention_scores(const sim_context *context, const sim_step *step, const sim_value *values,
                                   ane_error *err) {
    (void)err;
    const sim_cached_attention *at = step->chain;
    const ane_node *product = at->product;
    int r = product->rank;
    int64_t positions = product->shape[r - 1], m = product->shape[r - 2], depth = at->q->shape[r - 1];
    float *tail = context->scratch; /* [positions] (the plan reserves it) */
    memset(tail, 0, (size_t)positions * sizeof *tail);
    scores_job job = {at, values[at->q->id].data, values[at->keys->id].half, values[at->mask->id].data, tail,
                      values[at->logits->id].data, values[at->row_max->id].data, values[at->scale->id].data[0],
                      m, depth, positions, values[at->keys->id].filled};
    logits_from_products(at, tail, job.mask, job.scale, positions);
    int64_t batches = ane_node_numel(product) / (m * positions);
    /* heads over the helper threads, 64 KB of keys a share at least (as the matmul kernel shares them) */
    ane_parallel_for(batches, ((int64_t)1 << 16) / (depth * positions * (int64_t)sizeof(float) + 1) + 1, scores_batches,
                     &job);
    return ANE_OK;
}

typedef struct weights_job {
    const float *logits, *peak; /* [rows, positions], [rows] */
    float *weights;             /* [rows, positions] */
    int64_t positions, prefix;
} weights_job;

static void weights_rows(void *context, int64_t first, int64_t last) {
    const weights_job *j = context;
    for (int64_t row = first; row < last; row++) {
        const float *logits = j->logits + row * j->positions;
        float *weights = j->weights + row * j->positions, peak = j->peak[row];
        int64_t prefix = j->prefix;
        if (prefix < j->positions) { /* the rest +0, if every weight there rounds to +0 */
            float highest = ane_max_n(logits + prefix, j->positions - prefix), shift = highest - peak;
            round_n(&shift, 1);
            if (!(shift <= NEGLIGIBLE_SHIFT)) prefix = j->positions; /* (NaN too) */
        }
        for (int64_t i = 0; i < prefix; i++) weights[i] = logits[i] - peak;
        round_n(weights, prefix);
        ane_exp_n(weights, weights, prefix);
        round_n(weights, prefix);
        memset(weights + prefix, 0, (size_t)(j->positions - prefix) * sizeof *weights);
    }
}

static ane_status attention_weights(const sim_context *context, const sim_step *step, const sim_value *values,
                                    ane_error *err) {
    (void)context, (void)err;
    const sim_cached_attention *at = step->chain;
    int64_t positions = at->logits->shape[at->logits->rank - 1], rows = ane_node_numel(at->logits) / positions;
    /* the positions every row's product computed at least (a q with an inf or NaN computed
     * all: its logits past them are its own, which the check of each row reads as they are) */
    int64_t written = written_tiles(values[at->keys->id].filled, positions);
    weights_job job = {values[at->logits->id].data, values[at->peak->id].data, values[at->weights->id].data, positions,
                       whole_blocks(written, positions)};
    ane_parallel_for(rows, ((int64_t)1 << 14) / (positions + 1) + 1, weights_rows, &job);
    return ANE_OK;
}
