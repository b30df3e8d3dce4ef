/* The sim backend's plan of a compiled program: for every value a slot (its form and its
 * place), and for every node that computes something a step (the kernel, the nodes it writes,
 * its weights' palette codes, whether its outputs are rounded). Evaluation is then a loop over
 * the steps (sim.c). The plan is made once per compile, in six passes over the graph:
 *   weight forms   consts only conv weights read stay as stored (fp16 bits, or encoded);
 *   half inputs    fp16 inputs only matmuls read as their second operand stay fp16 bits;
 *   edges          the positions each input's readers read (and the one slice of its
 *                  leading positions eval fills straight from the binding), and the outputs
 *                  that are zero pads of a value (a one-position program's 32-wide I/O,
 *                  ANE-21): eval reads and writes only what the program computes;
 *   fusions        chains that fewer steps compute (sim_attention.c: a decode attention
 *                  over an fp16 KV cache; sim_norm.c: RMSNorm; sim_rope.c: RoPE;
 *                  sim_scores.c: the scores of keys besides a cache);
 *   places         each value's place in the instance's slab or an evaluation's region;
 *   steps          one per computing node, convs of one decoded x grouped into one step. */
#include <stdlib.h>
#include <string.h>

#include "../tensor/intern.h"
#include "../tensor/gemv.h"
#include "sim_places.h"
#include "sim_program.h"

static ane_status out_of_memory(const sim_compiled *p, ane_error *err) {
    return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling program '%s'", p->graph->name);
}

/* Consts that only conv weights use stay as stored: fp16 ones as fp16 (kernels convert them
 * block by block, so they take half the memory, decoding reads half the bytes, and patching
 * is a copy), quantized ones as int8 / 4-bit codes read where the graph keeps them (no copy
 * at all). Other consts, and every output, become fp32 values. */
static void choose_weight_forms(sim_compiled *p) {
    const ane_graph *g = p->graph;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (node->op == ANE_OP_CONST && node->encoding) p->slots[i].weight_form = SIM_WEIGHT_ENCODED;
        else if (node->op == ANE_OP_CONST && node->dtype == ANE_FP16) p->slots[i].weight_form = SIM_WEIGHT_HALF;
    }
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        for (int k = 0; k < node->noperands; k++)
            if (!(node->op == ANE_OP_CONV && k == 1)) p->slots[node->operands[k]->id].weight_form = SIM_WEIGHT_FP32;
    }
    for (int i = 0; i < g->noutputs; i++) p->slots[g->outputs[i].node->id].weight_form = SIM_WEIGHT_FP32;
}

/* fp16 inputs of an fp16-precision program that are read only as a matmul's second operand
 * (directly or through views; not outputs) are held as fp16 bits: the values they hold are
 * fp16 values either way, and attention reads half the bytes of a KV cache. */
static void find_half_inputs(sim_compiled *p) {
    const ane_graph *g = p->graph;
    if (p->options.precision != ANE_PRECISION_FP16) return;
    for (int i = 0; i < g->count; i++)
        p->slots[i].half_input = g->nodes[i]->op == ANE_OP_INPUT && g->nodes[i]->dtype == ANE_FP16;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (sim_is_view(node)) continue;
        for (int k = 0; k < node->noperands; k++)
            if (!(node->op == ANE_OP_MATMUL && k == 1)) p->slots[sim_value_source(g, node->operands[k]->id)].half_input = 0;
    }
    for (int i = 0; i < g->noutputs; i++) p->slots[sim_value_source(g, g->outputs[i].node->id)].half_input = 0;
    for (int i = 0; i < g->count; i++)
        if (sim_is_view(g->nodes[i])) p->slots[i].half_input = p->slots[sim_value_source(g, i)].half_input;
}

/* The leading positions of the last axis a slice reads from its operand, or -1 when it is not
 * a slice from position 0 of the last axis. */
static int64_t leading_positions(const ane_node *reader) {
    if (reader->op != ANE_OP_SLICE_BY_SIZE && reader->op != ANE_OP_SLICE_BY_INDEX) return -1;
    int last = reader->rank - 1;
    if (last < 0 || reader->attrs.begin.count != reader->rank || reader->attrs.begin.values[last] != 0) return -1;
    return reader->shape[last];
}

