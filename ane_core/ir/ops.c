/* The op metadata table, expanded from the X-macro in ops.h, with each op's attribute
 * schema. An attribute row: { MIL name, Lua name, kind, field, default, positional, rule }.
 * The order of the rows is the order the emitter writes their const statements in; the
 * positional rows are the Lua builder's arguments after the operands, in order. */
#include "ops.h"

#include <stdio.h>
#include <string.h>

#include "graph.h"

#define AT(field) offsetof(ane_node_attrs, field)

static const ane_attr_spec attrs_conv[] = {
    {"pad_type", NULL, ANE_ATTR_PAD_TYPE, AT(pads), "valid", 0, NULL, 0},
    {"strides", "strides", ANE_ATTR_PAIR, AT(strides), "1", 0, NULL, 0},
    {"pad", "pads", ANE_ATTR_QUAD, AT(pads), "0", 0, NULL, 0},
    {"dilations", "dilations", ANE_ATTR_PAIR, AT(dilations), "1", 0, NULL, 0},
    {"groups", "groups", ANE_ATTR_INT, AT(groups), "1", 0, NULL, 0},
    {"bias", NULL, ANE_ATTR_REJECTED, 0, "conv takes no bias (ANE-13); add the bias with a separate add", 0, "ANE-13", 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_matmul[] = {
    {"transpose_x", "transpose_x", ANE_ATTR_BOOL, AT(transpose_x), "false", 0, NULL, 0},
    {"transpose_y", "transpose_y", ANE_ATTR_BOOL, AT(transpose_y), "false", 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_rsqrt[] = { /* MIL: 1 / sqrt(x + epsilon) */
    {"epsilon", "epsilon", ANE_ATTR_FLOAT, AT(epsilon), "1e-12", 0, NULL, 1},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_log[] = { /* MIL: log(x + epsilon) */
    {"epsilon", "epsilon", ANE_ATTR_FLOAT, AT(epsilon), "1e-45", 0, NULL, 1},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_gelu[] = { /* MIL: mode EXACT, TANH_APPROXIMATION or SIGMOID_APPROXIMATION */
    {"mode", "mode", ANE_ATTR_STRING, AT(mode), "EXACT", 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_inverse[] = { /* MIL: 1 / (x + epsilon) */
    {"epsilon", "epsilon", ANE_ATTR_FLOAT, AT(epsilon), "0.0001", 0, NULL, 1},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
/* quantize: clamp(round(input / scale + zero_point)) in output_dtype; dequantize:
 * (input - zero_point) * scale; scale and zero_point per tensor, or per index of `axis` */
static const ane_attr_spec attrs_quantize[] = {
    {"output_dtype", "output_dtype", ANE_ATTR_DTYPE, AT(dtype), "int8", 0, NULL, 0},
    {"axis", "axis", ANE_ATTR_INT, AT(axis), "0", 0, NULL, 1},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_dequantize[] = {
    {"axis", "axis", ANE_ATTR_INT, AT(axis), "0", 0, NULL, 1},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_softmax[] = {
    {"axis", "axis", ANE_ATTR_INT, AT(axis), "-1", 1, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_reduce[] = {
    {"axes", "axes", ANE_ATTR_INTS, AT(axes), NULL, 1, NULL, 0},
    {"keep_dims", "keep_dims", ANE_ATTR_BOOL, AT(keep_dims), "false", 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_reshape[] = {
    {"shape", "shape", ANE_ATTR_INTS, AT(shape), NULL, 1, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_transpose[] = {
    {"perm", "perm", ANE_ATTR_INTS, AT(perm), NULL, 1, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_slice_by_index[] = {
    {"begin", "begin", ANE_ATTR_INTS, AT(begin), NULL, 1, NULL, 0},
    {"end", "end", ANE_ATTR_INTS, AT(end), NULL, 1, NULL, 0},
    {"stride", NULL, ANE_ATTR_ONES, 0, NULL, 0, NULL, 0},
    {"begin_mask", NULL, ANE_ATTR_IGNORED, 0, NULL, 0, NULL, 0},
    {"end_mask", NULL, ANE_ATTR_IGNORED, 0, NULL, 0, NULL, 0},
    {"squeeze_mask", NULL, ANE_ATTR_IGNORED, 0, NULL, 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_slice_by_size[] = {
    {"begin", "begin", ANE_ATTR_INTS, AT(begin), NULL, 1, NULL, 0},
    {"size", "size", ANE_ATTR_INTS, AT(size), NULL, 1, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_cast[] = {
    {"dtype", "dtype", ANE_ATTR_DTYPE, AT(dtype), NULL, 1, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_clip[] = {
    {"alpha", "alpha", ANE_ATTR_FLOAT, AT(alpha), NULL, 1, NULL, 0},
    {"beta", "beta", ANE_ATTR_FLOAT, AT(beta), NULL, 1, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_concat[] = {
    {"axis", "axis", ANE_ATTR_INT, AT(axis), NULL, 1, NULL, 0},
    {"interleave", NULL, ANE_ATTR_FALSE, 0, "false", 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_split[] = {
    {"split_sizes", "sizes", ANE_ATTR_INTS, AT(sizes), "", 1, NULL, 0}, /* MIL may give num_splits instead */
    {"axis", "axis", ANE_ATTR_INT, AT(axis), NULL, 1, NULL, 0},
    {"num_splits", NULL, ANE_ATTR_IGNORED, 0, NULL, 0, NULL, 0},
    {NULL, "index", ANE_ATTR_PIECE, AT(index), "0", 0, NULL, 0}, /* which piece this node is */
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_pad[] = {
    {"pad", "amounts", ANE_ATTR_INTS, AT(amounts), NULL, 1, NULL, 0},
    {"mode", "mode", ANE_ATTR_STRING, AT(mode), "constant", 0, NULL, 0},
    {"constant_val", "value", ANE_ATTR_FLOAT, AT(alpha), "0", 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};
static const ane_attr_spec attrs_gather[] = {
    {"axis", "axis", ANE_ATTR_INT, AT(axis), "0", 1, NULL, 0},
    {"batch_dims", NULL, ANE_ATTR_ZERO, 0, NULL, 0, NULL, 0},
    {"validate_indices", NULL, ANE_ATTR_IGNORED, 0, NULL, 0, NULL, 0},
    {NULL, NULL, ANE_ATTR_END, 0, NULL, 0, NULL, 0},
};

const ane_op_info ane_op_table[ANE_OP_COUNT] = {
#define X(id, mil, operands, min_in, max_in, rule, flags, attrs) [ANE_OP_##id] = {mil, operands, min_in, max_in, rule, flags, attrs},
    ANE_OP_TABLE(X)
#undef X
};

int ane_attr_is_stored(const ane_attr_spec *spec) {
    return spec->kind >= ANE_ATTR_INT && spec->kind <= ANE_ATTR_PIECE;
}

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
