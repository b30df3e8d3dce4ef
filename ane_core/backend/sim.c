/* The sim backend: runs parsed MIL programs on the CPU.
 *
 * compile  parses the MIL text and weights (the very bytes the device would get), checks
 *          the constraint catalogue (profile `ane`) and sorts the ports alphabetically;
 * load     gives the instance its fp32 value buffers, weights converted once;
 * eval     emulates the device's I/O: positional binding in name order (ANE-03/19), padded
 *          64-byte rows read through the surface views (ANE-21), allocation rules ANE-02,
 *          ANE-04 and ANE-18; then runs every node, rounding each output to fp16 (RNE,
 *          overflow to inf) in fp16 precision, or nothing in fp32 precision (the reference);
 * patch    rewrites one weight buffer of the loaded instance, no parsing or compiling;
 *          patch_together writes one buffer that the instances patched with the same value
 *          share (a training step's forward and backward programs of a layer);
 * write_input  keeps an input in its value buffer between evals (a KV cache written one
 *          position at a time: nothing is copied in at eval). In fp16 precision an fp16 input
 *          that only matmuls read (through reshapes), a KV cache, is held as fp16 bits: the
 *          values it holds are fp16 values either way, and attention reads half the bytes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/cpu.h"
#include "../base/fp16.h"
#include "../base/interrupt.h"
#include "../base/parallel.h"
#include "../passes/passes.h"
#include "../tensor/gemv.h"
#include "../tensor/storage.h"
#include "../tensor/surface.h"
#include "backend.h"
#include "sim_kernels.h"
#include "sim_plan.h"

typedef struct sim_compiled {
    ane_compiled base;
    ane_compile_options options;
    ane_graph *graph;
    ane_port *inputs, *outputs;     /* [ninputs], [noutputs], alphabetical */
    int ninputs, noutputs;
    int *input_nodes, *output_nodes; /* node ids in port order */
    unsigned char *weight_form;     /* [graph->count]: SIM_WEIGHT_* of consts only conv weights use */
    unsigned char *half_input;      /* [graph->count]: 1 for fp16 inputs held as fp16 bits (read
                                       only as matmuls' second operands) and reshapes of them */
    size_t *slab_offsets;           /* [graph->count] each value's place (sim_plan.c): kept values
                                       in an instance's slab, temporaries in a region taken by
                                       each evaluation at offset - kept_floats */
    unsigned char *slot_kinds;      /* [graph->count] sim_slot_kind */
    size_t kept_floats, temp_floats;
    int *temp_nodes, ntemp;         /* temporaries and the views of them, in node order */
    size_t scratch_floats;
    void **palette_codes;           /* [graph->count]: 4-bit weights' palettes as the products
                                       read them (tensor/gemv.h: integer codes, or bf16 words
                                       under float activations), computed here once; NULL for
                                       other nodes, and where no product reads them */
    unsigned char *part_role;       /* [graph->count] PART_*: convs run together (group_parts) */
    int *next_part;                 /* [graph->count] a group's next conv after this one, or -1 */
} sim_compiled;

enum { PART_ALONE = 0, PART_LEADS, PART_FOLLOWS };

/* A patched weight's bytes (fp32 values or fp16 bits): one instance's own, or shared by the
 * instances patched together with one value. Written in place only while one instance
 * reads them; a patch of one sharer alone gives it new bytes (the others keep theirs). */
typedef struct sim_weight {
    int sharers;
    void *data;
} sim_weight;

typedef struct sim_loaded {
    ane_loaded base;
    sim_compiled *program;
    float **values;                 /* [graph->count] buffers into `slab`, fp32 consts' values in
                                       the graph itself (NULL for fp16 weights) */
    float *slab;
    uint16_t **halves;              /* [graph->count] fp16 conv weights, NULL elsewhere */
    sim_weight **patched;           /* [graph->count]: the bytes a const's halves / values
                                       point at from its first patch on; until then (NULL)
                                       they are the compiled graph's bytes, which the
                                       programs holding the same weights share (intern.h) */
    float *scratch;
    sim_column_copies **column_copies; /* [graph->count]: matmuls by a const with one nonzero a
                                       column (sim_kernels.h), found from the values the
                                       instance reads; again after every patch (copies_current 0) */
    int copies_current;
    int64_t *written;               /* [graph->count]: positions of a resident input's last axis
                                       written since write_input last cleared it (the rest hold
                                       zeros) */
    int64_t *filled;                /* [graph->count]: each eval's sim_context.filled */
} sim_loaded;

static int sim_available(char *why, size_t size) {
    (void)why;
    (void)size;
    return 1;
}

static void sim_close(ane_compiled *compiled) {
    sim_compiled *p = (sim_compiled *)compiled;
    if (!p) return;
    if (p->palette_codes)
        for (int i = 0; i < p->graph->count; i++) free(p->palette_codes[i]);
    free(p->palette_codes);
    ane_graph_free(p->graph);
    free(p->inputs);
    free(p->outputs);
    free(p->input_nodes);
    free(p->output_nodes);
    free(p->weight_form);
    free(p->half_input);
    free(p->slab_offsets);
    free(p->temp_nodes);
    free(p->slot_kinds);
    free(p->part_role);
    free(p->next_part);
    free(p);
}

/* A reshape moves no data in row-major order: its value buffer is its operand's. */
static int is_view(const ane_node *node) { return node->op == ANE_OP_RESHAPE; }

