/* The sim backend: runs parsed MIL programs on the CPU.
 *
 * compile  parses the MIL text and weights (the very bytes the device would get), checks
 *          the constraint catalogue (profile `ane`), sorts the ports alphabetically and
 *          plans the program (sim_plan.c: a slot per value, a step per computing node);
 * load     gives the instance its fp32 value buffers, weights converted once;
 * eval     emulates the device's I/O: positional binding in name order (ANE-03/19), padded
 *          64-byte rows read through the surface views (ANE-21), allocation rules ANE-02,
 *          ANE-04 and ANE-18; then runs every node, rounding each output to fp16 (RNE,
 *          overflow to inf) in fp16 precision, or nothing in fp32 precision (the reference):
 *          evaluate() is a loop over the plan's steps;
 * patch    rewrites one weight buffer of the loaded instance, no parsing or compiling;
 *          patch_together writes one buffer that the instances patched with the same value
 *          share (a training step's forward and backward programs of a layer): sim_patch.c;
 * write_input  keeps an input in its value buffer between evals (a KV cache written one
 *          position at a time: nothing is copied in at eval). In fp16 precision an fp16 input
 *          that only matmuls read (through reshapes), a KV cache, is held as fp16 bits: the
 *          values it holds are fp16 values either way, and attention reads half the bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/interrupt.h"
#include "../base/parallel.h"
#include "../passes/passes.h"
#include "../tensor/storage.h"
#include "../tensor/surface.h"
#include "backend.h"
#include "sim_kernels.h"
#include "sim_places.h"
#include "sim_program.h"

static int sim_available(char *why, size_t size) {
    (void)why;
    (void)size;
    return 1;
}

static void sim_close(ane_compiled *compiled) {
    sim_compiled *p = (sim_compiled *)compiled;
    if (!p) return;
    sim_plan_free(p);
    ane_graph_free(p->graph);
    free(p->inputs);
    free(p->outputs);
    free(p->input_nodes);
    free(p->output_nodes);
    free(p);
}

static ane_status sim_compile(const ane_compile_options *options, const char *mil, size_t length, const ane_mil_file *files,
                              int nfiles, ane_compiled **out, ane_error *err) {
    sim_compiled *p = calloc(1, sizeof *p);
    if (!p) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
    p->base.backend = &ane_sim_backend;
    p->options = *options;
    ane_status status = ane_parse_mil(mil, length, "model.mil", files, nfiles, NULL, &p->graph, &p->base.notes, err);
    if (!status && options->name[0]) snprintf(p->graph->name, sizeof p->graph->name, "%s", options->name);
    if (!status && options->profile == ANE_PROFILE_ANE && !options->rules_checked)
        status = ane_check_device_rules(p->graph, options, ane_sim_backend.supports_op, NULL, err);
    if (status) {
        sim_close(&p->base);
        return status;
    }
    ane_graph *g = p->graph;
    snprintf(p->base.name, sizeof p->base.name, "%s", options->name[0] ? options->name : g->name);
    snprintf(g->name, sizeof g->name, "%s", p->base.name);
    p->base.sram_spill_nodes = options->rules_checked ? options->sram_spill_nodes : ane_sram_spill_nodes(g);
    status = ane_graph_ports(g, &p->inputs, &p->ninputs, &p->outputs, &p->noutputs, err);
    if (status) {
        sim_close(&p->base);
        return status;
    }
    p->input_nodes = calloc((size_t)p->ninputs + 1, sizeof *p->input_nodes);
    p->output_nodes = calloc((size_t)g->noutputs + 1, sizeof *p->output_nodes);
    if (!p->input_nodes || !p->output_nodes) {
        sim_close(&p->base);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
    }
    for (int i = 0; i < p->ninputs; i++) p->input_nodes[i] = ane_graph_find(g, p->inputs[i].name)->id;
    for (int i = 0; i < p->noutputs; i++)
        for (int k = 0; k < g->noutputs; k++)
            if (strcmp(g->outputs[k].name, p->outputs[i].name) == 0) p->output_nodes[i] = g->outputs[k].node->id;
    status = sim_plan_program(p, err);
    if (status) {
        sim_close(&p->base);
        return status;
    }
    *out = &p->base;
    return ANE_OK;
}

static void sim_ports(const ane_compiled *compiled, const ane_port **inputs, int *ninputs, const ane_port **outputs,
                      int *noutputs) {
    const sim_compiled *p = (const sim_compiled *)compiled;
    *inputs = p->inputs;
    *ninputs = p->ninputs;
    *outputs = p->outputs;
    *noutputs = p->noutputs;
}

static void free_column_copies(sim_loaded *instance) {
    for (int i = 0; i < instance->program->graph->count; i++) {
        sim_column_copies_free(instance->values[i].column_copies);
        instance->values[i].column_copies = NULL;
    }
}

static void sim_unload(ane_loaded *loaded) {
    sim_loaded *instance = (sim_loaded *)loaded;
    if (!instance) return;
    sim_warm_stop(); /* (an evaluation on another thread may be reading its weights ahead) */
    const sim_compiled *p = instance->program;
    if (instance->values) {
        free_column_copies(instance);
        for (int i = 0; i < p->graph->count; i++) {
            if (instance->values[i].patched) sim_release_weight(instance->values[i].patched);
            if (p->slots[i].half_input && p->graph->nodes[i]->op == ANE_OP_INPUT) free(instance->values[i].half);
        }
    }
    free(instance->written);
    free(instance->own_inputs);
    free(instance->values);
    free(instance->slab);
    free(instance->scratch);
    free(instance);
}

