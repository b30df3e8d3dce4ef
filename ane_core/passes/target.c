/* The built-in compile targets (see target.h). The per-family numbers are docs/reference/constraints.md's
 * "newer facts": spatial axis 16,384 on M1-M3 and 65,536 on M4/M5, conv kernels at most 13
 * wide on M1 (15 elsewhere); `generic` takes the strictest of each. */
#include "target.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "passes.h"

void ane_target_generic(ane_target *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "generic");
    out->max_conv_channels = ANE_MAX_CONV_CHANNELS;
    out->max_kernel_width = 13;  /* M1's limit: the strictest */
    out->min_io_width = 1;       /* ANE-21 below 32 is a warning: disputed, probe it */
    out->max_spatial = 16384;
    out->max_weight_bytes = 2ll << 30; /* ~2 GB compile, 3.4 GB fail (newer facts) */
    out->io_rows = ANE_IO_ROWS_64_BYTES; /* ANE-21 as the catalogue has it; M4 and M5 differ */
}

void ane_target_complete(const ane_target *target, ane_target *out) {
    ane_target generic;
    ane_target_generic(&generic);
    if (!target) {
        *out = generic;
        return;
    }
    *out = *target;
    if (!out->name[0]) memcpy(out->name, generic.name, sizeof out->name);
    if (!out->max_conv_channels) out->max_conv_channels = generic.max_conv_channels;
    if (!out->max_kernel_width) out->max_kernel_width = generic.max_kernel_width;
    if (!out->min_io_width) out->min_io_width = generic.min_io_width;
    if (!out->max_spatial) out->max_spatial = generic.max_spatial;
    if (!out->max_weight_bytes) out->max_weight_bytes = generic.max_weight_bytes;
    if (!out->io_rows) out->io_rows = generic.io_rows;
}

/* Per family: kernel width (ANE-23), axis (ANE-31), cast rejected (ANE-33, M1/M2), the
 * numeric cliffs (matmul outputs to +-inf near 32,752, last-axis slices at an offset
 * saturating above 4,094 before A16 (M1, M2), NaN not propagated), and the I/O row layout
 * each family was seen to use (M4 packed: Orion; M5 32 elements: ane-bridge-rs; M1-M3 have no
 * report and keep the catalogue's 64 bytes). */
static const struct {
    const char *name;
    int64_t kernel_width, spatial;
    int cast_refused;
    double offset_slice_limit;
    int io_rows;
} families[] = {
    {"m1", 13, 16384, 1, 4094, ANE_IO_ROWS_64_BYTES}, {"m2", 15, 16384, 1, 4094, ANE_IO_ROWS_64_BYTES},
    {"m3", 15, 16384, 0, 0, ANE_IO_ROWS_64_BYTES},    {"m4", 15, 65536, 0, 0, ANE_IO_ROWS_PACKED},
    {"m5", 15, 65536, 0, 0, ANE_IO_ROWS_32_ELEMENTS},
};

static const char *const io_rows_names[ANE_IO_ROWS_COUNT] = {NULL, "64-bytes", "packed", "32-elements"};

const char *ane_io_rows_name(int rows) { return rows > 0 && rows < ANE_IO_ROWS_COUNT ? io_rows_names[rows] : NULL; }

int ane_io_rows_from_name(const char *name, int *rows) {
    for (int i = 1; i < ANE_IO_ROWS_COUNT; i++)
        if (name && strcmp(name, io_rows_names[i]) == 0) {
            *rows = i;
            return 1;
        }
    return 0;
}

size_t ane_io_row_bytes(int rows, int64_t width, size_t element) {
    size_t packed = (size_t)width * element;
    if (rows == ANE_IO_ROWS_PACKED) return packed;
    if (rows == ANE_IO_ROWS_32_ELEMENTS) return ((size_t)width + 31) / 32 * 32 * element;
    return (packed + 63) / 64 * 64;
}

int ane_target_builtin(const char *name, ane_target *out) {
    ane_target_generic(out);
    if (strcmp(name, "generic") == 0) return 1;
    if (strcmp(name, "unchecked") == 0) {
        snprintf(out->name, sizeof out->name, "unchecked");
        for (int i = 1; i < ANE_RULE_MAX; i++) out->level[i] = ANE_RULE_OFF;
        out->max_conv_channels = out->max_kernel_width = out->max_spatial = out->max_weight_bytes = INT64_MAX;
        out->min_io_width = 1;
        for (int op = 0; op < ANE_OP_COUNT; op++) ane_target_set_op(out->ops_accepted, (ane_op)op);
        return 1;
    }
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        if (strcmp(name, families[i].name) == 0) {
            snprintf(out->name, sizeof out->name, "%s", name);
            out->max_kernel_width = families[i].kernel_width;
            out->max_spatial = families[i].spatial;
            out->cast_refused = families[i].cast_refused;
            out->offset_slice_limit = families[i].offset_slice_limit;
            out->matmul_inf_at = 32752;
            out->nan_to_zero = 1;
            out->io_rows = families[i].io_rows;
            return 1;
        }
    return 0;
}

const char *ane_target_names(void) { return "generic, m1, m2, m3, m4, m5, unchecked"; }

int ane_rule_number(const char *id) {
    char *end;
    if (strncmp(id, "ANE-", 4) != 0) return 0;
    long n = strtol(id + 4, &end, 10);
    return *end == '\0' && n > 0 && n < ANE_RULE_MAX ? (int)n : 0;
}

ane_rule_level ane_target_level(const ane_target *target, int rule) {
    return target && rule > 0 && rule < ANE_RULE_MAX ? (ane_rule_level)target->level[rule] : ANE_RULE_AS_CATALOGUE;
}

void ane_target_set_op(uint64_t set[2], ane_op op) { set[op / 64] |= 1ull << (op % 64); }
int ane_target_has_op(const uint64_t set[2], ane_op op) { return (set[op / 64] >> (op % 64)) & 1; }

_Static_assert(ANE_OP_COUNT <= 128, "ane_target's op sets hold 128 ops");