/* Whether a graph output is a constant pad with zeros after its operand's last axis only. */
static int pads_with_zeros_after(const ane_node *node) {
    if (node->op != ANE_OP_PAD || strcmp(node->attrs.mode, "constant") != 0 || node->attrs.alpha != 0.0) return 0;
    const ane_int_list *amounts = &node->attrs.amounts;
    for (int k = 0; k < amounts->count; k++)
        if (amounts->values[k] != 0 && k != amounts->count - 1) return 0; /* (only the last axis's "after") */
    return node->operands[0]->dtype == node->dtype;
}

/* The edges of the program: the positions each input's readers read (slot.positions_read),
 * and the outputs that are zero pads of a value (slot.output_pad) and that nothing else reads. */
static void find_edges(sim_compiled *p) {
    const ane_graph *g = p->graph;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        p->slots[i].positions_read = node->op == ANE_OP_INPUT ? 0 : -1; /* (grown by the readers below) */
    }
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        for (int k = 0; k < node->noperands; k++) {
            sim_slot *operand = &p->slots[node->operands[k]->id];
            if (operand->positions_read < 0) continue;
            const ane_node *input = node->operands[k];
            int64_t read = leading_positions(node), all = input->rank ? input->shape[input->rank - 1] : 1;
            if (read < 0 || read > all) read = all;
            if (read > operand->positions_read) operand->positions_read = read;
        }
    }
    for (int i = 0; i < g->noutputs; i++) { /* an input that is an output is read whole */
        const ane_node *node = g->outputs[i].node;
        if (node->op == ANE_OP_INPUT) p->slots[node->id].positions_read = node->rank ? node->shape[node->rank - 1] : 1;
    }
    int *readers = calloc((size_t)g->count + 1, sizeof *readers);
    for (int i = 0; readers && i < g->count; i++)
        for (int k = 0; k < g->nodes[i]->noperands; k++) readers[g->nodes[i]->operands[k]->id]++;
    for (int i = 0; i < g->count; i++) p->slots[i].read_into = -1;
    for (int i = 0; readers && i < g->count; i++) { /* an input's one reader, a slice of its leading positions */
        const ane_node *slice = g->nodes[i];
        const ane_node *input = slice->noperands ? slice->operands[0] : NULL;
        if (!input || input->op != ANE_OP_INPUT || readers[input->id] != 1 || leading_positions(slice) < 0) continue;
        int whole_rows = slice->rank == input->rank;
        for (int d = 0; whole_rows && d < slice->rank - 1; d++)
            whole_rows = slice->attrs.begin.values[d] == 0 && slice->shape[d] == input->shape[d];
        int output = 0;
        for (int k = 0; k < g->noutputs; k++) output |= g->outputs[k].node == input;
        if (!whole_rows || output || p->slots[input->id].half_input) continue;
        p->slots[input->id].read_into = i;
        p->slots[i].filled_at_read = 1;
    }
    for (int i = 0; readers && i < g->noutputs; i++) {
        const ane_node *node = g->outputs[i].node;
        int outputs_of_node = 0;
        for (int k = 0; k < g->noutputs; k++) outputs_of_node += g->outputs[k].node == node;
        if (!readers[node->id] && outputs_of_node == 1 && pads_with_zeros_after(node)) p->slots[node->id].output_pad = 1;
    }
    free(readers); /* (without memory for the count: no output is fused, each pad runs its step) */
}

/* Where each value lives in an instance's slab: weights read from the graph have no place,
 * reshapes read their operand's, inputs, converted consts and outputs keep theirs between
 * evaluations, and every other value shares places with values not live at the same time. */
ane_status sim_add_chain(sim_compiled *p, const void *found, size_t size, void **kept, ane_error *err) {
    void *chain = malloc(size);
    void **grown = chain ? realloc(p->chains, (size_t)(p->nchains + 1) * sizeof *grown) : NULL;
    if (!grown) {
        free(chain);
        return out_of_memory(p, err);
    }
    memcpy(chain, found, size);
    p->chains = grown;
    p->chains[p->nchains++] = *kept = chain;
    return ANE_OK;
}

