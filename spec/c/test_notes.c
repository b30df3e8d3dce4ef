/* base/notes.c: a bounded list of distinct lines: equal lines kept once, at most
 * ANE_NOTES_MAX kept and the rest counted as dropped, long lines cut to fit, NULL ignored. */
#include <string.h>

#include "ane_core/base/notes.h"
#include "check.h"

int main(void) {
    ane_notes notes = { 0 };
    ane_notes_add(&notes, "%s: record %d disagrees", "weights.bin", 1);
    ane_notes_add(&notes, "%s: record %d disagrees", "weights.bin", 1);
    CHECK(notes.count == 1 && strcmp(notes.text[0], "weights.bin: record 1 disagrees") == 0, "equal lines are kept once");
    for (int i = 2; i <= ANE_NOTES_MAX + 3; i++) ane_notes_add(&notes, "note %d", i);
    CHECK(notes.count == ANE_NOTES_MAX, "%d lines kept, the maximum is %d", notes.count, ANE_NOTES_MAX);
    /* 11 distinct lines in all: the first ANE_NOTES_MAX (8) kept, 3 dropped */
    CHECK(notes.dropped == 3, "%d lines dropped, expected 3", notes.dropped);
    CHECK(strcmp(notes.text[ANE_NOTES_MAX - 1], "note 8") == 0, "the first lines are the ones kept (last: %s)",
          notes.text[ANE_NOTES_MAX - 1]);

    ane_notes one = { 0 };
    char long_line[3 * ANE_NOTE_LENGTH];
    memset(long_line, 'x', sizeof long_line - 1);
    long_line[sizeof long_line - 1] = '\0';
    ane_notes_add(&one, "%s", long_line);
    CHECK(strlen(one.text[0]) == ANE_NOTE_LENGTH - 1, "a long line is cut to %d characters", ANE_NOTE_LENGTH - 1);
    ane_notes_add(NULL, "ignored %d", 1);
    return check_summary("notes");
}
