/* backend/sim_places.c: on random programs (elementwise ops, adds, concats, slices, reshape
 * views; some values declared outputs; some read again later, as a fused step reads them:
 * read_until), evaluation is simulated over the planned slab: each node stamps its place with
 * its id, and every value must still carry its own stamp when a node reads it (through views
 * too), and the inputs and outputs at the end. The witness is
 * the simulated memory, not the planner's lifetimes. A chain of equal values needs a few
 * places, not one per node. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/backend/sim_places.h"
#include "check.h"

static uint32_t rng = 12345u;
static uint32_t next_random(uint32_t below) {
    rng = rng * 1664525u + 1013904223u;
    return (rng >> 8) % below;
}

/* 1 if every float of value `id`'s place still carries the stamp of its holder. */
static int intact(const ane_graph *g, const unsigned char *kinds, const size_t *offsets, const int *stamps, int id) {
    int h = ane_sim_slot_holder(g, kinds, id);
    int64_t n = ane_node_numel(g->nodes[h]);
    for (int64_t k = 0; k < n; k++)
        if (stamps[offsets[h] + (size_t)k] != h) return 0;
    return 1;
}

/* Simulates an evaluation over the plan; returns the number of values found overwritten. */
static int simulate(const ane_graph *g, const unsigned char *kinds, const int *read_until, const size_t *offsets,
                    size_t total) {
    int *stamps = malloc((total + 1) * sizeof *stamps);
    for (size_t k = 0; k < total; k++) stamps[k] = -1;
    int damaged = 0;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        for (int k = 0; k < node->noperands; k++) damaged += !intact(g, kinds, offsets, stamps, node->operands[k]->id);
        for (int j = 0; read_until && j < i; j++) /* values node i reads besides its operands */
            if (read_until[j] == i) damaged += !intact(g, kinds, offsets, stamps, j);
        if (kinds[i] == SIM_SLOT_KEPT || kinds[i] == SIM_SLOT_TEMP) {
            int64_t n = ane_node_numel(node);
            CHECK(offsets[i] + (size_t)n <= total, "node %d's place ends at %zu, beyond the slab's %zu floats", i,
                  offsets[i] + (size_t)n, total);
            for (int64_t k = 0; k < n && offsets[i] + (size_t)k < total; k++) stamps[offsets[i] + (size_t)k] = i;
        }
    }
    for (int i = 0; i < g->count; i++)
        if (g->nodes[i]->op == ANE_OP_INPUT) damaged += !intact(g, kinds, offsets, stamps, i);
    for (int i = 0; i < g->noutputs; i++) damaged += !intact(g, kinds, offsets, stamps, g->outputs[i].node->id);
    free(stamps);
    return damaged;
}

/* A random program of n nodes over values [1, c]. */
static ane_graph *random_program(int n) {
    ane_error err;
    ane_graph *g;
    ane_graph_new("planned", &g, &err);
    int64_t shape[2] = {1, 16 + next_random(64)};
    ane_node *x;
    ane_graph_input(g, "x", ANE_FP32, 2, shape, &x, &err);
    ane_node *made[512];
    int count = 0;
    made[count++] = x;
    while (count < n) {
        ane_node *a = made[next_random((uint32_t)count)], *out = NULL;
        int64_t c = a->shape[a->rank - 1];
        ane_node_attrs attrs;
        memset(&attrs, 0, sizeof attrs);
        switch (next_random(5)) {
        case 0:
            ane_graph_op(g, ANE_OP_RELU, NULL, &a, 1, NULL, &out, &err);
            break;
        case 1: { /* an add of two values of one shape, or of a value with itself */
            ane_node *pair[2] = {a, a};
            for (int tries = 0; tries < 8; tries++) {
                ane_node *b = made[next_random((uint32_t)count)];
                if (b->rank == a->rank && memcmp(b->shape, a->shape, sizeof(int64_t) * (size_t)a->rank) == 0) pair[1] = b;
            }
            ane_graph_op(g, ANE_OP_ADD, NULL, pair, 2, NULL, &out, &err);
            break;
        }
        case 2: /* longer values: a concat along the last axis */
            if (a->rank != 2 || c > 2048) continue;
            attrs.axis = 1;
            ane_graph_op(g, ANE_OP_CONCAT, NULL, (ane_node *[]){a, a}, 2, &attrs, &out, &err);
            break;
        case 3: /* shorter ones: the first half */
            if (a->rank != 2 || c < 2) continue;
            attrs.begin = (ane_int_list){2, {0, 0}};
            attrs.size = (ane_int_list){2, {1, c / 2}};
            ane_graph_op(g, ANE_OP_SLICE_BY_SIZE, NULL, &a, 1, &attrs, &out, &err);
            break;
        default: /* a view: [1, c] <-> [c] */
            attrs.shape = a->rank == 2 ? (ane_int_list){1, {c}} : (ane_int_list){2, {1, c}};
            ane_graph_op(g, ANE_OP_RESHAPE, NULL, &a, 1, &attrs, &out, &err);
            break;
        }
        if (!out) continue;
        made[count++] = out;
    }
    for (int k = 0; k < 3; k++) ane_graph_output_node(g, NULL, made[1 + next_random((uint32_t)(count - 1))], &err);
    return g;
}

