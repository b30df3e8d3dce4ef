/* base/budget.c: the compile counter (ANE-05): checks pass while fewer programs than the
 * budget were compiled, then fail naming the program and the counts; the backend's own
 * compiles count too; a negative budget is refused and 0 restores the default. */
#include <string.h>

#include "ane_core/base/budget.h"
#include "check.h"

int main(void) {
    ane_error err;
    ane_error_clear(&err);
    int64_t default_limit = ane_budget_limit();
    CHECK(default_limit > 0 && ane_budget_used() == 0, "a fresh process has a budget and no compiles");
    CHECK(ane_budget_set_limit(3, &err) == ANE_OK && ane_budget_limit() == 3, "the budget can be set");
    for (int i = 0; i < 3; i++) {
        CHECK(ane_budget_check("p", &err) == ANE_OK, "compile %d fits", i + 1);
        ane_budget_count(i == 1);
    }
    CHECK(ane_budget_used() == 3 && ane_budget_backend_compiles() == 1, "3 compiles, 1 of them the backend's own");
    CHECK(ane_budget_check("attn_prefill L3", &err) == ANE_ERR_CONSTRAINT, "the fourth does not fit");
    CHECK(strstr(err.message, "attn_prefill L3") && strstr(err.message, "ANE-05") && strstr(err.message, "compiled 3"),
          "the message names the program, the rule and the count: %s", err.message);
    CHECK(ane_budget_set_limit(-1, &err) == ANE_ERR_ARGUMENT && ane_budget_limit() == 3, "a negative budget is refused");
    CHECK(ane_budget_set_limit(0, &err) == ANE_OK && ane_budget_limit() == default_limit, "0 restores the default");
    CHECK(ane_budget_check("p", &err) == ANE_OK, "under the default budget again");
    return check_summary("budget");
}
