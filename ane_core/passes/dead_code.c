/* Dead-code elimination: marks nodes that no output depends on as dead. Inputs stay: they
 * are the program's interface, bound by name, even when unused. */
#include <stdlib.h>

#include "passes.h"

int ane_pass_dead_code(ane_graph *g) {
    char *live = calloc((size_t)g->count + 1, 1);
    if (!live) return 0;
    for (int i = 0; i < g->noutputs; i++) live[g->outputs[i].node->id] = 1;
    /* Nodes come in topological order, so one backward sweep reaches every dependency. */
    for (int i = g->count - 1; i >= 0; i--) {
        ane_node *node = g->nodes[i];
        if (!live[i] || node->dead) continue;
        for (int k = 0; k < node->noperands; k++) live[node->operands[k]->id] = 1;
    }
    int removed = 0;
    for (int i = 0; i < g->count; i++) {
        ane_node *node = g->nodes[i];
        if (node->dead || live[i] || node->op == ANE_OP_INPUT) continue;
        node->dead = 1;
        removed++;
    }
    free(live);
    if (removed) ane_graph_compact(g);
    return removed;
}
