/* The MIL text emitter (see emit.h). Statements follow the graph's node order; every op
 * parameter that the device wants as a named const (conv geometry, matmul flags, softmax
 * and reduce axes, cast dtype, ...) gets its own const statement named
 * `<node>_<parameter>`; call arguments are written in alphabetical order; inputs and outputs
 * are listed alphabetically (the order the device binds them, ANE-03/19); conv never gets
 * `bias=` (ANE-13) and matmul flags are never inline (ANE-12). */
#include "emit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/parallel.h"
#include "../base/text.h"
#include "milblob.h"

#define INDENT "        "

typedef struct argument {
    char param[32];
    char value[ANE_NAME_MAX * 66]; /* a name, or concat's tuple of up to 64 names */
} argument;

typedef struct emitter {
    const ane_graph *g;
    ane_text text;
    ane_milblob_writer blobs;
    char (*param_names)[ANE_NAME_MAX + 32]; /* names given to parameter consts so far */
    int param_count, param_capacity;
    ane_status status;
    ane_error *err;
} emitter;

/* ------------------------------------------------------------------ literals */

const char *ane_mil_float_literal(double value, ane_dtype dtype, char *buf, size_t size) {
    if (isnan(value)) return snprintf(buf, size, "nan"), buf;
    if (isinf(value)) return snprintf(buf, size, value < 0 ? "-inf" : "inf"), buf;
    float target = (float)value;
    uint16_t target_half = ane_fp32_to_fp16(target);
    for (int digits = 1; digits <= 9; digits++) {
        snprintf(buf, size, "%.*g", digits, (double)target);
        double parsed = strtod(buf, NULL);
        int exact = dtype == ANE_FP16 ? ane_fp32_to_fp16((float)parsed) == target_half : (float)parsed == target;
        if (exact && !strchr(buf, 'e')) return buf; /* with an exponent, try more digits, then hex */
    }
    snprintf(buf, size, "%a", (double)target);
    return buf;
}

static const char *mil_dtype(ane_dtype dtype) { return ane_dtype_name(dtype); }

static const char *type_of(ane_dtype dtype, int rank, const int64_t *shape, char *buf, size_t size) {
    if (rank == 0) {
        snprintf(buf, size, "%s", mil_dtype(dtype));
        return buf;
    }
    char dims[160];
    ane_shape_string(dims, sizeof dims, rank, shape);
    snprintf(buf, size, "tensor<%s, %s>", mil_dtype(dtype), dims);
    return buf;
}

static const char *node_type(const ane_node *node, char *buf, size_t size) {
    return type_of(node->dtype, node->rank, node->shape, buf, size);
}

/* ------------------------------------------------------------------ const statements */

static void emit_const(emitter *e, const char *name, const char *type, const char *literal) {
    ane_text_append(&e->text, INDENT "%s %s = const()[name = string(\"%s\"), val = %s];\n", type, name, name, literal);
}

/* A free name for a parameter const of `node`: "<node>_<param>", suffixed if taken. */
static const char *param_name(emitter *e, const ane_node *node, const char *param, char *buf, size_t size) {
    snprintf(buf, size, "%s_%s", node->name, param);
    for (int attempt = 0;; attempt++) {
        int taken = ane_graph_find(e->g, buf) != NULL;
        for (int i = 0; !taken && i < e->param_count; i++) taken = strcmp(e->param_names[i], buf) == 0;
        if (!taken) break;
        snprintf(buf, size, "%s_%s_%d", node->name, param, attempt + 1);
    }
    if (e->param_count == e->param_capacity) {
        int capacity = e->param_capacity ? e->param_capacity * 2 : 64;
        void *grown = realloc(e->param_names, (size_t)capacity * sizeof *e->param_names);
        if (!grown) {
            e->status = ane_fail(e->err, ANE_ERR_NOMEM, "out of memory emitting MIL");
            return buf;
        }
        e->param_names = grown;
        e->param_capacity = capacity;
    }
    snprintf(e->param_names[e->param_count++], sizeof e->param_names[0], "%s", buf);
    return buf;
}

