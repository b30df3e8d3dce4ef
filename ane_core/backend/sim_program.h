/* The sim backend's compiled program and loaded instance, shared by its three files:
 * sim_plan.c builds the plan (a slot per value, a step per computing node), sim.c compiles,
 * loads and evaluates (a loop over the steps), sim_patch.c rewrites weights of an instance. */
#ifndef ANE_BACKEND_SIM_PROGRAM_H
#define ANE_BACKEND_SIM_PROGRAM_H

#include <stddef.h>
#include <stdint.h>

#include "../base/fp16.h"
#include "../ir/graph.h"
#include "backend.h"
#include "sim_kernels.h"

/* Where one value of a program lives, and in what form (fixed at compile). */
typedef struct sim_slot {
    unsigned char kind;        /* sim_slot_kind (sim_places.h): none, a view, kept, temporary */
    unsigned char weight_form; /* SIM_WEIGHT_*: fp16 bits or encoded for consts only conv weights read */
    unsigned char half_input;  /* an fp16 input held as fp16 bits (read only as matmuls' second
                                  operands: a KV cache) and the reshapes of one */
    size_t offset;             /* kept: in the instance's slab; temporary: at offset - kept_floats in
                                  the region each evaluation takes (sim_places.c) */
    int64_t positions_read;    /* inputs: the leading positions of the last axis any reader reads (all
                                  of them but where every reader is a slice from position 0: a
                                  one-position program's 32-wide input, ANE-21) */
    unsigned char output_pad;  /* a graph output that pads its operand with zeros after the last axis:
                                  no step computes it, the output's write does (write_outputs) */
    int read_into;             /* inputs: their one reader when it is a slice of the leading positions
                                  (a one-position program's), which eval fills straight from the
                                  binding instead of a step computing it; -1: none */
    unsigned char filled_at_read; /* such a slice (no step computes it) */
} sim_slot;

/* Fusions (sim_attention.c, sim_norm.c, sim_rope.c, sim_scores.c) compute a chain of nodes in
 * fewer steps than one a node, each result rounded as its own step would round it. A node of a
 * chain that no step computes is a link: held (a fused step writes it; it has a place) or not
 * (never written). */
enum { SIM_NOT_A_LINK = 0, SIM_LINK_HELD, SIM_LINK_UNHELD };

/* A fused step: run at `node`'s place in node order, writing node (and held links). */
typedef struct sim_fused_step {
    const ane_node *node;
    sim_kernel kernel;
    const void *chain;     /* the fusion's own description of its nodes (freed with the plan) */
    int rounds_itself;     /* the kernel leaves node's values rounded (no rounding pass after it) */
    size_t scratch_floats; /* what the kernel takes of the instance's scratch */
} sim_fused_step;

/* Independent branches (sim_branches.c): nodes first_node .. last_node, each computing node in
 * one of nbranches branches (sim_compiled.branch_of), whose steps (first_step .. end_step - 1)
 * run at once, a branch on one thread. */
enum { SIM_MAX_BRANCHES = 16 }; /* (a server's batched step: one a session, ANE_FEW_COLUMNS of them) */
typedef struct sim_group {
    int first_node, last_node, nbranches;
    int first_step, end_step;
} sim_group;