/* fp32 consts are read where the graph keeps them (no copy per program instance). */
static int reads_graph_values(const ane_node *node) {
    return node->op == ANE_OP_CONST && !node->encoding && node->value.dtype == ANE_FP32 &&
           ane_tensor_is_contiguous(&node->value);
}

/* Where each value lives in an instance's slab: weights read from the graph have no place,
 * reshapes read their operand's, inputs, converted consts and outputs keep theirs between
 * evaluations, and every other value shares places with values not live at the same time. */
static ane_status plan_slab(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    unsigned char *kinds = calloc((size_t)g->count + 1, 1);
    p->slab_offsets = calloc((size_t)g->count + 1, sizeof *p->slab_offsets);
    if (!kinds || !p->slab_offsets) {
        free(kinds);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling program '%s'", g->name);
    }
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (is_view(node)) kinds[i] = SIM_SLOT_VIEW; /* of a half input: a view of no slab place */
        else if (p->weight_form[i] || reads_graph_values(node) || p->half_input[i]) kinds[i] = SIM_SLOT_NONE;
        else if (node->op == ANE_OP_INPUT || node->op == ANE_OP_CONST) kinds[i] = SIM_SLOT_KEPT;
        else kinds[i] = SIM_SLOT_TEMP;
    }
    for (int i = 0; i < g->noutputs; i++) { /* read after the last node: kept, as is what they view */
        int holder = ane_sim_slot_holder(g, kinds, g->outputs[i].node->id);
        if (kinds[holder] == SIM_SLOT_TEMP) kinds[holder] = SIM_SLOT_KEPT;
    }
    size_t total = 0;
    ane_status status = ane_sim_plan(g, kinds, p->slab_offsets, &p->kept_floats, &total, err);
    p->temp_floats = total - p->kept_floats;
    p->temp_nodes = calloc((size_t)g->count + 1, sizeof *p->temp_nodes);
    if (!status && !p->temp_nodes) status = ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling program '%s'", g->name);
    for (int i = 0; !status && i < g->count; i++)
        if (kinds[ane_sim_slot_holder(g, kinds, i)] == SIM_SLOT_TEMP) p->temp_nodes[p->ntemp++] = i;
    p->slot_kinds = kinds;
    return status;
}

/* The node whose value node `id` is, looking through reshapes. */
static int value_source(const ane_graph *g, int id) {
    while (is_view(g->nodes[id])) id = g->nodes[id]->operands[0]->id;
    return id;
}

/* fp16 inputs of an fp16-precision program that are read only as a matmul's second operand
 * (directly or through reshapes; not outputs): held as fp16 bits (the header says why). */
static ane_status find_half_inputs(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    p->half_input = calloc((size_t)g->count + 1, 1);
    if (!p->half_input) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling program '%s'", g->name);
    if (p->options.precision != ANE_PRECISION_FP16) return ANE_OK;
    for (int i = 0; i < g->count; i++)
        p->half_input[i] = g->nodes[i]->op == ANE_OP_INPUT && g->nodes[i]->dtype == ANE_FP16;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (is_view(node)) continue;
        for (int k = 0; k < node->noperands; k++)
            if (!(node->op == ANE_OP_MATMUL && k == 1)) p->half_input[value_source(g, node->operands[k]->id)] = 0;
    }
    for (int i = 0; i < g->noutputs; i++) p->half_input[value_source(g, g->outputs[i].node->id)] = 0;
    for (int i = 0; i < g->count; i++)
        if (is_view(g->nodes[i])) p->half_input[i] = p->half_input[value_source(g, i)];
    return ANE_OK;
}

/* Every 4-bit weight's palettes as the products read them: integer codes under integer
 * activations, else bf16 words where the CPU's kernel reads them (AVX-512 BF16) and every
 * entry is a bf16 value (else none: the products read the fp32 palettes). */
static ane_status compute_palette_codes(sim_compiled *p, ane_error *err) {
    if (p->options.activations == ANE_ACTIVATIONS_FLOAT && !ane_cpu_has_avx512_bf16()) return ANE_OK;
    const ane_graph *g = p->graph;
    p->palette_codes = calloc((size_t)g->count + 1, sizeof *p->palette_codes);
    if (!p->palette_codes) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (p->weight_form[i] != SIM_WEIGHT_ENCODED || node->encoding != ANE_ENCODING_LUT4) continue;
        int64_t rows = node->shape[0];
        p->palette_codes[i] = malloc((size_t)rows * ane_palette_codes_stride(p->options.activations) + 1);
        if (!p->palette_codes[i]) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
        if (!ane_palette_codes(p->palette_codes[i], (const float *)ane_tensor_data(&node->table), rows,
                               p->options.activations)) {
            free(p->palette_codes[i]);
            p->palette_codes[i] = NULL;
        }
    }
    return ANE_OK;
}

/* sim_part_kind of a node (0 for any but a conv of x and a weight). */
static int part_kind(const sim_compiled *p, const ane_node *node) {
    if (node->op != ANE_OP_CONV || node->noperands != 2) return 0;
    return sim_part_kind(node, p->weight_form[node->operands[1]->id], p->options.activations);
}

/* A decoded position's products of one x (q, k and v; gate and up: sim_kernels.h) run as one
 * loop at the first one's turn. A group: convs of one part kind, x and k, in node order with
 * nothing between them but consts, inputs and reshapes, which compute nothing: running the
 * later ones early reads only x and their weights, and writes places no value live meanwhile
 * holds (sim_plan.c frees a place after its last reader, and the only readers in between are
 * the group's convs, whose x stays live to the last of them). */