static void add_argument(argument *args, int *count, const char *param, const char *value) {
    snprintf(args[*count].param, sizeof args[0].param, "%s", param);
    snprintf(args[*count].value, sizeof args[0].value, "%s", value);
    (*count)++;
}

static void param_int_list(emitter *e, const ane_node *node, argument *args, int *count, const char *param,
                           const int64_t *values, int n) {
    char name[ANE_NAME_MAX + 32], literal[512], type[64];
    param_name(e, node, param, name, sizeof name);
    int used = snprintf(literal, sizeof literal, "tensor<int32, [%d]>([", n);
    for (int i = 0; i < n; i++) used += snprintf(literal + used, sizeof literal - (size_t)used, i ? ", %lld" : "%lld", (long long)values[i]);
    snprintf(literal + used, sizeof literal - (size_t)used, "])");
    snprintf(type, sizeof type, "tensor<int32, [%d]>", n);
    emit_const(e, name, type, literal);
    add_argument(args, count, param, name);
}

static void param_scalar(emitter *e, const ane_node *node, argument *args, int *count, const char *param,
                         const char *type, const char *literal) {
    char name[ANE_NAME_MAX + 32];
    param_name(e, node, param, name, sizeof name);
    emit_const(e, name, type, literal);
    add_argument(args, count, param, name);
}

static void param_int(emitter *e, const ane_node *node, argument *args, int *count, const char *param, int64_t value) {
    char literal[64];
    snprintf(literal, sizeof literal, "int32(%lld)", (long long)value);
    param_scalar(e, node, args, count, param, "int32", literal);
}

static void param_bool(emitter *e, const ane_node *node, argument *args, int *count, const char *param, int value) {
    param_scalar(e, node, args, count, param, "bool", value ? "bool(true)" : "bool(false)");
}

static void param_string(emitter *e, const ane_node *node, argument *args, int *count, const char *param,
                         const char *value) {
    char literal[96];
    snprintf(literal, sizeof literal, "string(\"%s\")", value);
    param_scalar(e, node, args, count, param, "string", literal);
}

static void param_float(emitter *e, const ane_node *node, argument *args, int *count, const char *param,
                        ane_dtype dtype, double value) {
    char number[64], literal[96];
    snprintf(literal, sizeof literal, "%s(%s)", mil_dtype(dtype), ane_mil_float_literal(value, dtype, number, sizeof number));
    param_scalar(e, node, args, count, param, mil_dtype(dtype), literal);
}

/* The literal that reads the blob whose record is at `offset` of the weight file. */
static void blob_reference(const char *type, uint64_t offset, char *literal, size_t literal_size) {
    snprintf(literal, literal_size, "%s(BLOBFILE(path = string(\"%s\"), offset = uint64(%llu)))", type, ANE_MIL_WEIGHT_PATH,
             (unsigned long long)offset);
}

/* `size` bytes as a new MILBlob record: the BLOBFILE literal of a `type` tensor in `literal`.
 * `graphs_own`: the bytes are the graph's (they live as long as it), so a file by reference
 * may point at them. */
static void blob_literal(emitter *e, const char *type, uint32_t code, const void *bytes, uint64_t size, int graphs_own,
                         char *literal, size_t literal_size) {
    uint64_t offset = 0;
    if (!e->status)
        e->status = graphs_own ? ane_milblob_add_borrowed(&e->blobs, code, bytes, size, &offset, e->err)
                               : ane_milblob_add(&e->blobs, code, bytes, size, &offset, e->err);
    blob_reference(type, offset, literal, literal_size);
}