ane_status sim_add_fused_step(sim_compiled *p, const sim_fused_step *step, ane_error *err) {
    sim_fused_step *grown = realloc(p->fused, (size_t)(p->nfused + 1) * sizeof *grown);
    if (!grown) return out_of_memory(p, err);
    p->fused = grown;
    p->fused[p->nfused++] = *step;
    return ANE_OK;
}

size_t sim_node_scratch_floats(const sim_compiled *p, const ane_node *node) {
    int stored = node->op == ANE_OP_CONV ? p->slots[node->operands[1]->id].weight_form == SIM_WEIGHT_HALF
                 : node->op == ANE_OP_MATMUL && p->slots[node->operands[1]->id].half_input;
    return sim_scratch_floats(node, stored);
}

void sim_mark_link(sim_compiled *p, const ane_node *node, int kind) { p->links[node->id] = (unsigned char)kind; }

void sim_read_at(sim_compiled *p, const ane_node *value, const ane_node *reader) {
    if (p->read_until[value->id] < reader->id) p->read_until[value->id] = reader->id;
}

int sim_readers(const ane_graph *g, const ane_node *node, const ane_node **readers, int max) {
    int count = 0;
    for (int i = node->id + 1; i < g->count; i++)
        for (int k = 0; k < g->nodes[i]->noperands; k++)
            if (g->nodes[i]->operands[k] == node) {
                if (count < max) readers[count] = g->nodes[i];
                count++;
                break; /* (a node reading it twice is one reader) */
            }
    return count;
}

const ane_node *sim_only_reader(const ane_graph *g, const ane_node *node) {
    const ane_node *reader = NULL;
    return sim_readers(g, node, &reader, 1) == 1 && !ane_graph_is_output(g, node) ? reader : NULL;
}

/* The fused step that runs at node's place, or NULL. */
static const sim_fused_step *fused_step_at(const sim_compiled *p, const ane_node *node) {
    for (int f = 0; f < p->nfused; f++)
        if (p->fused[f].node == node) return &p->fused[f];
    return NULL;
}

static ane_status place_values(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    unsigned char *kinds = calloc((size_t)g->count + 1, 1);
    size_t *offsets = calloc((size_t)g->count + 1, sizeof *offsets);
    p->temp_nodes = calloc((size_t)g->count + 1, sizeof *p->temp_nodes);
    p->view_nodes = calloc((size_t)g->count + 1, sizeof *p->view_nodes);
    ane_status status = kinds && offsets && p->temp_nodes && p->view_nodes ? ANE_OK : out_of_memory(p, err);
    for (int i = 0; !status && i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (p->links[i] == SIM_LINK_UNHELD) kinds[i] = SIM_SLOT_NONE; /* a link of a fused chain no step writes */
        else if (sim_is_view(node)) kinds[i] = SIM_SLOT_VIEW; /* of a half input: a view of no slab place */
        else if (p->slots[i].output_pad) kinds[i] = SIM_SLOT_NONE; /* written from its operand's place */
        else if (p->slots[i].weight_form || sim_reads_graph_values(node) || p->slots[i].half_input) kinds[i] = SIM_SLOT_NONE;
        else if (node->op == ANE_OP_INPUT || node->op == ANE_OP_CONST || p->slots[i].filled_at_read)
            kinds[i] = SIM_SLOT_KEPT; /* (a slice filled at read is written before any step runs) */
        else kinds[i] = SIM_SLOT_TEMP;
    }
    for (int i = 0; !status && i < g->noutputs; i++) { /* read after the last node: kept, as is what they view */
        const ane_node *output = g->outputs[i].node;
        if (p->slots[output->id].output_pad) output = output->operands[0]; /* (what the output's write reads) */
        int holder = ane_sim_slot_holder(g, kinds, output->id);
        if (kinds[holder] == SIM_SLOT_TEMP) kinds[holder] = SIM_SLOT_KEPT;
    }
    size_t total = 0;
    if (!status) status = ane_sim_places(g, kinds, p->read_until, offsets, &p->kept_floats, &total, err);
    p->temp_floats = total - p->kept_floats;
    for (int i = 0; !status && i < g->count; i++) {
        p->slots[i].kind = kinds[i];
        p->slots[i].offset = offsets[i];
        if (kinds[ane_sim_slot_holder(g, kinds, i)] == SIM_SLOT_TEMP) p->temp_nodes[p->ntemp++] = i;
        if (sim_is_view(g->nodes[i])) p->view_nodes[p->nviews++] = i;
    }
    free(kinds);
    free(offsets);
    return status;
}

