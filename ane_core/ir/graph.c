/* The graph IR: building nodes, names, outputs, use lists, stats and dumps (see graph.h). */
#include "graph.h"

#include "../base/hashmap.h"
#include "../base/text.h"
#include "../tensor/intern.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ane_status ane_graph_new(const char *name, ane_graph **out, ane_error *err) {
    if (!name || !ane_is_valid_identifier(name))
        return ane_fail(err, ANE_ERR_ARGUMENT, "graph name '%s' is not a valid MIL identifier ([A-Za-z_][A-Za-z0-9_]*)",
                        name ? name : "(null)");
    ane_graph *g = calloc(1, sizeof *g);
    if (!g) return ane_fail(err, ANE_ERR_NOMEM, "out of memory creating graph '%s'", name);
    snprintf(g->name, sizeof g->name, "%s", name);
    *out = g;
    return ANE_OK;
}

static void release_const(ane_node *node) {
    ane_tensor_release(&node->value);
    if (node->encoding) ane_tensor_release(&node->table);
}

void ane_graph_free(ane_graph *g) {
    if (!g) return;
    int had_consts = 0;
    for (int i = 0; i < g->count; i++)
        if (g->nodes[i]->op == ANE_OP_CONST) release_const(g->nodes[i]), had_consts = 1;
    free(g->nodes);
    free(g->outputs);
    free(g->names);
    ane_arena_free(&g->arena);
    free(g);
    if (had_consts) ane_intern_sweep(); /* weights no other graph holds are freed now */
}

