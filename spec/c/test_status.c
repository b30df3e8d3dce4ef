/* base/status.c: ane_fail fills the message and returns the status (and tolerates a NULL
 * error), ane_fail_context prepends, overlong messages stay NUL-terminated within the
 * buffer, statuses are classified as the header says and every one has its own name. */
#include <string.h>

#include "ane_core/base/status.h"
#include "check.h"

int main(void) {
    ane_error err;
    ane_error_clear(&err);
    CHECK(err.status == ANE_OK && err.message[0] == '\0', "a cleared error is OK and empty");
    ane_status s = ane_fail(&err, ANE_ERR_IO, "%s: cannot open: %s", "model.bin", "No such file");
    CHECK(s == ANE_ERR_IO && err.status == ANE_ERR_IO, "ane_fail returns and records the status");
    CHECK(strcmp(err.message, "model.bin: cannot open: No such file") == 0, "message: %s", err.message);
    s = ane_fail_context(&err, "loading layer %d", 3);
    CHECK(s == ANE_ERR_IO, "ane_fail_context keeps the status");
    CHECK(strcmp(err.message, "loading layer 3: model.bin: cannot open: No such file") == 0, "message: %s", err.message);
    CHECK(ane_fail(NULL, ANE_ERR_SHAPE, "ignored") == ANE_ERR_SHAPE, "a NULL error only returns the status");

    char huge[4 * ANE_ERROR_MESSAGE_MAX];
    memset(huge, 'y', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    ane_fail(&err, ANE_ERR_FORMAT, "%s", huge);
    CHECK(strlen(err.message) == ANE_ERROR_MESSAGE_MAX - 1, "an overlong message is cut at the buffer");
    ane_fail_context(&err, "context");
    CHECK(strlen(err.message) < ANE_ERROR_MESSAGE_MAX && strncmp(err.message, "context: ", 9) == 0,
          "context on a full message still fits");

    const ane_status environmental[] = { ANE_ERR_IO, ANE_ERR_FORMAT, ANE_ERR_NOMEM, ANE_ERR_UNAVAILABLE };
    const ane_status programming[] = { ANE_OK, ANE_ERR_ARGUMENT, ANE_ERR_SHAPE, ANE_ERR_RANGE, ANE_ERR_CONSTRAINT,
                                       ANE_ERR_INTERRUPTED };
    for (size_t i = 0; i < sizeof environmental / sizeof *environmental; i++)
        CHECK(ane_status_is_environmental(environmental[i]), "%s is environmental", ane_status_name(environmental[i]));
    for (size_t i = 0; i < sizeof programming / sizeof *programming; i++)
        CHECK(!ane_status_is_environmental(programming[i]), "%s is not environmental", ane_status_name(programming[i]));
    for (int a = ANE_OK; a <= ANE_ERR_INTERRUPTED; a++) {
        CHECK(ane_status_name((ane_status)a) && ane_status_name((ane_status)a)[0], "status %d has a name", a);
        for (int b = ANE_OK; b < a; b++)
            CHECK(strcmp(ane_status_name((ane_status)a), ane_status_name((ane_status)b)) != 0, "statuses %d and %d share a name",
                  a, b);
    }
    return check_summary("status");
}