/* Rows of Q5_K / Q6_K codes as packed (tensor/quantize.h) unpacked a byte each, over the helpers. */
typedef struct unpack_job {
    ane_weight_encoding encoding;
    const uint8_t *packed; /* [rows] rows of ane_encoded_data_bytes(encoding, 1, k) */
    uint8_t *codes;        /* [rows, k] */
    int64_t k;
} unpack_job;

static void unpack_rows(void *context, int64_t first, int64_t last) {
    const unpack_job *job = context;
    for (int64_t r = first; r < last; r++) {
        const uint8_t *row = job->packed + ane_encoded_data_bytes(job->encoding, r, job->k);
        if (job->encoding == ANE_ENCODING_Q6_K) ane_q6_k_unpack_codes((int8_t *)job->codes + r * job->k, row, job->k);
        else ane_q5_k_unpack(job->codes + r * job->k, row, job->k);
    }
}

/* A quantized weight, stored compressed as the device stores it (docs/reference/mil-dialect.md; the
 * parameters in the attribute brackets):
 *   int8  constexpr_affine_dequantize: int8 data, one scale per row along axis 0, zero point 0
 *   int4  constexpr_lut_to_dense (iOS18): uint4 indices of the weight's shape and a palette per
 *         row, lut [rows, 1, ..., 1, 16, 1]
 *   q8_0, q4_0, q4_k, q5_k, q6_k  constexpr_blockwise_shift_scale (iOS18; coremltools' definition:
 *         output = scale x (data - offset), block sizes data's dims / scale's): int8, int4, uint4
 *         (q4_k), uint8 (q5_k) or int8 (q6_k: its codes x - 32) data of the weight's (unpacked:
 *         q5_k's and q6_k's packing is sim's)
 *         shape, scale [rows, k / 32, 1, ...] (q6_k: k / 16); q4_k's and q5_k's offset of scale's
 *         shape and type (the table's pairs, split) */
