/* backend/sim_branches.c: on random programs shaped like a server's batched step (a shared
 * trunk, then B chains that read the trunk and their own nodes, some with outputs of their own
 * and nodes that no later chain node reads, joined by a concat, then a tail), the pass must
 * find one group whose branches are exactly the chains; and the values must keep their places
 * however the branches interleave: evaluation is simulated over the slab the places plan
 * gives (sim_places.c, with the pass's read_until), the branches' nodes in a random
 * interleaving, each node stamping its place, and every operand must still carry its own
 * stamp when read. The same simulation without the pass's read_until damages values (the
 * witness can fail). A chain node that reads two chains leaves the program without a group; a
 * node the later chains share, made after the first chain, starts the group after it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/backend/sim_places.h"
#include "ane_core/backend/sim_program.h"
#include "check.h"

static uint32_t rng = 2024u;
static uint32_t next_random(uint32_t below) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % below;
}

enum { MAX_NODES = 1024, TRUNK = -2, TAIL = -3 };

typedef struct program {
    ane_graph *g;
    int chain_of[MAX_NODES]; /* the chain a node was made in (0 ..), TRUNK, TAIL; -1 inputs */
    int branches;
    int late_trunk; /* mix 2: the trunk node made after the first chain, else -1 */
} program;

static ane_node *op(ane_graph *g, ane_op kind, ane_node *a, ane_node *b) {
    ane_error err;
    ane_node *out = NULL, *operands[2] = {a, b};
    CHECK(ane_graph_op(g, kind, NULL, operands, b ? 2 : 1, NULL, &out, &err) == ANE_OK, "op: %s", err.message);
    return out;
}

/* mix: 1 = one node of the last chain also reads the chain before it; 2 = a trunk node made
 * after the first chain began is read by the chains after it. */
static program random_program(int branches, int mix) {
    program p = {.branches = branches, .late_trunk = -1};
    ane_error err;
    ane_graph_new("branched", &p.g, &err);
    int64_t shape[2] = {1, 8 + next_random(32)};
    ane_node *x, *trunk[8], *last[16];
    ane_graph_input(p.g, "x", ANE_FP32, 2, shape, &x, &err);
    memset(p.chain_of, -1, sizeof p.chain_of);
    int ntrunk = 0;
    trunk[ntrunk++] = x;
    for (int t = 0; t < 3; t++) {
        ane_node *made = next_random(2) ? op(p.g, ANE_OP_RELU, trunk[next_random(ntrunk)], NULL)
                                        : op(p.g, ANE_OP_ADD, trunk[next_random(ntrunk)], trunk[next_random(ntrunk)]);
        p.chain_of[made->id] = TRUNK;
        trunk[ntrunk++] = made;
    }
    for (int b = 0; b < branches; b++) {
        ane_node *own[16];
        int nown = 0;
        own[nown++] = op(p.g, ANE_OP_ADD, trunk[ntrunk - 1], trunk[next_random(ntrunk)]); /* (the last trunk node: shared) */
        p.chain_of[own[0]->id] = b;
        int length = 4 + (int)next_random(10);
        for (int k = 1; k < length; k++) {
            ane_node *a = own[next_random(nown)], *made;
            switch (next_random(4)) {
            case 0: made = op(p.g, ANE_OP_RELU, a, NULL); break;
            case 1: made = op(p.g, ANE_OP_ADD, a, trunk[next_random(ntrunk)]); break; /* reads the trunk */
            default: made = op(p.g, ANE_OP_ADD, a, own[next_random(nown)]); break;
            }
            p.chain_of[made->id] = b;
            own[nown++] = made;
        }
        if (mix == 1 && b == branches - 1) { /* reads the previous chain's last node */
            ane_node *made = op(p.g, ANE_OP_ADD, own[nown - 1], last[b - 1]);
            p.chain_of[made->id] = b;
            own[nown++] = made;
        }
        if (mix == 2 && b == 0) { /* a trunk node among the chains, read by the later ones below */
            trunk[ntrunk] = op(p.g, ANE_OP_RELU, x, NULL);
            p.chain_of[trunk[ntrunk]->id] = TRUNK;
            p.late_trunk = trunk[ntrunk]->id;
            ntrunk++;
        }
        if (mix == 2 && b > 0) {
            ane_node *made = op(p.g, ANE_OP_ADD, own[nown - 1], trunk[ntrunk - 1]);
            p.chain_of[made->id] = b;
            own[nown++] = made;
        }
        last[b] = own[nown - 1];
        /* a node of the chain's own that the concat does not need: an output (a session's k) */
        ane_node *side = op(p.g, ANE_OP_RELU, own[next_random(nown)], NULL);
        p.chain_of[side->id] = b;
        ane_graph_output_node(p.g, NULL, side, &err);
    }
    ane_node_attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.axis = 1;
    ane_node *joined = NULL;
    CHECK(ane_graph_op(p.g, ANE_OP_CONCAT, NULL, last, branches, &attrs, &joined, &err) == ANE_OK, "concat: %s", err.message);
    p.chain_of[joined->id] = TAIL;
    ane_node *tail = op(p.g, ANE_OP_RELU, joined, NULL);
    p.chain_of[tail->id] = TAIL;
    ane_graph_output_node(p.g, NULL, tail, &err);
    return p;
}