static ane_status group_parts(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    p->part_role = calloc((size_t)g->count + 1, 1);
    p->next_part = malloc(((size_t)g->count + 1) * sizeof *p->next_part);
    if (!p->part_role || !p->next_part) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling program '%s'", g->name);
    for (int i = 0; i < g->count; i++) p->next_part[i] = -1;
    for (int i = 0; i < g->count; i++) {
        const ane_node *leader = g->nodes[i];
        int kind = p->part_role[i] == PART_ALONE ? part_kind(p, leader) : 0;
        if (!kind) continue;
        int last = i, count = 1;
        for (int j = i + 1; j < g->count && count < SIM_MAX_PARTS; j++) {
            const ane_node *node = g->nodes[j];
            if (is_view(node) || node->op == ANE_OP_CONST || node->op == ANE_OP_INPUT) continue;
            if (part_kind(p, node) != kind ||
                node->operands[0] != leader->operands[0] || node->operands[1]->shape[1] != leader->operands[1]->shape[1])
                break;
            p->next_part[last] = j, p->part_role[j] = PART_FOLLOWS, last = j, count++;
        }
        if (count > 1) p->part_role[i] = PART_LEADS;
    }
    return ANE_OK;
}

/* Runs the group node i leads (group_parts), or its convs one by one where sim_run_parts
 * cannot. */
static ane_status run_parts(const sim_compiled *p, const sim_context *context, int i, float *const *values, ane_error *err) {
    const ane_node *convs[SIM_MAX_PARTS];
    int count = 0;
    for (int j = i; j >= 0; j = p->next_part[j]) convs[count++] = p->graph->nodes[j];
    if (sim_run_parts(context, convs, count, values)) return ANE_OK;
    for (int c = 0; c < count; c++) {
        ane_status status = sim_run_node(context, convs[c], values, values[convs[c]->id], err);
        if (status) return status;
    }
    return ANE_OK;
}

static ane_status sim_compile(const ane_compile_options *options, const char *mil, size_t length, const ane_mil_file *files,
                              int nfiles, ane_compiled **out, ane_error *err) {
    sim_compiled *p = calloc(1, sizeof *p);
    if (!p) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
    p->base.backend = &ane_sim_backend;
    p->options = *options;
    ane_status status = ane_parse_mil(mil, length, "model.mil", files, nfiles, NULL, &p->graph, &p->base.notes, err);
    if (!status && options->name[0]) snprintf(p->graph->name, sizeof p->graph->name, "%s", options->name);
    if (!status && options->profile == ANE_PROFILE_ANE)
        status = ane_check_device_rules(p->graph, options, ane_sim_backend.supports_op, err);
    if (status) {
        sim_close(&p->base);
        return status;
    }
    ane_graph *g = p->graph;
    snprintf(p->base.name, sizeof p->base.name, "%s", options->name[0] ? options->name : g->name);
    snprintf(g->name, sizeof g->name, "%s", p->base.name);
    for (int i = 0; i < g->count; i++) p->base.sram_spill_nodes += ane_node_working_set_bytes(g->nodes[i]) > ANE_SRAM_BYTES;
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
    /* Consts that only conv weights use stay as stored: fp16 ones as fp16 (kernels convert
     * them block by block, so they take half the memory, decoding reads half the bytes, and
     * patching is a copy), quantized ones as int8 / 4-bit codes read where the graph keeps
     * them (no copy at all). Other consts become fp32 values. */
    p->weight_form = calloc((size_t)g->count + 1, 1);
    if (!p->weight_form) {
        sim_close(&p->base);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
    }
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (node->op == ANE_OP_CONST && node->encoding) p->weight_form[i] = SIM_WEIGHT_ENCODED;
        else if (node->op == ANE_OP_CONST && node->dtype == ANE_FP16) p->weight_form[i] = SIM_WEIGHT_HALF;
    }
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        for (int k = 0; k < node->noperands; k++)
            if (!(node->op == ANE_OP_CONV && k == 1)) p->weight_form[node->operands[k]->id] = SIM_WEIGHT_FP32;
    }
    for (int i = 0; i < g->noutputs; i++) p->weight_form[g->outputs[i].node->id] = SIM_WEIGHT_FP32;
    status = find_half_inputs(p, err);
    if (!status) status = compute_palette_codes(p, err);
    if (status) {
        sim_close(&p->base);
        return status;
    }
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        int stored = node->op == ANE_OP_CONV ? p->weight_form[node->operands[1]->id] == SIM_WEIGHT_HALF
                     : node->op == ANE_OP_MATMUL && p->half_input[node->operands[1]->id];
        size_t scratch = sim_scratch_floats(node, stored);
        if (scratch > p->scratch_floats) p->scratch_floats = scratch;
    }
    status = plan_slab(p, err);
    if (!status) status = group_parts(p, err);
    if (status) {
        sim_close(&p->base);
        return status;
    }
    for (int i = 0; i < p->ninputs; i++) p->input_nodes[i] = ane_graph_find(g, p->inputs[i].name)->id;
    for (int i = 0; i < p->noutputs; i++)
        for (int k = 0; k < g->noutputs; k++)
            if (strcmp(g->outputs[k].name, p->outputs[i].name) == 0) p->output_nodes[i] = g->outputs[k].node->id;
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

static void release_weight(sim_weight *weight) {
    if (--weight->sharers > 0) return;
    free(weight->data);
    free(weight);
}