int ane_is_valid_identifier(const char *name) {
    if (!name[0] || strlen(name) >= ANE_NAME_MAX) return 0;
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_')) return 0;
    for (const char *p = name + 1; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_')) return 0;
    return 1;
}

int64_t ane_node_working_set_bytes(const ane_node *node) {
    if (node->op == ANE_OP_INPUT || node->op == ANE_OP_CONST) return 0;
    int64_t bytes = ane_node_bytes(node);
    for (int k = 0; k < node->noperands; k++) bytes += ane_node_bytes(node->operands[k]);
    return bytes;
}

/* ane_graph_find's index: open addressing over the node ids, keyed by the hash of the name the
 * node bears (read from the node, so a rename adds an entry and the old one no longer matches).
 * Names are unique among live nodes and a node is never revived, so of a name's entries only a
 * live node bearing it is found. */
static uint32_t name_hash(const char *name) { return (uint32_t)ane_hash_bytes(name, strlen(name)); }

static void index_insert(ane_graph *g, const ane_node *node) {
    uint32_t hash = name_hash(node->name), mask = (uint32_t)g->names_capacity - 1;
    uint32_t i = hash & mask;
    while (g->names[i]) i = (i + 1) & mask;
    g->names[i] = (uint64_t)hash << 32 | (uint32_t)(node->id + 1);
    g->names_count++;
}

/* The index rebuilt over the live nodes, with room for twice as many (a scan when memory ran out). */
static void index_rebuild(ane_graph *g) {
    int capacity = 16;
    while (capacity < 2 * (g->count + 1)) capacity *= 2;
    free(g->names);
    g->names = calloc((size_t)capacity, sizeof *g->names);
    g->names_capacity = g->names ? capacity : 0, g->names_count = 0;
    for (int i = 0; g->names && i < g->count; i++)
        if (!g->nodes[i]->dead) index_insert(g, g->nodes[i]);
}

/* Records that `node` now bears its name. */
static void index_name(ane_graph *g, const ane_node *node) {
    if (2 * (g->names_count + 1) > g->names_capacity) index_rebuild(g); /* (takes `node` in too) */
    else index_insert(g, node);
}

ane_node *ane_graph_find(const ane_graph *g, const char *name) {
    if (!g->names_capacity) {
        for (int i = 0; i < g->count; i++)
            if (!g->nodes[i]->dead && strcmp(g->nodes[i]->name, name) == 0) return g->nodes[i];
        return NULL;
    }
    uint32_t hash = name_hash(name), mask = (uint32_t)g->names_capacity - 1;
    for (uint32_t i = hash & mask; g->names[i]; i = (i + 1) & mask) {
        if ((uint32_t)(g->names[i] >> 32) != hash) continue;
        ane_node *node = g->nodes[(uint32_t)g->names[i] - 1];
        if (!node->dead && strcmp(node->name, name) == 0) return node;
    }
    return NULL;
}

static int output_name_taken(const ane_graph *g, const char *name) {
    for (int i = 0; i < g->noutputs; i++)
        if (strcmp(g->outputs[i].name, name) == 0) return 1;
    return 0;
}

/* Fills node->name with `name` (checked) or a generated `<op>_<n>` that is free. */
static ane_status assign_name(ane_graph *g, ane_node *node, const char *name, ane_error *err) {
    if (name && name[0]) {
        if (!ane_is_valid_identifier(name))
            return ane_fail(err, ANE_ERR_ARGUMENT, "node name '%s' is not a valid MIL identifier ([A-Za-z_][A-Za-z0-9_]*, < %d chars)",
                            name, ANE_NAME_MAX);
        ane_node *holder = ane_graph_find(g, name);
        if (holder && !output_name_taken(g, name) && ane_graph_use_count(g, holder) == 0 &&
            (holder->op == ANE_OP_CONST || holder->op == ANE_OP_INPUT))
            return ane_fail(err, ANE_ERR_ARGUMENT,
                            "node name '%s' is already used in graph '%s' by %s nothing uses yet (left by an earlier "
                            "line that failed after creating it?): give this one another name",
                            name, g->name, holder->op == ANE_OP_CONST ? "a const" : "an input");
        if (holder || output_name_taken(g, name))
            return ane_fail(err, ANE_ERR_ARGUMENT, "node name '%s' is already used in graph '%s'", name, g->name);
        snprintf(node->name, sizeof node->name, "%s", name);
        return ANE_OK;
    }
    do {
        snprintf(node->name, sizeof node->name, "%s_%d", ane_op_table[node->op].name, g->auto_names++);
    } while (ane_graph_find(g, node->name) || output_name_taken(g, node->name));
    return ANE_OK;
}

static ane_status new_node(ane_graph *g, ane_op op, const char *name, int noperands, ane_node **out,
                           ane_error *err) {
    if (g->count == g->capacity) {
        int capacity = g->capacity ? g->capacity * 2 : 64;
        ane_node **nodes = realloc(g->nodes, (size_t)capacity * sizeof *nodes);
        if (!nodes) return ane_fail(err, ANE_ERR_NOMEM, "out of memory growing graph '%s'", g->name);
        g->nodes = nodes;
        g->capacity = capacity;
    }
    ane_node *node = ane_arena_alloc(&g->arena, sizeof *node);
    ane_node **operands = noperands ? ane_arena_alloc(&g->arena, (size_t)noperands * sizeof *operands) : NULL;
    if (!node || (noperands && !operands)) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding a node");
    node->op = op;
    node->operands = operands;
    node->noperands = noperands;
    ane_status status = assign_name(g, node, name, err);
    if (status) return status;
    *out = node;
    return ANE_OK;
}

/* Adds a finished node to the graph (after its checks passed). */
static void commit_node(ane_graph *g, ane_node *node) {
    node->id = g->count;
    g->nodes[g->count++] = node;
    index_name(g, node);
}

ane_status ane_graph_input(ane_graph *g, const char *name, ane_dtype dtype, int rank, const int64_t *shape,
                           ane_node **out, ane_error *err) {
    if (!name || !name[0]) return ane_fail(err, ANE_ERR_ARGUMENT, "inputs need a name");
    if (rank < 0 || rank > ANE_IR_MAX_RANK)
        return ane_fail(err, ANE_ERR_SHAPE, "input '%s': rank %d is outside 0..%d", name, rank, ANE_IR_MAX_RANK);
    for (int i = 0; i < rank; i++)
        if (shape[i] < 1)
            return ane_fail(err, ANE_ERR_SHAPE, "input '%s': dimension %d is %lld; shapes are static and positive (ANE-22)",
                            name, i + 1, (long long)shape[i]);
    ane_node *node;
    ane_status status = new_node(g, ANE_OP_INPUT, name, 0, &node, err);
    if (status) return status;
    node->dtype = dtype;
    node->rank = rank;
    memcpy(node->shape, shape, (size_t)rank * sizeof *shape);
    commit_node(g, node);
    *out = node;
    return ANE_OK;
}

ane_status ane_graph_const(ane_graph *g, const char *name, const ane_tensor *value, ane_node **out,
                           ane_error *err) {
    if (value->ndim > ANE_IR_MAX_RANK)
        return ane_fail(err, ANE_ERR_SHAPE, "const '%s': rank %d is above %d", name ? name : "", value->ndim, ANE_IR_MAX_RANK);
    ane_node *node;
    ane_status status = new_node(g, ANE_OP_CONST, name, 0, &node, err);
    if (status) return status;
    /* Keep a contiguous private copy, so later writes to the caller's tensor cannot change
     * the graph (ANE-07: weights are baked at compile time), or share the interned copy of
     * the same bytes (tensor/intern.h: programs of one model hold each weight once). */
    if (!ane_intern_find(value, &node->value)) {
        status = ane_tensor_to(&node->value, value, value->dtype, err);
        if (status) return status;
        ane_intern_add(&node->value);
    }
    node->dtype = value->dtype;
    node->rank = value->ndim;
    memcpy(node->shape, value->shape, (size_t)value->ndim * sizeof *value->shape);
    commit_node(g, node);
    *out = node;
    return ANE_OK;
}

ane_status ane_graph_op(ane_graph *g, ane_op op, const char *name, ane_node *const *operands, int noperands,
                        const ane_node_attrs *attrs, ane_node **out, ane_error *err) {
    const ane_op_info *info = &ane_op_table[op];
    if (op == ANE_OP_INPUT || op == ANE_OP_CONST)
        return ane_fail(err, ANE_ERR_ARGUMENT, "use the input and const builders for %s nodes", info->name);
    if (noperands < info->min_operands || noperands > info->max_operands)
        return ane_fail(err, ANE_ERR_ARGUMENT, "%s takes %d to %d operands, got %d", info->name, info->min_operands,
                        info->max_operands, noperands);
    for (int i = 0; i < noperands; i++)
        if (!operands[i] || operands[i]->dead)
            return ane_fail(err, ANE_ERR_ARGUMENT, "%s: operand %d is missing or was removed", info->name, i + 1);
    ane_node *node;
    ane_status status = new_node(g, op, name, noperands, &node, err);
    if (status) return status;
    memcpy(node->operands, operands, (size_t)noperands * sizeof *operands);
    if (attrs) node->attrs = *attrs;
    status = ane_infer_shape(node, err);
    if (status) return status; /* the node stays unreachable in the arena; nothing refers to it */
    commit_node(g, node);
    *out = node;
    return ANE_OK;
}

int ane_graph_is_output(const ane_graph *g, const ane_node *node) {
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i].node == node) return 1;
    return 0;
}

