/* The sim backend's memory plan. A program instance holds its values in one slab. Values
 * that must outlive an evaluation (SIM_SLOT_KEPT: inputs, consts converted at load, the
 * outputs) come first, each with a place of its own. Every other value (SIM_SLOT_TEMP) is
 * needed only from the node that computes it to the last node that reads it, directly or
 * through reshapes of it (views of its buffer); the nodes run in graph order, so walking
 * that order, each temporary value takes the lowest offset where it overlaps no value still
 * to be read, and gives its place back after its last reader. A training step's backward
 * program keeps a few layers' worth of activations live instead of every one it computes. */
#include "sim_places.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { ALIGN_FLOATS = 16 }; /* 64 bytes: a cache line, an AVX-512 vector */

static size_t aligned_floats(const ane_node *node) {
    size_t n = (size_t)ane_node_numel(node);
    return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS;
}

typedef struct {
    size_t offset, floats;
    int last_reader;
} live_block;

int ane_sim_slot_holder(const ane_graph *g, const unsigned char *kinds, int id) {
    while (kinds[id] == SIM_SLOT_VIEW) id = g->nodes[id]->operands[0]->id;
    return id;
}

ane_status ane_sim_places(const ane_graph *g, const unsigned char *kinds, const int *read_until, size_t *offsets,
                        size_t *kept_floats, size_t *total_floats, ane_error *err) {
    int n = g->count;
    int *last_reader = malloc(((size_t)n + 1) * sizeof *last_reader);
    live_block *live = malloc(((size_t)n + 1) * sizeof *live); /* sorted by offset */
    if (!last_reader || !live) {
        free(last_reader);
        free(live);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory planning the values of program '%s'", g->name);
    }
    for (int i = 0; i < n; i++) last_reader[i] = i;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < g->nodes[i]->noperands; k++) {
            int holder = ane_sim_slot_holder(g, kinds, g->nodes[i]->operands[k]->id);
            if (i > last_reader[holder]) last_reader[holder] = i;
        }
    for (int i = 0; read_until && i < n; i++) {
        int holder = ane_sim_slot_holder(g, kinds, i);
        if (read_until[i] > last_reader[holder]) last_reader[holder] = read_until[i];
    }

    size_t kept = 0;
    for (int i = 0; i < n; i++) {
        offsets[i] = 0;
        if (kinds[i] == SIM_SLOT_KEPT) {
            offsets[i] = kept;
            kept += aligned_floats(g->nodes[i]);
        }
    }

    size_t peak = 0; /* end of the temporary region, relative to `kept` */
    int nlive = 0;
    for (int i = 0; i < n; i++) {
        if (kinds[i] == SIM_SLOT_TEMP) {
            size_t floats = aligned_floats(g->nodes[i]), offset = 0;
            int at = 0; /* first fit: the first gap between live blocks wide enough */
            while (at < nlive && live[at].offset < offset + floats) {
                size_t end = live[at].offset + live[at].floats;
                if (end > offset) offset = end;
                at++;
            }
            memmove(live + at + 1, live + at, (size_t)(nlive - at) * sizeof *live);
            live[at] = (live_block){offset, floats, last_reader[i]};
            nlive++;
            offsets[i] = kept + offset;
            if (offset + floats > peak) peak = offset + floats;
        }
        int kept_blocks = 0; /* places read for the last time by node i are free for node i + 1 */
        for (int b = 0; b < nlive; b++)
            if (live[b].last_reader > i) live[kept_blocks++] = live[b];
        nlive = kept_blocks;
    }
    *kept_floats = kept;
    *total_floats = kept + peak;
    free(last_reader);
    free(live);
    return ANE_OK;
}