ane_tensor sim_view_shaped(void *data, ane_dtype dtype, int ndim, const int64_t *shape, ane_storage *pin) {
    memset(pin, 0, sizeof *pin);
    pin->refcount = 1;
    pin->data = data;
    ane_tensor view;
    memset(&view, 0, sizeof view);
    view.storage = pin;
    view.dtype = dtype;
    view.ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        view.shape[i] = shape[i];
        view.strides[i] = stride;
        stride *= shape[i];
    }
    pin->nbytes = (size_t)stride * (dtype == ANE_FP16 ? sizeof(uint16_t) : sizeof(float));
    return view;
}

/* A node's fp32 values as a tensor in the node's shape, for converting copies in and out. */
static ane_tensor fp32_view(float *data, const ane_node *node, ane_storage *pin) {
    return sim_view_shaped(data, ANE_FP32, node->rank, node->shape, pin);
}

/* An input's buffer as a tensor: its fp16 bits for a half input, else its fp32 values. */
static ane_tensor input_view(const sim_loaded *instance, const ane_node *node, ane_storage *pin) {
    const sim_value *value = &instance->values[node->id];
    if (instance->program->slots[node->id].half_input)
        return sim_view_shaped(value->half, ANE_FP16, node->rank, node->shape, pin);
    return fp32_view(value->data, node, pin);
}

static void load_const(sim_loaded *instance, const ane_node *node) {
    float *values = instance->values[node->id].data;
    if (node->encoding) { /* a quantized weight used by other ops: decoded once, as the device decodes it */
        ane_const_decode_rows(node, 0, node->shape[0], values);
        if (node->dtype == ANE_FP16) ane_round_fp32_through_fp16_n(values, (size_t)ane_node_numel(node));
        return;
    }
    ane_storage pin;
    ane_tensor view = fp32_view(values, node, &pin);
    ane_tensor_copy_into(&view, &node->value, NULL);
}

/* Points each value of a new instance where its slot says it lives (temporaries: at each
 * evaluation). */
static int place_instance_values(sim_loaded *instance) {
    const sim_compiled *p = instance->program;
    const ane_graph *g = p->graph;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        const sim_slot *slot = &p->slots[i];
        sim_value *value = &instance->values[i];
        value->filled = node->rank ? node->shape[node->rank - 1] : 1;
        if (slot->weight_form == SIM_WEIGHT_ENCODED) continue; /* read from the graph's node by the kernels */
        if (slot->output_pad) continue;                         /* written from its operand (write_outputs) */
        if (slot->weight_form == SIM_WEIGHT_HALF) { /* fp16 bits as they are, where the graph holds them */
            value->half = (uint16_t *)ane_tensor_data(&node->value);
        } else if (sim_is_view(node)) { /* the operand's values (or fp16 bits), read in the new shape */
            value->data = instance->values[node->operands[0]->id].data;
            value->half = slot->half_input ? instance->values[node->operands[0]->id].half : NULL;
        } else if (slot->half_input) { /* fp16 bits of its own, zero until written */
            value->half = calloc((size_t)ane_node_numel(node) + 1, sizeof(uint16_t));
            if (!value->half) return 0;
        } else if (sim_reads_graph_values(node)) { /* fp32 values as they are, where the graph holds them */
            value->data = (float *)ane_tensor_data(&node->value);
        } else if (slot->kind != SIM_SLOT_TEMP) {
            value->data = instance->slab + slot->offset;
            if (node->op == ANE_OP_CONST) load_const(instance, node); /* other weights converted once, to fp32 */
        }
    }
    return 1;
}