/* A node the caller named explicitly keeps its name; generated ones look like <op>_<n>. */
static int has_generated_name(const ane_node *node) {
    const char *op = ane_op_table[node->op].name;
    size_t length = strlen(op);
    if (strncmp(node->name, op, length) != 0 || node->name[length] != '_') return 0;
    const char *digits = node->name + length + 1;
    if (!*digits) return 0;
    for (; *digits; digits++)
        if (!isdigit((unsigned char)*digits)) return 0;
    return 1;
}

ane_status ane_graph_clone(const ane_graph *source, ane_graph **out, ane_error *err) {
    *out = NULL;
    ane_graph *g = NULL;
    ane_status status = ane_graph_new(source->name, &g, err);
    if (status) return status;
    ane_node **map = calloc((size_t)source->count + 1, sizeof *map); /* source id -> clone node */
    if (!map) {
        ane_graph_free(g);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory copying graph '%s'", source->name);
    }
    for (int i = 0; i < source->count && !status; i++) {
        const ane_node *node = source->nodes[i];
        if (node->dead) continue;
        if (node->op == ANE_OP_INPUT) {
            status = ane_graph_input(g, node->name, node->dtype, node->rank, node->shape, &map[i], err);
        } else if (node->op == ANE_OP_CONST) { /* shares the (immutable) values: no weight copy */
            status = new_node(g, ANE_OP_CONST, node->name, 0, &map[i], err);
            if (!status) {
                ane_tensor_share(&map[i]->value, &node->value);
                map[i]->encoding = node->encoding;
                if (node->encoding) ane_tensor_share(&map[i]->table, &node->table);
                map[i]->dtype = node->dtype;
                map[i]->rank = node->rank;
                memcpy(map[i]->shape, node->shape, sizeof node->shape);
                commit_node(g, map[i]);
            }
        } else {
            ane_node *operands[64];
            for (int k = 0; k < node->noperands; k++) operands[k] = map[node->operands[k]->id];
            status = ane_graph_op(g, node->op, node->name, operands, node->noperands, &node->attrs, &map[i], err);
        }
    }
    for (int i = 0; i < source->noutputs && !status; i++)
        status = ane_graph_output_node(g, source->outputs[i].name, map[source->outputs[i].node->id], err);
    free(map);
    if (status) {
        ane_graph_free(g);
        return status;
    }
    g->auto_names = source->auto_names;
    *out = g;
    return ANE_OK;
}

