/* Compiler passes over the graph IR, one per file, and the pipeline that runs them.
 *
 * Rewriting passes return how many changes they made, so the pipeline can iterate them to a
 * fixed point. Analyses (SRAM annotation, ANE validation) append diagnostics to a report.
 * The structural verifier runs between passes in debug builds, or when asked. */
#ifndef ANE_PASSES_PASSES_H
#define ANE_PASSES_PASSES_H

#include "../base/status.h"
#include "../base/text.h"
#include "../ir/graph.h"
#include "../ir/profile.h"

#define ANE_SRAM_BYTES (32ll << 20)      /* ANE-27: on-chip SRAM */
#define ANE_MAX_CONV_CHANNELS 16384      /* ANE-16 default */

typedef enum ane_severity { ANE_SEVERITY_ERROR, ANE_SEVERITY_WARNING } ane_severity;

typedef struct ane_diagnostic {
    char id[8];                 /* "ANE-13" */
    char node[ANE_NAME_MAX];    /* the offending node ("" for whole-graph rules) */
    ane_severity severity;
    char message[320];
} ane_diagnostic;

typedef struct ane_report {
    ane_diagnostic *items;      /* [count] */
    int count, capacity;
    int rounds;                 /* optimization rounds run */
    int changes;                /* rewrites made in all rounds */
    ane_text dump;              /* IR after each pass, when dumping was asked for */
} ane_report;

void ane_report_add(ane_report *report, const char *id, const ane_node *node, ane_severity severity,
                    const char *format, ...) __attribute__((format(printf, 5, 6)));
/* Adds a copy of a diagnostic from another report. */
void ane_report_append(ane_report *report, const ane_diagnostic *diagnostic);
int ane_report_errors(const ane_report *report);
void ane_report_free(ane_report *report);

typedef struct ane_target ane_target;

typedef struct ane_validate_options {
    const ane_target *target;   /* the device checked against (passes/target.h); NULL = generic */
    /* The backend's op set (its supports_op); NULL: the device's, as the op table flags it. */
    int (*supports_op)(ane_op op, ane_profile profile);
} ane_validate_options;

typedef struct ane_optimize_options {
    int dump;                   /* record the IR after every pass in report->dump */
    int verify;                 /* run the verifier between passes (always on in debug builds) */
    int max_rounds;             /* 0 = 20 */
} ane_optimize_options;

/* Rewriting passes: each returns the number of changes. */
int ane_pass_dead_code(ane_graph *g);
int ane_pass_identity(ane_graph *g);
int ane_pass_cast_fusion(ane_graph *g);

/* Analyses. */
void ane_pass_sram_annotate(ane_graph *g, ane_report *report);
void ane_pass_validate_ane(const ane_graph *g, const ane_validate_options *options, ane_report *report);

/* Structural checks: operands defined before use and alive, outputs alive, names valid and
 * unique, shapes consistent with the shape rules. */
ane_status ane_verify_graph(const ane_graph *g, ane_error *err);

/* The pipeline: rewriting passes to a fixed point (at most max_rounds), then the SRAM
 * annotation. Fails only if the verifier finds a broken graph (a compiler bug). */
ane_status ane_optimize(ane_graph *g, const ane_optimize_options *options, ane_report *report, ane_error *err);

#endif
