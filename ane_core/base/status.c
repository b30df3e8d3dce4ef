/* Status codes and error messages: formatting helpers shared by the whole core. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

ane_status ane_fail(ane_error *err, ane_status status, const char *format, ...) {
    if (err) {
        va_list args;
        va_start(args, format);
        vsnprintf(err->message, sizeof err->message, format, args);
        va_end(args);
        err->status = status;
    }
    return status;
}

ane_status ane_fail_context(ane_error *err, const char *format, ...) {
    if (!err) return ANE_ERR_ARGUMENT;
    char context[ANE_ERROR_MESSAGE_MAX];
    va_list args;
    va_start(args, format);
    vsnprintf(context, sizeof context, format, args);
    va_end(args);
    /* Shift the old message right and put "<context>: " in front, truncating the tail. */
    size_t context_length = strlen(context), old_length = strlen(err->message);
    size_t prefix = context_length + 2 < sizeof err->message ? context_length + 2 : sizeof err->message - 1;
    size_t kept = old_length + prefix < sizeof err->message ? old_length : sizeof err->message - 1 - prefix;
    memmove(err->message + prefix, err->message, kept);
    err->message[prefix + kept] = '\0';
    memcpy(err->message, context, prefix >= 2 ? prefix - 2 : prefix);
    if (prefix >= 2) memcpy(err->message + prefix - 2, ": ", 2);
    return err->status;
}

int ane_status_is_environmental(ane_status status) {
    switch (status) {
    case ANE_ERR_IO:
    case ANE_ERR_FORMAT:
    case ANE_ERR_NOMEM:
    case ANE_ERR_UNAVAILABLE:
        return 1;
    default:
        return 0;
    }
}

const char *ane_status_name(ane_status status) {
    switch (status) {
    case ANE_OK: return "ok";
    case ANE_ERR_ARGUMENT: return "bad argument";
    case ANE_ERR_SHAPE: return "shape mismatch";
    case ANE_ERR_RANGE: return "out of range";
    case ANE_ERR_CONSTRAINT: return "constraint violated";
    case ANE_ERR_IO: return "i/o error";
    case ANE_ERR_FORMAT: return "malformed input";
    case ANE_ERR_NOMEM: return "out of memory";
    case ANE_ERR_UNAVAILABLE: return "unavailable";
    case ANE_ERR_INTERRUPTED: return "interrupted";
    }
    return "unknown status";
}

void ane_error_clear(ane_error *err) {
    if (err) {
        err->status = ANE_OK;
        err->message[0] = '\0';
    }
}
