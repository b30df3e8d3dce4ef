/* Diagnostics collected by the analyses (see passes.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "passes.h"

/* A new slot at the end of the report, or NULL when memory runs out (the diagnostic is
 * lost, nothing else). */
static ane_diagnostic *next_slot(ane_report *report) {
    if (report->count == report->capacity) {
        int capacity = report->capacity ? report->capacity * 2 : 16;
        ane_diagnostic *items = realloc(report->items, (size_t)capacity * sizeof *items);
        if (!items) return NULL;
        report->items = items;
        report->capacity = capacity;
    }
    return &report->items[report->count++];
}

void ane_report_add(ane_report *report, const char *id, const ane_node *node, ane_severity severity,
                    const char *format, ...) {
    ane_diagnostic *d = next_slot(report);
    if (!d) return;
    snprintf(d->id, sizeof d->id, "%s", id);
    snprintf(d->node, sizeof d->node, "%s", node ? node->name : "");
    d->severity = severity;
    va_list args;
    va_start(args, format);
    vsnprintf(d->message, sizeof d->message, format, args);
    va_end(args);
}

void ane_report_append(ane_report *report, const ane_diagnostic *diagnostic) {
    ane_diagnostic *d = next_slot(report);
    if (d) *d = *diagnostic;
}

int ane_report_errors(const ane_report *report) {
    int errors = 0;
    for (int i = 0; i < report->count; i++) errors += report->items[i].severity == ANE_SEVERITY_ERROR;
    return errors;
}

void ane_report_free(ane_report *report) {
    free(report->items);
    ane_text_free(&report->dump);
    report->items = NULL;
    report->count = report->capacity = 0;
}
