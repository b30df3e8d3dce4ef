/* The compile pipeline, in one function: graph -> copy -> passes (dead code, identities,
 * cast fusion to a fixed point, the verifier after each, then the SRAM annotation) -> MIL
 * text + MILBlob -> the runtime's program (cache, compile budget, backend compile, load).
 * The order is fixed here, so no caller can validate before annotating or emit before
 * optimizing; an unoptimized and an optimized graph give the same program. Weights are
 * shared by the copy, and the MILBlob the backend reads leaves them there (by reference:
 * the file's records and padding around the graph's own bytes), so a compile copies none. */
#include "compile.h"

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
    if (!status && options->profile == ANE_PROFILE_ANE) {
        /* the device rules' warnings (the errors come from the backend's compile, below) */
        ane_report checks = {0};
        ane_validate_options validate = {.target = &options->target};
        ane_pass_validate_ane(work, &validate, &checks);
        for (int i = 0; i < checks.count; i++)
            if (checks.items[i].severity == ANE_SEVERITY_WARNING) ane_report_append(warnings, &checks.items[i]);
        ane_report_free(&checks);
    }
    ane_mil_program mil = {0};
    if (!status) status = ane_emit_mil_by_reference(work, &mil, err); /* (the weights stay in `work` until it is freed) */
    if (!status)
        status = ane_program_create(backend_name, options, key, mil.text, mil.text_length, &mil.weight_file, mil.blobs ? 1 : 0,
                                    out, err);
    ane_mil_program_free(&mil);
    ane_graph_free(work);
    if (!report) ane_report_free(&local);
    return status;
}
