/* Notes (see notes.h). */
#include "notes.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void ane_notes_add(ane_notes *notes, const char *format, ...) {
    if (!notes) return;
    char line[ANE_NOTE_LENGTH];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof line, format, args);
    va_end(args);
    for (int i = 0; i < notes->count; i++)
        if (strcmp(notes->text[i], line) == 0) return;
    if (notes->count == ANE_NOTES_MAX) {
        notes->dropped++;
        return;
    }
    memcpy(notes->text[notes->count++], line, sizeof line);
}