ane_status ane_graph_output_node(ane_graph *g, const char *name, ane_node *node, ane_error *err) {
    if (!name || !ane_is_valid_identifier(name))
        return ane_fail(err, ANE_ERR_ARGUMENT, "output name '%s' is not a valid MIL identifier", name ? name : "(null)");
    if (output_name_taken(g, name)) return ane_fail(err, ANE_ERR_ARGUMENT, "output '%s' is declared twice", name);
    if (node->dead) return ane_fail(err, ANE_ERR_ARGUMENT, "output '%s': node '%s' was removed", name, node->name);
    ane_node *target = node;
    if (strcmp(node->name, name) != 0) {
        ane_node *holder = ane_graph_find(g, name);
        int renamable = node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST && !ane_graph_is_output(g, node) &&
                        has_generated_name(node);
        if (renamable && !holder) {
            snprintf(node->name, sizeof node->name, "%s", name);
            index_name(g, node);
        } else if (holder) {
            return ane_fail(err, ANE_ERR_ARGUMENT, "output name '%s' is already the name of another node", name);
        } else {
            ane_status status = ane_graph_op(g, ANE_OP_IDENTITY, name, &node, 1, NULL, &target, err);
            if (status) return status;
        }
    }
    if (g->noutputs == g->outputs_capacity) {
        int capacity = g->outputs_capacity ? g->outputs_capacity * 2 : 8;
        ane_graph_output *outputs = realloc(g->outputs, (size_t)capacity * sizeof *outputs);
        if (!outputs) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding an output");
        g->outputs = outputs;
        g->outputs_capacity = capacity;
    }
    snprintf(g->outputs[g->noutputs].name, ANE_NAME_MAX, "%s", name);
    g->outputs[g->noutputs++].node = target;
    return ANE_OK;
}

int ane_graph_use_count(const ane_graph *g, const ane_node *node) {
    int uses = 0;
    for (int i = 0; i < g->count; i++) {
        const ane_node *user = g->nodes[i];
        if (user->dead) continue;
        for (int k = 0; k < user->noperands; k++) uses += user->operands[k] == node;
    }
    for (int i = 0; i < g->noutputs; i++) uses += g->outputs[i].node == node;
    return uses;
}

void ane_graph_replace_uses(ane_graph *g, ane_node *old, ane_node *replacement) {
    for (int i = 0; i < g->count; i++) {
        ane_node *user = g->nodes[i];
        for (int k = 0; k < user->noperands; k++)
            if (user->operands[k] == old) user->operands[k] = replacement;
    }
    for (int i = 0; i < g->noutputs; i++)
        if (g->outputs[i].node == old) g->outputs[i].node = replacement;
}

ane_status ane_graph_rename(ane_graph *g, ane_node *node, const char *name, ane_error *err) {
    if (strcmp(node->name, name) == 0) return ANE_OK;
    if (!ane_is_valid_identifier(name)) return ane_fail(err, ANE_ERR_ARGUMENT, "'%s' is not a valid MIL identifier", name);
    ane_node *holder = ane_graph_find(g, name);
    if (holder && holder != node) return ane_fail(err, ANE_ERR_ARGUMENT, "node name '%s' is already used", name);
    snprintf(node->name, sizeof node->name, "%s", name);
    index_name(g, node);
    return ANE_OK;
}

