/* The per-process compile budget (ANE-05): the device fails silently after ~119 compiles in
 * one process. The runtime charges every program it compiles, and the `ane` backend charges
 * its own compiles too (patch self-check references, recompile fallbacks), so the count is
 * the device's. */
#ifndef ANE_BASE_BUDGET_H
#define ANE_BASE_BUDGET_H

#include <stdint.h>

#include "status.h"

#define ANE_DEFAULT_COMPILE_BUDGET 119

/* ANE_OK when one more compile fits; otherwise an ANE-05 error naming `what`. */
ane_status ane_budget_check(const char *what, ane_error *err);
/* Counts one compile done; `own` marks the backend's own (not asked for by the runtime). */
void ane_budget_count(int own);

int64_t ane_budget_limit(void);
int64_t ane_budget_used(void);
int64_t ane_budget_backend_compiles(void);
/* 0 restores the default; a negative budget is an argument error. */
ane_status ane_budget_set_limit(int64_t limit, ane_error *err);

#endif
