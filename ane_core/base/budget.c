/* The compile budget (budget.h). */
#include "budget.h"

static int64_t limit = ANE_DEFAULT_COMPILE_BUDGET;
static int64_t used, backend_compiles;

ane_status ane_budget_check(const char *what, ane_error *err) {
    if (used < limit) return ANE_OK;
    return ane_fail(err, ANE_ERR_CONSTRAINT,
                    "compile budget exhausted: this process has compiled %lld programs, the budget is %lld (ANE-05: "
                    "the device fails silently after ~119 compiles per process) while compiling %s. Reuse programs "
                    "(cache keys), patch weights instead of recompiling, or restart the process; "
                    "ane.set_compile_budget(n) changes the budget",
                    (long long)used, (long long)limit, what);
}

void ane_budget_count(int own) {
    used++;
    backend_compiles += own != 0;
}

int64_t ane_budget_limit(void) { return limit; }
int64_t ane_budget_used(void) { return used; }
int64_t ane_budget_backend_compiles(void) { return backend_compiles; }

ane_status ane_budget_set_limit(int64_t value, ane_error *err) {
    if (value < 0)
        return ane_fail(err, ANE_ERR_ARGUMENT, "the compile budget must be >= 0 (0 restores %d), got %lld",
                        ANE_DEFAULT_COMPILE_BUDGET, (long long)value);
    limit = value > 0 ? value : ANE_DEFAULT_COMPILE_BUDGET;
    return ANE_OK;
}