static ane_status sim_load(ane_compiled *compiled, ane_loaded **out, ane_error *err) {
    sim_compiled *p = (sim_compiled *)compiled;
    ane_graph *g = p->graph;
    sim_loaded *instance = calloc(1, sizeof *instance);
    size_t total = p->kept_floats;
    if (instance) {
        instance->program = p;
        instance->values = calloc((size_t)g->count + 1, sizeof *instance->values);
        instance->written = calloc((size_t)p->ninputs + 1, sizeof *instance->written);
        instance->own_inputs = calloc((size_t)p->ninputs + 1, sizeof *instance->own_inputs);
        instance->slab = malloc((total + 1) * sizeof *instance->slab);
        size_t scratches = p->most_branches > 1 ? (size_t)p->most_branches : 1; /* (a branch's own: run_branches) */
        instance->scratch = p->scratch_floats ? malloc(scratches * p->scratch_floats * sizeof *instance->scratch) : NULL;
    }
    int ok = instance && instance->values && instance->written && instance->own_inputs && instance->slab &&
             (!p->scratch_floats || instance->scratch);
    if (ok) ok = place_instance_values(instance);
    for (int port = 0; ok && port < p->ninputs; port++) instance->own_inputs[port] = instance->values[p->input_nodes[port]];
    if (!ok) {
        sim_unload(instance ? &instance->base : NULL);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory loading program '%s' (%zu values)", g->name, total);
    }
    instance->base.backend = &ane_sim_backend;
    *out = &instance->base;
    return ANE_OK;
}

static int same_shape_as_port(const ane_tensor *view, const ane_port *port) {
    if (view->ndim != port->rank) return 0;
    for (int i = 0; i < port->rank; i++)
        if (view->shape[i] != port->shape[i]) return 0;
    return 1;
}

/* ANE-02/04/18: surface allocations, checked in the `ane` profile. */
static ane_status check_allocations(const ane_binding *bindings, int count, const char *role, const char *rule,
                                    ane_error *err) {
    for (int i = 0; i < count; i++) {
        if (!bindings[i].alloc_size) continue;
        if (bindings[i].alloc_size < ANE_SURFACE_MIN_ALLOC)
            return ane_fail(err, ANE_ERR_CONSTRAINT, "%s '%s' is a %zu-byte surface; the ANE needs at least %d bytes (ANE-04)",
                            role, bindings[i].name, bindings[i].alloc_size, ANE_SURFACE_MIN_ALLOC);
        if (i > 0 && bindings[0].alloc_size && bindings[i].alloc_size != bindings[0].alloc_size)
            return ane_fail(err, ANE_ERR_CONSTRAINT,
                            "%s surfaces must share one allocation size (%s): '%s' has %zu bytes, '%s' has %zu", role, rule,
                            bindings[0].name, bindings[0].alloc_size, bindings[i].name, bindings[i].alloc_size);
    }
    return ANE_OK;
}

/* The numeric cliffs of the target's chip (docs/reference/constraints.md, newer facts),
 * applied to a node's output: matmul results from matmul_inf_at on become +-inf, last-axis
 * slices at a non-zero offset saturate to +-inf beyond offset_slice_limit (65504 / 16, the
 * crop DMA's fixed point, as ANEForge measured), NaN results read as 0 (the chip does not
 * propagate NaN; 0 is this model's choice, documented in docs/compiler.md). */
static void apply_numeric_cliffs(const ane_target *t, const ane_node *node, float *values) {
    int64_t n = ane_node_numel(node);
    if (t->matmul_inf_at > 0 && node->op == ANE_OP_MATMUL)
        for (int64_t i = 0; i < n; i++)
            if (fabsf(values[i]) >= (float)t->matmul_inf_at) values[i] = values[i] > 0 ? INFINITY : -INFINITY;
    int offset_slice = (node->op == ANE_OP_SLICE_BY_INDEX || node->op == ANE_OP_SLICE_BY_SIZE) && node->rank > 0 &&
                       node->attrs.begin.count == node->rank && node->attrs.begin.values[node->rank - 1] != 0;
    if (t->offset_slice_limit > 0 && offset_slice) {
        float limit = (float)t->offset_slice_limit;
        for (int64_t i = 0; i < n; i++)
            if (fabsf(values[i]) > limit) values[i] = values[i] > 0 ? INFINITY : -INFINITY;
    }
    if (t->nan_to_zero)
        for (int64_t i = 0; i < n; i++)
            if (values[i] != values[i]) values[i] = 0.0f;
}

static ane_status evaluate(sim_loaded *instance, const ane_binding *inputs, int ninputs, ane_binding *outputs,
                           int noutputs, ane_error *err);

