/* ANE validation: every rule of the constraint catalogue that can be checked on the graph,
 * reported with its ID and the node at fault. Errors are what the device compiler or
 * runtime rejects (or silently miscomputes); warnings are performance cliffs and rules
 * that fail only on some chips. Rules that concern the MIL text itself (ANE-12 matmul
 * flags, ANE-13 conv bias, ANE-14 live return names) hold by construction of the emitter,
 * and runtime rules (ANE-02/03/04/18/19) are met by the runtime's binding and padding. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "passes.h"
#include "target.h"

#include "../backend/backend.h"

/* Adds a diagnostic for rule `id` at the severity the target gives it (the catalogue's,
 * `severity`, unless a target changed it); nothing when the target turned the rule off. */
static void __attribute__((format(printf, 6, 7)))
rule(ane_report *report, const ane_target *target, const char *id, const ane_node *node, ane_severity severity,
     const char *format, ...) {
    switch (ane_target_level(target, ane_rule_number(id))) {
    case ANE_RULE_OFF: return;
    case ANE_RULE_ERROR: severity = ANE_SEVERITY_ERROR; break;
    case ANE_RULE_WARNING: severity = ANE_SEVERITY_WARNING; break;
    case ANE_RULE_AS_CATALOGUE: break;
    }
    char message[sizeof report->items[0].message];
    va_list args;
    va_start(args, format);
    vsnprintf(message, sizeof message, format, args);
    va_end(args);
    ane_report_add(report, id, node, severity, "%s", message);
}

/* I/O tensors: rank 4 (ANE-20: [1, C, 1, S] lies in channel rows, any other rank-4 shape
 * packed at the start of its buffer, as the device reads it); the width S of [1, C, 1, S]
 * (ANE-21: narrower than 32 is disputed, a warning unless the target measured a minimum). */
static void check_io(const ane_target *t, const ane_node *node, const char *role, ane_report *report) {
    char shape[128];
    ane_node_shape_string(node, shape, sizeof shape);
    if (node->rank != 4) {
        rule(report, t, "ANE-20", node, ANE_SEVERITY_ERROR, "%s '%s' is %s; device I/O tensors are rank 4 ([1, C, 1, S], "
             "or another rank-4 shape read packed)", role, node->name, shape);
        return;
    }
    if (node->shape[0] != 1 || node->shape[2] != 1) return; /* packed (ANE-20): no row layout to check */
    int64_t width = node->shape[3];
    if (width < t->min_io_width)
        rule(report, t, "ANE-21", node, ANE_SEVERITY_ERROR,
             "%s '%s' %s has width %lld < %lld, the narrowest target %s runs; pad the last axis to at least %lld", role,
             node->name, shape, (long long)width, (long long)t->min_io_width, t->name, (long long)t->min_io_width);
    else if (width < 32 && t->min_io_width > 1)
        rule(report, t, "ANE-21", node, ANE_SEVERITY_WARNING,
             "%s '%s' %s has width %lld < 32, which target %s measured to run; rows are laid out at a 64-byte stride",
             role, node->name, shape, (long long)width, t->name);
    else if (width < 32)
        rule(report, t, "ANE-21", node, ANE_SEVERITY_WARNING,
             "%s '%s' %s has width %lld < 32: disputed (ane-bridge-rs and tinygrad report wrong data or dispatch failures; "
             "Orion ran decode at width 16); rows are laid out at a 64-byte stride. Probe your chip (ane.probe.run(\"io_width\"))",
             role, node->name, shape, (long long)width);
    else if (width % 32)
        rule(report, t, "ANE-21", node, ANE_SEVERITY_WARNING,
             "%s '%s' %s has width %lld, not a multiple of 32: rows are laid out at a 64-byte stride", role, node->name, shape,
             (long long)width);
}

