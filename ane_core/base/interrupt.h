/* A process-wide interrupt flag that long-running core loops poll, and a graceful-stop
 * request that long-running scripts poll.
 *
 * The host's SIGINT handler calls ane_interrupt_request(); loops that can run for more
 * than a few milliseconds call ane_interrupt_pending() every block of work and return
 * ANE_ERR_INTERRUPTED when it is set. Whoever reports the interruption to the user
 * (the binding) clears the flag with ane_interrupt_clear(). In graceful mode (a training
 * or generation script that wants to finish its step and save) the first request only
 * sets the stop request, which the script polls between steps; the next one interrupts.
 * Async-signal-safe. */
#ifndef ANE_BASE_INTERRUPT_H
#define ANE_BASE_INTERRUPT_H

#include "status.h"

/* Records a Ctrl-C. Returns 1 when the caller should interrupt running code now, 0 when
 * the request was taken as a graceful stop. */
int ane_interrupt_request(void);
int ane_interrupt_pending(void);
void ane_interrupt_clear(void);

/* Turns graceful mode on or off (and forgets an earlier stop request). */
void ane_interrupt_set_graceful(int on);
int ane_interrupt_stop_requested(void);

/* Returns ANE_ERR_INTERRUPTED with a message naming `what` when an interrupt is pending. */
ane_status ane_interrupt_check(ane_error *err, const char *what);

#endif