/* An evaluation takes a region for the temporaries and points them (and views of them) into
 * it, and gives it back after. The region is heap storage: glibc keeps freed blocks below 32 MB
 * and storage.c's pool the larger ones, so instances that do not evaluate at the same time (a
 * model's layers, a training step's forward and backward programs) reuse the same memory
 * instead of holding a region each. Each thread keeps the last region it gave back (up to
 * SPARE_LIMIT) for its next evaluation: a decode step evaluates a few dozen programs, each of
 * which would otherwise allocate and free its region again. */
#define SPARE_LIMIT ((size_t)32 << 20)
static _Thread_local ane_storage *spare_region;

static ane_status take_region(size_t nbytes, ane_storage **out, ane_error *err) {
    if (spare_region && spare_region->nbytes >= nbytes) {
        *out = spare_region, spare_region = NULL;
        return ANE_OK;
    }
    return ane_storage_new_heap_uninitialized(nbytes, out, err);
}

static void give_back_region(ane_storage *region) {
    if (!region || region->nbytes > SPARE_LIMIT || (spare_region && spare_region->nbytes >= region->nbytes)) {
        ane_storage_release(region);
        return;
    }
    ane_storage_release(spare_region);
    spare_region = region;
}

static ane_status sim_eval(ane_loaded *loaded, const ane_binding *inputs, int ninputs, ane_binding *outputs, int noutputs,
                           ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    sim_compiled *p = instance->program;
    ane_storage *region = NULL;
    if (p->ntemp) {
        ane_status status = take_region((p->temp_floats + 1) * sizeof(float), &region, err);
        if (status) return status;
    }
    for (int t = 0; t < p->ntemp; t++) { /* (the views of them: bind_views, in evaluate) */
        int i = p->temp_nodes[t];
        if (p->slots[i].kind != SIM_SLOT_VIEW)
            instance->values[i].data = (float *)region->data + (p->slots[i].offset - p->kept_floats);
    }
    ane_status status = evaluate(instance, inputs, ninputs, outputs, noutputs, err);
    give_back_region(region);
    for (int port = 0; port < p->ninputs; port++) { /* (the caller's buffers are theirs again) */
        sim_value *value = &instance->values[p->input_nodes[port]];
        value->data = instance->own_inputs[port].data;
        value->half = instance->own_inputs[port].half;
    }
    return status;
}

/* The matmuls whose second operand is a const (through reshapes) with at most one nonzero a
 * column in the values this instance reads now. Without memory for them, none (the products run). */
static void find_column_copies(sim_loaded *instance) {
    free_column_copies(instance);
    instance->copies_current = 1;
    const ane_graph *g = instance->program->graph;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i], *y = node->op == ANE_OP_MATMUL ? node->operands[1] : NULL;
        if (!y || node->attrs.transpose_x || y->rank < 2) continue;
        int source = sim_value_source(g, y->id);
        const float *values = instance->values[source].data;
        int64_t rows = y->shape[y->rank - 2], columns = y->shape[y->rank - 1];
        if (g->nodes[source]->op != ANE_OP_CONST || g->nodes[source]->encoding || !values ||
            instance->values[source].half || ane_node_numel(y) != rows * columns)
            continue;
        sim_column_copies found;
        if (!sim_find_column_copies(values, rows, columns, node->attrs.transpose_y, &found)) continue;
        sim_column_copies *kept = malloc(sizeof *kept);
        if (kept) {
            *kept = found;
            instance->values[i].column_copies = kept;
        } else {
            free(found.source);
            free(found.factor);
        }
    }
}

static int64_t last_axis(const ane_node *node) { return node->rank ? node->shape[node->rank - 1] : 1; }

/* Points every view (sim_is_view) at its operand's buffer as this evaluation binds it (an
 * input read where the caller keeps it, a temporary's place), and says how many positions of
 * its last axis may be non-zero (sim_value.filled): its source's when the last axis has the
 * source's size (a view keeps the flat order, so a position stays a position: a cache read as
 * heads), every position elsewhere. */
static void bind_views(sim_loaded *instance) {
    const sim_compiled *p = instance->program;
    const ane_graph *g = p->graph;
    for (int v = 0; v < p->nviews; v++) {
        int i = p->view_nodes[v];
        const ane_node *node = g->nodes[i];
        const sim_value *operand = &instance->values[node->operands[0]->id];
        sim_value *value = &instance->values[i];
        value->data = operand->data;
        value->half = p->slots[i].half_input ? operand->half : NULL;
        int source = sim_value_source(g, i);
        value->filled = last_axis(g->nodes[source]) == last_axis(node) ? instance->values[source].filled : last_axis(node);
    }
}

