/* The op table: every IR op once, with its MIL name, operand names, shape rule, flags and
 * attribute schema.
 *
 * X(ID, mil_name, operands, min_operands, max_operands, shape_rule, flags, attributes)
 *   operands   comma-separated MIL parameter names of the node's tensor operands, in order
 *              (a variadic op repeats its one name: concat's `values` tuple)
 *   shape_rule how the output shape and dtype follow from operands and attributes (shape.c)
 *   flags      ANE_OP_DIFFERENTIABLE (autodiff has its VJP), ANE_OP_ELEMENTWISE, ANE_OP_TRANSCENDENTAL,
 *              ANE_OP_HOST_ONLY (the device rejects it; read by the backends' supports_op)
 *   attributes the op's attribute schema (ops.c: attrs_<name>, or NULL): for each attribute
 *              its MIL parameter name, its name in the Lua builder, its kind, where it lives
 *              in ane_node_attrs and its default. The emitter, the MIL parser, the graph dump
 *              and the Lua builders all read attributes through it.
 * It expands into the ane_op enum and the ane_op_info table (ops.c). */
#ifndef ANE_IR_OPS_H
#define ANE_IR_OPS_H

#define ANE_OP_DIFFERENTIABLE 1
#define ANE_OP_ELEMENTWISE 2
#define ANE_OP_TRANSCENDENTAL 4
#define ANE_OP_HOST_ONLY 8 /* the device compiler rejects it (ANE-01 concat, ANE-25 gather), or may (ANE-10 gelu,
                            * disputed): the cpu profile, or a target whose probe report accepted it */

/* Short flag names for the rows below. */
#define OPF_D ANE_OP_DIFFERENTIABLE
#define OPF_E ANE_OP_ELEMENTWISE
#define OPF_T ANE_OP_TRANSCENDENTAL
#define OPF_H ANE_OP_HOST_ONLY
#define ANE_OP_TABLE(X)                                                                        \
    X(INPUT, "input", "", 0, 0, SHAPE_SOURCE, 0, NULL)                                               \
    X(CONST, "const", "", 0, 0, SHAPE_SOURCE, 0, NULL)                                               \
    X(CONV, "conv", "x,weight", 2, 2, SHAPE_CONV, OPF_D, attrs_conv)                                           \
    X(MATMUL, "matmul", "x,y", 2, 2, SHAPE_MATMUL, OPF_D, attrs_matmul)                                          \
    X(ADD, "add", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E, NULL)                                         \
    X(SUB, "sub", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E, NULL)                                         \
    X(MUL, "mul", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E, NULL)                                         \
    X(REAL_DIV, "real_div", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E, NULL)                               \
    X(MAXIMUM, "maximum", "x,y", 2, 2, SHAPE_BROADCAST, OPF_E, NULL)                                 \
    X(MINIMUM, "minimum", "x,y", 2, 2, SHAPE_BROADCAST, OPF_E, NULL)                                 \
    X(POW, "pow", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E | OPF_T, NULL)                                     \
    X(NEG, "neg", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E, NULL)                                                \
    X(ABS, "abs", "x", 1, 1, SHAPE_SAME, OPF_E, NULL)                                                \
    X(EXP, "exp", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, NULL)                                            \
    X(LOG, "log", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, attrs_log)                                       \
    X(SQRT, "sqrt", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, NULL)                                          \
    X(RSQRT, "rsqrt", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, attrs_rsqrt)                                        \
    X(INVERSE, "inverse", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E, attrs_inverse)                                   \
    X(TANH, "tanh", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, NULL)                                          \
    X(SIGMOID, "sigmoid", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, NULL)                                    \
    X(SILU, "silu", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, NULL)                                          \
    X(SOFTPLUS, "softplus", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T, NULL)                                    \
    X(GELU, "gelu", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T | OPF_H, attrs_gelu)                                      \
    X(RELU, "relu", "x", 1, 1, SHAPE_SAME, OPF_E, NULL)                                              \
    X(SOFTMAX, "softmax", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_T, attrs_softmax)                                        \
    X(REDUCE_SUM, "reduce_sum", "x", 1, 1, SHAPE_REDUCE, OPF_D, attrs_reduce)                                    \
    X(REDUCE_MEAN, "reduce_mean", "x", 1, 1, SHAPE_REDUCE, OPF_D, attrs_reduce)                                  \
    X(REDUCE_L2_NORM, "reduce_l2_norm", "x", 1, 1, SHAPE_REDUCE, OPF_D, attrs_reduce)                          \
    X(REDUCE_MAX, "reduce_max", "x", 1, 1, SHAPE_REDUCE, 0, attrs_reduce)                                    \
    X(RESHAPE, "reshape", "x", 1, 1, SHAPE_RESHAPE, OPF_D, attrs_reshape)                                         \
    X(TRANSPOSE, "transpose", "x", 1, 1, SHAPE_TRANSPOSE, OPF_D, attrs_transpose)                                   \
    X(SLICE_BY_INDEX, "slice_by_index", "x", 1, 1, SHAPE_SLICE_INDEX, OPF_D, attrs_slice_by_index)                       \
    X(SLICE_BY_SIZE, "slice_by_size", "x", 1, 1, SHAPE_SLICE_SIZE, OPF_D, attrs_slice_by_size)                          \
    X(CAST, "cast", "x", 1, 1, SHAPE_CAST, OPF_D | OPF_E, attrs_cast)                                              \
    X(CLIP, "clip", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E, attrs_clip)                                              \
    X(QUANTIZE, "quantize", "input,scale,zero_point", 2, 3, SHAPE_QUANTIZE, OPF_E, attrs_quantize)                 \
    X(DEQUANTIZE, "dequantize", "input,scale,zero_point", 2, 3, SHAPE_QUANTIZE, OPF_E, attrs_dequantize)           \
    X(SELECT, "select", "cond,a,b", 3, 3, SHAPE_SELECT, OPF_E, NULL)                                 \
    X(IDENTITY, "identity", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E, NULL)                                      \
    X(CONCAT, "concat", "values", 1, 64, SHAPE_CONCAT, OPF_H, attrs_concat)                                      \
    X(SPLIT, "split", "x", 1, 1, SHAPE_SPLIT, 0, attrs_split)                                               \
    X(PAD, "pad", "x", 1, 1, SHAPE_PAD, 0, attrs_pad)                                                     \
    X(GATHER, "gather", "x,indices", 2, 2, SHAPE_GATHER, OPF_H, attrs_gather)                                    \
    X(SDPA, "scaled_dot_product_attention", "query,key,value,attn_mask", 3, 4, SHAPE_SDPA, 0, NULL)

