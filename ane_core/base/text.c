/* The growable text buffer (see text.h). */
#include "text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The buffer reallocated to `capacity` bytes (a failure is remembered); returns 0 on failure. */
static int resize(ane_text *text, size_t capacity) {
    char *data = realloc(text->data, capacity);
    if (!data) {
        text->failed = 1;
        return 0;
    }
    if (!text->data) data[0] = '\0';
    text->data = data;
    text->capacity = capacity;
    return 1;
}

/* Room for `extra` more bytes and the terminator, growing by doubling. */
static int reserve(ane_text *text, size_t extra) {
    if (text->failed) return 0;
    if (text->length + extra + 1 <= text->capacity) return 1;
    size_t capacity = text->capacity ? text->capacity : 4096;
    while (capacity < text->length + extra + 1) capacity *= 2;
    return resize(text, capacity);
}

void ane_text_reserve(ane_text *text, size_t extra) {
    if (text->failed || text->length + extra + 1 <= text->capacity) return;
    resize(text, text->length + extra + 1);
}

/* Formatted once into the room there is; only a text that does not fit is formatted again
 * after growing (formatting is most of an emitter's time: in a process that links
 * libquadmath, as OpenBLAS's libgfortran does, every printf takes glibc's slow path). */
void ane_text_append(ane_text *text, const char *format, ...) {
    if (!reserve(text, 0)) return;
    size_t room = text->capacity - text->length;
    va_list args;
    va_start(args, format);
    int needed = vsnprintf(text->data + text->length, room, format, args);
    va_end(args);
    if (needed < 0) {
        text->data[text->length] = '\0';
        return;
    }
    if ((size_t)needed >= room) {
        if (!reserve(text, (size_t)needed)) {
            text->data[text->length] = '\0';
            return;
        }
        va_start(args, format);
        vsnprintf(text->data + text->length, text->capacity - text->length, format, args);
        va_end(args);
    }
    text->length += (size_t)needed;
}

void ane_text_append_bytes(ane_text *text, const void *bytes, size_t size) {
    if (!reserve(text, size)) return;
    memcpy(text->data + text->length, bytes, size);
    text->length += size;
    text->data[text->length] = '\0';
}

void ane_text_free(ane_text *text) {
    free(text->data);
    memset(text, 0, sizeof *text);
}