/* Whether an eval reads input `port` where the caller keeps it instead of copying it in: a
 * contiguous buffer of the port's shape in the form sim holds that input (fp16 bits for a half
 * input; fp32 values for an fp32 one, or an fp16 one of an fp32-precision program: nothing to
 * round). A KV cache a session owns is read in place so, however long it is. */
static int reads_in_place(const sim_compiled *p, int port, const ane_node *node, const ane_tensor *view) {
    if (!ane_tensor_is_contiguous(view) || !same_shape_as_port(view, &p->inputs[port])) return 0;
    if (p->slots[node->id].half_input) return view->dtype == ANE_FP16;
    int rounds = p->options.precision == ANE_PRECISION_FP16 && p->inputs[port].dtype == ANE_FP16;
    return view->dtype == ANE_FP32 && !rounds;
}

/* Copies a bound input (`view`) into its value buffer: the positions its readers read
 * (slot.positions_read; the rest is never read), or straight into its one reader, a slice of
 * those leading positions (slot.read_into); converted, and rounded as the device would read
 * them: fp32 data bound to an fp16 input in fp16 precision (fp16 data converts exactly; a half
 * input's copy rounds to fp16 itself). */
static ane_status copy_input(sim_loaded *instance, const ane_port *port, const ane_node *node, const ane_tensor *view,
                             ane_error *err) {
    const sim_compiled *p = instance->program;
    const sim_slot *slot = &p->slots[node->id];
    int last = node->rank - 1;
    int64_t read = slot->positions_read, positions = last_axis(node);
    const ane_node *holder = slot->read_into >= 0 ? p->graph->nodes[slot->read_into] : node;
    ane_storage pin;
    ane_tensor whole = holder == node ? input_view(instance, node, &pin)
                                      : fp32_view(instance->values[holder->id].data, holder, &pin),
               target = whole, source = *view;
    int part = last >= 0 && read < positions;
    ane_status status = ANE_OK;
    if (part && holder == node) status = ane_tensor_slice(&target, &whole, last, 0, read, err);
    if (part && !status) status = ane_tensor_slice(&source, view, last, 0, read, err);
    if (!status) status = ane_tensor_copy_into(&target, &source, err);
    if (part) ane_tensor_release(&source);
    if (part && holder == node) ane_tensor_release(&target);
    if (status) return status;
    if (p->options.precision == ANE_PRECISION_FP16 && port->dtype == ANE_FP16 && view->dtype != ANE_FP16 && !slot->half_input) {
        float *values = instance->values[holder->id].data; /* [rows, the holder's positions] */
        int64_t width = last_axis(holder), rows = ane_node_numel(holder) / (width ? width : 1);
        for (int64_t row = 0; row < rows; row++) ane_round_fp32_through_fp16_n(values + row * width, (size_t)read);
    }
    if (holder != node && p->options.profile == ANE_PROFILE_ANE) /* (what the slice's step would have met) */
        apply_numeric_cliffs(&p->options.target, holder, instance->values[holder->id].data);
    return ANE_OK;
}

/* Inputs by position, in alphabetical order of their names (ANE-19): read where the caller
 * keeps them (reads_in_place), or copied into their value buffers, unless resident (their
 * buffers hold what write_input wrote); each with the positions that may be non-zero. */
static ane_status read_inputs(sim_loaded *instance, const ane_binding *inputs, int device_rules, ane_error *err) {
    sim_compiled *p = instance->program;
    const ane_graph *g = p->graph;
    for (int i = 0; i < p->ninputs; i++) {
        sim_value *value = &instance->values[p->input_nodes[i]];
        const ane_node *node = g->nodes[p->input_nodes[i]];
        value->filled = inputs[i].resident ? instance->written[i] : inputs[i].zeros_after_written ? inputs[i].written : last_axis(node);
        const ane_port *port = &p->inputs[i];
        if (inputs[i].resident && p->slots[node->id].read_into >= 0) { /* its slice, from what write_input wrote */
            ane_storage pin;
            ane_tensor own = input_view(instance, node, &pin);
            ane_status status = copy_input(instance, port, node, &own, err);
            if (status) return status;
        }
        if (inputs[i].resident) continue;
        const ane_tensor *view = &inputs[i].view;
        int dtype_ok = !device_rules || view->dtype == port->dtype || p->options.precision == ANE_PRECISION_FP32;
        if (!same_shape_as_port(view, port) || !dtype_ok) {
            char want[128], got[128];
            return ane_fail(err, ANE_ERR_SHAPE, "input '%s' of program '%s' is %s%s, bound to a %s%s buffer", port->name,
                            g->name, ane_dtype_name(port->dtype), ane_shape_string(want, sizeof want, port->rank, port->shape),
                            ane_dtype_name(view->dtype), ane_shape_string(got, sizeof got, view->ndim, view->shape));
        }
        if (p->slots[node->id].read_into < 0 && reads_in_place(p, i, node, view)) {
            void *data = ane_tensor_data(view); /* (read only: no kernel writes an input) */
            if (p->slots[node->id].half_input) value->half = data;
            else value->data = data;
            continue;
        }
        ane_status status = copy_input(instance, port, node, view, err);
        if (status) return status;
    }
    return ANE_OK;
}

