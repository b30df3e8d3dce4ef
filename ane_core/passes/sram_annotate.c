/* SRAM annotation: estimates each node's working set (its operands plus its output, in
 * bytes) and warns, naming the node, when it exceeds the ANE's ~32 MB of on-chip SRAM
 * (ANE-27: such working sets run about 30% slower). */
#include "passes.h"

void ane_pass_sram_annotate(ane_graph *g, ane_report *report) {
    for (int i = 0; i < g->count; i++) {
        ane_node *node = g->nodes[i];
        if (node->dead || node->op == ANE_OP_INPUT || node->op == ANE_OP_CONST) continue;
        int64_t bytes = ane_node_working_set_bytes(node);
        node->working_set_bytes = bytes;
        if (report && bytes > ANE_SRAM_BYTES)
            ane_report_add(report, "ANE-27", node, ANE_SEVERITY_WARNING,
                           "node '%s' (%s) works on %.1f MB, beyond the ~32 MB of on-chip SRAM: expect ~30%% slower "
                           "execution; tile or split the program",
                           node->name, ane_op_table[node->op].name, (double)bytes / (1 << 20));
    }
}