static void free_column_copies(sim_loaded *instance) {
    if (instance->column_copies)
        for (int i = 0; i < instance->program->graph->count; i++) sim_column_copies_free(instance->column_copies[i]);
    free(instance->column_copies);
    instance->column_copies = NULL;
}

static void sim_unload(ane_loaded *loaded) {
    sim_loaded *instance = (sim_loaded *)loaded;
    if (!instance) return;
    free_column_copies(instance);
    if (instance->patched)
        for (int i = 0; i < instance->program->graph->count; i++)
            if (instance->patched[i]) release_weight(instance->patched[i]);
    if (instance->halves)
        for (int i = 0; i < instance->program->graph->count; i++)
            if (instance->program->half_input[i] && instance->program->graph->nodes[i]->op == ANE_OP_INPUT)
                free(instance->halves[i]);
    free(instance->halves);
    free(instance->patched);
    free(instance->written);
    free(instance->filled);
    free(instance->values);
    free(instance->slab);
    free(instance->scratch);
    free(instance);
}

/* A row-major tensor header of `shape` over a buffer of fp32 values (or fp16 bits), for
 * converting copies in and out. */
static ane_tensor view_shaped(void *data, ane_dtype dtype, int ndim, const int64_t *shape, ane_storage *pin) {
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

static ane_tensor fp32_view_shaped(float *data, int ndim, const int64_t *shape, ane_storage *pin) {
    return view_shaped(data, ANE_FP32, ndim, shape, pin);
}

/* The same over a node's value buffer, in the node's shape. */
static ane_tensor fp32_view(float *data, const ane_node *node, ane_storage *pin) {
    return fp32_view_shaped(data, node->rank, node->shape, pin);
}

/* An input's buffer as a tensor: its fp16 bits for a half input, else its fp32 values. */
static ane_tensor input_view(const sim_loaded *instance, const ane_node *node, ane_storage *pin) {
    if (instance->program->half_input[node->id])
        return view_shaped(instance->halves[node->id], ANE_FP16, node->rank, node->shape, pin);
    return fp32_view(instance->values[node->id], node, pin);
}

static void load_const(sim_loaded *instance, const ane_node *node) {
    if (node->encoding) { /* a quantized weight used by other ops: decoded once, as the device decodes it */
        float *values = instance->values[node->id];
        ane_const_decode_rows(node, 0, node->shape[0], values);
        if (node->dtype == ANE_FP16) ane_round_fp32_through_fp16_n(values, (size_t)ane_node_numel(node));
        return;
    }
    ane_storage pin;
    ane_tensor view = fp32_view(instance->values[node->id], node, &pin);
    ane_tensor_copy_into(&view, &node->value, NULL);
}

static ane_status sim_load(ane_compiled *compiled, ane_loaded **out, ane_error *err) {
    sim_compiled *p = (sim_compiled *)compiled;
    ane_graph *g = p->graph;
    sim_loaded *instance = calloc(1, sizeof *instance);
    size_t total = p->kept_floats;
    if (instance) {
        instance->program = p;
        instance->values = calloc((size_t)g->count + 1, sizeof *instance->values);
        instance->halves = calloc((size_t)g->count + 1, sizeof *instance->halves);
        instance->patched = calloc((size_t)g->count + 1, sizeof *instance->patched);
        instance->written = calloc((size_t)g->count + 1, sizeof *instance->written);
        instance->filled = calloc((size_t)g->count + 1, sizeof *instance->filled);
        instance->slab = malloc((total + 1) * sizeof *instance->slab);
        instance->scratch = p->scratch_floats ? malloc(p->scratch_floats * sizeof *instance->scratch) : NULL;
    }
    int ok = instance && instance->values && instance->halves && instance->patched && instance->written &&
             instance->filled && instance->slab &&
             (!p->scratch_floats || instance->scratch);
    for (int i = 0; ok && i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (p->weight_form[i] == SIM_WEIGHT_ENCODED) continue; /* read from the graph's node by the kernels */
        if (p->weight_form[i] == SIM_WEIGHT_HALF) { /* fp16 bits as they are, where the graph holds them */
            instance->halves[i] = (uint16_t *)ane_tensor_data(&node->value);
            continue;
        }
        if (is_view(node)) { /* the operand's values (or fp16 bits), read in the new shape */
            instance->values[i] = instance->values[node->operands[0]->id];
            instance->halves[i] = p->half_input[i] ? instance->halves[node->operands[0]->id] : NULL;
            continue;
        }
        if (p->half_input[i]) { /* fp16 bits of its own, zero until written */
            instance->halves[i] = calloc((size_t)ane_node_numel(node) + 1, sizeof(uint16_t));
            ok = instance->halves[i] != NULL;
            continue;
        }
        if (reads_graph_values(node)) { /* fp32 values as they are, where the graph holds them */
            instance->values[i] = (float *)ane_tensor_data(&node->value);
            continue;
        }
        if (p->slot_kinds[i] == SIM_SLOT_TEMP) continue; /* placed at each evaluation */
        instance->values[i] = instance->slab + p->slab_offsets[i];
        if (node->op == ANE_OP_CONST) load_const(instance, node); /* other weights converted once, to fp32 */
    }
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

/* The numeric cliffs of the target's chip (constraints.md, newer facts), applied to a
 * node's output: matmul results from matmul_inf_at on become +-inf, last-axis slices at a
 * non-zero offset saturate to +-inf beyond offset_slice_limit (65504 / 16, the crop DMA's
 * fixed point, as ANEForge measured), NaN results read as 0 (the chip does not
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
 * instead of holding a region each. */
static ane_status sim_eval(ane_loaded *loaded, const ane_binding *inputs, int ninputs, ane_binding *outputs, int noutputs,
                           ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    sim_compiled *p = instance->program;
    ane_storage *region = NULL;
    if (p->ntemp) {
        ane_status status = ane_storage_new_heap_uninitialized((p->temp_floats + 1) * sizeof(float), &region, err);
        if (status) return status;
    }
    for (int t = 0; t < p->ntemp; t++) {
        int i = p->temp_nodes[t];
        instance->values[i] = p->slot_kinds[i] == SIM_SLOT_VIEW ? instance->values[p->graph->nodes[i]->operands[0]->id]
                                                                : (float *)region->data + (p->slab_offsets[i] - p->kept_floats);
    }
    ane_status status = evaluate(instance, inputs, ninputs, outputs, noutputs, err);
    ane_storage_release(region);
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
        int source = value_source(g, y->id);
        const float *values = instance->values[source];
        int64_t rows = y->shape[y->rank - 2], columns = y->shape[y->rank - 1];
        if (g->nodes[source]->op != ANE_OP_CONST || g->nodes[source]->encoding || !values || instance->halves[source] ||
            ane_node_numel(y) != rows * columns)
            continue;
        sim_column_copies found;
        if (!sim_find_column_copies(values, rows, columns, node->attrs.transpose_y, &found)) continue;
        if (!instance->column_copies) instance->column_copies = calloc((size_t)g->count + 1, sizeof *instance->column_copies);
        sim_column_copies *kept = instance->column_copies ? malloc(sizeof *kept) : NULL;
        if (kept) {
            *kept = found;
            instance->column_copies[i] = kept;
        } else {
            free(found.source);
            free(found.factor);
        }
    }
}

static int64_t last_axis(const ane_node *node) { return node->rank ? node->shape[node->rank - 1] : 1; }

/* How many positions of each node's last axis may be non-zero (sim_context.filled): a resident
 * input's written ones, and a view's of it when its last axis has the input's size (a reshape
 * keeps the flat order, so a position stays a position: a cache read as heads); every position
 * elsewhere. */
static const int64_t *find_filled(sim_loaded *instance, const ane_binding *inputs) {
    const sim_compiled *p = instance->program;
    const ane_graph *g = p->graph;
    for (int i = 0; i < g->count; i++) instance->filled[i] = last_axis(g->nodes[i]);
    for (int port = 0; port < p->ninputs; port++)
        if (inputs[port].resident) instance->filled[p->input_nodes[port]] = instance->written[p->input_nodes[port]];
    for (int i = 0; i < g->count; i++) {
        if (!is_view(g->nodes[i])) continue;
        int source = value_source(g, i);
        if (last_axis(g->nodes[source]) == last_axis(g->nodes[i])) instance->filled[i] = instance->filled[source];
    }
    return instance->filled;
}

static ane_status evaluate(sim_loaded *instance, const ane_binding *inputs, int ninputs, ane_binding *outputs,
                           int noutputs, ane_error *err) {
    sim_compiled *p = instance->program;
    ane_graph *g = p->graph;
    int device_rules = p->options.profile == ANE_PROFILE_ANE;
    if (ninputs != p->ninputs || noutputs != p->noutputs)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' binds %d inputs and %d outputs, got %d and %d", g->name,
                        p->ninputs, p->noutputs, ninputs, noutputs);
    if (device_rules) {
        ane_status status = check_allocations(inputs, ninputs, "input", "ANE-18", err);
        if (!status) status = check_allocations(outputs, noutputs, "output", "ANE-02", err);
        if (status) return status;
    }
    /* Inputs by position, in alphabetical order of their names (ANE-19). */
    for (int i = 0; i < ninputs; i++) {
        if (inputs[i].resident) continue; /* its value buffer holds what write_input wrote */
        const ane_port *port = &p->inputs[i];
        const ane_tensor *view = &inputs[i].view;
        int dtype_ok = !device_rules || view->dtype == port->dtype || p->options.precision == ANE_PRECISION_FP32;
        if (!same_shape_as_port(view, port) || !dtype_ok) {
            char want[128], got[128];
            return ane_fail(err, ANE_ERR_SHAPE, "input '%s' of program '%s' is %s%s, bound to a %s%s buffer", port->name,
                            g->name, ane_dtype_name(port->dtype), ane_shape_string(want, sizeof want, port->rank, port->shape),
                            ane_dtype_name(view->dtype), ane_shape_string(got, sizeof got, view->ndim, view->shape));
        }
        const ane_node *node = g->nodes[p->input_nodes[i]];
        ane_storage pin;
        ane_tensor target = input_view(instance, node, &pin); /* a half input's copy rounds to fp16 itself */
        ane_status status = ane_tensor_copy_into(&target, view, err);
        if (status) return status;
        /* fp32 data bound to an fp16 input is rounded as the device would read it (fp16 data
         * converts exactly: nothing to round) */
        if (p->options.precision == ANE_PRECISION_FP16 && port->dtype == ANE_FP16 && view->dtype != ANE_FP16 &&
            !p->half_input[node->id])
            ane_round_fp32_through_fp16_n(instance->values[node->id], (size_t)ane_node_numel(node));
    }
    sim_context context = {
        .apply_sdpa_mask = !device_rules || p->options.target.sdpa_mask_honoured, /* ANE-06: ignored unless the target says */
        .sdpa_mask_one_plane = device_rules && p->options.target.sdpa_mask_one_plane,
        .scratch = instance->scratch,
        .scratch_floats = p->scratch_floats,
        .halves = (const uint16_t *const *)instance->halves,
        .activations = p->options.activations,
        .palette_codes = (const void *const *)p->palette_codes,
    };
    if (!instance->copies_current) find_column_copies(instance);
    context.column_copies = (sim_column_copies *const *)instance->column_copies;
    context.filled = find_filled(instance, inputs);
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (is_view(node)) continue;
        ane_status status = p->part_role[i] == PART_FOLLOWS ? ANE_OK /* computed with its group's first */
                            : p->part_role[i] == PART_LEADS ? run_parts(p, &context, i, instance->values, err)
                                                            : sim_run_node(&context, node, instance->values, instance->values[i], err);
        if (!status) status = ane_interrupt_check(err, "a program evaluation");
        if (status) return status;
        if (p->options.precision == ANE_PRECISION_FP16 && node->dtype == ANE_FP16 && node->op != ANE_OP_INPUT &&
            node->op != ANE_OP_CONST && !moves_data_only(node->op))
            ane_round_fp32_through_fp16_n(instance->values[i], (size_t)ane_node_numel(node));
        if (device_rules && node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST)
            apply_numeric_cliffs(&p->options.target, node, instance->values[i]);
    }
    for (int i = 0; i < noutputs; i++) {
        const ane_port *port = &p->outputs[i];
        ane_tensor *view = &outputs[i].view;
        if (!same_shape_as_port(view, port)) {
            char want[128], got[128];
            return ane_fail(err, ANE_ERR_SHAPE, "output '%s' of program '%s' is %s, bound to a %s buffer", port->name, g->name,
                            ane_shape_string(want, sizeof want, port->rank, port->shape),
                            ane_shape_string(got, sizeof got, view->ndim, view->shape));
        }
        const ane_node *node = g->nodes[p->output_nodes[i]];
        ane_storage pin;
        ane_tensor source = fp32_view(instance->values[node->id], node, &pin);
        ane_status status = ane_tensor_copy_into(view, &source, err);
        if (status) return status;
    }
    return ANE_OK;
}