static ane_status write_output(const sim_loaded *instance, const ane_node *node, ane_tensor *view, ane_error *err) {
    ane_storage pin;
    ane_tensor source = fp32_view(instance->values[node->id].data, node, &pin);
    return ane_tensor_copy_into(view, &source, err);
}

/* An output pad (slot.output_pad): its operand's values into the leading positions of the
 * binding, zeros after (unless the caller reads only the leading ones: binding.positions_read),
 * row by row in one pass over a contiguous binding. */
static ane_status write_padded_output(const sim_loaded *instance, const ane_node *pad, const ane_binding *binding,
                                      ane_error *err) {
    const ane_node *node = pad->operands[0];
    const ane_tensor *view = &binding->view;
    int last = pad->rank - 1;
    int64_t width = last_axis(node), padded = last_axis(pad);
    int zeros = !binding->positions_read || binding->positions_read > width;
    if (ane_tensor_is_contiguous(view) && (view->dtype == ANE_FP16 || view->dtype == ANE_FP32)) {
        size_t size = ane_dtype_size(view->dtype);
        const float *values = instance->values[node->id].data; /* [rows, width] */
        char *out = ane_tensor_data(view);                    /* [rows, padded] */
        int64_t rows = ane_node_numel(node) / (width ? width : 1);
        /* converted a block of rows at a time (one vector conversion for many short rows: a
         * one-position program's columns), then placed row by row */
        enum { BLOCK_BYTES = 8192 };
        char block[BLOCK_BYTES];
        int64_t rows_per_block = (int64_t)(BLOCK_BYTES / size) / (width ? width : 1);
        for (int64_t first = 0; first < rows; first += rows_per_block ? rows_per_block : 1) {
            int64_t count = rows_per_block ? (rows - first < rows_per_block ? rows - first : rows_per_block) : 1;
            const char *converted = block;
            if (rows_per_block) ane_dtype_convert_row(block, view->dtype, values + first * width, ANE_FP32, (size_t)(count * width));
            for (int64_t row = first; row < first + count; row++) {
                char *o = out + (size_t)(row * padded) * size;
                if (rows_per_block && width == 1 && size == 2) *(uint16_t *)o = ((const uint16_t *)converted)[row - first];
                else if (rows_per_block) memcpy(o, converted + (size_t)((row - first) * width) * size, (size_t)width * size);
                else ane_dtype_convert_row(o, view->dtype, values + row * width, ANE_FP32, (size_t)width); /* (a long row) */
                if (zeros) memset(o + (size_t)width * size, 0, (size_t)(padded - width) * size); /* (+0 in both dtypes) */
            }
        }
        return ANE_OK;
    }
    ane_tensor leading = {0}, after = {0};
    ane_status status = ane_tensor_slice(&leading, view, last, 0, width, err);
    if (!status) status = write_output(instance, node, &leading, err);
    if (!status && zeros && width < padded) status = ane_tensor_slice(&after, view, last, width, padded, err);
    if (!status && after.storage) status = ane_tensor_fill(&after, 0.0, err);
    ane_tensor_release(&leading);
    ane_tensor_release(&after);
    return status;
}

/* The outputs, in name order, copied out of their value buffers. */
static ane_status write_outputs(const sim_loaded *instance, ane_binding *outputs, ane_error *err) {
    const sim_compiled *p = instance->program;
    for (int i = 0; i < p->noutputs; i++) {
        const ane_port *port = &p->outputs[i];
        ane_tensor *view = &outputs[i].view;
        if (!same_shape_as_port(view, port)) {
            char want[128], got[128];
            return ane_fail(err, ANE_ERR_SHAPE, "output '%s' of program '%s' is %s, bound to a %s buffer", port->name,
                            p->graph->name, ane_shape_string(want, sizeof want, port->rank, port->shape),
                            ane_shape_string(got, sizeof got, view->ndim, view->shape));
        }
        const ane_node *node = p->graph->nodes[p->output_nodes[i]];
        ane_status status = p->slots[node->id].output_pad ? write_padded_output(instance, node, &outputs[i], err)
                                                         : write_output(instance, node, view, err);
        if (status) return status;
    }
    return ANE_OK;
}