/* fp32 is allowed only at the boundary, cast at once (ANE-26); bf16 never. */
static void check_dtypes(const ane_graph *g, const ane_target *t, const ane_node *node, ane_report *report) {
    const char *op = ane_op_table[node->op].name;
    if (node->dtype == ANE_BF16) {
        rule(report, t, "ANE-26", node, ANE_SEVERITY_ERROR,
                       "node '%s' (%s) is bf16, which the ANE does not support; convert to fp16", node->name, op);
        return;
    }
    if (node->dtype != ANE_FP32) return;
    if (node->op == ANE_OP_INPUT) {
        for (int i = 0; i < g->count; i++) {
            const ane_node *user = g->nodes[i];
            if (user->dead || user->op == ANE_OP_CAST) continue;
            for (int k = 0; k < user->noperands; k++)
                if (user->operands[k] == node) {
                    rule(report, t, "ANE-26", user, ANE_SEVERITY_ERROR,
                                   "fp32 input '%s' feeds '%s' (%s) directly; cast it to fp16 first", node->name,
                                   user->name, ane_op_table[user->op].name);
                    break;
                }
        }
        return;
    }
    if (node->op == ANE_OP_CAST && ane_graph_is_output(g, node)) return; /* cast for an fp32 output */
    if (node->op == ANE_OP_CONST) {
        for (int i = 0; i < g->count; i++) {
            const ane_node *user = g->nodes[i];
            if (user->dead) continue;
            for (int k = 0; k < user->noperands; k++)
                if (user->operands[k] == node && user->op != ANE_OP_CAST) {
                    rule(report, t, "ANE-26", node, ANE_SEVERITY_ERROR,
                                   "const '%s' is fp32 and used by '%s' (%s); store weights in fp16", node->name,
                                   user->name, ane_op_table[user->op].name);
                    return;
                }
        }
        return;
    }
    if (node->op == ANE_OP_CAST) return; /* reported at its users below when they compute in fp32 */
    rule(report, t, "ANE-26", node, ANE_SEVERITY_ERROR,
                   "node '%s' (%s) computes in fp32; the ANE computes in fp16 only (cast at the boundary)", node->name, op);
}

