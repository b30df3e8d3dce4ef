/* The MIL text parser: the dialect the emitter writes and the variants of
 * docs/reference/mil-dialect.md (scalar and tensor literals including hex floats, tuples,
 * BLOBFILE references, attribute brackets, several functions, comments, any whitespace).
 * It builds the graph IR of one function, resolving BLOBFILE references against the
 * weight files given. Errors name `line:column`, quote the line and put a caret under
 * the offending token; rules of the constraint catalogue that show in the text (ANE-08,
 * ANE-10, ANE-12, ANE-13, ANE-14, ANE-22, ANE-24) are cited by ID. The parser never
 * crashes, leaks or hangs on any input (it is fuzzed: spec/fuzz/, scripts/fuzz.sh). */
#ifndef ANE_MIL_PARSE_H
#define ANE_MIL_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/notes.h"
#include "../base/status.h"
#include "../ir/graph.h"
#include "milblob.h" /* ane_mil_file */

/* Parses `text` and returns the graph of function `function` (NULL: "main", or the only
 * function). `source` labels errors (a file name or "<mil>"). Weight files are read as the
 * device reads them (mil/milblob.h); what they do differently from the format goes to
 * `notes` (may be NULL). */
ane_status ane_parse_mil(const char *text, size_t length, const char *source, const ane_mil_file *files,
                         int nfiles, const char *function, ane_graph **out, ane_notes *notes, ane_error *err);

#endif