/* One step: its kernel, then each node it writes rounded (and given the chip's cliffs). */
static ane_status run_step(sim_loaded *instance, const sim_context *context, const sim_step *step, ane_error *err) {
    const sim_compiled *p = instance->program;
    ane_status status = step->kernel(context, step, instance->values, err);
    if (!status) status = ane_interrupt_check(err, "a program evaluation");
    if (status) return status;
    for (int k = 0; k < step->nparts; k++) {
        const ane_node *part = step->parts[k];
        float *values = instance->values[part->id].data; /* [numel(part)] */
        if (step->rounds[k]) ane_round_fp32_through_fp16_n(values, (size_t)ane_node_numel(part));
        if (step->cliffs) apply_numeric_cliffs(&p->options.target, part, values);
    }
    return ANE_OK;
}

typedef struct branches_job {
    sim_loaded *instance;
    const sim_context *context;
    const sim_group *group;
    int place;                    /* the group's index x SIM_MAX_BRANCHES */
    const ane_binding *inputs;    /* [ninputs] */
    ane_binding *outputs;         /* [noutputs] */
    ane_status *statuses;         /* [nbranches] */
    ane_error *errors;            /* [nbranches] */
} branches_job;

/* The appends of a branch's own outputs to inputs it alone reads, written as it ends (the
 * input read for the last time, its lines still in this core's cache; after the eval they
 * would come from memory again): position `written` of the caller's input takes the output's
 * first position. evaluate writes the others it can place after their steps (sim_appends.c), the
 * runtime the rest after the eval. */
static ane_status append_own(const branches_job *job, int place, ane_error *err) {
    const sim_compiled *p = job->instance->program;
    ane_status status = ANE_OK;
    for (int port = 0; port < p->noutputs && !status; port++) {
        ane_binding *out = &job->outputs[port];
        if (out->append_to < 0 || p->output_branch[port] != place || p->input_branch[out->append_to] != place) continue;
        status = sim_append_output(job->instance, port, out, &job->inputs[out->append_to], err);
    }
    return status;
}

/* Branches first .. last - 1 of a group, each its steps in order with its own scratch, then
 * its appends. */
static void branches(void *context, int64_t first, int64_t last) {
    const branches_job *job = context;
    const sim_compiled *p = job->instance->program;
    for (int64_t b = first; b < last; b++) {
        sim_context own = *job->context;
        own.scratch = job->context->scratch + (size_t)b * p->scratch_floats;
        ane_status status = ANE_OK;
        for (int s = job->group->first_step; !status && s < job->group->end_step; s++)
            if (p->branch_of[p->steps[s].node->id] == b) status = run_step(job->instance, &own, &p->steps[s], &job->errors[b]);
        if (!status) status = append_own(job, job->place + (int)b, &job->errors[b]);
        job->statuses[b] = status;
    }
}

/* A group's branches over the threads (a branch's ops inside it on its thread alone:
 * base/parallel.h runs loops nested in a body inline); the first failure is the eval's. */
static ane_status run_branches(sim_loaded *instance, const sim_context *context, const sim_group *group,
                               const ane_binding *inputs, ane_binding *outputs, ane_error *err) {
    ane_status statuses[SIM_MAX_BRANCHES];
    ane_error errors[SIM_MAX_BRANCHES];
    const sim_compiled *p = instance->program;
    branches_job job = {instance, context, group, (int)(group - p->groups) * SIM_MAX_BRANCHES, inputs, outputs,
                        statuses, errors};
    ane_parallel_for(group->nbranches, 1, branches, &job);
    for (int b = 0; b < group->nbranches; b++)
        if (statuses[b]) {
            if (err) *err = errors[b];
            return statuses[b];
        }
    return ANE_OK;
}

/* The inputs in, every step of the plan in order (a group's branches at once), the outputs
 * out. A step's outputs are rounded to fp16 in fp16 precision (sim_step.rounds) and take the
 * chip's numeric cliffs in the `ane` profile. */
