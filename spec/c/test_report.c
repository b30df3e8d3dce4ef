/* passes/report.c: diagnostics keep their rule ID, node name, severity and formatted message
 * in the order added (also past the first growth of the list), copies appended from another
 * report are equal, errors are counted apart from warnings, and freeing empties the report. */
#include <stdio.h>
#include <string.h>

#include "ane_core/ir/graph.h"
#include "ane_core/passes/passes.h"
#include "check.h"

int main(void) {
    ane_error err;
    ane_graph *g;
    ane_node *x;
    const int64_t shape[4] = { 1, 8, 1, 32 };
    ane_graph_new("reported", &g, &err);
    ane_graph_input(g, "x", ANE_FP16, 4, shape, &x, &err);
    ane_report report = { 0 };
    for (int i = 0; i < 40; i++)
        ane_report_add(&report, i % 3 ? "ANE-27" : "ANE-01", i % 2 ? x : NULL,
                       i % 3 ? ANE_SEVERITY_WARNING : ANE_SEVERITY_ERROR, "finding %d of %s", i, "the test");
    CHECK(report.count == 40, "40 diagnostics kept, got %d", report.count);
    int in_order = 1;
    for (int i = 0; i < report.count; i++) {
        char expected[64];
        snprintf(expected, sizeof expected, "finding %d of the test", i);
        in_order &= strcmp(report.items[i].message, expected) == 0 &&
                    strcmp(report.items[i].id, i % 3 ? "ANE-27" : "ANE-01") == 0 &&
                    strcmp(report.items[i].node, i % 2 ? "x" : "") == 0;
    }
    CHECK(in_order, "each diagnostic keeps its ID, node and message, in order");
    CHECK(ane_report_errors(&report) == 14, "14 errors (every third), got %d", ane_report_errors(&report));
    ane_report copy = { 0 };
    ane_report_append(&copy, &report.items[3]);
    CHECK(copy.count == 1 && memcmp(&copy.items[0], &report.items[3], sizeof copy.items[0]) == 0, "an appended copy is equal");
    ane_report_free(&report);
    ane_report_free(&copy);
    CHECK(report.count == 0 && report.items == NULL && ane_report_errors(&report) == 0, "a freed report is empty");
    ane_graph_free(g);
    return check_summary("report");
}