static int is_power_of_two(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

/* An op the backend does not run on the device: the rule it breaks and what to do instead. */
static void report_unsupported(const ane_target *t, const ane_node *node, ane_report *report) {
    static const struct { ane_op op; const char *id, *advice; } rules[] = {
        {ANE_OP_CONCAT, "ANE-01", "concat is rejected by the ANE compiler (node '%s'); split the program or pack on the CPU and slice"},
        {ANE_OP_GATHER, "ANE-25", "gather '%s' is not supported on the ANE; do embeddings and sampling on the CPU"},
        {ANE_OP_GELU, "ANE-10", "gelu '%s': disputed on the ANE (refused for Orion, run by ANEForge); compile for a target "
                                "whose probe report accepted it (anelua --probe op_acceptance), or use the tanh form "
                                "(ane.nn.gelu)"},
    };
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (rules[i].op == node->op) {
            rule(report, t, rules[i].id, node, ANE_SEVERITY_ERROR, rules[i].advice, node->name);
            return;
        }
    ane_report_add(report, "backend", node, ANE_SEVERITY_ERROR, "%s '%s' is not supported by this backend on the ANE",
                   ane_op_table[node->op].name, node->name);
}

/* ANE-31: the longest axis the device takes along the width (last) axis, and a matmul's
 * contraction. */
static void check_spatial(const ane_target *t, const ane_node *node, ane_report *report) {
    int64_t width = node->rank ? node->shape[node->rank - 1] : 0;
    if (node->op == ANE_OP_MATMUL) {
        const ane_node *x = node->operands[0];
        int64_t contraction = x->rank ? x->shape[x->rank - (node->attrs.transpose_x ? 2 : 1)] : 0;
        if (contraction > width) width = contraction;
    }
    if (width > t->max_spatial)
        rule(report, t, "ANE-31", node, ANE_SEVERITY_ERROR,
             "%s '%s' runs %lld elements along its width or contraction axis; target %s allows %lld (M1-M3: 16,384, "
             "M4/M5: 65,536); split the axis",
             ane_op_table[node->op].name, node->name, (long long)width, t->name, (long long)t->max_spatial);
}

void ane_pass_validate_ane(const ane_graph *g, const ane_validate_options *options, ane_report *report) {
    ane_target checked;
    ane_target_complete(options ? options->target : NULL, &checked);
    const ane_target *t = &checked;
    int64_t max_channels = t->max_conv_channels;
    int (*supports)(ane_op, ane_profile) = options && options->supports_op ? options->supports_op : ane_device_op_set;
    int anchored = 0;
    int64_t weight_bytes = 0;
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (node->dead) continue;
        if (node->op == ANE_OP_INPUT) check_io(t, node, "input", report);
        check_dtypes(g, t, node, report);
        int computes = node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST;
        if (computes && !supports(node->op, ANE_PROFILE_ANE) && !ane_target_has_op(t->ops_accepted, node->op))
            report_unsupported(t, node, report);
        if (computes && ane_target_has_op(t->ops_refused, node->op))
            ane_report_add(report, "target", node, ANE_SEVERITY_ERROR,
                           "%s '%s': target %s measured that this chip refuses %s", ane_op_table[node->op].name,
                           node->name, t->name, ane_op_table[node->op].name);
        if (computes) check_spatial(t, node, report);
        if (node->op == ANE_OP_CONST && node->rank > 0) weight_bytes += ane_const_stored_bytes(node);
        if (node->op == ANE_OP_CAST)
            rule(report, t, "ANE-33", node, t->cast_refused ? ANE_SEVERITY_ERROR : ANE_SEVERITY_WARNING,
                 "cast '%s': the M1 and M2 compilers reject cast%s; give the program fp16 inputs and outputs", node->name,
                 t->cast_refused ? "" : " (a problem only there)");
        switch (node->op) {
        case ANE_OP_CONV: {
            const ane_node *w = node->operands[1];
            anchored = 1;
            if (w->shape[0] > max_channels || w->shape[1] * node->attrs.groups > max_channels)
                rule(report, t, "ANE-16", node, ANE_SEVERITY_ERROR,
                               "conv '%s' has %lld input and %lld output channels; the ANE rejects convs wider than "
                               "%lld (run the classifier on the CPU, or split it)",
                               node->name, (long long)(w->shape[1] * node->attrs.groups), (long long)w->shape[0],
                               (long long)max_channels);
            if (w->shape[3] > t->max_kernel_width)
                rule(report, t, "ANE-23", node, ANE_SEVERITY_ERROR,
                     "conv '%s' has kernel width %lld; target %s allows at most %lld (15 on M2 and later, 13 on M1; "
                     "split the kernel)", node->name, (long long)w->shape[3], t->name, (long long)t->max_kernel_width);
            if (w->op != ANE_OP_CONST)
                rule(report, t, "ANE-07", node, ANE_SEVERITY_WARNING,
                               "conv '%s' takes its weight '%s' as an input: fine, but it cannot be patched", node->name,
                               w->name);
            break;
        }
        case ANE_OP_MATMUL: anchored = 1; break;
        case ANE_OP_SDPA:
            anchored = 1; /* two matmuls inside */
            if (node->noperands == 4 && !t->sdpa_mask_honoured)
                rule(report, t, "ANE-06", node, ANE_SEVERITY_WARNING,
                               "scaled_dot_product_attention '%s' has an attn_mask, which the ANE silently ignores; "
                               "decompose attention (matmul, additive mask, softmax, matmul)",
                               node->name);
            break;
        case ANE_OP_REDUCE_MEAN:
            rule(report, t, "ANE-29", node, ANE_SEVERITY_WARNING,
                           "reduce_mean '%s' fails at dispatch on some chips; use reduce_sum times 1/N", node->name);
            break;
        case ANE_OP_SOFTMAX:
            if (!is_power_of_two(node->shape[node->attrs.axis]))
                rule(report, t, "ANE-30", node, ANE_SEVERITY_WARNING,
                               "softmax '%s' runs over %lld elements, not a power of two, reported to fail on some "
                               "chips; pad with a large negative mask",
                               node->name, (long long)node->shape[node->attrs.axis]);
            break;
        default: break;
        }
        /* ANE-27 here only where the pipeline's SRAM pass did not run (a parsed program): where it
         * ran, it annotated the working set and warned already */
        int64_t working_set = node->working_set_bytes ? 0 : ane_node_working_set_bytes(node);
        if (working_set > ANE_SRAM_BYTES)
            rule(report, t, "ANE-27", node, ANE_SEVERITY_WARNING,
                           "node '%s' works on %.1f MB, beyond the ~32 MB SRAM", node->name,
                           (double)working_set / (1 << 20));
    }
    for (int i = 0; i < g->noutputs; i++) check_io(t, g->outputs[i].node, "output", report);
    if (weight_bytes > t->max_weight_bytes)
        rule(report, t, "ANE-32", NULL, ANE_SEVERITY_ERROR,
             "graph '%s' bakes %.2f GB of weights; target %s allows %.2f GB in one program (1.5 GB compiles, 3.4 GB fails): "
             "split the layers over several programs", g->name, (double)weight_bytes / 1e9, t->name,
             (double)t->max_weight_bytes / 1e9);
    else if (weight_bytes > t->max_weight_bytes / 4 * 3)
        rule(report, t, "ANE-32", NULL, ANE_SEVERITY_WARNING,
             "graph '%s' bakes %.2f GB of weights, near the %.2f GB one program holds on target %s", g->name,
             (double)weight_bytes / 1e9, (double)t->max_weight_bytes / 1e9, t->name);
    if (!anchored && g->count > 0)
        rule(report, t, "ANE-28", NULL, ANE_SEVERITY_WARNING,
                       "graph '%s' has no conv or matmul; purely elementwise programs may be refused (fuse it into a "
                       "neighbour)",
                       g->name);
}