static ane_status evaluate(sim_loaded *instance, const ane_binding *inputs, int ninputs, ane_binding *outputs,
                           int noutputs, ane_error *err) {
    sim_compiled *p = instance->program;
    int device_rules = p->options.profile == ANE_PROFILE_ANE;
    if (ninputs != p->ninputs || noutputs != p->noutputs)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' binds %d inputs and %d outputs, got %d and %d", p->graph->name,
                        p->ninputs, p->noutputs, ninputs, noutputs);
    ane_status status = ANE_OK;
    if (device_rules) {
        status = check_allocations(inputs, ninputs, "input", "ANE-18", err);
        if (!status) status = check_allocations(outputs, noutputs, "output", "ANE-02", err);
    }
    if (!status) status = read_inputs(instance, inputs, device_rules, err);
    if (status) return status;
    sim_context context = {
        .apply_sdpa_mask = !device_rules || p->options.target.sdpa_mask_honoured, /* ANE-06: ignored unless the target says */
        .sdpa_mask_one_plane = device_rules && p->options.target.sdpa_mask_one_plane,
        .scratch = instance->scratch,
        .scratch_floats = p->scratch_floats,
        .activations = p->options.activations,
    };
    if (!instance->copies_current) find_column_copies(instance);
    bind_views(instance);
    const sim_group *group = p->ngroups ? &p->groups[0] : NULL, *last_group = group ? group + p->ngroups : NULL;
    int next_product = p->next_product[0]; /* (after each product the helpers read the next one's weights) */
    sim_due_append due[64]; /* (ane_program_eval_with binds at most 64 outputs; the device's appends are its own) */
    int ndue = !device_rules && noutputs <= 64 ? sim_appends_due(instance, outputs, due) : 0;
    for (int s = 0; !status && s < p->nsteps;) {
        if (group && s == group->first_step) { /* its branches at once */
            status = run_branches(instance, &context, group, inputs, outputs, err);
            s = group->end_step;
            group = group + 1 < last_group ? group + 1 : NULL;
        } else {
            if (s == next_product) sim_warm_stop(); /* (its own weights: the product reads them now) */
            status = run_step(instance, &context, &p->steps[s], err);
            if (!status && s == next_product) next_product = sim_warm_after_product(instance, s);
            if (!status && ndue) status = sim_write_due_appends(instance, s, due, ndue, inputs, outputs, err);
            s++;
        }
    }
    sim_warm_stop(); /* (nothing is read ahead once the evaluation is over) */
    return status ? status : write_outputs(instance, outputs, err);
}

/* Resident inputs live in the input node's value buffer, which evals leave alone. The
 * written positions are rounded as eval rounds a bound input: fp32 data to fp16 for an fp16
 * port in fp16 precision (fp16 data converts exactly). */
static ane_status sim_write_input(ane_loaded *loaded, int port, int64_t offset, const ane_tensor *value, int first,
                                  ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    sim_compiled *p = instance->program;
    const ane_node *node = p->graph->nodes[p->input_nodes[port]];
    sim_value *held = &instance->values[node->id]; /* [numel], the port's shape, last axis contiguous */
    int64_t numel = ane_node_numel(node), positions = node->shape[node->rank - 1];
    int half = p->slots[node->id].half_input; /* fp16 bits instead: the copy rounds */
    if (first) memset(half ? (void *)held->half : (void *)held->data, 0, (size_t)numel * (half ? 2 : 4));
    int64_t count = value->shape[value->ndim - 1];
    if (first) instance->written[port] = 0;
    ane_storage pin;
    ane_tensor whole = input_view(instance, node, &pin), target;
    ane_status status = ane_tensor_slice(&target, &whole, node->rank - 1, offset, offset + count, err);
    if (!status) status = ane_tensor_copy_into(&target, value, err);
    if (status) return status;
    if (instance->written[port] < offset + count) instance->written[port] = offset + count;
    if (!half && p->options.precision == ANE_PRECISION_FP16 && p->inputs[port].dtype == ANE_FP16 && value->dtype != ANE_FP16)
        for (int64_t row = 0; row < numel / positions; row++)
            ane_round_fp32_through_fp16_n(held->data + row * positions + offset, (size_t)count);
    return ANE_OK;
}

static ane_status sim_read_input(ane_loaded *loaded, int port, ane_tensor *out, ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    const ane_node *node = instance->program->graph->nodes[instance->program->input_nodes[port]];
    ane_storage pin;
    ane_tensor source = input_view(instance, node, &pin);
    return ane_tensor_copy_into(out, &source, err);
}

static void sim_weights(const ane_compiled *compiled, void (*visit)(void *context, const ane_node *node), void *context) {
    const sim_compiled *p = (const sim_compiled *)compiled;
    for (int i = 0; i < p->graph->count; i++)
        if (p->graph->nodes[i]->op == ANE_OP_CONST) visit(context, p->graph->nodes[i]);
}

const ane_backend ane_sim_backend = {
    .name = "sim",
    .available = sim_available,
    .supports_op = ane_device_op_set, /* sim runs what the device runs */
    .compile = sim_compile,
    .ports = sim_ports,
    .load = sim_load,
    .eval = sim_eval,
    .patch = sim_patch,
    .patch_together = sim_patch_together,
    .write_input = sim_write_input,
    .read_input = sim_read_input,
    .weights = sim_weights,
    .unload = sim_unload,
    .close = sim_close,
};