/* Resident inputs live in the input node's value buffer, which evals leave alone. The
 * written positions are rounded as eval rounds a bound input: fp32 data to fp16 for an fp16
 * port in fp16 precision (fp16 data converts exactly). */
static ane_status sim_write_input(ane_loaded *loaded, int port, int64_t offset, const ane_tensor *value, int first,
                                  ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    sim_compiled *p = instance->program;
    const ane_node *node = p->graph->nodes[p->input_nodes[port]];
    float *values = instance->values[node->id]; /* [numel], the port's shape, last axis contiguous */
    int64_t numel = ane_node_numel(node), positions = node->shape[node->rank - 1];
    int half = p->half_input[node->id]; /* fp16 bits instead: the copy rounds */
    if (first) memset(half ? (void *)instance->halves[node->id] : (void *)values, 0, (size_t)numel * (half ? 2 : 4));
    int64_t count = value->shape[value->ndim - 1];
    if (first) instance->written[node->id] = 0;
    ane_storage pin;
    ane_tensor whole = input_view(instance, node, &pin), target;
    ane_status status = ane_tensor_slice(&target, &whole, node->rank - 1, offset, offset + count, err);
    if (!status) status = ane_tensor_copy_into(&target, value, err);
    if (status) return status;
    if (instance->written[node->id] < offset + count) instance->written[node->id] = offset + count;
    if (!half && p->options.precision == ANE_PRECISION_FP16 && p->inputs[port].dtype == ANE_FP16 && value->dtype != ANE_FP16)
        for (int64_t row = 0; row < numel / positions; row++)
            ane_round_fp32_through_fp16_n(values + row * positions + offset, (size_t)count);
    return ANE_OK;
}