void ane_graph_compact(ane_graph *g) {
    int kept = 0;
    for (int i = 0; i < g->count; i++) {
        ane_node *node = g->nodes[i];
        if (node->dead) {
            if (node->op == ANE_OP_CONST) release_const(node);
            continue;
        }
        node->id = kept;
        g->nodes[kept++] = node;
    }
    g->count = kept;
    index_rebuild(g); /* (the ids moved) */
}

int64_t ane_node_numel(const ane_node *node) {
    int64_t count = 1;
    for (int i = 0; i < node->rank; i++) count *= node->shape[i];
    return count;
}

int ane_node_same_shape(const ane_node *a, const ane_node *b) {
    return a->rank == b->rank && memcmp(a->shape, b->shape, (size_t)a->rank * sizeof a->shape[0]) == 0;
}

int64_t ane_node_bytes(const ane_node *node) { return ane_node_numel(node) * (int64_t)ane_dtype_size(node->dtype); }

const char *ane_node_shape_string(const ane_node *node, char *buf, size_t size) {
    return ane_shape_string(buf, size, node->rank, node->shape);
}

/* Floating-point operations of one node (a multiply-add counts 2). */
static int64_t node_flops(const ane_node *node) {
    const ane_node *x = node->noperands ? node->operands[0] : NULL;
    switch (node->op) {
    case ANE_OP_INPUT:
    case ANE_OP_CONST:
    case ANE_OP_RESHAPE:
    case ANE_OP_TRANSPOSE:
    case ANE_OP_SLICE_BY_INDEX:
    case ANE_OP_SLICE_BY_SIZE:
    case ANE_OP_IDENTITY:
    case ANE_OP_CONCAT:
    case ANE_OP_SPLIT:
    case ANE_OP_PAD:
    case ANE_OP_GATHER:
    case ANE_OP_CAST:
        return 0;
    case ANE_OP_CONV: {
        const ane_node *w = node->operands[1]; /* [Cout, Cin/groups, kh, kw] */
        return 2 * ane_node_numel(node) * w->shape[1] * w->shape[2] * w->shape[3];
    }
    case ANE_OP_MATMUL: {
        int64_t inner = node->attrs.transpose_x ? x->shape[x->rank - 2] : x->shape[x->rank - 1];
        return 2 * ane_node_numel(node) * inner;
    }
    case ANE_OP_SDPA: {
        const ane_node *q = node->operands[0], *k = node->operands[1];
        int64_t keys = k->shape[k->rank - 2], width = q->shape[q->rank - 1];
        return 4 * ane_node_numel(node) / node->shape[node->rank - 1] * keys * width;
    }
    case ANE_OP_SOFTMAX:
        return 5 * ane_node_numel(node);
    case ANE_OP_REDUCE_SUM:
    case ANE_OP_REDUCE_MEAN:
    case ANE_OP_REDUCE_MAX:
        return ane_node_numel(x);
    default:
        return ane_node_numel(node);
    }
}

void ane_graph_stats_compute(const ane_graph *g, ane_graph_stats *stats) {
    memset(stats, 0, sizeof *stats);
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (node->dead) continue;
        stats->nodes++;
        stats->flops += node_flops(node);
        if (node->op == ANE_OP_INPUT) stats->inputs++;
        if (node->op == ANE_OP_CONST) {
            stats->consts++;
            stats->weight_bytes += ane_const_stored_bytes(node);
        }
        int64_t working = node->op == ANE_OP_INPUT || node->op == ANE_OP_CONST ? ane_node_bytes(node)
                                                                                 : ane_node_working_set_bytes(node);
        if (working > stats->peak_working_set_bytes) stats->peak_working_set_bytes = working;
    }
    stats->outputs = g->noutputs;
}