static void emit_encoded_const(emitter *e, const ane_node *node, const char *type) {
    int64_t rows = node->shape[0], k = ane_node_numel(node) / (rows ? rows : 1);
    int64_t width = ane_encoded_table_width(node->encoding, k);
    int shifted = ane_encoding_is_shifted(node->encoding); /* a scale and an offset per block */
    int64_t per_table = shifted ? width / 2 : width;   /* entries of one table (scale, or offset) per row */
    char data_type[192], table_type[192], data_literal[512], table_literal[512], offset_literal[512], dims[160];
    int lut = node->encoding == ANE_ENCODING_LUT4, blockwise = ane_encoding_is_gguf_block(node->encoding);
    int64_t table_shape[ANE_IR_MAX_RANK + 2] = {rows};
    int table_rank = 1;
    if (lut) {
        for (int d = 1; d < node->rank; d++) table_shape[d] = 1;
        table_shape[node->rank] = width, table_shape[node->rank + 1] = 1;
        table_rank = node->rank + 2;
    } else if (blockwise) { /* (graph.c: the weight is [rows, k, 1, ...]) */
        for (int d = 1; d < node->rank; d++) table_shape[d] = d == 1 ? per_table : 1;
        table_rank = node->rank;
    }
    ane_shape_string(dims, sizeof dims, node->rank, node->shape);
    uint32_t code = MILBLOB_INT8;
    if (lut || node->encoding == ANE_ENCODING_Q4_K) snprintf(data_type, sizeof data_type, "tensor<uint4, %s>", dims), code = MILBLOB_UINT4;
    else if (node->encoding == ANE_ENCODING_Q5_K) type_of(ANE_UINT8, node->rank, node->shape, data_type, sizeof data_type), code = MILBLOB_UINT8;
    else if (node->encoding == ANE_ENCODING_Q4_0) snprintf(data_type, sizeof data_type, "tensor<int4, %s>", dims), code = MILBLOB_INT4;
    else type_of(ANE_INT8, node->rank, node->shape, data_type, sizeof data_type);
    type_of(node->dtype, table_rank, table_shape, table_type, sizeof table_type);
    if (node->encoding == ANE_ENCODING_Q6_K || node->encoding == ANE_ENCODING_Q5_K) { /* its codes, a byte each,
                                                        derived from the packed ones, which a compile's parse takes back */
        uint8_t *codes = malloc((size_t)(rows * k) + 1);
        if (!codes) {
            if (!e->status) e->status = ane_fail(e->err, ANE_ERR_NOMEM, "out of memory emitting weight '%s'", node->name);
            return;
        }
        unpack_job job = {node->encoding, (const uint8_t *)ane_tensor_data(&node->value), codes, k};
        ane_parallel_for(rows, 1 + ((int64_t)1 << 16) / k, unpack_rows, &job); /* (the helpers idle while compiling) */
        uint64_t offset = 0;
        if (e->status) free(codes);
        else e->status = ane_milblob_add_derived(&e->blobs, code, codes, (uint64_t)(rows * k), &node->value, (int)node->encoding,
                                                  &offset, e->err);
        blob_reference(data_type, offset, data_literal, sizeof data_literal);
    } else {
        blob_literal(e, data_type, code, ane_tensor_data(&node->value), (uint64_t)ane_tensor_numel(&node->value), 1,
                     data_literal, sizeof data_literal);
    }
    size_t table_bytes = (size_t)(rows * per_table) * ane_dtype_size(node->dtype);
    void *table = malloc(table_bytes ? table_bytes : 1);
    float *column = shifted ? malloc(sizeof(float) * (size_t)(rows * per_table) + 1) : NULL; /* one of the pairs' halves */
    if (!table || (shifted && !column)) {
        if (!e->status) e->status = ane_fail(e->err, ANE_ERR_NOMEM, "out of memory emitting weight '%s'", node->name);
        free(table), free(column);
        return;
    }
    const float *entries = (const float *)ane_tensor_data(&node->table);
    for (int half = 0; half < (shifted ? 2 : 1); half++) { /* the scales, then (q4_k) the offsets */
        if (shifted)
            for (int64_t i = 0; i < rows * per_table; i++) column[i] = entries[2 * i + half];
        ane_dtype_convert_row(table, node->dtype, shifted ? column : entries, ANE_FP32, (size_t)(rows * per_table));
        blob_literal(e, table_type, ane_milblob_code_for(node->dtype), table, table_bytes, 0,
                     half ? offset_literal : table_literal, sizeof table_literal);
    }
    free(table), free(column);
    if (lut)
        ane_text_append(&e->text, INDENT "%s %s = constexpr_lut_to_dense()[indices = %s, lut = %s, name = string(\"%s\")];\n",
                        type, node->name, data_literal, table_literal, node->name);
    else if (shifted)
        ane_text_append(&e->text, INDENT "%s %s = constexpr_blockwise_shift_scale()[data = %s, name = string(\"%s\"), "
                        "offset = %s, scale = %s];\n", type, node->name, data_literal, node->name, offset_literal, table_literal);
    else if (blockwise)
        ane_text_append(&e->text, INDENT "%s %s = constexpr_blockwise_shift_scale()[data = %s, name = string(\"%s\"), "
                        "scale = %s];\n", type, node->name, data_literal, node->name, table_literal);
    else
        ane_text_append(&e->text, INDENT "%s %s = constexpr_affine_dequantize()[axis = int32(0), name = string(\"%s\"), "
                        "quantized_data = %s, scale = %s, zero_point = int8(0)];\n", type, node->name, node->name,
                        data_literal, table_literal);
}