static sim_compiled *plan(ane_graph *g) {
    sim_compiled *c = calloc(1, sizeof *c);
    c->graph = g;
    c->options.profile = ANE_PROFILE_CPU;
    c->read_until = calloc((size_t)g->count + 1, sizeof *c->read_until);
    ane_error err;
    CHECK(sim_find_branches(c, &err) == ANE_OK, "find branches: %s", err.message);
    return c;
}

static void free_plan(sim_compiled *c) {
    free(c->branch_of);
    free(c->groups);
    free(c->read_until);
    free(c);
}

static void kinds_of(const ane_graph *g, unsigned char *kinds) {
    for (int i = 0; i < g->count; i++) kinds[i] = g->nodes[i]->op == ANE_OP_INPUT ? SIM_SLOT_KEPT : SIM_SLOT_TEMP;
    for (int i = 0; i < g->noutputs; i++) kinds[g->outputs[i].node->id] = SIM_SLOT_KEPT;
}

static int intact(const ane_graph *g, const size_t *offsets, const int *stamps, int id) {
    int64_t n = ane_node_numel(g->nodes[id]);
    for (int64_t k = 0; k < n; k++)
        if (stamps[offsets[id] + (size_t)k] != id) return 0;
    return 1;
}

static int run_node(const ane_graph *g, const size_t *offsets, int *stamps, int i) {
    int damaged = 0;
    const ane_node *node = g->nodes[i];
    for (int k = 0; k < node->noperands; k++) damaged += !intact(g, offsets, stamps, node->operands[k]->id);
    for (int64_t k = 0; k < ane_node_numel(node); k++) stamps[offsets[i] + (size_t)k] = i;
    return damaged;
}

/* Values found overwritten in an evaluation whose group (nodes lo .. hi) runs its branches
 * in a random interleaving, each branch's nodes in their order. */
