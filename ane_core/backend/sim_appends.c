/* The sim backend's appends written during an evaluation. A decode step's program outputs its
 * position's key and value, which ane_program_eval_with appends to the session's caches (inputs
 * of the same program; ane_eval_options) after the evaluation. By then a layer's out projection
 * and FFN have streamed megabytes of weights through the caches, and the lines that take the
 * append (one a channel: 768 lines, 512 bytes apart, for each cache of a Stories110M layer) come
 * from memory again, though the attention read every one of them moments before. So sim writes
 * an append itself, right after the later of the step that computes the output and the last step
 * that reads the input, while those lines are at hand.
 *
 * The plan (sim_plan_appends) finds, for every output, the step that computes it, and for every
 * input the step that reads it last: a reader's own step, or the fused step that reads it later
 * (sim_read_at: a fusion declares what it reads late). Where either is inside a group's branches
 * (whose own appends run_branches writes at the branch's end, sim.c) or is a link computed by a
 * fused step that declared nothing, the append is left to the runtime, after the evaluation. */
#include <stdlib.h>

#include "sim_program.h"

/* Whether step s runs inside a group's branches. */
static int in_group(const sim_compiled *p, int s) {
    for (int k = 0; k < p->ngroups; k++)
        if (s >= p->groups[k].first_step && s < p->groups[k].end_step) return 1;
    return 0;
}

/* The last node that reads input node `input` (through views of it, and the late reads fusions
 * declared), or -1. */
static int last_reader(const sim_compiled *p, int input) {
    const ane_graph *g = p->graph;
    int last = -1;
    for (int r = 0; r < g->count; r++) {
        const ane_node *node = g->nodes[r];
        if (sim_value_source(g, r) == input && p->read_until[r] > last) last = p->read_until[r];
        if (sim_is_view(node)) continue; /* (its readers read the input) */
        for (int k = 0; k < node->noperands; k++)
            if (sim_value_source(g, node->operands[k]->id) == input && r > last) last = r;
    }
    return last;
}

ane_status sim_plan_appends(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    p->output_step = malloc(((size_t)p->noutputs + 1) * sizeof *p->output_step);
    p->input_last_step = malloc(((size_t)p->ninputs + 1) * sizeof *p->input_last_step);
    int *step_of = malloc(((size_t)g->count + 1) * sizeof *step_of); /* per node: the step computing it, -1 */
    if (!p->output_step || !p->input_last_step || !step_of) {
        free(step_of);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory planning program '%s'", g->name);
    }
    for (int i = 0; i < g->count; i++) step_of[i] = -1;
    for (int s = 0; s < p->nsteps; s++) {
        if (in_group(p, s)) continue;
        const sim_step *step = &p->steps[s];
        step_of[step->node->id] = s;
        for (int k = 0; k < step->nparts; k++) step_of[step->parts[k]->id] = s;
    }
    for (int port = 0; port < p->noutputs; port++) {
        int node = p->output_nodes[port];
        p->output_step[port] = p->slots[node].output_pad ? -1 : step_of[sim_value_source(g, node)];
    }
    for (int port = 0; port < p->ninputs; port++) {
        int reader = last_reader(p, p->input_nodes[port]);
        p->input_last_step[port] = reader >= 0 ? step_of[reader] : -1;
    }
    free(step_of);
    return ANE_OK;
}

ane_status sim_append_output(const sim_loaded *instance, int port, ane_binding *output, const ane_binding *input,
                             ane_error *err) {
    const sim_compiled *p = instance->program;
    const ane_node *node = p->graph->nodes[p->output_nodes[port]];
    ane_storage pin;
    ane_tensor values = sim_view_shaped(instance->values[node->id].data, ANE_FP32, node->rank, node->shape, &pin);
    ane_tensor first = {0}, target = {0};
    ane_status status = ane_tensor_slice(&first, &values, node->rank - 1, 0, 1, err);
    if (!status) status = ane_tensor_slice(&target, &input->view, input->view.ndim - 1, input->written, input->written + 1, err);
    if (!status) status = ane_tensor_copy_into(&target, &first, err);
    if (!status) status = ane_binding_clamp_append(output, &target, err);
    ane_tensor_release(&target);
    ane_tensor_release(&first);
    if (!status) output->appended = 1;
    return status;
}

int sim_appends_due(const sim_loaded *instance, const ane_binding *outputs, sim_due_append *due) {
    const sim_compiled *p = instance->program;
    int count = 0;
    for (int port = 0; port < p->noutputs; port++) {
        int input = outputs[port].append_to;
        if (input < 0 || p->output_step[port] < 0 || p->input_last_step[input] < 0) continue;
        int after = p->output_step[port] > p->input_last_step[input] ? p->output_step[port] : p->input_last_step[input];
        due[count++] = (sim_due_append){port, after};
    }
    return count;
}

ane_status sim_write_due_appends(const sim_loaded *instance, int step, const sim_due_append *due, int count,
                                 const ane_binding *inputs, ane_binding *outputs, ane_error *err) {
    ane_status status = ANE_OK;
    for (int i = 0; i < count && !status; i++)
        if (due[i].after_step == step) {
            ane_binding *output = &outputs[due[i].port];
            status = sim_append_output(instance, due[i].port, output, &inputs[output->append_to], err);
        }
    return status;
}
