/* What both backends read from a parsed MIL program before running it: its ports in the
 * device's binding order (alphabetical, ANE-03/19) and the verdict of the device rules. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../passes/passes.h"
#include "backend.h"

static int by_port_name(const void *a, const void *b) { return strcmp(((const ane_port *)a)->name, ((const ane_port *)b)->name); }

static void fill_port(ane_port *port, const char *name, const ane_node *node) {
    snprintf(port->name, sizeof port->name, "%s", name);
    port->dtype = node->dtype;
    port->rank = node->rank;
    memcpy(port->shape, node->shape, sizeof port->shape);
}

ane_status ane_graph_ports(const ane_graph *g, ane_port **inputs, int *ninputs, ane_port **outputs, int *noutputs,
                           ane_error *err) {
    int count = 0;
    for (int i = 0; i < g->count; i++) count += g->nodes[i]->op == ANE_OP_INPUT;
    *inputs = calloc((size_t)count + 1, sizeof **inputs);
    *outputs = calloc((size_t)g->noutputs + 1, sizeof **outputs);
    if (!*inputs || !*outputs) {
        free(*inputs), free(*outputs);
        *inputs = *outputs = NULL;
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory listing the ports of program '%s'", g->name);
    }
    *ninputs = 0;
    for (int i = 0; i < g->count; i++)
        if (g->nodes[i]->op == ANE_OP_INPUT) fill_port(&(*inputs)[(*ninputs)++], g->nodes[i]->name, g->nodes[i]);
    for (int i = 0; i < g->noutputs; i++) fill_port(&(*outputs)[i], g->outputs[i].name, g->outputs[i].node);
    *noutputs = g->noutputs;
    qsort(*inputs, (size_t)*ninputs, sizeof **inputs, by_port_name);
    qsort(*outputs, (size_t)*noutputs, sizeof **outputs, by_port_name);
    return ANE_OK;
}

ane_status ane_check_device_rules(const ane_graph *g, const ane_compile_options *compile, int (*supports_op)(ane_op, ane_profile),
                                  ane_report *warnings, ane_error *err) {
    ane_report report = {0};
    ane_validate_options options = {.target = &compile->target, .supports_op = supports_op};
    ane_pass_validate_ane(g, &options, &report);
    int errors = ane_report_errors(&report);
    for (int i = 0; warnings && !errors && i < report.count; i++)
        if (report.items[i].severity == ANE_SEVERITY_WARNING) ane_report_append(warnings, &report.items[i]);
    if (!errors) {
        ane_report_free(&report);
        return ANE_OK;
    }
    char message[ANE_ERROR_MESSAGE_MAX];
    int used = snprintf(message, sizeof message, "program '%s' breaks %d rule%s of the device (profile 'ane'; use profile "
                        "'cpu' to run it on the CPU anyway):", g->name, errors, errors > 1 ? "s" : "");
    for (int i = 0; i < report.count && used < (int)sizeof message; i++)
        if (report.items[i].severity == ANE_SEVERITY_ERROR)
            used += snprintf(message + used, sizeof message - (size_t)used, "\n  %s: %s", report.items[i].id, report.items[i].message);
    ane_report_free(&report);
    return ane_fail(err, ANE_ERR_CONSTRAINT, "%s", message);
}

int ane_port_is_surface(const ane_port *port) {
    return port->rank == 4 && port->shape[0] == 1 && port->shape[2] == 1 &&
           (port->dtype == ANE_FP16 || port->dtype == ANE_FP32);
}

int ane_sram_spill_nodes(const ane_graph *g) {
    int spills = 0;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        int64_t bytes = node->working_set_bytes ? node->working_set_bytes : ane_node_working_set_bytes(node);
        spills += bytes > ANE_SRAM_BYTES;
    }
    return spills;
}