/* A const node: inline literal for small or integer values, otherwise a MILBlob record. */
static void emit_const_node(emitter *e, const ane_node *node) {
    char type[192];
    node_type(node, type, sizeof type);
    if (node->encoding) {
        emit_encoded_const(e, node, type);
        return;
    }
    const ane_tensor *value = &node->value;
    int64_t numel = ane_node_numel(node);
    uint32_t code = ane_milblob_code_for(node->dtype);
    int to_blob = code && node->dtype != ANE_INT32 && numel >= ANE_MIL_INLINE_MAX;
    if (to_blob) {
        char literal[384];
        blob_literal(e, type, code, ane_tensor_data(value), (uint64_t)ane_node_bytes(node), 1, literal, sizeof literal);
        emit_const(e, node->name, type, literal);
        return;
    }
    ane_text literal = {0};
    if (node->rank > 0) ane_text_append(&literal, "%s([", type);
    else ane_text_append(&literal, "%s(", type);
    const char *data = ane_tensor_data(value);
    size_t element = ane_dtype_size(node->dtype);
    for (int64_t i = 0; i < numel; i++) {
        const char *p = data + i * (int64_t)element;
        if (i) ane_text_append(&literal, ", ");
        switch (ane_dtype_kind_of(node->dtype)) {
        case ANE_KIND_FLOAT: {
            char number[64];
            ane_text_append(&literal, "%s", ane_mil_float_literal(ane_dtype_load(p, node->dtype), node->dtype, number, sizeof number));
            break;
        }
        case ANE_KIND_BOOL: ane_text_append(&literal, "%s", ane_dtype_load_int(p, node->dtype) ? "true" : "false"); break;
        default: ane_text_append(&literal, "%lld", (long long)ane_dtype_load_int(p, node->dtype)); break;
        }
    }
    ane_text_append(&literal, node->rank > 0 ? "])" : ")");
    if (literal.failed) e->status = ane_fail(e->err, ANE_ERR_NOMEM, "out of memory emitting const '%s'", node->name);
    else emit_const(e, node->name, type, literal.data);
    ane_text_free(&literal);
}

/* ------------------------------------------------------------------ op statements */

static int by_param(const void *a, const void *b) {
    return strcmp(((const argument *)a)->param, ((const argument *)b)->param);
}

/* The parameter consts of one op (its attributes, from the op table's schema, in its
 * order), appended to args. */
static void emit_attribute_params(emitter *e, const ane_node *node, argument *args, int *count) {
    const ane_node *x = node->noperands ? node->operands[0] : NULL;
    ANE_FOR_EACH_ATTR(node->op, spec) {
        if (!spec->mil) continue; /* internal (split's piece index) */
        const void *field = ane_attr_field_const(&node->attrs, spec);
        if (spec->elided && spec->kind == ANE_ATTR_FLOAT && *(const double *)field == strtod(spec->fallback, NULL)) continue;
        if (spec->elided && spec->kind == ANE_ATTR_INT && *(const int64_t *)field == strtoll(spec->fallback, NULL, 10)) continue;
        switch (spec->kind) {
        case ANE_ATTR_INT: param_int(e, node, args, count, spec->mil, *(const int64_t *)field); break;
        case ANE_ATTR_BOOL: param_bool(e, node, args, count, spec->mil, *(const int *)field); break;
        case ANE_ATTR_FLOAT: param_float(e, node, args, count, spec->mil, x->dtype, *(const double *)field); break;
        case ANE_ATTR_INTS: {
            const ane_int_list *list = field;
            param_int_list(e, node, args, count, spec->mil, list->values, list->count);
            break;
        }
        case ANE_ATTR_PAIR: param_int_list(e, node, args, count, spec->mil, field, 2); break;
        case ANE_ATTR_QUAD: param_int_list(e, node, args, count, spec->mil, field, 4); break;
        case ANE_ATTR_DTYPE: param_string(e, node, args, count, spec->mil, mil_dtype(*(const ane_dtype *)field)); break;
        case ANE_ATTR_STRING: param_string(e, node, args, count, spec->mil, field); break;
        case ANE_ATTR_PAD_TYPE: {
            const int64_t *pads = field;
            param_string(e, node, args, count, spec->mil, pads[0] || pads[1] || pads[2] || pads[3] ? "custom" : "valid");
            break;
        }
        case ANE_ATTR_FALSE: param_bool(e, node, args, count, spec->mil, 0); break;
        default: break; /* parse-only parameters are never written */
        }
    }
}

