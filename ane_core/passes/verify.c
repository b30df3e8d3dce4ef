/* The structural verifier, run between passes: it catches compiler bugs (a pass that
 * leaves a dangling operand, a duplicate name, a stale shape) at the pass that made them. */
#include <string.h>

#include "passes.h"

ane_status ane_verify_graph(const ane_graph *g, ane_error *err) {
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (node->dead) return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: dead node '%s' left in the node list", node->name);
        if (node->id != i) return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: node '%s' has id %d at position %d", node->name, node->id, i);
        if (!ane_is_valid_identifier(node->name))
            return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: node %d has invalid name '%s'", i, node->name);
        for (int j = 0; j < i; j++)
            if (strcmp(g->nodes[j]->name, node->name) == 0)
                return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: name '%s' is used twice", node->name);
        for (int k = 0; k < node->noperands; k++) {
            const ane_node *operand = node->operands[k];
            if (operand->dead || operand->id >= i || g->nodes[operand->id] != operand)
                return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: node '%s' uses '%s', which is not defined before it",
                                node->name, operand->name);
        }
        if (node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST) {
            ane_node copy = *node;
            ane_error inner;
            if (ane_infer_shape(&copy, &inner) != ANE_OK)
                return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: %s", inner.message);
            if (copy.rank != node->rank || copy.dtype != node->dtype ||
                memcmp(copy.shape, node->shape, (size_t)node->rank * sizeof node->shape[0]) != 0)
                return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: node '%s' has a stale shape or dtype", node->name);
        }
    }
    for (int i = 0; i < g->noutputs; i++) {
        const ane_node *node = g->outputs[i].node;
        if (node->dead || g->nodes[node->id] != node)
            return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: output '%s' names a removed node", g->outputs[i].name);
        if (strcmp(node->name, g->outputs[i].name) != 0 && node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST)
            return ane_fail(err, ANE_ERR_ARGUMENT, "verifier: output '%s' is node '%s' (the names must agree, ANE-14)",
                            g->outputs[i].name, node->name);
    }
    return ANE_OK;
}
