/* Compile targets: which device the validator checks a program against. A target is the
 * constraint catalogue with its chip-dependent limits filled in and, where a probe on the
 * user's chip measured something else, individual rules turned off, demoted or promoted
 * (a probe report loads as a target, see lua/ane/probe.lua). Built-in targets:
 *
 *   generic    the catalogue as written: the strictest limits of the known chips (default)
 *   m1 .. m5   the per-family limits of constraints.md's newer facts
 *   unchecked  no catalogue rule at all: the program goes to the device as it is, so the
 *              device answers (what the probes need); allocation rules still hold at eval */
#ifndef ANE_PASSES_TARGET_H
#define ANE_PASSES_TARGET_H

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
    /* Numeric cliffs of the chip (constraints.md, newer facts), modelled by sim: */
    double matmul_inf_at;                 /* matmul outputs from this magnitude on are +-inf (0: fp16's own) */
    double offset_slice_limit;            /* slices at a non-zero last-axis offset turn |v| beyond it to +-inf (0: none) */
    int nan_to_zero;                      /* the chip does not propagate NaN: a NaN result reads as 0 */
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

void ane_target_set_op(uint64_t set[2], ane_op op);
int ane_target_has_op(const uint64_t set[2], ane_op op);

#endif