typedef struct sim_compiled {
    ane_compiled base;
    ane_compile_options options;
    ane_graph *graph;
    ane_port *inputs, *outputs;      /* [ninputs], [noutputs], alphabetical */
    int ninputs, noutputs;
    int *input_nodes, *output_nodes; /* node ids in port order */
    sim_slot *slots;                 /* [graph->count] */
    sim_step *steps;                 /* [nsteps] in node order: what evaluate() runs */
    int nsteps;
    int *temp_nodes, ntemp;          /* temporaries and the views of them, in node order */
    int *view_nodes, nviews;         /* the views (reshapes and the like), in node order */
    unsigned char *links;            /* [graph->count] SIM_LINK_*: the nodes fused steps compute */
    int *read_until;                 /* [graph->count] a position up to which a fused step reads the
                                        value, beyond its readers' own (sim_places.c), or 0 */
    sim_fused_step *fused;           /* [nfused] */
    int nfused;
    void **chains;                   /* [nchains] the fusions' descriptions, owned by the plan */
    int nchains;
    int *branch_of;                  /* [graph->count] a node's branch in its group, or -1 */
    sim_group *groups;               /* [ngroups], in node order */
    int ngroups, most_branches;      /* (the scratch holds one kernel's for each branch of the largest) */
    int *next_product;               /* [nsteps + 1] the first product of const weights from a step on,
                                        outside the groups, or -1 (sim_warm.c) */
    int *input_branch, *output_branch; /* [ninputs], [noutputs]: group x SIM_MAX_BRANCHES + branch of an
                                        input every reader of which is in that branch, of an output
                                        that branch computes; -1 elsewhere (an append from such an output
                                        to such an input is written at the branch's end, run_branches) */
    int *output_step, *input_last_step; /* [noutputs], [ninputs]: the step computing an output, the last
                                        step reading an input, outside the groups; -1: none found
                                        (sim_appends.c: an append is written after the later of its two) */
    size_t kept_floats, temp_floats, scratch_floats;
} sim_compiled;

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
    sim_value *values;   /* [graph->count]: fp32 consts' data where the graph keeps them, fp16
                            weights' bits likewise until patched, the rest in `slab` or in an
                            evaluation's region */
    float *slab;         /* [kept_floats] */
    float *scratch;      /* [scratch_floats x max(1, most_branches)]: a branch's at b x scratch_floats */
    int64_t *written;    /* [ninputs]: positions of a resident input's last axis written since
                            write_input last cleared it (the rest hold zeros) */
    sim_value *own_inputs; /* [ninputs]: the inputs' own buffers, pointed at again after an
                              eval that read the caller's in place */
    int copies_current;  /* values[].column_copies match the weights (0 after a patch) */
} sim_loaded;

/* Whether a transpose moves only axes of size 1 (a decode step's [1, heads, depth, 1] ->
 * [1, heads, 1, depth]): its operand's other axes keep their order, so its values do too. */
static inline int sim_transpose_keeps_order(const ane_node *node) {
    const ane_node *x = node->operands[0];
    int64_t last = -1;
    for (int i = 0; i < node->attrs.perm.count; i++) {
        int64_t axis = node->attrs.perm.values[i];
        if (x->shape[axis] == 1) continue;
        if (axis < last) return 0;
        last = axis;
    }
    return 1;
}

/* A reshape, or a transpose of axes of size 1, moves no data in row-major order: its value
 * buffer is its operand's. */
static inline int sim_is_view(const ane_node *node) {
    return node->op == ANE_OP_RESHAPE || (node->op == ANE_OP_TRANSPOSE && sim_transpose_keeps_order(node));
}

/* Whether `table` holds the last two axes of x ([S, D], any leading axes of size 1): one value
 * a position and element of x's rows, the same for every head (RoPE's cos and sin, a mask). */
static inline int sim_per_position(const ane_node *table, const ane_node *x) {
    if (x->rank < 2 || table->rank < 2 || table->rank > x->rank) return 0;
    for (int i = 0; i < table->rank; i++) {
        int64_t want = i >= table->rank - 2 ? x->shape[x->rank - table->rank + i] : 1;
        if (table->shape[i] != want) return 0;
    }
    return 1;
}

/* fp32 consts are read where the graph keeps them (no copy per program instance). */
static inline int sim_reads_graph_values(const ane_node *node) {
    return node->op == ANE_OP_CONST && !node->encoding && node->value.dtype == ANE_FP32 &&
           ane_tensor_is_contiguous(&node->value);
}

/* The node whose value node `id` is, looking through reshapes. */
static inline int sim_value_source(const ane_graph *g, int id) {
    while (sim_is_view(g->nodes[id])) id = g->nodes[id]->operands[0]->id;
    return id;
}

/* Builds p->slots, p->steps, the temporaries' list and the scratch size (sim_plan.c). */
ane_status sim_plan_program(sim_compiled *p, ane_error *err);
void sim_plan_free(sim_compiled *p);

/* Fusions register what they found (sim_plan.c): a copy of a chain's description (`size` bytes
 * at `found`, the plan's to keep: *kept), a fused step, a link, a value a fused step at
 * `reader` reads. */
