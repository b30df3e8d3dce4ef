/* The compile pipeline, in one function: graph -> copy -> passes (dead code, identities,
 * cast fusion to a fixed point, the verifier after each, then the SRAM annotation) -> the
 * device rules, once (profile `ane`) -> MIL text + MILBlob -> the runtime's program (cache,
 * compile budget, backend compile, load). The backend trusts the rules checked and the SRAM
 * spills counted here (ane_compile_options.rules_checked) instead of doing both again.
 * The order is fixed here, so no caller can validate before annotating or emit before
 * optimizing; an unoptimized and an optimized graph give the same program. Weights are
 * shared by the copy, and the MILBlob the backend reads leaves them there (by reference:
 * the file's records and padding around the graph's own bytes), so a compile copies none. */
#include "compile.h"

#include "../backend/backend.h"
#include "../mil/emit.h"

ane_status ane_compile_graph(const ane_graph *graph, const char *backend_name, const ane_compile_options *options,
                             const char *key, ane_program **out, ane_report *report, ane_error *err) {
    *out = NULL;
    ane_report local = {0};
    ane_report *warnings = report ? report : &local;
    ane_graph *work;
    ane_status status = ane_graph_clone(graph, &work, err);
    if (status) return status;
    status = ane_optimize(work, NULL, warnings, err);
    ane_compile_options checked = *options;
    const ane_backend *backend = ane_backend_find(backend_name);
    char why[ANE_ERROR_MESSAGE_MAX];
    if (!status && backend && backend->available(why, sizeof why)) { /* (else the runtime says what is wrong) */
        if (options->profile == ANE_PROFILE_ANE)
            status = ane_check_device_rules(work, options, backend->supports_op, warnings, err);
        checked.rules_checked = 1;
        checked.sram_spill_nodes = ane_sram_spill_nodes(work); /* (annotated by the pipeline) */
    }
    ane_mil_program mil = {0};
    if (!status) status = ane_emit_mil_by_reference(work, &mil, err); /* (the weights stay in `work` until it is freed) */
    if (!status)
        status = ane_program_create(backend_name, &checked, key, mil.text, mil.text_length, &mil.weight_file, mil.blobs ? 1 : 0,
                                    out, err);
    ane_mil_program_free(&mil);
    ane_graph_free(work);
    if (!report) ane_report_free(&local);
    return status;
}