/* A 4-bit weight's palettes as the products read them: integer codes under integer
 * activations, else bf16 words where the CPU's kernel reads them (ane_palette_words_read) and every
 * entry is a bf16 value; NULL (the products read the fp32 palettes) otherwise. */
static ane_status palette_codes(const sim_compiled *p, const ane_node *w, const void **out, ane_error *err) {
    *out = NULL;
    if (p->slots[w->id].weight_form != SIM_WEIGHT_ENCODED || w->encoding != ANE_ENCODING_LUT4) return ANE_OK;
    if (p->options.activations == ANE_ACTIVATIONS_FLOAT && !ane_palette_words_read()) return ANE_OK;
    int64_t rows = w->shape[0];
    void *codes = malloc((size_t)rows * ane_palette_codes_stride(p->options.activations) + 1);
    if (!codes) return out_of_memory(p, err);
    if (!ane_palette_codes(codes, (const float *)ane_tensor_data(&w->table), rows, p->options.activations)) {
        free(codes);
        return ANE_OK;
    }
    *out = codes;
    return ANE_OK;
}

/* A block weight's table as fp16 under int8 activations, which its products read in place of
 * the fp32 one (tensor/gemv.h: ane_table_as_fp16; Q6_K's scales come from its blocks), interned
 * so that every program of the weight holds one copy; left without storage when an entry is no
 * fp16 value, or for any other weight. */
static ane_status half_table(const sim_compiled *p, const ane_node *w, ane_tensor *out, ane_error *err) {
    memset(out, 0, sizeof *out);
    if (p->slots[w->id].weight_form != SIM_WEIGHT_ENCODED || !ane_encoding_is_blockwise(w->encoding) ||
        p->options.activations != ANE_ACTIVATIONS_INT8)
        return ANE_OK;
    int64_t n = ane_tensor_numel(&w->table);
    ane_tensor half;
    if (ane_tensor_empty(&half, 1, &n, ANE_FP16, err)) return out_of_memory(p, err);
    if (!ane_table_as_fp16((uint16_t *)ane_tensor_data(&half), (const float *)ane_tensor_data(&w->table), n)) {
        ane_tensor_release(&half);
        return ANE_OK;
    }
    if (ane_intern_find(&half, out)) {
        ane_tensor_release(&half);
    } else {
        ane_intern_add(&half);
        *out = half;
    }
    return ANE_OK;
}

/* sim_part_kind of a node (0 for any but a conv of x and a weight). */
static int part_kind(const sim_compiled *p, const ane_node *node) {
    if (node->op != ANE_OP_CONV || node->noperands != 2) return 0;
    return sim_part_kind(node, p->slots[node->operands[1]->id].weight_form);
}

/* Nodes no step computes: inputs and consts (filled at eval and load), views (sim_is_view),
 * output pads (written by the output's write), slices filled when their input is read, the
 * links of a fused chain (its fused steps compute through them). */
static int computes(const sim_compiled *p, const ane_node *node) {
    const sim_slot *slot = &p->slots[node->id];
    return node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST && !sim_is_view(node) && !slot->output_pad &&
           !slot->filled_at_read && p->links[node->id] == SIM_NOT_A_LINK;
}

