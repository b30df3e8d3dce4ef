/* The MIL text emitter: a graph becomes one MIL program (text) plus one MILBlob weight
 * file, in the dialect of docs/reference/mil-dialect.md. Deterministic: the same graph gives
 * identical bytes. */
#ifndef ANE_MIL_EMIT_H
#define ANE_MIL_EMIT_H

#include <stddef.h>

#include "../base/status.h"
#include "../ir/graph.h"
#include "milblob.h"

#define ANE_MIL_WEIGHT_PATH "@model_path/weights/weight.bin"

/* Float consts with at least this many elements go to the weight file; smaller ones (and
 * every integer/bool const) are written inline. */
#define ANE_MIL_INLINE_MAX 16

typedef struct ane_mil_program {
    char *text;             /* MIL text, NUL-terminated (malloc'd) */
    size_t text_length;
    unsigned char *weights; /* the MILBlob file (malloc'd; NULL when there are no blobs or it is by reference) */
    size_t weights_size;
    int blobs;              /* records in the weight file */
    ane_milblob_writer by_reference; /* ane_emit_mil_by_reference's file (its pieces: weight_file) */
    ane_mil_file weight_file; /* the weight file as a program takes it (path ANE_MIL_WEIGHT_PATH; size 0: none) */
} ane_mil_program;

ane_status ane_emit_mil(const ane_graph *g, ane_mil_program *out, ane_error *err);
/* The same MIL text, and the same weight file with the large consts' bytes left where the
 * graph holds them (pieces, milblob.h): for a compile, which reads them while the graph
 * lives, without copying every weight into the file first. */
ane_status ane_emit_mil_by_reference(const ane_graph *g, ane_mil_program *out, ane_error *err);
void ane_mil_program_free(ane_mil_program *program);

/* The shortest decimal that reads back to exactly `value` in `dtype` (fp16 or fp32), or a
 * hex float when a decimal would need an exponent; "inf", "-inf", "nan" for the specials. */
const char *ane_mil_float_literal(double value, ane_dtype dtype, char *buf, size_t size);

#endif
