/* Notes: the warnings a reader gives about input it accepts anyway (a weight file whose
 * record fields disagree with the MIL, as other writers' files do), a short bounded list
 * the caller shows the user. Equal lines are kept once. */
#ifndef ANE_BASE_NOTES_H
#define ANE_BASE_NOTES_H

#define ANE_NOTES_MAX 8
#define ANE_NOTE_LENGTH 256

typedef struct ane_notes {
    int count;                               /* lines kept */
    int dropped;                             /* lines beyond ANE_NOTES_MAX */
    char text[ANE_NOTES_MAX][ANE_NOTE_LENGTH];
} ane_notes;

/* Adds a line (NULL notes: nothing). */
void ane_notes_add(ane_notes *notes, const char *format, ...) __attribute__((format(printf, 2, 3)));

#endif
