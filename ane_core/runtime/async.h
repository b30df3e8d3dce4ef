/* Asynchronous evaluation: submit an eval, do other work, wait for its outputs.
 *
 * Two helper threads run submitted evals, so two requests are in flight (on the device, the
 * second dispatch overlaps the first; more do not help, docs/reference/constraints.md). Each submission
 * gets its own outputs (double-buffered: the next submit of a program never writes the
 * tensors a pending wait returns). A program runs one eval at a time: a submit, eval,
 * patch or close of a program with an eval in flight waits for it first. Patches are
 * committed on the submitting thread before the eval is queued. The caller keeps inputs and
 * destinations alive and unchanged until the wait. */
#ifndef ANE_RUNTIME_ASYNC_H
#define ANE_RUNTIME_ASYNC_H

#include "program.h"

typedef struct ane_ticket ane_ticket;

/* Queues an eval of `program` (arguments as ane_program_eval). */
ane_status ane_program_submit(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                              int ndestinations, ane_ticket **out, ane_error *err);
/* Waits for the eval; results as ane_program_eval's (indexed like the output ports). Frees
 * the ticket either way. */
ane_status ane_ticket_wait(ane_ticket *ticket, ane_tensor *results, ane_error *err);

/* Returns when no submitted eval of `program` is queued or running. */
void ane_async_wait_idle(const ane_program *program);

#endif