static void kinds_of(const ane_graph *g, unsigned char *kinds) {
    for (int i = 0; i < g->count; i++) {
        ane_op op = g->nodes[i]->op;
        kinds[i] = op == ANE_OP_RESHAPE ? SIM_SLOT_VIEW : op == ANE_OP_INPUT ? SIM_SLOT_KEPT : SIM_SLOT_TEMP;
    }
    for (int i = 0; i < g->noutputs; i++) {
        int h = ane_sim_slot_holder(g, kinds, g->outputs[i].node->id);
        if (kinds[h] == SIM_SLOT_TEMP) kinds[h] = SIM_SLOT_KEPT;
    }
}

int main(void) {
    ane_error err;
    int programs = 0, damaged_programs = 0;
    size_t planned = 0, unplanned = 0;
    for (int trial = 0; trial < 300; trial++) {
        ane_graph *g = random_program(20 + (int)next_random(300));
        unsigned char kinds[1024];
        size_t offsets[1024], kept = 0, total = 0;
        int read_until[1024] = {0}; /* every other program: a tenth of the values read up to 30 nodes later */
        for (int i = 0; trial % 2 && i < g->count; i++)
            if (next_random(10) == 0) {
                int later = i + 1 + (int)next_random(30);
                if (later < g->count) read_until[i] = later;
            }
        kinds_of(g, kinds);
        CHECK(ane_sim_places(g, kinds, read_until, offsets, &kept, &total, &err) == ANE_OK, "plan: %s", err.message);
        for (int i = 0; i < g->count; i++) {
            size_t end = offsets[i] + (size_t)ane_node_numel(g->nodes[i]);
            if (kinds[i] == SIM_SLOT_KEPT) CHECK(end <= kept, "kept node %d ends at %zu, past the kept region's %zu", i, end, kept);
            if (kinds[i] == SIM_SLOT_TEMP)
                CHECK(offsets[i] >= kept, "temporary node %d starts at %zu, inside the kept region (%zu)", i, offsets[i], kept);
        }
        for (int i = 0; i < g->count; i++)
            if (kinds[i] == SIM_SLOT_KEPT || kinds[i] == SIM_SLOT_TEMP) unplanned += (size_t)ane_node_numel(g->nodes[i]);
        planned += total;
        for (int i = 0; i < g->count; i++)
            if (kinds[i] == SIM_SLOT_KEPT || kinds[i] == SIM_SLOT_TEMP)
                CHECK(offsets[i] % 16 == 0, "node %d's place %zu is not 64-byte aligned", i, offsets[i]);
        int damaged = simulate(g, kinds, read_until, offsets, total);
        CHECK(damaged == 0, "program %d (%d nodes): %d values overwritten before their last reader", trial, g->count,
              damaged);
        damaged_programs += damaged != 0;
        programs++;
        ane_graph_free(g);
    }
    CHECK(planned < unplanned, "the plans share places: %zu floats planned, %zu without sharing", planned, unplanned);
    printf("%d random programs, %d damaged; %zu floats planned where one place per value takes %zu\n", programs,
           damaged_programs, planned, unplanned);

    /* A chain y_{k+1} = relu(y_k) of 200 [1, 1024] values: places for the input, the output
     * and two temporaries that take turns. */
    ane_graph *g;
    ane_graph_new("chain", &g, &err);
    int64_t shape[2] = {1, 1024};
    ane_node *y;
    ane_graph_input(g, "x", ANE_FP32, 2, shape, &y, &err);
    for (int k = 0; k < 200; k++) ane_graph_op(g, ANE_OP_RELU, NULL, &y, 1, NULL, &y, &err);
    ane_graph_output_node(g, "y", y, &err);
    unsigned char kinds[256];
    size_t offsets[256], kept = 0, total = 0;
    kinds_of(g, kinds);
    ane_sim_places(g, kinds, NULL, offsets, &kept, &total, &err);
    CHECK(kept == 2 * 1024, "the chain keeps its input and output: %zu floats (2 x 1024 expected)", kept);
    CHECK(total == 4 * 1024, "a chain of 200 values takes %zu floats (4 x 1024 expected)", total);
    CHECK(simulate(g, kinds, NULL, offsets, total) == 0, "the chain's values are intact");
    ane_graph_free(g);
    return check_summary("test_sim_places");
}
