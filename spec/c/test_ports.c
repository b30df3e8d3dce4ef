/* backend/ports.c: a program's ports come out in the device's binding order (alphabetical,
 * ANE-03/19) with their dtypes and shapes whatever order the graph declared them in; the
 * surface predicate accepts exactly [1, C, 1, S] fp16/fp32; the device rules turn a
 * host-only op into one error that names the program, the rule and the node. */
#include <stdlib.h>
#include <string.h>

#include "ane_core/backend/backend.h"
#include "ane_core/ir/graph.h"
#include "ane_core/passes/target.h"
#include "check.h"

static int device_ops(ane_op op, ane_profile profile) { return ane_device_op_set(op, profile); }

int main(void) {
    ane_error err;
    ane_graph *g;
    CHECK(ane_graph_new("ports", &g, &err) == ANE_OK, "graph");
    const int64_t wide[4] = { 1, 64, 1, 32 }, narrow[4] = { 1, 8, 1, 32 };
    ane_node *zeta, *alpha, *mid;
    ane_graph_input(g, "zeta", ANE_FP16, 4, wide, &zeta, &err);
    ane_graph_input(g, "alpha", ANE_FP16, 4, wide, &alpha, &err);
    ane_graph_input(g, "mid", ANE_FP16, 4, narrow, &mid, &err);
    ane_node *ops[2] = { zeta, alpha }, *sum, *r;
    CHECK(ane_graph_op(g, ANE_OP_ADD, "sum", ops, 2, NULL, &sum, &err) == ANE_OK, "add: %s", err.message);
    CHECK(ane_graph_op(g, ANE_OP_RELU, "r", &mid, 1, NULL, &r, &err) == ANE_OK, "relu: %s", err.message);
    ane_graph_output_node(g, "z_out", sum, &err);
    ane_graph_output_node(g, "a_out", r, &err);

    ane_port *inputs, *outputs;
    int ninputs, noutputs;
    CHECK(ane_graph_ports(g, &inputs, &ninputs, &outputs, &noutputs, &err) == ANE_OK, "ports: %s", err.message);
    CHECK(ninputs == 3 && strcmp(inputs[0].name, "alpha") == 0 && strcmp(inputs[1].name, "mid") == 0 &&
              strcmp(inputs[2].name, "zeta") == 0,
          "inputs in alphabetical order: %s %s %s", inputs[0].name, inputs[1].name, inputs[2].name);
    CHECK(inputs[1].dtype == ANE_FP16 && inputs[1].rank == 4 && inputs[1].shape[1] == 8 && inputs[1].shape[3] == 32,
          "a port keeps its dtype and shape");
    CHECK(noutputs == 2 && strcmp(outputs[0].name, "a_out") == 0 && strcmp(outputs[1].name, "z_out") == 0,
          "outputs in alphabetical order: %s %s", outputs[0].name, outputs[1].name);

    ane_port port = inputs[0];
    CHECK(ane_port_is_surface(&port), "[1, 64, 1, 32] fp16 is a surface port");
    port.dtype = ANE_FP32;
    CHECK(ane_port_is_surface(&port), "fp32 too (the device stages fp32 surfaces, ANE-26 is the validator's)");
    port.dtype = ANE_INT32;
    CHECK(!ane_port_is_surface(&port), "int32 is not");
    port = inputs[0];
    port.shape[2] = 2;
    CHECK(!ane_port_is_surface(&port), "[1, 64, 2, 32] is not [1, C, 1, S]");
    port = inputs[0];
    port.rank = 3;
    CHECK(!ane_port_is_surface(&port), "rank 3 is not");
    free(inputs), free(outputs);

    ane_compile_options options;
    memset(&options, 0, sizeof options);
    options.profile = ANE_PROFILE_ANE;
    ane_target_generic(&options.target);
    ane_report warnings = {0};
    CHECK(ane_check_device_rules(g, &options, device_ops, &warnings, &err) == ANE_OK, "an add and a relu break no rule: %s",
          err.message);
    CHECK(warnings.count == 1 && strcmp(warnings.items[0].id, "ANE-28") == 0,
          "the warnings are passed on: a purely elementwise program (ANE-28), %d warnings", warnings.count);
    ane_report_free(&warnings);
    ane_node *halves[2] = { zeta, alpha }, *joined;
    ane_node_attrs attrs;
    memset(&attrs, 0, sizeof attrs);
    attrs.axis = 1;
    CHECK(ane_graph_op(g, ANE_OP_CONCAT, "joined", halves, 2, &attrs, &joined, &err) == ANE_OK, "concat: %s",
          err.message);
    ane_graph_output_node(g, "joined_out", joined, &err);
    CHECK(ane_check_device_rules(g, &options, device_ops, NULL, &err) == ANE_ERR_CONSTRAINT, "a concat breaks ANE-01");
    CHECK(strstr(err.message, "program 'ports' breaks 1 rule") && strstr(err.message, "ANE-01") &&
              strstr(err.message, "joined"),
          "the error names the program, the rule and the node: %s", err.message);
    ane_graph_free(g);
    return check_summary("ports");
}
