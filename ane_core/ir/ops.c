/* The op metadata table, expanded from the X-macro in ops.h. */
#include "ops.h"

#include <stdio.h>
#include <string.h>

const ane_op_info ane_op_table[ANE_OP_COUNT] = {
#define X(id, mil, operands, min_in, max_in, rule, flags) {mil, operands, min_in, max_in, rule, flags},
    ANE_OP_TABLE(X)
#undef X
};

/* One row per enum value, counted independently of the enum. */
#define X(id, mil, operands, min_in, max_in, rule, flags) +1
_Static_assert(0 ANE_OP_TABLE(X) == ANE_OP_COUNT, "op table rows and ane_op disagree");
#undef X

int ane_op_from_name(const char *name, ane_op *out) {
    for (int i = 0; i < ANE_OP_COUNT; i++)
        if (strcmp(ane_op_table[i].name, name) == 0) {
            *out = (ane_op)i;
            return 1;
        }
    return 0;
}

const char *ane_op_operand_name(ane_op op, int i, char *buf, int size) {
    const char *list = ane_op_table[op].operands;
    const char *start = list;
    for (int k = 0; k < i; k++) {
        const char *comma = strchr(start, ',');
        if (!comma) break; /* variadic: the last name repeats */
        start = comma + 1;
    }
    const char *end = strchr(start, ',');
    int length = end ? (int)(end - start) : (int)strlen(start);
    snprintf(buf, (size_t)size, "%.*s", length, start);
    return buf;
}