static ane_status sim_read_input(ane_loaded *loaded, int port, ane_tensor *out, ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    const ane_node *node = instance->program->graph->nodes[instance->program->input_nodes[port]];
    ane_storage pin;
    ane_tensor source = input_view(instance, node, &pin);
    return ane_tensor_copy_into(out, &source, err);
}

/* Copies fp16 bits, replacing NaN -> 0 and +-inf -> +-65504; returns how many were
 * replaced. The copy loop only notes whether any special value passed (it vectorizes);
 * the rare fix-up pass runs only then. */
static int64_t copy_sanitized_half(uint16_t *dst, const uint16_t *src, int64_t n) {
    unsigned special = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = src[i];
        dst[i] = b;
        special |= (b & 0x7C00u) == 0x7C00u;
    }
    if (!special) return 0;
    int64_t replaced = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = dst[i];
        if ((b & 0x7C00u) != 0x7C00u) continue;
        dst[i] = (b & 0x03FFu) ? 0 : (uint16_t)((b & 0x8000u) | 0x7BFFu);
        replaced++;
    }
    return replaced;
}

/* Blocks of a patch written into a weight's buffer (below), a share of them per thread. */
enum { PATCH_BLOCK = 4096 };

typedef struct patch_job {
    const char *source; /* numel elements of source_dtype, element bytes each */
    size_t element;
    ane_dtype source_dtype, weight_dtype;
    float *values;   /* fp32 values [numel], or NULL when the weight keeps fp16 bits */
    uint16_t *half;  /* fp16 bits [numel], or NULL */
    int64_t numel;
    int64_t replaced; /* out of range or NaN, summed over the shares (atomically) */
} patch_job;