static int simulate(const ane_graph *g, const int *branch_of, int lo, int hi, int branches, const int *read_until) {
    unsigned char kinds[MAX_NODES];
    size_t offsets[MAX_NODES], kept = 0, total = 0;
    ane_error err;
    kinds_of(g, kinds);
    CHECK(ane_sim_places(g, kinds, read_until, offsets, &kept, &total, &err) == ANE_OK, "places: %s", err.message);
    int *stamps = malloc((total + 1) * sizeof *stamps);
    for (size_t k = 0; k < total; k++) stamps[k] = -1;
    for (int i = 0; i < g->count; i++)
        if (g->nodes[i]->op == ANE_OP_INPUT) run_node(g, offsets, stamps, i);
    int damaged = 0, next[16];
    for (int i = 0; i < lo; i++)
        if (g->nodes[i]->op != ANE_OP_INPUT) damaged += run_node(g, offsets, stamps, i);
    for (int b = 0; b < branches; b++) next[b] = lo;
    for (int left = hi - lo + 1; left > 0;) {
        int b = (int)next_random((uint32_t)branches);
        while (next[b] <= hi && branch_of[next[b]] != b) next[b]++;
        if (next[b] > hi) continue;
        damaged += run_node(g, offsets, stamps, next[b]++);
        left = 0;
        for (int k = 0; k < branches; k++) {
            int at = next[k];
            while (at <= hi && branch_of[at] != k) at++;
            left += at <= hi;
        }
    }
    for (int i = hi + 1; i < g->count; i++) damaged += run_node(g, offsets, stamps, i);
    for (int i = 0; i < g->noutputs; i++) damaged += !intact(g, offsets, stamps, g->outputs[i].node->id);
    free(stamps);
    return damaged;
}

int main(void) {
    int unsafe_without = 0, trials = 200;
    for (int trial = 0; trial < trials; trial++) {
        int branches = 2 + (int)next_random(7);
        program p = random_program(branches, 0);
        sim_compiled *c = plan(p.g);
        CHECK(c->ngroups == 1, "trial %d: %d groups, not 1", trial, c->ngroups);
        if (c->ngroups != 1) continue;
        const sim_group *group = &c->groups[0];
        CHECK(group->nbranches == branches, "trial %d: %d branches, not %d", trial, group->nbranches, branches);
        int wrong = 0;
        for (int i = 0; i < p.g->count; i++) {
            int want = p.chain_of[i] >= 0 ? p.chain_of[i] : -1;
            wrong += c->branch_of[i] != want;
        }
        CHECK(wrong == 0, "trial %d: %d nodes in the wrong branch", trial, wrong);
        int lo = group->first_node, hi = group->last_node;
        for (int round = 0; round < 4; round++)
            CHECK(simulate(p.g, c->branch_of, lo, hi, branches, c->read_until) == 0,
                  "trial %d: values overwritten with the branches interleaved", trial);
        int *none = calloc((size_t)p.g->count + 1, sizeof *none);
        for (int round = 0; round < 4; round++) unsafe_without += simulate(p.g, c->branch_of, lo, hi, branches, none) > 0;
        free(none);
        free_plan(c);
        ane_graph_free(p.g);
    }
    CHECK(unsafe_without > 0, "no interleaving damaged a value without the pass's read_until: the witness cannot fail");
    for (int trial = 0; trial < 20; trial++) { /* a node reading two chains: no group */
        program p = random_program(3 + (int)next_random(4), 1);
        sim_compiled *c = plan(p.g);
        CHECK(c->ngroups == 0, "trial %d: a chain reading another chain, yet a group was found", trial);
        free_plan(c);
        ane_graph_free(p.g);
    }
    for (int trial = 0; trial < 20; trial++) { /* a node the later chains share: the group starts after it */
        program p = random_program(3 + (int)next_random(4), 2);
        sim_compiled *c = plan(p.g);
        CHECK(c->ngroups == 1 && c->groups[0].first_node > p.late_trunk,
              "trial %d: %d groups, the first from node %d; the shared node %d comes before it", trial, c->ngroups,
              c->ngroups ? c->groups[0].first_node : -1, p.late_trunk);
        if (c->ngroups == 1) {
            const sim_group *group = &c->groups[0];
            int wrong = 0;
            for (int i = 0; i < p.g->count; i++)
                wrong += c->branch_of[i] != (i >= group->first_node && i <= group->last_node ? p.chain_of[i] : -1);
            CHECK(wrong == 0, "trial %d: %d nodes in the wrong branch", trial, wrong);
            CHECK(simulate(p.g, c->branch_of, group->first_node, group->last_node, group->nbranches, c->read_until) == 0,
                  "trial %d: values overwritten with the branches interleaved", trial);
        }
        free_plan(c);
        ane_graph_free(p.g);
    }
    return check_summary("test_sim_branches");
}
