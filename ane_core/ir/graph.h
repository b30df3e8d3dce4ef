/* The graph IR: nodes in creation order (which is a topological order), each with an op
 * from the op table, a name that is a valid MIL identifier, a dtype, a static shape of
 * rank 0..5, operands, and attributes. Builders check shapes and dtypes as nodes are
 * created and name the node in their errors. Graphs own their nodes in an arena freed at
 * once; const nodes hold a reference to their host tensor. */
#ifndef ANE_IR_GRAPH_H
#define ANE_IR_GRAPH_H

#include <stdint.h>

#include "../base/arena.h"
#include "../base/status.h"
#include "../tensor/quantize.h"
#include "../tensor/tensor.h"
#include "ops.h"

#define ANE_IR_MAX_RANK 5
#define ANE_NAME_MAX 64
#define ANE_LIST_MAX 10 /* 2 x rank, for pad amounts */

typedef struct ane_int_list {
    int count;
    int64_t values[ANE_LIST_MAX];
} ane_int_list;

/* Attributes; each op reads only its own fields (listed per field), and the op table's
 * attribute schema (ops.c) says which, with their MIL and Lua names and defaults. */
typedef struct ane_node_attrs {
    int64_t strides[2], dilations[2]; /* conv */
    int64_t pads[4];                  /* conv: top, bottom, left, right */
    int64_t groups;                   /* conv */
    int transpose_x, transpose_y;     /* matmul */
    int64_t axis;                     /* softmax, concat, split, gather, (de)quantize (normalized >= 0) */
    ane_int_list axes;                /* reduce_* (normalized, ascending) */
    int keep_dims;                    /* reduce_* */
    ane_int_list shape;               /* reshape: the target shape (resolved, no -1) */
    ane_int_list perm;                /* transpose */
    ane_int_list begin, end, size;    /* slice_by_index (begin, end), slice_by_size (begin, size) */
    ane_dtype dtype;                  /* cast: the target dtype; quantize: output_dtype */
    double alpha, beta;               /* clip: [alpha, beta]; pad: alpha = constant value */
    double epsilon;                   /* rsqrt: 1 / sqrt(x + epsilon); inverse: 1 / (x + epsilon); log(x + epsilon) */
    ane_int_list amounts;             /* pad: (before, after) pairs for the last count/2 dims */
    char mode[24];                    /* pad: "constant", "reflect" or "replicate"; gelu: "EXACT",
                                         "TANH_APPROXIMATION" or "SIGMOID_APPROXIMATION" */
    ane_int_list sizes;               /* split: sizes along axis */
    int64_t index;                    /* split: which piece this node is */
} ane_node_attrs;

typedef struct ane_node ane_node;
struct ane_node {
    int id;                           /* position in graph->nodes */
    ane_op op;
    char name[ANE_NAME_MAX];
    ane_dtype dtype;
    int rank;
    int64_t shape[ANE_IR_MAX_RANK];   /* [rank] */
    int noperands;
    ane_node **operands;              /* [noperands], in the graph's arena */
    ane_node_attrs attrs;
    ane_tensor value;                 /* const: the values (one reference owned); encoded: the data */
    ane_weight_encoding encoding;     /* const: DENSE, or quantized per row (tensor/quantize.h) */
    ane_tensor table;                 /* encoded const: fp32 scales [rows] or palettes [rows, 16] */
    int dead;                         /* removed by a pass; ignored from then on */
    int64_t working_set_bytes;        /* SRAM annotation: operands + output, in bytes */
    struct {                          /* a const parsed from a BLOBFILE: where its bytes are */
        int file;                     /* index among the program's weight files */
        uint64_t offset, size;        /* of the data in that file; size 0 = not from a file */
    } blob;
};

typedef struct ane_graph_output {
    char name[ANE_NAME_MAX];
    ane_node *node;
} ane_graph_output;

typedef struct ane_graph {
    char name[ANE_NAME_MAX];
    ane_arena arena;
    ane_node **nodes;                 /* [count], creation order */
    int count, capacity;
    ane_graph_output *outputs;        /* [noutputs], in the order they were declared */
    int noutputs, outputs_capacity;
    int auto_names;                   /* counter for generated names */
    uint64_t *names;                  /* [names_capacity] ane_graph_find's index: per entry the
                                         name's hash << 32 | node id + 1 (0: empty); an entry of a
                                         node since renamed or removed stays until a rebuild */
    int names_capacity, names_count;  /* a power of two (0: no index yet, or memory ran out) */
} ane_graph;