/* Ops whose outputs are values of their inputs (no arithmetic): no rounding needed. */
static int moves_data_only(ane_op op) {
    switch (op) {
    case ANE_OP_RESHAPE: case ANE_OP_TRANSPOSE: case ANE_OP_SLICE_BY_INDEX: case ANE_OP_SLICE_BY_SIZE:
    case ANE_OP_IDENTITY: case ANE_OP_CONCAT: case ANE_OP_SPLIT: case ANE_OP_GATHER: case ANE_OP_RELU:
    case ANE_OP_NEG: case ANE_OP_ABS: case ANE_OP_MAXIMUM: case ANE_OP_MINIMUM: case ANE_OP_SELECT:
        return 1;
    default:
        return 0;
    }
}

/* Node i's group (step->parts): the convs of one part kind, x and k, from node i on in node
 * order with nothing between them but consts, inputs and reshapes, which compute nothing.
 * Running the later ones early reads only x and their weights, and writes places no value
 * live meanwhile holds (sim_places.c frees a place after its last reader, and the only readers
 * in between are the group's convs, whose x stays live to the last of them). */
static void group_parts(const sim_compiled *p, int i, unsigned char *grouped, sim_step *step) {
    const ane_graph *g = p->graph;
    const ane_node *leader = g->nodes[i];
    step->parts[0] = leader, step->nparts = 1;
    int kind = part_kind(p, leader);
    for (int j = i + 1; kind && j < g->count && step->nparts < SIM_MAX_PARTS; j++) {
        const ane_node *node = g->nodes[j];
        if (!computes(p, node)) continue;
        if (part_kind(p, node) != kind || node->operands[0] != leader->operands[0] ||
            node->operands[1]->shape[1] != leader->operands[1]->shape[1] || p->branch_of[node->id] != p->branch_of[leader->id])
            break;
        step->parts[step->nparts++] = node;
        grouped[j] = 1;
    }
}

static ane_status build_steps(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    unsigned char *grouped = calloc((size_t)g->count + 1, 1); /* followers of a group, run by its step */
    p->steps = calloc((size_t)g->count + 1, sizeof *p->steps);
    if (!grouped || !p->steps) {
        free(grouped);
        return out_of_memory(p, err);
    }
    int fp16 = p->options.precision == ANE_PRECISION_FP16, device_rules = p->options.profile == ANE_PROFILE_ANE;
    ane_status status = ANE_OK;
    for (int i = 0; !status && i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (!computes(p, node) || grouped[i]) continue;
        sim_step *step = &p->steps[p->nsteps++];
        step->node = node;
        group_parts(p, i, grouped, step);
        const sim_fused_step *fused = fused_step_at(p, node);
        if (fused) step->kernel = fused->kernel, step->chain = fused->chain;
        else status = sim_kernel_for(node, part_kind(p, node) != 0, &step->kernel, err);
        for (int k = 0; !status && k < step->nparts; k++)
            if (step->parts[k]->op == ANE_OP_CONV && step->parts[k]->noperands > 1) {
                status = palette_codes(p, step->parts[k]->operands[1], &step->palette_codes[k], err);
                if (!status) status = half_table(p, step->parts[k]->operands[1], &step->half_tables[k], err);
            }
        step->cliffs = (unsigned char)device_rules;
        for (int k = 0; k < step->nparts; k++) {
            const ane_node *part = step->parts[k];
            step->rounds[k] = fp16 && part->dtype == ANE_FP16 && !moves_data_only(part->op);
            size_t scratch = fused ? fused->scratch_floats : sim_node_scratch_floats(p, part);
            if (fused && fused->rounds_itself) step->rounds[k] = 0;
            if (scratch > p->scratch_floats) p->scratch_floats = scratch;
        }
    }
    free(grouped);
    return status;
}

/* Each group's steps: those of its nodes (contiguous in step order: every computing node
 * between its first and last is in one of its branches). */
static void group_steps(sim_compiled *p) {
    for (int k = 0; k < p->ngroups; k++) {
        sim_group *group = &p->groups[k];
        group->first_step = group->end_step = -1;
        for (int s = 0; s < p->nsteps; s++) {
            int id = p->steps[s].node->id;
            if (id < group->first_node || id > group->last_node) continue;
            if (group->first_step < 0) group->first_step = s;
            group->end_step = s + 1;
        }
        if (group->nbranches > p->most_branches) p->most_branches = group->nbranches;
    }
}

