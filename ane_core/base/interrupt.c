/* The process-wide interrupt flag and the graceful-stop request (see interrupt.h). */
#include "interrupt.h"

#include <signal.h>

static volatile sig_atomic_t interrupt_flag = 0;
static volatile sig_atomic_t graceful = 0;        /* first Ctrl-C asks for a stop instead */
static volatile sig_atomic_t stop_requested = 0;

int ane_interrupt_request(void) {
    if (graceful && !stop_requested) {
        stop_requested = 1;
        return 0;
    }
    interrupt_flag = 1;
    return 1;
}
int ane_interrupt_pending(void) { return interrupt_flag != 0; }
void ane_interrupt_clear(void) { interrupt_flag = 0; }

void ane_interrupt_set_graceful(int on) {
    graceful = on != 0;
    stop_requested = 0;
}
int ane_interrupt_stop_requested(void) { return stop_requested != 0; }

ane_status ane_interrupt_check(ane_error *err, const char *what) {
    if (!interrupt_flag) return ANE_OK;
    return ane_fail(err, ANE_ERR_INTERRUPTED, "interrupted during %s", what);
}
