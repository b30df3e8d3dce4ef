/* NFC normalization (see normalize.h). */
#include "normalize.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct buffer {
    char *data;
    size_t length, capacity;
} buffer;

static int append(buffer *b, const void *bytes, size_t count) {
    if (b->length + count + 1 > b->capacity) {
        size_t capacity = (b->length + count + 1) * 2;
        char *grown = realloc(b->data, capacity);
        if (!grown) return 0;
        b->data = grown, b->capacity = capacity;
    }
    memcpy(b->data + b->length, bytes, count);
    b->length += count;
    b->data[b->length] = '\0';
    return 1;
}

/* Appends the NFC form of a valid UTF-8 run. */
static int append_normalized(buffer *b, const char *run, size_t length) {
    if (length == 0) return 1;
    utf8proc_uint8_t *normalized = NULL;
    utf8proc_ssize_t count = utf8proc_map((const utf8proc_uint8_t *)run, (utf8proc_ssize_t)length, &normalized,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (count < 0) return 0;
    int ok = append(b, normalized, (size_t)count);
    free(normalized);
    return ok;
}

ane_status ane_text_nfc(const char *text, size_t length, char **out, size_t *out_length, ane_error *err) {
    buffer b = {NULL, 0, 0};
    int ok = append(&b, "", 0);
    size_t run_start = 0, i = 0;
    while (ok && i < length) {
        utf8proc_int32_t code_point;
        utf8proc_ssize_t step = utf8proc_iterate((const utf8proc_uint8_t *)text + i, (utf8proc_ssize_t)(length - i),
                                                 &code_point);
        if (step > 0) {
            i += (size_t)step;
            continue;
        }
        /* an invalid byte: normalize the valid run before it, keep the byte as it is */
        ok = append_normalized(&b, text + run_start, i - run_start) && append(&b, text + i, 1);
        i++;
        run_start = i;
    }
    if (ok) ok = append_normalized(&b, text + run_start, length - run_start);
    if (!ok) {
        free(b.data);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory normalizing %zu bytes of text", length);
    }
    *out = b.data;
    *out_length = b.length;
    return ANE_OK;
}