/* Node `id`'s group x SIM_MAX_BRANCHES + branch, or -1 outside the groups. */
static int place_in_groups(const sim_compiled *p, int id) {
    for (int k = 0; k < p->ngroups; k++)
        if (id >= p->groups[k].first_node && id <= p->groups[k].last_node && p->branch_of[id] >= 0)
            return k * SIM_MAX_BRANCHES + p->branch_of[id];
    return -1;
}

/* Which inputs are read in one branch alone, which outputs one branch computes. */
static ane_status port_branches(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    p->input_branch = malloc(((size_t)p->ninputs + 1) * sizeof *p->input_branch);
    p->output_branch = malloc(((size_t)p->noutputs + 1) * sizeof *p->output_branch);
    int *read_in = malloc(((size_t)g->count + 1) * sizeof *read_in); /* per node: its readers' place, -2 none yet */
    if (!p->input_branch || !p->output_branch || !read_in) {
        free(read_in);
        return out_of_memory(p, err);
    }
    for (int i = 0; i < g->count; i++) read_in[i] = -2;
    for (int r = 0; r < g->count; r++) {
        int at = place_in_groups(p, r);
        for (int o = 0; o < g->nodes[r]->noperands; o++) {
            int source = sim_value_source(g, g->nodes[r]->operands[o]->id);
            read_in[source] = read_in[source] == -2 || read_in[source] == at ? at : -1;
        }
    }
    for (int port = 0; port < p->ninputs; port++) {
        int read = read_in[p->input_nodes[port]];
        p->input_branch[port] = read >= 0 ? read : -1;
    }
    for (int port = 0; port < p->noutputs; port++) p->output_branch[port] = place_in_groups(p, p->output_nodes[port]);
    free(read_in);
    return ANE_OK;
}

ane_status sim_plan_program(sim_compiled *p, ane_error *err) {
    p->slots = calloc((size_t)p->graph->count + 1, sizeof *p->slots);
    if (!p->slots) return out_of_memory(p, err);
    choose_weight_forms(p);
    find_half_inputs(p);
    find_edges(p);
    p->links = calloc((size_t)p->graph->count + 1, sizeof *p->links);
    p->read_until = calloc((size_t)p->graph->count + 1, sizeof *p->read_until);
    if (!p->links || !p->read_until) return out_of_memory(p, err);
    ane_status status = ANE_OK;
    if (p->options.precision == ANE_PRECISION_FP16 && p->options.profile != ANE_PROFILE_ANE && !p->options.step_by_step) {
        status = sim_fuse_cached_attentions(p, err);
        if (!status) status = sim_fuse_rms_norms(p, err);
        if (!status) status = sim_fuse_ropes(p, err);
        if (!status) status = sim_fuse_scores(p, err);
    }
    if (!status) status = sim_find_branches(p, err);
    if (!status) status = place_values(p, err);
    if (!status) status = build_steps(p, err);
    if (!status) group_steps(p);
    if (!status) status = port_branches(p, err);
    if (!status) status = sim_plan_products(p, err);
    if (!status) status = sim_plan_appends(p, err);
    return status;
}

void sim_plan_free(sim_compiled *p) {
    for (int s = 0; p->steps && s < p->nsteps; s++)
        for (int k = 0; k < p->steps[s].nparts; k++)
            free((void *)p->steps[s].palette_codes[k]), ane_tensor_release(&p->steps[s].half_tables[k]);
    free(p->steps);
    free(p->next_product);
    free(p->output_step);
    free(p->input_last_step);
    free(p->slots);
    free(p->temp_nodes);
    free(p->view_nodes);
    free(p->branch_of);
    free(p->groups);
    free(p->input_branch);
    free(p->output_branch);
    for (int c = 0; c < p->nchains; c++) free(p->chains[c]);
    free(p->chains);
    free(p->fused);
    free(p->links);
    free(p->read_until);
}
