/* base/interrupt.c: a request sets the pending flag that ane_interrupt_check turns into an
 * error naming the work; clearing resets it; in graceful mode the first request only asks to
 * stop (nothing pending) and the second interrupts. */
#include <string.h>

#include "ane_core/base/interrupt.h"
#include "check.h"

int main(void) {
    ane_error err;
    ane_error_clear(&err);
    CHECK(!ane_interrupt_pending() && ane_interrupt_check(&err, "x") == ANE_OK, "nothing pending at start");
    CHECK(ane_interrupt_request() == 1 && ane_interrupt_pending(), "a request interrupts");
    CHECK(ane_interrupt_check(&err, "the sim eval of 'attn'") == ANE_ERR_INTERRUPTED, "check reports the interruption");
    CHECK(strstr(err.message, "the sim eval of 'attn'") != NULL, "the message names the work: %s", err.message);
    ane_interrupt_clear();
    CHECK(!ane_interrupt_pending(), "clear resets the flag");

    ane_interrupt_set_graceful(1);
    CHECK(ane_interrupt_request() == 0, "graceful: the first request is a stop request");
    CHECK(ane_interrupt_stop_requested() && !ane_interrupt_pending(), "graceful: stop requested, nothing interrupted");
    CHECK(ane_interrupt_request() == 1 && ane_interrupt_pending(), "graceful: the second request interrupts");
    ane_interrupt_clear();
    ane_interrupt_set_graceful(0);
    CHECK(!ane_interrupt_stop_requested(), "leaving graceful mode forgets the stop request");
    return check_summary("interrupt");
}