ane_status sim_add_chain(sim_compiled *p, const void *found, size_t size, void **kept, ane_error *err);
ane_status sim_add_fused_step(sim_compiled *p, const sim_fused_step *step, ane_error *err);
void sim_mark_link(sim_compiled *p, const ane_node *node, int kind);
/* The scratch node's own step takes (its weight or second operand as the plan keeps it). */
size_t sim_node_scratch_floats(const sim_compiled *p, const ane_node *node);

/* A held link that a fused step computes with its own kernel (kernel: sim_kernel_for's),
 * rounded to fp16 as its own step would round it (the fusions run in fp16 precision). */
static inline ane_status sim_run_link(sim_kernel kernel, const ane_node *link, const sim_context *context,
                                      const sim_value *values, ane_error *err) {
    sim_step own = {.kernel = kernel, .node = link, .nparts = 1, .parts = {link}};
    ane_status status = kernel(context, &own, values, err);
    if (!status) ane_round_fp32_through_fp16_n(values[link->id].data, (size_t)ane_node_numel(link));
    return status;
}
void sim_read_at(sim_compiled *p, const ane_node *value, const ane_node *reader);

/* The distinct nodes reading `node` (up to max of them written to readers), their count; its
 * only reader when it has one and is no graph output, else NULL. */
int sim_readers(const ane_graph *g, const ane_node *node, const ane_node **readers, int max);
const ane_node *sim_only_reader(const ane_graph *g, const ane_node *node);

/* The fusions: each finds its chains and registers them (fp16 precision in the cpu profile: the
 * ane profile applies the chip's numeric cliffs op by op). */
ane_status sim_fuse_cached_attentions(sim_compiled *p, ane_error *err); /* sim_attention.c */
ane_status sim_fuse_rms_norms(sim_compiled *p, ane_error *err);         /* sim_norm.c */
ane_status sim_fuse_ropes(sim_compiled *p, ane_error *err);             /* sim_rope.c */
ane_status sim_fuse_scores(sim_compiled *p, ane_error *err);            /* sim_scores.c (after sim_attention.c's) */

/* Independent branches: found after the fusions, before the values are placed (sim_branches.c). */
ane_status sim_find_branches(sim_compiled *p, ane_error *err);

/* A row-major tensor header of `shape` over a buffer of fp32 values (or fp16 bits). */
ane_tensor sim_view_shaped(void *data, ane_dtype dtype, int ndim, const int64_t *shape, ane_storage *pin);

/* Reading the next product's weights ahead (sim_warm.c), inside an evaluation: after each
 * product step (p->next_product[0] is the first) sim_warm_after_product posts the program's
 * next product and returns its step (-1: none, nothing posted); sim_warm_stop stops the reading
 * (a product's start, the evaluation's end, an unload, a patch). */
ane_status sim_plan_products(sim_compiled *p, ane_error *err); /* (the plan's next_product) */
int sim_warm_after_product(const sim_loaded *instance, int step);
void sim_warm_stop(void);

/* Appends written during an evaluation (sim_appends.c). sim_plan_appends fills output_step and
 * input_last_step; sim_appends_due lists an evaluation's appends sim writes itself (at most one an
 * output: due[noutputs]), each with the step after which it is written; sim_write_due_appends
 * writes those due after `step`; sim_append_output writes one (output port `port` into its
 * binding's append_to input at the input's `written` position) and marks it appended. */
typedef struct sim_due_append {
    int port, after_step;
} sim_due_append;
ane_status sim_plan_appends(sim_compiled *p, ane_error *err);
int sim_appends_due(const sim_loaded *instance, const ane_binding *outputs, sim_due_append *due);
ane_status sim_write_due_appends(const sim_loaded *instance, int step, const sim_due_append *due, int count,
                                 const ane_binding *inputs, ane_binding *outputs, ane_error *err);
ane_status sim_append_output(const sim_loaded *instance, int port, ane_binding *output, const ane_binding *input,
                             ane_error *err);

/* Patching (sim_patch.c); the backend's vtable entries. */
ane_status sim_patch(ane_loaded *loaded, const char *name, const ane_tensor *value, int64_t *sanitized, ane_error *err);
ane_status sim_patch_together(ane_loaded *const *loaded, int count, const char *name, const ane_tensor *value,
                              int64_t *sanitized, ane_error *err);
void sim_release_weight(sim_weight *weight);

#endif