static void emit_op(emitter *e, const ane_node *node) {
    argument args[16];
    int count = 0;
    emit_attribute_params(e, node, args, &count);
    if (node->op == ANE_OP_CONCAT) { /* values = (a, b, ...) */
        ane_text values = {0};
        ane_text_append(&values, "(");
        for (int k = 0; k < node->noperands; k++) ane_text_append(&values, k ? ", %s" : "%s", node->operands[k]->name);
        ane_text_append(&values, ")");
        add_argument(args, &count, "values", values.data ? values.data : "()");
        ane_text_free(&values);
    } else {
        for (int k = 0; k < node->noperands; k++) {
            char param[32];
            ane_op_operand_name(node->op, k, param, sizeof param);
            add_argument(args, &count, param, node->operands[k]->name);
        }
    }
    qsort(args, (size_t)count, sizeof args[0], by_param);

    char type[192];
    ane_text_append(&e->text, INDENT);
    if (node->op == ANE_OP_SPLIT) { /* every piece is named; this node is piece `index` */
        const ane_node *x = node->operands[0];
        for (int piece = 0; piece < node->attrs.sizes.count; piece++) {
            int64_t shape[ANE_IR_MAX_RANK];
            memcpy(shape, x->shape, sizeof shape);
            shape[node->attrs.axis] = node->attrs.sizes.values[piece];
            type_of(node->dtype, node->rank, shape, type, sizeof type);
            if (piece == node->attrs.index) ane_text_append(&e->text, "%s%s %s", piece ? ", " : "", type, node->name);
            else ane_text_append(&e->text, "%s%s %s_piece%d", piece ? ", " : "", type, node->name, piece);
        }
    } else {
        ane_text_append(&e->text, "%s %s", node_type(node, type, sizeof type), node->name);
    }
    ane_text_append(&e->text, " = %s(", ane_op_table[node->op].name);
    for (int i = 0; i < count; i++) ane_text_append(&e->text, "%s%s = %s", i ? ", " : "", args[i].param, args[i].value);
    ane_text_append(&e->text, ")[name = string(\"%s\")];\n", node->name);
}

/* ------------------------------------------------------------------ program */

static int by_node_name(const void *a, const void *b) {
    return strcmp((*(const ane_node *const *)a)->name, (*(const ane_node *const *)b)->name);
}

static int by_output_name(const void *a, const void *b) {
    return strcmp(((const ane_graph_output *)a)->name, ((const ane_graph_output *)b)->name);
}

