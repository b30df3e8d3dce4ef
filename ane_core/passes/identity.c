/* Identity elimination: removes ops that return their operand unchanged — identity,
 * casts to the same dtype, reshapes to the same shape, transposes by the identity
 * permutation and slices that keep everything. An eliminated node that is a program
 * output hands its name to its operand when the operand is a free intermediate (the
 * return tuple must keep naming live nodes, ANE-14); otherwise it stays. */
#include <string.h>

#include "passes.h"

static int is_identity(const ane_node *node) {
    const ane_node *x = node->noperands ? node->operands[0] : NULL;
    switch (node->op) {
    case ANE_OP_IDENTITY: return 1;
    case ANE_OP_CAST: return node->attrs.dtype == x->dtype;
    case ANE_OP_RESHAPE: return ane_node_same_shape(node, x);
    case ANE_OP_TRANSPOSE:
        for (int i = 0; i < node->attrs.perm.count; i++)
            if (node->attrs.perm.values[i] != i) return 0;
        return 1;
    case ANE_OP_SLICE_BY_INDEX:
    case ANE_OP_SLICE_BY_SIZE: return ane_node_same_shape(node, x);
    default: return 0;
    }
}

int ane_pass_identity(ane_graph *g) {
    int removed = 0;
    for (int i = 0; i < g->count; i++) {
        ane_node *node = g->nodes[i];
        if (node->dead || !is_identity(node)) continue;
        ane_node *source = node->operands[0];
        if (ane_graph_is_output(g, node)) {
            int free_intermediate = source->op != ANE_OP_INPUT && source->op != ANE_OP_CONST &&
                                    !ane_graph_is_output(g, source);
            if (!free_intermediate) continue;
            char name[ANE_NAME_MAX];
            memcpy(name, node->name, sizeof name);
            node->name[0] = '\0'; /* frees the name for the operand */
            ane_graph_rename(g, source, name, NULL);
        }
        ane_graph_replace_uses(g, node, source);
        node->dead = 1;
        removed++;
    }
    if (removed) ane_graph_compact(g);
    return removed;
}