ane_status ane_graph_const_encoded(ane_graph *g, const char *name, ane_dtype dtype, int rank, const int64_t *shape,
                                   ane_weight_encoding encoding, const ane_tensor *data, const ane_tensor *table,
                                   ane_node **out, ane_error *err) {
    const char *label = name ? name : "";
    if (encoding == ANE_ENCODING_DENSE || !ane_encoding_name(encoding))
        return ane_fail(err, ANE_ERR_ARGUMENT, "const '%s': unknown weight encoding %d", label, (int)encoding);
    if (dtype != ANE_FP16 && dtype != ANE_FP32)
        return ane_fail(err, ANE_ERR_SHAPE, "const '%s': quantized weights decode to fp16 or fp32, not %s", label,
                        ane_dtype_name(dtype));
    if (rank < 1 || rank > ANE_IR_MAX_RANK)
        return ane_fail(err, ANE_ERR_SHAPE, "const '%s': a quantized weight has rank 1..%d, not %d", label, ANE_IR_MAX_RANK, rank);
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) numel *= shape[i];
    int64_t rows = shape[0], k = rows ? numel / rows : 0;
    ane_dtype data_dtype = encoding == ANE_ENCODING_INT8 || encoding == ANE_ENCODING_Q8_0 ? ANE_INT8 : ANE_UINT8;
    if (encoding == ANE_ENCODING_LUT4 && k % 2)
        return ane_fail(err, ANE_ERR_SHAPE, "const '%s': int4 rows need an even length, not %lld", label, (long long)k);
    if (ane_encoding_is_gguf_block(encoding)) { /* blocks along dimension 1, whatever follows it of size 1 */
        int trailing_ones = 1, block = encoding == ANE_ENCODING_Q6_K ? ANE_Q6_K_WEIGHTS : ANE_ENCODING_BLOCK;
        for (int i = 2; i < rank; i++) trailing_ones &= shape[i] == 1;
        if (rank < 2 || !trailing_ones || k % block || k == 0)
            return ane_fail(err, ANE_ERR_SHAPE, "const '%s': %s weights are [rows, k, 1, ...] with k a multiple of %d",
                            label, ane_encoding_name(encoding), block);
    }
    if (data->dtype != data_dtype || !ane_tensor_is_contiguous(data) ||
        ane_tensor_numel(data) != ane_encoded_data_bytes(encoding, rows, k))
        return ane_fail(err, ANE_ERR_SHAPE, "const '%s': %s data must be %lld contiguous %s bytes, not %lld %s", label,
                        ane_encoding_name(encoding), (long long)ane_encoded_data_bytes(encoding, rows, k),
                        ane_dtype_name(data_dtype), (long long)ane_tensor_numel(data), ane_dtype_name(data->dtype));
    int64_t width = ane_encoded_table_width(encoding, k);
    if (table->dtype != ANE_FP32 || !ane_tensor_is_contiguous(table) || ane_tensor_numel(table) != rows * width)
        return ane_fail(err, ANE_ERR_SHAPE, "const '%s': the %s table must be %lld contiguous fp32 values (%lld per row), "
                        "not %lld %s", label, ane_encoding_name(encoding), (long long)(rows * width), (long long)width,
                        (long long)ane_tensor_numel(table), ane_dtype_name(table->dtype));
    ane_node *node;
    ane_status status = new_node(g, ANE_OP_CONST, name, 0, &node, err);
    if (status) return status;
    /* quantized once, never written: shared like clones share (the interned copy when there is one) */
    if (!ane_intern_find(data, &node->value)) ane_tensor_share(&node->value, data), ane_intern_add(data);
    if (!ane_intern_find(table, &node->table)) ane_tensor_share(&node->table, table), ane_intern_add(table);
    node->encoding = encoding;
    node->dtype = dtype;
    node->rank = rank;
    memcpy(node->shape, shape, (size_t)rank * sizeof *shape);
    commit_node(g, node);
    *out = node;
    return ANE_OK;
}

int64_t ane_const_stored_bytes(const ane_node *node) {
    if (!node->encoding) return ane_node_bytes(node);
    return ane_tensor_numel(&node->value) + ane_tensor_numel(&node->table) * (int64_t)ane_dtype_size(node->dtype);
}

void ane_const_decode_rows(const ane_node *node, int64_t first, int64_t count, float *out) {
    int64_t k = node->shape[0] ? ane_node_numel(node) / node->shape[0] : 0;
    ane_dequantize_rows(node->encoding, ane_tensor_data(&node->value), (const float *)ane_tensor_data(&node->table), k,
                        first, count, out);
}

/* ------------------------------------------------------------------ dump */

static void dump_ints(ane_text *b, const int64_t *values, int count) {
    ane_text_append(b, "[");
    for (int i = 0; i < count; i++) ane_text_append(b, i ? ", %lld" : "%lld", (long long)values[i]);
    ane_text_append(b, "]");
}