static ane_status emit(const ane_graph *g, ane_mil_program *out, int by_reference, ane_error *err) {
    memset(out, 0, sizeof *out);
    if (g->noutputs == 0) return ane_fail(err, ANE_ERR_ARGUMENT, "graph '%s' has no outputs; declare them with output()", g->name);
    emitter e = {.g = g, .err = err};
    if (by_reference) {
        ane_milblob_writer_init_by_reference(&e.blobs);
    } else {
        ane_milblob_writer_init(&e.blobs);
        /* The weight file's size ahead (each const's records and padding, at most two records
         * for an encoded one), so its bytes are copied once instead of again at every doubling. */
        size_t blob_bytes = 0;
        for (int i = 0; i < g->count; i++)
            if (!g->nodes[i]->dead && g->nodes[i]->op == ANE_OP_CONST)
                blob_bytes += (size_t)ane_const_stored_bytes(g->nodes[i]) + 4 * ANE_MILBLOB_ALIGN;
        ane_text_reserve(&e.blobs.bytes, blob_bytes);
    }

    ane_text_append(&e.text, "program(1.3)\n");
    ane_text_append(&e.text, "[buildInfo = dict<string, string>({{\"coremlc-component-MIL\", \"3510.2.1\"}, "
                             "{\"coremlc-version\", \"3505.4.1\"}, {\"coremltools-component-milinternal\", \"\"}, "
                             "{\"coremltools-version\", \"9.0\"}})]\n{\n");

    /* Inputs in alphabetical order (ANE-19). */
    const ane_node **inputs = calloc((size_t)g->count + 1, sizeof *inputs);
    ane_graph_output *outputs = calloc((size_t)g->noutputs, sizeof *outputs);
    if (!inputs || !outputs) {
        free(inputs);
        free(outputs);
        ane_milblob_writer_free(&e.blobs);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory emitting graph '%s'", g->name);
    }
    int ninputs = 0;
    for (int i = 0; i < g->count; i++)
        if (!g->nodes[i]->dead && g->nodes[i]->op == ANE_OP_INPUT) inputs[ninputs++] = g->nodes[i];
    qsort(inputs, (size_t)ninputs, sizeof *inputs, by_node_name);
    ane_text_append(&e.text, "    func main<ios18>(");
    for (int i = 0; i < ninputs; i++) {
        char type[192];
        ane_text_append(&e.text, "%s%s %s", i ? ", " : "", node_type(inputs[i], type, sizeof type), inputs[i]->name);
    }
    ane_text_append(&e.text, ") {\n");

    for (int i = 0; i < g->count && !e.status; i++) {
        const ane_node *node = g->nodes[i];
        if (node->dead || node->op == ANE_OP_INPUT) continue;
        if (node->op == ANE_OP_CONST) emit_const_node(&e, node);
        else emit_op(&e, node);
    }

    /* Outputs in alphabetical order (ANE-03); the names are live node names (ANE-14). */
    memcpy(outputs, g->outputs, (size_t)g->noutputs * sizeof *outputs);
    qsort(outputs, (size_t)g->noutputs, sizeof *outputs, by_output_name);
    ane_text_append(&e.text, "    } -> (");
    for (int i = 0; i < g->noutputs; i++) ane_text_append(&e.text, "%s%s", i ? ", " : "", outputs[i].node->name);
    ane_text_append(&e.text, ");\n}\n");
    free(inputs);
    free(outputs);
    free(e.param_names);

    if (!e.status && (e.text.failed || e.blobs.bytes.failed))
        e.status = ane_fail(err, ANE_ERR_NOMEM, "out of memory emitting graph '%s'", g->name);
    if (e.status) {
        ane_text_free(&e.text);
        ane_milblob_writer_free(&e.blobs);
        return e.status;
    }
    out->text = e.text.data;
    out->text_length = e.text.length;
    out->blobs = (int)e.blobs.count;
    out->weight_file.path = ANE_MIL_WEIGHT_PATH;
    if (!e.blobs.count) {
        ane_milblob_writer_free(&e.blobs);
    } else if (by_reference) {
        out->by_reference = e.blobs;
        ane_status status = ane_milblob_writer_file(&out->by_reference, ANE_MIL_WEIGHT_PATH, &out->weight_file, err);
        if (status) {
            ane_mil_program_free(out);
            return status;
        }
        out->weights_size = out->weight_file.size;
    } else {
        out->weights = (unsigned char *)e.blobs.bytes.data;
        out->weights_size = e.blobs.bytes.length;
        out->weight_file.bytes = out->weights;
        out->weight_file.size = out->weights_size;
    }
    return ANE_OK;
}

ane_status ane_emit_mil(const ane_graph *g, ane_mil_program *out, ane_error *err) { return emit(g, out, 0, err); }

ane_status ane_emit_mil_by_reference(const ane_graph *g, ane_mil_program *out, ane_error *err) {
    return emit(g, out, 1, err);
}

void ane_mil_program_free(ane_mil_program *program) {
    free(program->text);
    free(program->weights);
    ane_milblob_writer_free(&program->by_reference);
    memset(program, 0, sizeof *program);
}
