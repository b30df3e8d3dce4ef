/* The process-wide interrupt flag (see interrupt.h). */
#include "interrupt.h"

#include <signal.h>

static volatile sig_atomic_t interrupt_flag = 0;

void ane_interrupt_request(void) { interrupt_flag = 1; }
int ane_interrupt_pending(void) { return interrupt_flag != 0; }
void ane_interrupt_clear(void) { interrupt_flag = 0; }

ane_status ane_interrupt_check(ane_error *err, const char *what) {
    if (!interrupt_flag) return ANE_OK;
    return ane_fail(err, ANE_ERR_INTERRUPTED, "interrupted during %s", what);
}
