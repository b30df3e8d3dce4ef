/* Status codes and error messages of the core.
 *
 * Every core function that can fail returns an ane_status and, when it fails, fills an
 * ane_error with a message that names the object at fault (file and byte offset, tensor
 * name, argument). The core never exits or aborts on user input; the caller decides
 * what to do with the error (the Lua binding turns environmental failures into
 * `nil, message` and programming errors into Lua errors). */
#ifndef ANE_BASE_STATUS_H
#define ANE_BASE_STATUS_H

#include <stddef.h>

typedef enum ane_status {
    ANE_OK = 0,
    /* Programming errors: the caller passed something that can never work. */
    ANE_ERR_ARGUMENT,    /* bad argument value (unknown dtype, negative size, ...) */
    ANE_ERR_SHAPE,       /* shapes or dtypes do not fit together */
    ANE_ERR_RANGE,       /* index out of bounds */
    ANE_ERR_CONSTRAINT,  /* a program breaks a rule of the ANE constraint catalogue */
    /* Environmental errors: the world is not as expected. */
    ANE_ERR_IO,          /* a file could not be opened, read, written or mapped */
    ANE_ERR_FORMAT,      /* a file or text is malformed */
    ANE_ERR_NOMEM,       /* out of memory */
    ANE_ERR_UNAVAILABLE, /* a backend or device is not available on this machine */
    ANE_ERR_INTERRUPTED, /* the user interrupted a long operation (Ctrl-C): neither kind; the
                          * binding raises it as an interruption of its own */
} ane_status;

#define ANE_ERROR_MESSAGE_MAX 768

typedef struct ane_error {
    ane_status status;
    char message[ANE_ERROR_MESSAGE_MAX];
} ane_error;

/* Records a failure in `err` (which may be NULL) and returns `status`, so that a failing
 * path reads `return ane_fail(err, ANE_ERR_IO, "%s: cannot open: %s", path, why);`. */
ane_status ane_fail(ane_error *err, ane_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends context to an existing message: "<context>: <old message>". */
ane_status ane_fail_context(ane_error *err, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* True for statuses caused by the environment rather than by the calling program. */
int ane_status_is_environmental(ane_status status);

const char *ane_status_name(ane_status status);

void ane_error_clear(ane_error *err);

#endif
