/* A process-wide interrupt flag that long-running core loops poll.
 *
 * The host's SIGINT handler calls ane_interrupt_request(); loops that can run for more
 * than a few milliseconds call ane_interrupt_pending() every block of work and return
 * ANE_ERR_INTERRUPTED when it is set. Whoever reports the interruption to the user
 * (the binding) clears the flag with ane_interrupt_clear(). Async-signal-safe. */
#ifndef ANE_BASE_INTERRUPT_H
#define ANE_BASE_INTERRUPT_H

#include "status.h"

void ane_interrupt_request(void);
int ane_interrupt_pending(void);
void ane_interrupt_clear(void);

/* Returns ANE_ERR_INTERRUPTED with a message naming `what` when an interrupt is pending. */
ane_status ane_interrupt_check(ane_error *err, const char *what);

#endif