static void patch_blocks(void *context, int64_t first, int64_t last) {
    patch_job *job = context;
    int to_half = job->weight_dtype == ANE_FP16;
    float staging[PATCH_BLOCK]; /* fp32 values of one block */
    int64_t replaced = 0;
    for (int64_t block = first; block < last; block++) {
        int64_t start = block * PATCH_BLOCK, count = job->numel - start < PATCH_BLOCK ? job->numel - start : PATCH_BLOCK;
        float *out = job->half ? staging : job->values + start;
        ane_dtype_convert_row(out, ANE_FP32, job->source + (size_t)start * job->element, job->source_dtype, (size_t)count);
        replaced += ane_sanitize_weight_values(out, (size_t)count, job->weight_dtype);
        if (job->half) ane_fp32_to_fp16_n(job->half + start, staging, (size_t)count);
        else if (to_half && job->source_dtype != ANE_FP16) ane_round_fp32_through_fp16_n(out, (size_t)count);
    }
    if (replaced) __atomic_add_fetch(&job->replaced, replaced, __ATOMIC_RELAXED);
}

/* The const `name` of an instance's program, checked against a patch of `value`. */
static ane_status patchable_node(const sim_loaded *instance, const char *name, const ane_tensor *value, ane_node **out,
                                 ane_error *err) {
    ane_node *node = ane_graph_find(instance->program->graph, name);
    if (!node || node->op != ANE_OP_CONST)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' has no weight '%s'", instance->program->graph->name, name);
    if (node->encoding) return ane_refuse_encoded_patch(instance->program->graph->name, node, err);
    int64_t numel = ane_node_numel(node);
    if (ane_tensor_numel(value) != numel)
        return ane_fail(err, ANE_ERR_SHAPE, "weight '%s' has %lld elements, the patch %lld", name, (long long)numel,
                        (long long)ane_tensor_numel(value));
    *out = node;
    return ANE_OK;
}

/* Points the const's halves (fp16 bits) or values (and the reshapes reading them) at `data`. */
static void point_weight_at(sim_loaded *instance, const ane_node *node, void *data) {
    if (instance->halves[node->id]) {
        instance->halves[node->id] = data;
        return;
    }
    float *before = instance->values[node->id];
    const ane_graph *g = instance->program->graph;
    for (int i = 0; i < g->count; i++)
        if (instance->values[i] == before && is_view(g->nodes[i])) instance->values[i] = data;
    instance->values[node->id] = data;
}

/* Whether a patch gives the const bytes of its own (sim_weight): fp16 bits and fp32 values
 * read where the graph keeps them. Other consts live in the instance's slab already. */
static int patches_into_weight(const sim_loaded *instance, const ane_node *node) {
    return instance->halves[node->id] || reads_graph_values(node);
}

/* Makes the const's bytes this instance's alone, to be overwritten whole (nothing is copied
 * into them): new bytes unless it reads its own unshared ones or its slab's already. */
static ane_status own_weight(sim_loaded *instance, const ane_node *node, ane_error *err) {
    sim_weight *current = instance->patched[node->id];
    if (current && current->sharers == 1) return ANE_OK;
    if (!current && !patches_into_weight(instance, node)) return ANE_OK;
    size_t bytes = (size_t)ane_node_numel(node) * (instance->halves[node->id] ? sizeof(uint16_t) : sizeof(float));
    sim_weight *fresh = malloc(sizeof *fresh);
    void *data = malloc(bytes ? bytes : 4);
    if (!fresh || !data) {
        free(fresh);
        free(data);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory patching weight '%s'", node->name);
    }
    fresh->sharers = 1;
    fresh->data = data;
    if (current) release_weight(current);
    instance->patched[node->id] = fresh;
    point_weight_at(instance, node, data);
    return ANE_OK;
}

static void sanitize_blocks(void *context, int64_t first, int64_t last) {
    patch_job *job = context;
    int64_t replaced = 0;
    for (int64_t block = first; block < last; block++) {
        int64_t start = block * PATCH_BLOCK, count = job->numel - start < PATCH_BLOCK ? job->numel - start : PATCH_BLOCK;
        replaced += ane_sanitize_weight_values(job->values + start, (size_t)count, ANE_FP32);
    }
    if (replaced) __atomic_add_fetch(&job->replaced, replaced, __ATOMIC_RELAXED);
}

/* An fp32 weight from a strided fp32 view (a transposed parameter, GPT-2's [in, out]
 * matrices): copied straight into the weight's values in its row-major order (the blocked,
 * threaded strided copy), then sanitized in place; no packed copy in between. */
static ane_status write_strided_fp32(float *values, const ane_tensor *value, int64_t *sanitized, ane_error *err) {
    int64_t numel = ane_tensor_numel(value);
    ane_storage pin;
    ane_tensor destination = fp32_view_shaped(values, value->ndim, value->shape, &pin);
    ane_status status = ane_tensor_copy_into(&destination, value, err);
    if (status) return status;
    patch_job job = {.values = values, .numel = numel};
    ane_parallel_for((numel + PATCH_BLOCK - 1) / PATCH_BLOCK, 64, sanitize_blocks, &job);
    *sanitized += job.replaced;
    return ANE_OK;
}