ane_status ane_graph_new(const char *name, ane_graph **out, ane_error *err);
void ane_graph_free(ane_graph *graph);

int ane_is_valid_identifier(const char *name);

/* Builders. `name` may be NULL or "" for a generated one (`<op>_<n>`). */
ane_status ane_graph_input(ane_graph *g, const char *name, ane_dtype dtype, int rank, const int64_t *shape,
                           ane_node **out, ane_error *err);
ane_status ane_graph_const(ane_graph *g, const char *name, const ane_tensor *value, ane_node **out,
                           ane_error *err);
/* A quantized weight of dtype `dtype` (fp16 or fp32) and `shape` (rows = shape[0]):
 * `data` and `table` as ane_quantize_rows makes them (shared, not copied; checked). */
ane_status ane_graph_const_encoded(ane_graph *g, const char *name, ane_dtype dtype, int rank, const int64_t *shape,
                                   ane_weight_encoding encoding, const ane_tensor *data, const ane_tensor *table,
                                   ane_node **out, ane_error *err);
/* Bytes a const stores: its elements, or an encoded one's data plus its table. */
int64_t ane_const_stored_bytes(const ane_node *node);
/* Rows [first, first + count) of an encoded const as fp32 (rows = shape[0]). */
void ane_const_decode_rows(const ane_node *node, int64_t first, int64_t count, float *out);
/* Any other op: operands, then attributes (NULL for none); checks arity, shapes, dtypes. */
ane_status ane_graph_op(ane_graph *g, ane_op op, const char *name, ane_node *const *operands, int noperands,
                        const ane_node_attrs *attrs, ane_node **out, ane_error *err);
/* Declares an output. The node is renamed to `name` when it is an unnamed intermediate;
 * otherwise an identity named `name` is added. Output names must be unique. */
ane_status ane_graph_output_node(ane_graph *g, const char *name, ane_node *node, ane_error *err);

/* A copy of the live graph (same names, attributes and outputs; consts share their values). */
ane_status ane_graph_clone(const ane_graph *source, ane_graph **out, ane_error *err);

ane_node *ane_graph_find(const ane_graph *g, const char *name);
int ane_graph_is_output(const ane_graph *g, const ane_node *node);
/* Live consumers of a node (operand uses + output uses). */
int ane_graph_use_count(const ane_graph *g, const ane_node *node);
/* Points every use of `old` (operands and outputs) at `replacement`. */
void ane_graph_replace_uses(ane_graph *g, ane_node *old, ane_node *replacement);
/* Renames a node, checking the name is a free valid identifier. */
ane_status ane_graph_rename(ane_graph *g, ane_node *node, const char *name, ane_error *err);
/* Drops dead nodes from the node array and renumbers ids. */
void ane_graph_compact(ane_graph *g);

/* Sets every attribute of `op` that has a default to it; the others become zero. */
void ane_attrs_defaults(ane_op op, ane_node_attrs *attrs);
/* The field that a stored attribute (ane_attr_is_stored) lives in. */
void *ane_attr_field(ane_node_attrs *attrs, const ane_attr_spec *spec);
const void *ane_attr_field_const(const ane_node_attrs *attrs, const ane_attr_spec *spec);

/* Infers node->dtype/rank/shape from operands and attributes (shape.c). */
ane_status ane_infer_shape(ane_node *node, ane_error *err);

/* A node's working set: its operands plus its output, in bytes (0 for inputs and consts). */
int64_t ane_node_working_set_bytes(const ane_node *node);

/* Bytes of one node's value: numel x dtype size. */
int64_t ane_node_bytes(const ane_node *node);
int64_t ane_node_numel(const ane_node *node);
/* Whether two nodes have one shape (rank and every dimension). */
int ane_node_same_shape(const ane_node *a, const ane_node *b);
/* "[1, 768, 1, 64]" */
const char *ane_node_shape_string(const ane_node *node, char *buf, size_t size);

typedef struct ane_graph_stats {
    int nodes;                        /* live nodes */
    int64_t flops;                    /* multiply-adds count 2 */
    int64_t weight_bytes;             /* bytes of constants as emitted */
    int64_t peak_working_set_bytes;   /* largest per-node operands + output */
    int inputs, outputs, consts;
} ane_graph_stats;

void ane_graph_stats_compute(const ane_graph *g, ane_graph_stats *stats);

/* A readable listing of the live graph ("%3 = conv(%0, %1) ..."), malloc'd. */
char *ane_graph_dump(const ane_graph *g);

#endif