/* " name=value" for each stored attribute, by its Lua name. */
static void dump_attrs(ane_text *b, const ane_node *node) {
    ANE_FOR_EACH_ATTR(node->op, spec) {
        if (!ane_attr_is_stored(spec)) continue;
        const void *field = ane_attr_field_const(&node->attrs, spec);
        ane_text_append(b, " %s=", spec->lua ? spec->lua : spec->mil);
        switch (spec->kind) {
        case ANE_ATTR_INT:
        case ANE_ATTR_PIECE: ane_text_append(b, "%lld", (long long)*(const int64_t *)field); break;
        case ANE_ATTR_BOOL: ane_text_append(b, "%s", *(const int *)field ? "true" : "false"); break;
        case ANE_ATTR_FLOAT: ane_text_append(b, "%g", *(const double *)field); break;
        case ANE_ATTR_INTS: {
            const ane_int_list *list = field;
            dump_ints(b, list->values, list->count);
            break;
        }
        case ANE_ATTR_PAIR: dump_ints(b, field, 2); break;
        case ANE_ATTR_QUAD: dump_ints(b, field, 4); break;
        case ANE_ATTR_DTYPE: ane_text_append(b, "%s", ane_dtype_name(*(const ane_dtype *)field)); break;
        case ANE_ATTR_STRING: ane_text_append(b, "%s", (const char *)field); break;
        default: break;
        }
    }
}

/* ------------------------------------------------------------------ attribute schema */

void *ane_attr_field(ane_node_attrs *attrs, const ane_attr_spec *spec) { return (char *)attrs + spec->offset; }

const void *ane_attr_field_const(const ane_node_attrs *attrs, const ane_attr_spec *spec) {
    return (const char *)attrs + spec->offset;
}

void ane_attrs_defaults(ane_op op, ane_node_attrs *attrs) {
    memset(attrs, 0, sizeof *attrs);
    ANE_FOR_EACH_ATTR(op, spec) {
        if (!ane_attr_is_stored(spec) || !spec->fallback) continue;
        void *field = ane_attr_field(attrs, spec);
        switch (spec->kind) {
        case ANE_ATTR_INT:
        case ANE_ATTR_PIECE: *(int64_t *)field = strtoll(spec->fallback, NULL, 10); break;
        case ANE_ATTR_BOOL: *(int *)field = strcmp(spec->fallback, "true") == 0; break;
        case ANE_ATTR_FLOAT: *(double *)field = strtod(spec->fallback, NULL); break;
        case ANE_ATTR_PAIR:
        case ANE_ATTR_QUAD: {
            int64_t *values = field, value = strtoll(spec->fallback, NULL, 10);
            for (int i = 0; i < (spec->kind == ANE_ATTR_PAIR ? 2 : 4); i++) values[i] = value;
            break;
        }
        case ANE_ATTR_DTYPE: (void)ane_dtype_from_name(spec->fallback, field); break;
        case ANE_ATTR_STRING: snprintf(field, sizeof attrs->mode, "%s", spec->fallback); break;
        default: break;
        }
    }
}

char *ane_graph_dump(const ane_graph *g) {
    ane_text b = {0};
    ane_text_append(&b, "graph %s\n", g->name);
    for (int i = 0; i < g->count; i++) {
        const ane_node *node = g->nodes[i];
        if (node->dead) continue;
        char shape[128], type[160];
        snprintf(type, sizeof type, "%s%s", ane_dtype_name(node->dtype), ane_node_shape_string(node, shape, sizeof shape));
        ane_text_append(&b, "  %-16s %-24s = %s(", node->name, type, ane_op_table[node->op].name);
        for (int k = 0; k < node->noperands; k++) ane_text_append(&b, k ? ", %s" : "%s", node->operands[k]->name);
        ane_text_append(&b, ")");
        dump_attrs(&b, node);
        if (node->working_set_bytes) ane_text_append(&b, "  ; working set %lld bytes", (long long)node->working_set_bytes);
        ane_text_append(&b, "\n");
    }
    ane_text_append(&b, "  return (");
    for (int i = 0; i < g->noutputs; i++) ane_text_append(&b, i ? ", %s" : "%s", g->outputs[i].name);
    ane_text_append(&b, ")\n");
    if (b.failed) {
        ane_text_free(&b);
        return NULL;
    }
    return b.data;
}