/* One pass, block by block, into the const's buffer: fp16 weights get the new bits
 * (converted from fp32 with the same rounding as a fresh compile), other weights fp32
 * values; NaN -> 0 and values beyond the dtype's range -> its largest finite value. */
static ane_status write_weight(sim_loaded *instance, const ane_node *node, const ane_tensor *value, int64_t *sanitized,
                               ane_error *err) {
    if (!instance->halves[node->id] && node->dtype == ANE_FP32 && value->dtype == ANE_FP32 &&
        !ane_tensor_is_contiguous(value))
        return write_strided_fp32(instance->values[node->id], value, sanitized, err);
    ane_tensor packed;
    ane_status status = ane_tensor_is_contiguous(value) ? (ane_tensor_share(&packed, value), ANE_OK)
                                                        : ane_tensor_to(&packed, value, value->dtype, err);
    if (status) return status;
    int64_t numel = ane_node_numel(node);
    uint16_t *half = instance->halves[node->id];
    int64_t replaced = 0;
    if (half && packed.dtype == ANE_FP16) {
        replaced = copy_sanitized_half(half, (const uint16_t *)ane_tensor_data(&packed), numel);
    } else {
        patch_job job = {.source = ane_tensor_data(&packed), .element = ane_dtype_size(packed.dtype),
                         .source_dtype = packed.dtype, .weight_dtype = node->dtype,
                         .values = half ? NULL : instance->values[node->id], .half = half, .numel = numel};
        /* a weight of a training step is megabytes: both cores' share of the bandwidth */
        ane_parallel_for((numel + PATCH_BLOCK - 1) / PATCH_BLOCK, 64, patch_blocks, &job);
        replaced = job.replaced;
    }
    ane_tensor_release(&packed);
    *sanitized += replaced;
    return ANE_OK;
}

/* The patch of one instance's const: bytes of its own, then the values written. */
static ane_status patch_node(sim_loaded *instance, const ane_node *node, const ane_tensor *value, int64_t *sanitized,
                             ane_error *err) {
    ane_status status = own_weight(instance, node, err);
    if (!status) status = write_weight(instance, node, value, sanitized, err);
    return status;
}

static ane_status sim_patch(ane_loaded *loaded, const char *name, const ane_tensor *value, int64_t *sanitized,
                            ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    instance->copies_current = 0; /* the patched const may be one a matmul reads */
    ane_node *node = NULL;
    ane_status status = patchable_node(instance, name, value, &node, err);
    if (!status) status = patch_node(instance, node, value, sanitized, err);
    return status;
}

/* Whether instance b's const can read instance a's bytes: the same dtype, size and form. */
static int can_share_weight(const sim_loaded *a, const ane_node *node_a, const sim_loaded *b, const ane_node *node_b) {
    return patches_into_weight(a, node_a) && patches_into_weight(b, node_b) && node_a->dtype == node_b->dtype &&
           !a->halves[node_a->id] == !b->halves[node_b->id] && ane_node_numel(node_a) == ane_node_numel(node_b);
}

/* The same value into weight `name` of each instance (distinct ones): written once, into
 * bytes the instances that can share them read together. When exactly those instances
 * share the bytes already (the previous step's patch), they are overwritten in place;
 * otherwise the first instance gets bytes of its own and the others adopt them. */
static ane_status sim_patch_together(ane_loaded *const *loaded, int count, const char *name, const ane_tensor *value,
                                     int64_t *sanitized, ane_error *err) {
    sim_loaded *const *instances = (sim_loaded *const *)loaded;
    ane_node **nodes = malloc((size_t)count * sizeof *nodes); /* [count]: each instance's const */
    if (!nodes) return ane_fail(err, ANE_ERR_NOMEM, "out of memory patching weight '%s'", name);
    ane_status status = ANE_OK;
    for (int i = 0; i < count; i++) instances[i]->copies_current = 0; /* (bytes shared change for all) */
    for (int i = 0; i < count && !status; i++) status = patchable_node(instances[i], name, value, &nodes[i], err);
    sim_loaded *first = instances[0];
    sim_weight *shared = status ? NULL : first->patched[nodes[0]->id];
    int sharing = 0, readers = 0; /* instances that can share; of them, those reading `shared` */
    for (int i = 0; i < count && !status; i++) {
        if (!can_share_weight(first, nodes[0], instances[i], nodes[i])) continue;
        sharing++;
        readers += shared && instances[i]->patched[nodes[i]->id] == shared;
    }
    if (!status && sharing < 2) { /* nothing to share: each on its own */
        for (int i = 0; i < count && !status; i++) status = patch_node(instances[i], nodes[i], value, sanitized, err);
    } else if (!status) {
        if (!(shared && readers == sharing && shared->sharers == sharing)) status = own_weight(first, nodes[0], err);
        if (!status) status = write_weight(first, nodes[0], value, sanitized, err);
        shared = first->patched[nodes[0]->id];
        for (int i = 1; i < count && !status; i++) {
            sim_loaded *instance = instances[i];
            const ane_node *node = nodes[i];
            if (!can_share_weight(first, nodes[0], instance, node)) { /* another form: on its own */
                status = patch_node(instance, node, value, sanitized, err);
                continue;
            }
            if (instance->patched[node->id] == shared) continue;
            if (instance->patched[node->id]) release_weight(instance->patched[node->id]);
            shared->sharers++;
            instance->patched[node->id] = shared;
            point_weight_at(instance, node, shared->data);
        }
    }
    free(nodes);
    return status;
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