typedef enum ane_shape_rule {
    SHAPE_SOURCE, SHAPE_SAME, SHAPE_BROADCAST, SHAPE_CONV, SHAPE_MATMUL, SHAPE_REDUCE,
    SHAPE_RESHAPE, SHAPE_TRANSPOSE, SHAPE_SLICE_INDEX, SHAPE_SLICE_SIZE, SHAPE_CAST,
    SHAPE_SELECT, SHAPE_CONCAT, SHAPE_SPLIT, SHAPE_PAD, SHAPE_GATHER, SHAPE_SDPA, SHAPE_QUANTIZE,
} ane_shape_rule;

typedef enum ane_op {
#define X(id, mil, operands, min_in, max_in, rule, flags, attrs) ANE_OP_##id,
    ANE_OP_TABLE(X)
#undef X
    ANE_OP_COUNT
} ane_op;

#include <stddef.h>

/* How an attribute is stored (in ane_node_attrs), written to MIL and taken from Lua. */
typedef enum ane_attr_kind {
    ANE_ATTR_END,        /* ends an op's attribute list */
    ANE_ATTR_INT,        /* int64_t; MIL int32 const */
    ANE_ATTR_BOOL,       /* int; MIL bool const */
    ANE_ATTR_FLOAT,      /* double; MIL scalar const of the first operand's dtype */
    ANE_ATTR_INTS,       /* ane_int_list; MIL tensor<int32, [n]> const */
    ANE_ATTR_PAIR,       /* int64_t[2] */
    ANE_ATTR_QUAD,       /* int64_t[4] */
    ANE_ATTR_DTYPE,      /* ane_dtype; MIL string const ("fp16") */
    ANE_ATTR_STRING,     /* char[24]; MIL string const */
    ANE_ATTR_PIECE,      /* int64_t set by the builder itself (split's piece index): dumped, never read */
    /* MIL-only parameters, derived or fixed: */
    ANE_ATTR_PAD_TYPE,   /* conv's pad_type: written "custom" when the QUAD at `offset` is non-zero, else
                          * "valid"; read as valid, same (pads computed) or custom (pads as given) */
    ANE_ATTR_FALSE,      /* a bool the device needs false (concat's interleave): written false, read false */
    /* Parameters the parser accepts but does not store: */
    ANE_ATTR_ONES,       /* a list that must be all ones (slice strides) */
    ANE_ATTR_ZERO,       /* an int that must be 0 (gather's batch_dims) */
    ANE_ATTR_IGNORED,    /* any value, no effect here */
    ANE_ATTR_REJECTED,   /* refused; `fallback` holds the message (with its constraint ID) */
} ane_attr_kind;

typedef struct ane_attr_spec {
    const char *mil;       /* the MIL parameter name */
    const char *lua;       /* the Lua builder's name for it; NULL when Lua does not set it */
    ane_attr_kind kind;
    size_t offset;         /* offsetof(ane_node_attrs, field) */
    const char *fallback;  /* the default, as text ("1", "-1", "false", "constant"); NULL: required */
    int positional;        /* Lua: the builder's next positional argument (else an options field) */
    const char *rule;      /* a constraint ID the parser enforces for it ("ANE-12": a named const) */
    int elided;            /* written to MIL only when it differs from its default (rsqrt's epsilon) */
} ane_attr_spec;

typedef struct ane_op_info {
    const char *name;       /* the MIL op name, also the builder's name in Lua */
    const char *operands;   /* "x,y" */
    int min_operands, max_operands;
    ane_shape_rule shape_rule;
    int flags;
    const ane_attr_spec *attrs; /* ends with ANE_ATTR_END; NULL when the op has none */
} ane_op_info;

/* Iterates the attribute specs of an op. */
#define ANE_FOR_EACH_ATTR(op, spec) \
    for (const ane_attr_spec *spec = ane_op_table[op].attrs; spec && spec->kind != ANE_ATTR_END; spec++)

/* Whether an attribute is stored in ane_node_attrs (and so dumped and set from Lua or MIL). */
int ane_attr_is_stored(const ane_attr_spec *spec);

extern const ane_op_info ane_op_table[ANE_OP_COUNT];

/* The op with this MIL name; returns 0 when there is none. */
int ane_op_from_name(const char *name, ane_op *out);

/* The MIL parameter name of operand i ("x", "weight", ...); variadic ops repeat the last. */
const char *ane_op_operand_name(ane_op op, int i, char *buf, int size);

#endif
