/* Compile targets: which device the validator checks a program against. A target is the
 * constraint catalogue with its chip-dependent limits filled in and, where a probe on the
 * user's chip measured something else, individual rules turned off, demoted or promoted
 * (a probe report loads as a target, see lua/ane/probe.lua). Built-in targets:
 *
 *   generic    the catalogue as written: the strictest limits of the known chips (default)
 *   m1 .. m5   the per-family limits of docs/reference/constraints.md's newer facts
 *   unchecked  no catalogue rule at all: the program goes to the device as it is, so the
 *              device answers (what the probes need); allocation rules still hold at eval */
#ifndef ANE_PASSES_TARGET_H
#define ANE_PASSES_TARGET_H

#include <stddef.h>
#include <stdint.h>

#include "../ir/graph.h"

#define ANE_RULE_MAX 64        /* rule numbers ANE-01 .. ANE-63 */
#define ANE_TARGET_NAME_MAX 96

typedef enum ane_rule_level {
    ANE_RULE_AS_CATALOGUE = 0, /* the severity the validator gives the rule */
    ANE_RULE_ERROR,
    ANE_RULE_WARNING,
    ANE_RULE_OFF,
} ane_rule_level;

/* How the rows of a [1, C, 1, S] I/O port lie in its surface. The reports disagree, so it is
 * a property of the chip, read from what a loaded model reports where it reports it, else
 * from the target (probe row_layout measures it). */
typedef enum ane_io_rows {
    ANE_IO_ROWS_UNSET = 0,       /* generic's, once completed */
    ANE_IO_ROWS_64_BYTES,        /* each row starts at a multiple of 64 bytes (the catalogue's ANE-21) */
    ANE_IO_ROWS_PACKED,          /* rows back to back (Orion on M4: Orion/docs/ane_constraints.md §14) */
    ANE_IO_ROWS_32_ELEMENTS,     /* each row starts at a multiple of 32 elements, 128 bytes in fp32
                                    (ane-bridge-rs on M5) */
    ANE_IO_ROWS_COUNT
} ane_io_rows;

typedef struct ane_target {
    char name[ANE_TARGET_NAME_MAX];       /* "generic", "m4", or the report it came from */
    signed char level[ANE_RULE_MAX];      /* by rule number */
    int64_t max_conv_channels;            /* ANE-16 */
    int64_t max_kernel_width;             /* ANE-23 */
    int64_t min_io_width;                 /* ANE-21: narrower I/O is an error (generic: 1, a warning below 32) */
    int64_t max_spatial;                  /* ANE-31: longest last axis / contraction */
    int sdpa_mask_honoured;               /* ANE-06: the device applies attn_mask */
    int sdpa_mask_one_plane;              /* ... but a per-head mask's first plane to every head */
    int64_t max_weight_bytes;             /* ANE-32: baked weights one program holds */
    int cast_refused;                     /* ANE-33: the chip's compiler rejects cast (M1/M2) */
    /* Numeric cliffs of the chip (docs/reference/constraints.md, newer facts), modelled by sim: */
    double matmul_inf_at;                 /* matmul outputs from this magnitude on are +-inf (0: fp16's own) */
    double offset_slice_limit;            /* slices at a non-zero last-axis offset turn |v| beyond it to +-inf (0: none) */
    int nan_to_zero;                      /* the chip does not propagate NaN: a NaN result reads as 0 */
    int io_rows;                          /* ane_io_rows: the row layout of I/O surfaces */
    uint64_t ops_refused[2], ops_accepted[2]; /* bit sets by ane_op, measured on a chip */
} ane_target;

/* The generic target (zeroed first, so targets compare and hash byte for byte). */
void ane_target_generic(ane_target *out);
/* A copy of the target (generic when NULL) with every limit left at 0 set to generic's, so
 * zero-initialized compile options mean "generic". */
void ane_target_complete(const ane_target *target, ane_target *out);
/* A built-in target by name; 0 when there is none of that name. */
int ane_target_builtin(const char *name, ane_target *out);
/* The names of the built-in targets, comma-separated, for messages. */
const char *ane_target_names(void);
/* "ANE-21" -> 21; 0 when the text is no rule ID. */
int ane_rule_number(const char *id);
/* The level of a rule under this target. */
ane_rule_level ane_target_level(const ane_target *target, int rule);

/* "64-bytes", "packed", "32-elements" (NULL for UNSET), and back; 0 when the name is none. */
const char *ane_io_rows_name(int rows);
int ane_io_rows_from_name(const char *name, int *rows);
/* Bytes from one row's start to the next for `width` elements of `element` bytes. */
size_t ane_io_row_bytes(int rows, int64_t width, size_t element);

void ane_target_set_op(uint64_t set[2], ane_op op);
int ane_target_has_op(const uint64_t set[2], ane_op op);

#endif
