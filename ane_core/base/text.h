/* A growable text buffer with printf-style appends (dumps, emitted MIL). */
#ifndef ANE_BASE_TEXT_H
#define ANE_BASE_TEXT_H

#include <stddef.h>

typedef struct ane_text {
    char *data;       /* NUL-terminated once anything was appended; malloc'd */
    size_t length, capacity;
    int failed;       /* set when memory ran out; the text is then incomplete */
} ane_text;

void ane_text_append(ane_text *text, const char *format, ...) __attribute__((format(printf, 2, 3)));
void ane_text_append_bytes(ane_text *text, const void *bytes, size_t size);
/* Room for `extra` more bytes in one allocation of exactly that size (appends that fit then
 * neither reallocate nor copy): for a text whose length is known ahead, as a MILBlob's. */
void ane_text_reserve(ane_text *text, size_t extra);
void ane_text_free(ane_text *text);

#endif
