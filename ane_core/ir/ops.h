/* The op table: every IR op once, with its MIL name, operand names, shape rule and flags.
 *
 * X(ID, mil_name, operands, min_operands, max_operands, shape_rule, flags)
 *   operands   comma-separated MIL parameter names of the node's tensor operands, in order
 *              (a variadic op repeats its one name: concat's `values` tuple)
 *   shape_rule how the output shape and dtype follow from operands and attributes (shape.c)
 *   flags      ANE_OP_DIFFERENTIABLE, ANE_OP_ELEMENTWISE, ANE_OP_TRANSCENDENTAL
 * It expands into the ane_op enum and the ane_op_info table (ops.c), static-asserted to
 * have one row per enum value. The passes, the emitter, the MIL parser, the sim backend
 * and autodiff all dispatch through it. */
#ifndef ANE_IR_OPS_H
#define ANE_IR_OPS_H

#define ANE_OP_DIFFERENTIABLE 1
#define ANE_OP_ELEMENTWISE 2
#define ANE_OP_TRANSCENDENTAL 4

/* Short flag names for the rows below. */
#define OPF_D ANE_OP_DIFFERENTIABLE
#define OPF_E ANE_OP_ELEMENTWISE
#define OPF_T ANE_OP_TRANSCENDENTAL
#define ANE_OP_TABLE(X)                                                                        \
    X(INPUT, "input", "", 0, 0, SHAPE_SOURCE, 0)                                               \
    X(CONST, "const", "", 0, 0, SHAPE_SOURCE, 0)                                               \
    X(CONV, "conv", "x,weight", 2, 2, SHAPE_CONV, OPF_D)                                           \
    X(MATMUL, "matmul", "x,y", 2, 2, SHAPE_MATMUL, OPF_D)                                          \
    X(ADD, "add", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E)                                         \
    X(SUB, "sub", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E)                                         \
    X(MUL, "mul", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E)                                         \
    X(REAL_DIV, "real_div", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E)                               \
    X(MAXIMUM, "maximum", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E)                                 \
    X(MINIMUM, "minimum", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E)                                 \
    X(POW, "pow", "x,y", 2, 2, SHAPE_BROADCAST, OPF_D | OPF_E | OPF_T)                                     \
    X(NEG, "neg", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E)                                                \
    X(ABS, "abs", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E)                                                \
    X(EXP, "exp", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T)                                            \
    X(LOG, "log", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T)                                            \
    X(SQRT, "sqrt", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T)                                          \
    X(RSQRT, "rsqrt", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T)                                        \
    X(TANH, "tanh", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T)                                          \
    X(SIGMOID, "sigmoid", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E | OPF_T)                                    \
    X(RELU, "relu", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E)                                              \
    X(SOFTMAX, "softmax", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_T)                                        \
    X(REDUCE_SUM, "reduce_sum", "x", 1, 1, SHAPE_REDUCE, OPF_D)                                    \
    X(REDUCE_MEAN, "reduce_mean", "x", 1, 1, SHAPE_REDUCE, OPF_D)                                  \
    X(REDUCE_MAX, "reduce_max", "x", 1, 1, SHAPE_REDUCE, OPF_D)                                    \
    X(RESHAPE, "reshape", "x", 1, 1, SHAPE_RESHAPE, OPF_D)                                         \
    X(TRANSPOSE, "transpose", "x", 1, 1, SHAPE_TRANSPOSE, OPF_D)                                   \
    X(SLICE_BY_INDEX, "slice_by_index", "x", 1, 1, SHAPE_SLICE_INDEX, OPF_D)                       \
    X(SLICE_BY_SIZE, "slice_by_size", "x", 1, 1, SHAPE_SLICE_SIZE, OPF_D)                          \
    X(CAST, "cast", "x", 1, 1, SHAPE_CAST, OPF_D | OPF_E)                                              \
    X(CLIP, "clip", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E)                                              \
    X(SELECT, "select", "cond,a,b", 3, 3, SHAPE_SELECT, OPF_D | OPF_E)                                 \
    X(IDENTITY, "identity", "x", 1, 1, SHAPE_SAME, OPF_D | OPF_E)                                      \
    X(CONCAT, "concat", "values", 1, 64, SHAPE_CONCAT, OPF_D)                                      \
    X(SPLIT, "split", "x", 1, 1, SHAPE_SPLIT, OPF_D)                                               \
    X(PAD, "pad", "x", 1, 1, SHAPE_PAD, OPF_D)                                                     \
    X(GATHER, "gather", "x,indices", 2, 2, SHAPE_GATHER, OPF_D)                                    \
    X(SDPA, "scaled_dot_product_attention", "query,key,value,attn_mask", 3, 4, SHAPE_SDPA, 0)

typedef enum ane_shape_rule {
    SHAPE_SOURCE, SHAPE_SAME, SHAPE_BROADCAST, SHAPE_CONV, SHAPE_MATMUL, SHAPE_REDUCE,
    SHAPE_RESHAPE, SHAPE_TRANSPOSE, SHAPE_SLICE_INDEX, SHAPE_SLICE_SIZE, SHAPE_CAST,
    SHAPE_SELECT, SHAPE_CONCAT, SHAPE_SPLIT, SHAPE_PAD, SHAPE_GATHER, SHAPE_SDPA,
} ane_shape_rule;

typedef enum ane_op {
#define X(id, mil, operands, min_in, max_in, rule, flags) ANE_OP_##id,
    ANE_OP_TABLE(X)
#undef X
    ANE_OP_COUNT
} ane_op;

typedef struct ane_op_info {
    const char *name;       /* the MIL op name, also the builder's name in Lua */
    const char *operands;   /* "x,y" */
    int min_operands, max_operands;
    ane_shape_rule shape_rule;
    int flags;
} ane_op_info;

extern const ane_op_info ane_op_table[ANE_OP_COUNT];

/* The op with this MIL name; returns 0 when there is none. */
int ane_op_from_name(const char *name, ane_op *out);

/* The MIL parameter name of operand i ("x", "weight", ...); variadic ops repeat the last. */
const char *ane_op_operand_name(ane_op op, int i, char *buf, int size);

#endif
