/* The optimization pipeline, in one function: dead code, identities and cast fusion until
 * nothing changes (at most 20 rounds), the verifier after each pass in debug builds, then
 * the SRAM annotation. ANELUA_DUMP=passes (or options->dump) records the IR after each pass. */
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct pass_entry {
    const char *name;
    int (*run)(ane_graph *g);
} pass_entry;

static const pass_entry rewriting_passes[] = {
    {"dead_code", ane_pass_dead_code},
    {"identity", ane_pass_identity},
    {"cast_fusion", ane_pass_cast_fusion},
};

static void record(const ane_graph *g, ane_report *report, const char *title) {
    char *listing = ane_graph_dump(g);
    ane_text_append(&report->dump, "--- after %s\n%s", title, listing ? listing : "(out of memory)\n");
    free(listing);
}

ane_status ane_optimize(ane_graph *g, const ane_optimize_options *options, ane_report *report, ane_error *err) {
    const char *env = getenv("ANELUA_DUMP");
    int dump = (options && options->dump) || (env && strstr(env, "passes"));
#ifdef NDEBUG
    int verify = options && options->verify;
#else
    int verify = 1;
#endif
    int max_rounds = options && options->max_rounds > 0 ? options->max_rounds : 20;
    if (dump) record(g, report, "building");
    int changed = 1;
    for (report->rounds = 0; changed && report->rounds < max_rounds; report->rounds++) {
        changed = 0;
        for (size_t p = 0; p < sizeof rewriting_passes / sizeof rewriting_passes[0]; p++) {
            int changes = rewriting_passes[p].run(g);
            changed += changes;
            report->changes += changes;
            if (dump) record(g, report, rewriting_passes[p].name);
            if (verify) {
                ane_status status = ane_verify_graph(g, err);
                if (status) return ane_fail_context(err, "after pass %s", rewriting_passes[p].name);
            }
        }
    }
    ane_pass_sram_annotate(g, report);
    if (dump) record(g, report, "sram_annotate");
    return ANE_OK;
}
