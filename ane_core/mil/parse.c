/* The MIL text parser (see parse.h): a recursive-descent parser over the lexer of lex.c
 * that builds the graph IR through the same builders the Lua API uses, so every shape rule
 * and name check applies to parsed programs too.
 *
 * Const statements go into a symbol table as literals; they become graph nodes only when
 * used as operands (conv weights, biases), while op parameters (strides, axes, flags)
 * are read from them directly. Every allocation of the parse lives in one arena. */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/arena.h"
#include "../base/fp16.h"
#include "../tensor/intern.h"
#include "../tensor/storage.h"
#include "lex.h"
#include "milblob.h"

enum { MAX_DEPTH = 32, MAX_OUTPUTS = 64, MAX_ARGS = 32, MAX_LITERAL_BYTES = 1 << 30 };

typedef struct symbol symbol;

typedef struct parser {
    mil_lexer lex;    /* the tokens, the source name and the first failure */
    ane_arena arena;
    const ane_mil_file *files;
    int nfiles;
    unsigned char checked_files[16]; /* files[i] read whole (the runtime passes at most 16) */
    ane_notes *notes;                /* what the weight files do differently (may be NULL) */
    ane_graph *graph; /* the function being built */
    symbol **table;   /* open addressing, capacity a power of two */
    int table_capacity, table_count;
    int depth;
    int auto_consts;
} parser;

/* The lexer's operations on the parser's lexer. */
#define failed(p) mil_lex_failed(&(p)->lex)
#define fail_at(p, ...) mil_lex_fail_at(&(p)->lex, __VA_ARGS__)
#define next(p) mil_lex_next(&(p)->lex)
#define is_punct(p, c) mil_lex_is_punct(&(p)->lex, c)
#define is_word(p, word) mil_lex_is_word(&(p)->lex, word)
#define describe mil_lex_describe
#define expect_punct(p, c, context) mil_lex_expect_punct(&(p)->lex, c, context)
#define accept_punct(p, c) mil_lex_accept_punct(&(p)->lex, c)
#define expect_ident(p, buf, what) mil_lex_expect_ident(&(p)->lex, buf, ANE_NAME_MAX, what)

/* ------------------------------------------------------------------ types */

typedef enum { TYPE_SCALAR, TYPE_TENSOR, TYPE_STRING, TYPE_UINT64, TYPE_DICT } type_kind;

typedef struct mil_type {
    type_kind kind;
    ane_dtype dtype;   /* sub-byte types: uint8 (int8 for int4) holding `bits` of each byte */
    int bits;          /* 1, 2, 3, 4, 6 for the sub-byte types of quantized weights; 0 otherwise */
    int rank;
    int64_t dims[ANE_MAX_DIMS]; /* literals may have more than ANE_IR_MAX_RANK (palettes) */
} mil_type;

/* The sub-byte element types of palettized and 4-bit weights, with their MILBlob codes. */
static const struct { const char *name; int bits, is_signed; uint32_t code; } subbyte_types[] = {
    {"uint1", 1, 0, MILBLOB_UINT1}, {"uint2", 2, 0, MILBLOB_UINT2}, {"uint3", 3, 0, MILBLOB_UINT3},
    {"uint4", 4, 0, MILBLOB_UINT4}, {"uint6", 6, 0, MILBLOB_UINT6}, {"int4", 4, 1, MILBLOB_INT4},
};

static int dtype_from_token(const token *t, ane_dtype *out) {
    char name[16];
    if (t->kind != T_IDENT || t->length >= sizeof name) return 0;
    memcpy(name, t->start, t->length);
    name[t->length] = '\0';
    return ane_dtype_from_name(name, out);
}

/* An element type word into *out (with bits set for the sub-byte types). */
static int element_type_from_token(const token *t, mil_type *out) {
    out->bits = 0;
    if (dtype_from_token(t, &out->dtype)) return 1;
    if (t->kind == T_IDENT && t->length == 6 && memcmp(t->start, "uint32", 6) == 0) {
        out->dtype = ANE_INT64; /* uint32 literals (the shape of constexpr_lut_to_dense) hold in int64 */
        return 1;
    }
    for (size_t i = 0; i < sizeof subbyte_types / sizeof subbyte_types[0]; i++)
        if (t->kind == T_IDENT && t->length == strlen(subbyte_types[i].name) &&
            memcmp(t->start, subbyte_types[i].name, t->length) == 0) {
            out->dtype = subbyte_types[i].is_signed ? ANE_INT8 : ANE_UINT8;
            out->bits = subbyte_types[i].bits;
            return 1;
        }
    return 0;
}

/* The MILBlob code and the byte count of a tensor type's data. */
static uint32_t blob_code(const mil_type *type) {
    for (size_t i = 0; i < sizeof subbyte_types / sizeof subbyte_types[0]; i++)
        if (type->bits && subbyte_types[i].bits == type->bits && subbyte_types[i].is_signed == (type->dtype == ANE_INT8))
            return subbyte_types[i].code;
    return type->bits ? 0 : ane_milblob_code_for(type->dtype);
}

static int64_t type_numel(const mil_type *type) {
    int64_t n = 1;
    for (int i = 0; i < type->rank; i++) n *= type->dims[i];
    return n;
}

static int parse_type(parser *p, mil_type *out);

/* dict<K, V>: only the buildInfo attribute uses it. */
static int parse_dict_type(parser *p) {
    next(p);
    mil_type inner;
    return expect_punct(p, '<', "after dict") && parse_type(p, &inner) && expect_punct(p, ',', "in dict type") &&
           parse_type(p, &inner) && expect_punct(p, '>', "after dict type");
}

static int parse_type(parser *p, mil_type *out) {
    if (failed(p)) return 0;
    memset(out, 0, sizeof *out);
    token start = p->lex.tok;
    if (is_word(p, "string")) {
        out->kind = TYPE_STRING;
        next(p);
        return 1;
    }
    if (is_word(p, "uint64")) {
        out->kind = TYPE_UINT64;
        next(p);
        return 1;
    }
    if (is_word(p, "dict")) {
        out->kind = TYPE_DICT;
        return parse_dict_type(p);
    }
    if (!is_word(p, "tensor")) {
        if (!element_type_from_token(&p->lex.tok, out)) {
            char found[64];
            fail_at(p, &p->lex.tok, "expected a type, found %s", describe(&p->lex.tok, found, sizeof found));
            return 0;
        }
        out->kind = TYPE_SCALAR;
        next(p);
        return 1;
    }
    next(p);
    if (!expect_punct(p, '<', "after tensor")) return 0;
    /* tensor<string, []> and tensor<uint64, []>: the rank-0 spelling of program(1.0) */
    int scalar_word = is_word(p, "string") ? TYPE_STRING : is_word(p, "uint64") ? TYPE_UINT64 : 0;
    if (scalar_word) {
        next(p);
        if (!expect_punct(p, ',', "after the element type") || !expect_punct(p, '[', "before the shape") ||
            !expect_punct(p, ']', "(a string or uint64 tensor is rank 0)") || !expect_punct(p, '>', "after the tensor type"))
            return 0;
        out->kind = (type_kind)scalar_word;
        return 1;
    }
    if (!element_type_from_token(&p->lex.tok, out)) {
        char found[64];
        fail_at(p, &p->lex.tok, "expected an element type (fp16, fp32, int32, ...), found %s", describe(&p->lex.tok, found, sizeof found));
        return 0;
    }
    next(p);
    if (!expect_punct(p, ',', "after the element type") || !expect_punct(p, '[', "before the shape")) return 0;
    out->kind = TYPE_TENSOR;
    int64_t numel = 1;
    while (!failed(p) && !is_punct(p, ']')) {
        if (out->rank > 0 && !expect_punct(p, ',', "between dimensions")) return 0;
        if (is_punct(p, '?')) {
            fail_at(p, &p->lex.tok, "dynamic dimension '?': the ANE takes static shapes only (ANE-22); compile one program per shape");
            return 0;
        }
        if (p->lex.tok.kind != T_NUMBER || out->rank >= ANE_MAX_DIMS) {
            fail_at(p, &p->lex.tok, out->rank >= ANE_MAX_DIMS ? "more than %d dimensions" : "expected a dimension (max rank %d)",
                    ANE_MAX_DIMS);
            return 0;
        }
        char digits[32];
        size_t n = p->lex.tok.length < sizeof digits - 1 ? p->lex.tok.length : sizeof digits - 1;
        memcpy(digits, p->lex.tok.start, n);
        digits[n] = '\0';
        char *end;
        errno = 0;
        long long value = strtoll(digits, &end, 10);
        if (*end || errno || value < 1 || value > (1ll << 31) || numel > (1ll << 40) / value) {
            fail_at(p, &p->lex.tok, "dimension '%s' is not a positive integer of a sane size", digits);
            return 0;
        }
        numel *= value;
        out->dims[out->rank++] = value;
        next(p);
    }
    if (!expect_punct(p, ']', "after the shape") || !expect_punct(p, '>', "after the tensor type")) return 0;
    (void)start;
    return 1;
}

static void type_string(const mil_type *type, char *buf, size_t size) {
    if (type->kind != TYPE_TENSOR) {
        snprintf(buf, size, "%s", type->kind == TYPE_STRING ? "string" : ane_dtype_name(type->dtype));
        return;
    }
    char dims[128];
    ane_shape_string(dims, sizeof dims, type->rank, type->dims);
    char element[16];
    if (type->bits) snprintf(element, sizeof element, "%sint%d", type->dtype == ANE_INT8 ? "" : "u", type->bits);
    else snprintf(element, sizeof element, "%s", ane_dtype_name(type->dtype));
    snprintf(buf, size, "tensor<%s, %s>", element, dims);
}

/* ------------------------------------------------------------------ values */

typedef enum { VAL_NAME, VAL_STRING, VAL_BOOL, VAL_INT, VAL_FLOAT, VAL_TENSOR, VAL_TUPLE, VAL_DICT, VAL_ENCODED } value_kind;

typedef struct mil_value mil_value;
struct mil_value {
    value_kind kind;
    token at;                  /* where it starts, for errors */
    mil_type type;             /* literal's declared type (scalars: TYPE_SCALAR + dtype) */
    char name[ANE_NAME_MAX];   /* VAL_NAME */
    const char *string;        /* VAL_STRING, in the arena */
    int64_t integer;           /* VAL_BOOL, VAL_INT */
    double number;             /* VAL_FLOAT */
    double *elements;          /* VAL_TENSOR: [numel] values, row-major (NULL for blobs) */
    const uint8_t *blob;       /* VAL_TENSOR from BLOBFILE: raw bytes in the weight file */
    int blob_file;             /* VAL_TENSOR from BLOBFILE: index of that file among the given ones */
    uint64_t blob_offset;      /* VAL_TENSOR from BLOBFILE: where its bytes start in that file */
    int count;                 /* VAL_TUPLE */
    mil_value **items;         /* VAL_TUPLE */
    ane_weight_encoding encoding; /* VAL_ENCODED: a quantized weight kept as stored (type: the dense one) */
    const mil_value *codes;    /* VAL_ENCODED: its int8 data or packed 4-bit indices (BLOBFILE bytes) */
    const mil_value *table;    /* VAL_ENCODED: its scales or palettes */
    const mil_value *offsets;  /* VAL_ENCODED q4_k: its offsets, one per scale */
    int table_per_row;         /* VAL_ENCODED: one scale / palette per row (else one for every row) */
};

static mil_value *new_value(parser *p, value_kind kind) {
    mil_value *v = ane_arena_alloc(&p->arena, sizeof *v);
    if (!v) {
        p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory while parsing", p->lex.source);
        return NULL;
    }
    v->kind = kind;
    v->at = p->lex.tok;
    return v;
}

static int parse_number_token(parser *p, double *out) {
    const token *t = &p->lex.tok;
    char text[80];
    if (t->length >= sizeof text) {
        fail_at(p, t, "number is too long");
        return 0;
    }
    memcpy(text, t->start, t->length);
    text[t->length] = '\0';
    if (strcmp(text, "inf") == 0 || strcmp(text, "+inf") == 0) *out = INFINITY;
    else if (strcmp(text, "-inf") == 0) *out = -INFINITY;
    else if (strcmp(text, "nan") == 0 || strcmp(text, "-nan") == 0) *out = NAN;
    else {
        char *end;
        *out = strtod(text, &end);
        if (*end || end == text) {
            fail_at(p, t, "'%s' is not a number", text);
            return 0;
        }
    }
    next(p);
    return 1;
}

static int parse_string_token(parser *p, const char **out) {
    if (p->lex.tok.kind != T_STRING) {
        char found[64];
        fail_at(p, &p->lex.tok, "expected a string, found %s", describe(&p->lex.tok, found, sizeof found));
        return 0;
    }
    size_t length = p->lex.tok.length - 2;
    char *copy = ane_arena_alloc(&p->arena, length + 1);
    if (!copy) {
        p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory", p->lex.source);
        return 0;
    }
    size_t n = 0;
    for (size_t i = 1; i + 1 < p->lex.tok.length; i++) {
        char c = p->lex.tok.start[i];
        if (c == '\\' && i + 2 < p->lex.tok.length) c = p->lex.tok.start[++i];
        copy[n++] = c;
    }
    copy[n] = '\0';
    *out = copy;
    next(p);
    return 1;
}

/* One element of a tensor list: a number, true/false, or inf/nan. */
static int parse_element(parser *p, double *out) {
    if (is_word(p, "true") || is_word(p, "false")) {
        *out = is_word(p, "true");
        next(p);
        return 1;
    }
    if (p->lex.tok.kind == T_NUMBER || is_word(p, "inf") || is_word(p, "nan")) return parse_number_token(p, out);
    char found[64];
    fail_at(p, &p->lex.tok, "expected a number, found %s", describe(&p->lex.tok, found, sizeof found));
    return 0;
}

/* [a, b, ...] possibly nested, flattened into elements (capacity numel). */
static int parse_list(parser *p, double *elements, int64_t capacity, int64_t *count) {
    if (++p->depth > MAX_DEPTH) {
        fail_at(p, &p->lex.tok, "values nest deeper than %d levels", MAX_DEPTH);
        return 0;
    }
    if (!expect_punct(p, '[', "to open the values")) return 0;
    int first = 1;
    while (!failed(p) && !is_punct(p, ']')) {
        if (!first && !expect_punct(p, ',', "between values")) return 0;
        first = 0;
        if (is_punct(p, '[')) {
            if (!parse_list(p, elements, capacity, count)) return 0;
            continue;
        }
        double value;
        token at = p->lex.tok;
        if (!parse_element(p, &value)) return 0;
        if (*count >= capacity) {
            fail_at(p, &at, "more values than the type's %lld elements", (long long)capacity);
            return 0;
        }
        elements[(*count)++] = value;
    }
    p->depth--;
    return expect_punct(p, ']', "to close the values");
}

static const ane_mil_file *find_file(const parser *p, const char *path) {
    for (int i = 0; i < p->nfiles; i++)
        if (p->files[i].path && strcmp(p->files[i].path, path) == 0) return &p->files[i];
    return NULL;
}

/* BLOBFILE(path = string("..."), offset = uint64(N)) for a tensor of `type`. */
static int parse_blobfile(parser *p, mil_value *v) {
    token at = p->lex.tok;
    next(p);
    const char *path = NULL;
    double offset = -1;
    if (!expect_punct(p, '(', "after BLOBFILE")) return 0;
    while (!failed(p) && !is_punct(p, ')')) {
        char key[ANE_NAME_MAX];
        if (path || offset >= 0) expect_punct(p, ',', "between BLOBFILE fields");
        if (!expect_ident(p, key, "path or offset") || !expect_punct(p, '=', "after the field name")) return 0;
        mil_type field_type; /* string / uint64, or their rank-0 tensor spelling */
        if (!parse_type(p, &field_type) || !expect_punct(p, '(', "after the type")) return 0;
        if (strcmp(key, "path") == 0) {
            if (!parse_string_token(p, &path)) return 0;
        } else if (strcmp(key, "offset") == 0) {
            if (p->lex.tok.kind != T_NUMBER || !parse_number_token(p, &offset)) {
                fail_at(p, &p->lex.tok, "BLOBFILE offset must be a number");
                return 0;
            }
        } else {
            fail_at(p, &at, "BLOBFILE has no field '%s'", key);
            return 0;
        }
        if (!expect_punct(p, ')', "after the field value")) return 0;
    }
    if (!expect_punct(p, ')', "to close BLOBFILE")) return 0;
    if (!path || offset < 0 || offset != floor(offset) || offset > 1e18) {
        fail_at(p, &at, "BLOBFILE needs path = string(...) and a whole offset = uint64(...)");
        return 0;
    }
    const ane_mil_file *file = find_file(p, path);
    if (!file) {
        fail_at(p, &at, "weight file '%s' was not given", path);
        return 0;
    }
    uint32_t code = blob_code(&v->type);
    if (!code) {
        fail_at(p, &at, "%s tensors cannot be stored in a MILBlob file", ane_dtype_name(v->type.dtype));
        return 0;
    }
    uint64_t bytes = v->type.bits ? ((uint64_t)type_numel(&v->type) * (uint64_t)v->type.bits + 7) / 8
                                  : (uint64_t)type_numel(&v->type) * ane_dtype_size(v->type.dtype);
    ane_error inner;
    int index = (int)(file - p->files);
    if (!p->checked_files[index]) { /* the whole file, once: the verdict and notes ane.milblob.read gives */
        ane_milblob_record *records;
        int count;
        if (ane_milblob_parse(file, path, &records, &count, p->notes, &inner)) {
            fail_at(p, &at, "%s", inner.message);
            return 0;
        }
        free(records);
        p->checked_files[index] = 1;
    }
    if (ane_milblob_lookup(file, path, (uint64_t)offset, code, bytes, &v->blob, p->notes, &inner)) {
        fail_at(p, &at, "%s", inner.message);
        return 0;
    }
    v->blob_file = index;
    v->blob_offset = (uint64_t)offset + ANE_MILBLOB_ALIGN; /* the data, right after the record */
    return 1;
}

static mil_value *parse_value(parser *p);

/* A typed literal: string("..."), bool(true), int32(1), fp16(0.5), uint64(64),
 * tensor<...>([...]) or tensor<...>(BLOBFILE(...)), dict<...>({{...}}). */
static mil_value *parse_literal(parser *p) {
    mil_value *v = new_value(p, VAL_FLOAT);
    if (!v || !parse_type(p, &v->type)) return NULL;
    if (!expect_punct(p, '(', "to open the literal")) return NULL;
    switch (v->type.kind) {
    case TYPE_STRING:
        v->kind = VAL_STRING;
        if (!parse_string_token(p, &v->string)) return NULL;
        break;
    case TYPE_UINT64: {
        double number;
        token at = p->lex.tok;
        if (!parse_number_token(p, &number)) return NULL;
        if (!(number >= 0 && number <= 9e18) || number != floor(number)) { /* also rejects NaN */
            fail_at(p, &at, "uint64 literal must be a whole number from 0 to 9e18");
            return NULL;
        }
        v->kind = VAL_INT;
        v->integer = (int64_t)number;
        break;
    }
    case TYPE_DICT: /* {{"k", "v"}, ...}: checked for shape, then dropped */
        v->kind = VAL_DICT;
        if (!expect_punct(p, '{', "to open the dict")) return NULL;
        while (!failed(p) && !is_punct(p, '}')) {
            const char *ignored;
            accept_punct(p, ',');
            if (!expect_punct(p, '{', "to open a dict entry") || !parse_string_token(p, &ignored) ||
                !expect_punct(p, ',', "in a dict entry") || !parse_string_token(p, &ignored) ||
                !expect_punct(p, '}', "to close a dict entry"))
                return NULL;
        }
        if (!expect_punct(p, '}', "to close the dict")) return NULL;
        break;
    case TYPE_SCALAR:
        if (v->type.dtype == ANE_BOOL) {
            v->kind = VAL_BOOL;
            if (!is_word(p, "true") && !is_word(p, "false")) {
                fail_at(p, &p->lex.tok, "expected true or false");
                return NULL;
            }
            v->integer = is_word(p, "true");
            next(p);
        } else if (ane_dtype_kind_of(v->type.dtype) == ANE_KIND_FLOAT) {
            v->kind = VAL_FLOAT;
            if (!parse_element(p, &v->number)) return NULL;
        } else {
            double number;
            token at = p->lex.tok;
            if (!parse_number_token(p, &number)) return NULL;
            if (number != floor(number) || fabs(number) > 9e15) {
                fail_at(p, &at, "%s literal must be a whole number", ane_dtype_name(v->type.dtype));
                return NULL;
            }
            v->kind = VAL_INT;
            v->integer = (int64_t)number;
        }
        break;
    case TYPE_TENSOR: {
        v->kind = VAL_TENSOR;
        if (is_word(p, "BLOBFILE")) {
            if (!parse_blobfile(p, v)) return NULL;
            break;
        }
        int64_t numel = type_numel(&v->type);
        if (numel * 8 > MAX_LITERAL_BYTES) {
            fail_at(p, &v->at, "inline tensor of %lld elements is too large; use a BLOBFILE", (long long)numel);
            return NULL;
        }
        v->elements = ane_arena_alloc(&p->arena, (size_t)(numel ? numel : 1) * sizeof(double));
        if (!v->elements) {
            p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory", p->lex.source);
            return NULL;
        }
        int64_t count = 0;
        token at = p->lex.tok;
        if (v->type.rank == 0 && !is_punct(p, '[')) { /* tensor<int32, []>(1): a rank-0 value, unbracketed */
            if (!parse_element(p, &v->elements[0])) return NULL;
            count = 1;
        } else if (!parse_list(p, v->elements, numel, &count)) {
            return NULL;
        }
        if (count != numel) {
            fail_at(p, &at, "%lld values for a type of %lld elements", (long long)count, (long long)numel);
            return NULL;
        }
        break;
    }
    }
    if (!expect_punct(p, ')', "to close the literal")) return NULL;
    return v;
}

static int starts_literal(const parser *p) {
    if (p->lex.tok.kind != T_IDENT) return 0;
    mil_type element;
    if (is_word(p, "tensor") || is_word(p, "string") || is_word(p, "uint64") || is_word(p, "dict")) return 1;
    if (!element_type_from_token(&p->lex.tok, &element)) return 0;
    /* A dtype word followed by '(' is a literal; otherwise it is a name. */
    const char *after = p->lex.tok.start + p->lex.tok.length;
    while (after < p->lex.end && isspace((unsigned char)*after)) after++;
    return after < p->lex.end && *after == '(';
}

/* A value: a literal, a name, or a tuple (a, b, ...). */
static mil_value *parse_value(parser *p) {
    if (failed(p)) return NULL;
    if (++p->depth > MAX_DEPTH) {
        fail_at(p, &p->lex.tok, "values nest deeper than %d levels", MAX_DEPTH);
        return NULL;
    }
    mil_value *v = NULL;
    if (starts_literal(p)) {
        v = parse_literal(p);
    } else if (is_punct(p, '(')) {
        v = new_value(p, VAL_TUPLE);
        next(p);
        mil_value *items[MAX_ARGS * 2];
        while (v && !failed(p) && !is_punct(p, ')')) {
            if (v->count > 0 && !expect_punct(p, ',', "between tuple items")) return NULL;
            if (v->count >= (int)(sizeof items / sizeof items[0])) {
                fail_at(p, &p->lex.tok, "tuple has too many items");
                return NULL;
            }
            items[v->count] = parse_value(p);
            if (!items[v->count]) return NULL;
            v->count++;
        }
        if (!v || !expect_punct(p, ')', "to close the tuple")) return NULL;
        v->items = ane_arena_alloc(&p->arena, (size_t)(v->count ? v->count : 1) * sizeof *v->items);
        if (!v->items) {
            p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory", p->lex.source);
            return NULL;
        }
        memcpy(v->items, items, (size_t)v->count * sizeof *items);
    } else if (p->lex.tok.kind == T_IDENT) {
        v = new_value(p, VAL_NAME);
        if (v && !expect_ident(p, v->name, "a name")) return NULL;
    } else {
        char found[64];
        fail_at(p, &p->lex.tok, "expected a value, found %s", describe(&p->lex.tok, found, sizeof found));
        return NULL;
    }
    p->depth--;
    return failed(p) ? NULL : v;
}

/* ------------------------------------------------------------------ symbols */

typedef enum { SYM_NODE, SYM_CONST } symbol_kind;

struct symbol {
    char name[ANE_NAME_MAX];
    symbol_kind kind;
    ane_node *node;      /* SYM_NODE, or a SYM_CONST once used as an operand */
    mil_value *value;    /* SYM_CONST: the literal */
    token at;
};

static uint64_t hash_name(const char *name) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *name; name++) h = (h ^ (unsigned char)*name) * 1099511628211ull;
    return h;
}

static symbol *lookup(const parser *p, const char *name) {
    if (!p->table_capacity) return NULL;
    for (uint64_t i = hash_name(name);; i++) {
        symbol *s = p->table[i & (uint64_t)(p->table_capacity - 1)];
        if (!s) return NULL;
        if (strcmp(s->name, name) == 0) return s;
    }
}

static symbol *define(parser *p, const char *name, symbol_kind kind, const token *at) {
    if (lookup(p, name)) {
        fail_at(p, at, "'%s' is defined twice", name);
        return NULL;
    }
    if ((p->table_count + 1) * 2 > p->table_capacity) {
        int capacity = p->table_capacity ? p->table_capacity * 2 : 64;
        symbol **table = ane_arena_alloc(&p->arena, (size_t)capacity * sizeof *table);
        if (!table) {
            p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory", p->lex.source);
            return NULL;
        }
        for (int i = 0; i < p->table_capacity; i++) {
            symbol *s = p->table[i];
            if (!s) continue;
            uint64_t j = hash_name(s->name);
            while (table[j & (uint64_t)(capacity - 1)]) j++;
            table[j & (uint64_t)(capacity - 1)] = s;
        }
        p->table = table;
        p->table_capacity = capacity;
    }
    symbol *s = ane_arena_alloc(&p->arena, sizeof *s);
    if (!s) {
        p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory", p->lex.source);
        return NULL;
    }
    snprintf(s->name, sizeof s->name, "%s", name);
    s->kind = kind;
    s->at = *at;
    uint64_t j = hash_name(name);
    while (p->table[j & (uint64_t)(p->table_capacity - 1)]) j++;
    p->table[j & (uint64_t)(p->table_capacity - 1)] = s;
    p->table_count++;
    return s;
}

/* ------------------------------------------------------------------ literals -> tensors */

/* Element i of a tensor literal: inline, or read from its weight file (sub-byte types
 * unpacked low bits first, as the MILBlob format and coremltools pack them). */
static double element_at(const mil_value *v, int64_t i) {
    if (!v->blob) return v->elements[i];
    if (!v->type.bits) return ane_dtype_load(v->blob + i * (int64_t)ane_dtype_size(v->type.dtype), v->type.dtype);
    uint64_t bit = (uint64_t)i * (uint64_t)v->type.bits;
    unsigned raw = 0;
    for (int b = 0; b < v->type.bits; b++, bit++) raw |= (unsigned)((v->blob[bit / 8] >> (bit % 8)) & 1u) << b;
    if (v->type.dtype == ANE_INT8 && (raw >> (v->type.bits - 1)) & 1u) return (double)raw - (double)(1u << v->type.bits);
    return (double)raw;
}

/* A tensor or scalar parameter's element count and element i. */
static int64_t param_numel(const mil_value *v) { return v->kind == VAL_TENSOR ? type_numel(&v->type) : 1; }

static double param_at(const mil_value *v, int64_t i) {
    if (v->kind == VAL_TENSOR) return element_at(v, i);
    return v->kind == VAL_FLOAT ? v->number : (double)v->integer;
}

/* A tensor over a weight file's bytes where they are (read-only, not copied): valid while
 * the file is, so for the parse only. */
static ane_status file_bytes_tensor(const uint8_t *bytes, int rank, const int64_t *dims, ane_dtype dtype,
                                    ane_tensor *out, ane_error *err) {
    int64_t numel = 1;
    for (int d = 0; d < rank; d++) numel *= dims[d];
    ane_storage *borrowed = NULL;
    ane_status status = ane_storage_wrap((void *)bytes, (size_t)numel * ane_dtype_size(dtype), 1, NULL, NULL, &borrowed, err);
    if (!status) status = ane_tensor_on_storage(out, borrowed, 0, rank, dims, NULL, dtype, err);
    ane_storage_release(borrowed);
    return status;
}

/* The literal's values as a host tensor of its declared type. A weight file's bytes in the
 * literal's own type are not copied: the tensor reads them where the file is (for the parse
 * only; ane_graph_const keeps a copy, or shares the interned one without copying at all). */
static int literal_tensor(parser *p, const mil_value *v, ane_tensor *out) {
    ane_error inner;
    int rank = v->kind == VAL_TENSOR ? v->type.rank : 0;
    ane_dtype dtype = v->type.dtype;
    if (v->kind == VAL_TENSOR && v->blob && !v->type.bits) {
        ane_status status = file_bytes_tensor(v->blob, rank, v->type.dims, dtype, out, &inner);
        if (status) fail_at(p, &v->at, "%s", inner.message);
        return status == ANE_OK;
    }
    if (ane_tensor_zeros(out, rank, v->type.dims, dtype, &inner)) {
        fail_at(p, &v->at, "%s", inner.message);
        return 0;
    }
    char *data = ane_tensor_data(out);
    if (v->kind == VAL_TENSOR && v->blob && v->type.bits) {
        int64_t numel = ane_tensor_numel(out);
        for (int64_t i = 0; i < numel; i++) ane_dtype_store(data + i * (int64_t)ane_dtype_size(dtype), dtype, element_at(v, i));
    } else if (v->kind == VAL_TENSOR) {
        int64_t numel = ane_tensor_numel(out);
        for (int64_t i = 0; i < numel; i++) ane_dtype_store(data + i * (int64_t)ane_dtype_size(dtype), dtype, v->elements[i]);
    } else if (v->kind == VAL_FLOAT) {
        ane_dtype_store(data, dtype, v->number);
    } else if (v->kind == VAL_INT || v->kind == VAL_BOOL) {
        ane_dtype_store_int(data, dtype, v->integer);
    } else {
        ane_tensor_release(out);
        fail_at(p, &v->at, "this value cannot be a tensor");
        return 0;
    }
    return 1;
}

/* The packed tensor a weight file's codes (`data`, from a BLOBFILE) were unpacked from for
 * `encoding` (Q5_K or Q6_K), when the file names it (a compile's file, the emitter's piece:
 * milblob.h); else NULL. Such codes are in the encoding's range by construction. */
static const ane_tensor *codes_origin(const parser *p, const mil_value *data, ane_weight_encoding encoding) {
    if (!data->blob) return NULL;
    uint64_t size = (uint64_t)type_numel(&data->type);
    const ane_mil_piece *piece = ane_mil_file_piece(&p->files[data->blob_file], data->blob_offset, size);
    return piece && piece->origin && piece->origin_kind == (int)encoding && piece->offset == data->blob_offset &&
                   piece->size == size
               ? piece->origin
               : NULL;
}

/* Q5_K's and Q6_K's codes (a byte each in the weight file) packed as tensor/quantize.h keeps
 * them: the packed tensor they were unpacked from (codes_origin), else the interned copy when
 * another program holds the same bytes (the same layer's), else new ones, interned for the next. */
static ane_status packed_codes(const parser *p, const mil_value *v, int64_t bytes, ane_tensor *data, ane_error *err) {
    int64_t rows = v->type.dims[0], k = type_numel(&v->type) / rows;
    const ane_tensor *packed = codes_origin(p, v->codes, v->encoding);
    if (packed && ane_tensor_is_contiguous(packed) && ane_tensor_numel(packed) * (int64_t)ane_dtype_size(packed->dtype) == bytes)
        return ane_tensor_on_storage(data, packed->storage, packed->offset, 1, &bytes, NULL, ANE_UINT8, err);
    ane_status status = ane_tensor_empty(data, 1, &bytes, ANE_UINT8, err);
    if (status) return status;
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = (uint8_t *)ane_tensor_data(data) + ane_encoded_data_bytes(v->encoding, r, k);
        if (v->encoding == ANE_ENCODING_Q6_K) ane_q6_k_pack_codes(row, (const int8_t *)v->codes->blob + r * k, k);
        else ane_q5_k_pack(row, v->codes->blob + r * k, k);
    }
    ane_tensor interned;
    if (ane_intern_find(data, &interned)) {
        ane_tensor_release(data);
        *data = interned;
    } else {
        ane_intern_add(data);
    }
    return ANE_OK;
}

/* The stored bytes of a quantized weight as a tensor of its own: the interned copy when the
 * weight file's bytes are one (a compile's file points at the graph's codes), else a copy. */
static ane_status encoded_data(const parser *p, const mil_value *v, int64_t bytes, ane_tensor *data, ane_error *err) {
    if (v->encoding == ANE_ENCODING_Q6_K || v->encoding == ANE_ENCODING_Q5_K) return packed_codes(p, v, bytes, data, err);
    ane_dtype dtype = v->encoding == ANE_ENCODING_INT8 || v->encoding == ANE_ENCODING_Q8_0 ? ANE_INT8 : ANE_UINT8;
    ane_tensor view;
    ane_status status = file_bytes_tensor(v->codes->blob, 1, &bytes, dtype, &view, err);
    if (status) return status;
    int interned = ane_intern_find(&view, data);
    ane_tensor_release(&view);
    if (interned) return ANE_OK;
    status = ane_tensor_empty(data, 1, &bytes, dtype, err);
    if (!status) memcpy(ane_tensor_data(data), v->codes->blob, (size_t)bytes);
    return status;
}

/* Elements [0, n) of a tensor literal as fp32 into out: a weight file's fp16 / fp32 run
 * converted as a row (a block table holds a value per 16 or 32 weights), else one at a time. */
static void literal_as_fp32(const mil_value *v, float *out, int64_t n) {
    int as_row = v->kind == VAL_TENSOR && v->blob && !v->type.bits && (v->type.dtype == ANE_FP16 || v->type.dtype == ANE_FP32);
    if (as_row) {
        ane_dtype_convert_row(out, ANE_FP32, v->blob, v->type.dtype, (size_t)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) out[i] = (float)param_at(v, i);
}

/* A quantized weight's graph const: its stored bytes (shared or copied once), its table in fp32. */
static ane_status encoded_const(parser *p, const mil_value *v, const char *name, ane_node **node, ane_error *err) {
    int64_t numel = type_numel(&v->type), rows = v->type.dims[0], k = rows ? numel / rows : 0;
    int64_t width = ane_encoded_table_width(v->encoding, k);
    int64_t bytes = ane_encoded_data_bytes(v->encoding, rows, k), table_shape[1] = {rows * width};
    ane_tensor data, table;
    ane_status status = encoded_data(p, v, bytes, &data, err);
    if (status) return status;
    int64_t pairs = v->offsets ? rows * width / 2 : 0;
    float *offsets = v->offsets ? malloc(sizeof(float) * (size_t)pairs + 1) : NULL;
    status = v->offsets && !offsets ? ane_fail(err, ANE_ERR_NOMEM, "out of memory reading weight '%s'", name)
                                    : ane_tensor_empty(&table, 1, table_shape, ANE_FP32, err);
    if (!status) {
        float *entries = (float *)ane_tensor_data(&table);
        if (v->offsets) { /* q4_k / q5_k: each block's scale, then its offset. The scales are read into the
                             table's second half, which the pairs then fill from the front: pair i's two
                             entries land at or before scale i, after it is read. */
            literal_as_fp32(v->table, entries + pairs, pairs);
            literal_as_fp32(v->offsets, offsets, pairs);
            for (int64_t i = 0; i < pairs; i++) {
                float scale = entries[pairs + i];
                entries[2 * i] = scale, entries[2 * i + 1] = offsets[i];
            }
        } else if (v->table_per_row) {
            literal_as_fp32(v->table, entries, rows * width);
        } else {
            for (int64_t i = 0; i < rows * width; i++) entries[i] = (float)param_at(v->table, i % width);
        }
        status = ane_graph_const_encoded(p->graph, name, v->type.dtype, v->type.rank, v->type.dims, v->encoding, &data,
                                         &table, node, err);
        ane_tensor_release(&table);
    }
    free(offsets);
    ane_tensor_release(&data);
    return status;
}

/* A graph const for a literal (named after its symbol, or generated). */
static ane_node *materialize(parser *p, const mil_value *v, const char *name) {
    ane_node *node = NULL;
    ane_error inner;
    char generated[ANE_NAME_MAX];
    if (!name) {
        do snprintf(generated, sizeof generated, "inline_const_%d", p->auto_consts++);
        while (lookup(p, generated) || ane_graph_find(p->graph, generated));
        name = generated;
    }
    if (v->kind == VAL_ENCODED) {
        if (encoded_const(p, v, name, &node, &inner)) {
            fail_at(p, &v->at, "%s", inner.message);
            return NULL;
        }
        return node;
    }
    ane_tensor value;
    if (!literal_tensor(p, v, &value)) return NULL;
    ane_status status = ane_graph_const(p->graph, name, &value, &node, &inner);
    ane_tensor_release(&value);
    if (status) {
        fail_at(p, &v->at, "%s", inner.message);
        return NULL;
    }
    if (v->kind == VAL_TENSOR && v->blob && !v->type.bits) {
        node->blob.file = v->blob_file;
        node->blob.offset = v->blob_offset;
        node->blob.size = (uint64_t)ane_node_numel(node) * ane_dtype_size(node->dtype);
    }
    return node;
}

/* The literal behind a parameter value: the value itself, or the const it names. */
static const mil_value *resolve_literal(parser *p, const mil_value *v, const char *param) {
    if (!v || failed(p)) return NULL;
    if (v->kind != VAL_NAME) return v;
    symbol *s = lookup(p, v->name);
    if (!s) {
        fail_at(p, &v->at, "'%s' is not defined", v->name);
        return NULL;
    }
    if (s->kind != SYM_CONST) {
        fail_at(p, &v->at, "parameter '%s' must be a const, but '%s' is computed", param, v->name);
        return NULL;
    }
    return s->value;
}

/* An operand: a node name, or an inline literal made into a const. */
static ane_node *resolve_operand(parser *p, const mil_value *v) {
    if (!v || failed(p)) return NULL;
    if (v->kind != VAL_NAME) return materialize(p, v, NULL);
    symbol *s = lookup(p, v->name);
    if (!s) {
        fail_at(p, &v->at, "'%s' is not defined", v->name);
        return NULL;
    }
    if (s->kind == SYM_CONST && !s->node) s->node = materialize(p, s->value, s->name);
    return s->node;
}

static int literal_int(parser *p, const mil_value *v, const char *param, int64_t *out) {
    v = resolve_literal(p, v, param);
    if (!v) return 0;
    if (v->kind == VAL_INT || v->kind == VAL_BOOL) *out = v->integer;
    else if (v->kind == VAL_TENSOR && !v->blob && type_numel(&v->type) == 1 && fabs(v->elements[0]) <= 1e15 &&
             v->elements[0] == floor(v->elements[0]))
        *out = (int64_t)v->elements[0];
    else {
        fail_at(p, &v->at, "parameter '%s' must be an integer", param);
        return 0;
    }
    return 1;
}

static int literal_bool(parser *p, const mil_value *v, const char *param, int *out) {
    int64_t value;
    if (!literal_int(p, v, param, &value)) return 0;
    *out = value != 0;
    return 1;
}

static int literal_float(parser *p, const mil_value *v, const char *param, double *out) {
    v = resolve_literal(p, v, param);
    if (!v) return 0;
    if (v->kind == VAL_FLOAT) *out = v->number;
    else if (v->kind == VAL_INT) *out = (double)v->integer;
    else if (v->kind == VAL_TENSOR && !v->blob && type_numel(&v->type) == 1) *out = v->elements[0];
    else {
        fail_at(p, &v->at, "parameter '%s' must be a number", param);
        return 0;
    }
    return 1;
}

static int literal_string(parser *p, const mil_value *v, const char *param, const char **out) {
    v = resolve_literal(p, v, param);
    if (!v) return 0;
    if (v->kind != VAL_STRING) {
        fail_at(p, &v->at, "parameter '%s' must be a string", param);
        return 0;
    }
    *out = v->string;
    return 1;
}

static int literal_ints(parser *p, const mil_value *v, const char *param, ane_int_list *out) {
    v = resolve_literal(p, v, param);
    if (!v) return 0;
    if (v->kind == VAL_INT) {
        out->count = 1;
        out->values[0] = v->integer;
        return 1;
    }
    if (v->kind != VAL_TENSOR || v->blob || v->type.rank > 1 || type_numel(&v->type) > ANE_LIST_MAX) {
        fail_at(p, &v->at, "parameter '%s' must be a list of at most %d integers", param, ANE_LIST_MAX);
        return 0;
    }
    out->count = (int)type_numel(&v->type);
    for (int i = 0; i < out->count; i++) {
        if (v->elements[i] != floor(v->elements[i]) || fabs(v->elements[i]) > 1e15) {
            fail_at(p, &v->at, "parameter '%s' must hold integers", param);
            return 0;
        }
        out->values[i] = (int64_t)v->elements[i];
    }
    return 1;
}

/* ------------------------------------------------------------------ op statements */

typedef struct argument {
    char name[ANE_NAME_MAX];
    token at;
    mil_value *value;
} argument;

static argument *find_argument(argument *args, int count, const char *name) {
    for (int i = 0; i < count; i++)
        if (strcmp(args[i].name, name) == 0) return &args[i];
    return NULL;
}

/* Ops the device does not have, with the constraint they break. */
static const char *missing_op_hint(const char *op) {
    if (strcmp(op, "read_state") == 0 || strcmp(op, "write_state") == 0 || strncmp(op, "scatter", 7) == 0 ||
        strcmp(op, "slice_update") == 0)
        return "ANE-24: state ops, scatter and slice_update are unsupported; keep the KV cache in input surfaces";
    if (strcmp(op, "layer_norm") == 0 || strcmp(op, "rms_norm") == 0 || strcmp(op, "batch_norm") == 0)
        return "norms are not single ANE ops; decompose them (reduce_sum, mul, pow)";
    return NULL;
}

/* conv's pad_type: valid (no padding), same (the padding that keeps ceil(in / stride)
 * positions, computed from the operands' shapes) or custom (the pad values as given). */
static void apply_pad_type(parser *p, const char *pad_type, const token *at, ane_node_attrs *a, ane_node *const *operands) {
    if (strcmp(pad_type, "valid") == 0) {
        memset(a->pads, 0, sizeof a->pads);
    } else if (strcmp(pad_type, "same") == 0) {
        if (!operands[0] || !operands[1] || operands[0]->rank != 4 || operands[1]->rank != 4) return;
        for (int i = 0; i < 2; i++) {
            int64_t in = operands[0]->shape[2 + i], k = operands[1]->shape[2 + i], s = a->strides[i] > 0 ? a->strides[i] : 1;
            int64_t out = (in + s - 1) / s, total = (out - 1) * s + (k - 1) * a->dilations[i] + 1 - in;
            if (total < 0) total = 0;
            a->pads[2 * i] = total / 2;
            a->pads[2 * i + 1] = total - total / 2;
        }
    } else if (strcmp(pad_type, "custom") != 0) {
        fail_at(p, at, "conv pad_type '%s' is not valid, same or custom", pad_type);
    }
}

/* Reads the attribute parameters of `op` from the arguments, as the op table's schema
 * describes them: defaults for the ones not given, required ones checked, values checked. A
 * parameter may be a named const or an inline literal (`transpose_x = bool(false)`): both are
 * valid MIL, and the program the device receives is the emitter's, whose parameters are
 * named consts (ANE-12, disputed). */
static void bind_attributes(parser *p, ane_op op, argument *args, int nargs, ane_node_attrs *a, ane_node *const *operands) {
    const char *op_name = ane_op_table[op].name;
    const char *pad_type = NULL;
    const token *pad_type_at = NULL;
    ane_attrs_defaults(op, a);
    ANE_FOR_EACH_ATTR(op, spec) {
        if (!spec->mil) continue;
        argument *arg = find_argument(args, nargs, spec->mil);
        if (!arg) {
            if (ane_attr_is_stored(spec) && !spec->fallback) {
                fail_at(p, &args[0].at, "%s needs %s", op_name, spec->mil);
                return;
            }
            continue;
        }
        void *field = ane_attr_is_stored(spec) ? ane_attr_field(a, spec) : NULL;
        switch (spec->kind) {
        case ANE_ATTR_INT: literal_int(p, arg->value, spec->mil, field); break;
        case ANE_ATTR_BOOL: literal_bool(p, arg->value, spec->mil, field); break;
        case ANE_ATTR_FLOAT: literal_float(p, arg->value, spec->mil, field); break;
        case ANE_ATTR_INTS: literal_ints(p, arg->value, spec->mil, field); break;
        case ANE_ATTR_PAIR:
        case ANE_ATTR_QUAD: {
            int want = spec->kind == ANE_ATTR_PAIR ? 2 : 4;
            ane_int_list list;
            if (!literal_ints(p, arg->value, spec->mil, &list)) break;
            if (list.count != want) fail_at(p, &arg->at, "%s needs %d values", spec->mil, want);
            else memcpy(field, list.values, (size_t)want * sizeof list.values[0]);
            break;
        }
        case ANE_ATTR_DTYPE: {
            const char *name;
            if (literal_string(p, arg->value, spec->mil, &name) && !ane_dtype_from_name(name, field))
                fail_at(p, &arg->at, "%s to unknown dtype '%s'", op_name, name);
            break;
        }
        case ANE_ATTR_STRING: {
            const char *text;
            if (literal_string(p, arg->value, spec->mil, &text)) snprintf(field, sizeof a->mode, "%s", text);
            break;
        }
        case ANE_ATTR_PAD_TYPE:
            if (literal_string(p, arg->value, spec->mil, &pad_type)) pad_type_at = &arg->at;
            break;
        case ANE_ATTR_FALSE: {
            int value = 0;
            if (literal_bool(p, arg->value, spec->mil, &value) && value)
                fail_at(p, &arg->at, "%s with %s = true is not supported", op_name, spec->mil);
            break;
        }
        case ANE_ATTR_ONES: {
            ane_int_list list;
            if (literal_ints(p, arg->value, spec->mil, &list))
                for (int i = 0; i < list.count; i++)
                    if (list.values[i] != 1) fail_at(p, &arg->at, "%s with %s other than 1 is not supported", op_name, spec->mil);
            break;
        }
        case ANE_ATTR_ZERO: {
            int64_t value;
            if (literal_int(p, arg->value, spec->mil, &value) && value != 0)
                fail_at(p, &arg->at, "%s with %s is not supported", op_name, spec->mil);
            break;
        }
        case ANE_ATTR_REJECTED: fail_at(p, &arg->at, "%s", spec->fallback); break;
        case ANE_ATTR_IGNORED:
        case ANE_ATTR_PIECE:
        case ANE_ATTR_END: break;
        }
        if (failed(p)) return;
    }
    if (pad_type_at) apply_pad_type(p, pad_type, pad_type_at, a, operands);
    else ANE_FOR_EACH_ATTR(op, spec) if (spec->kind == ANE_ATTR_PAD_TYPE) apply_pad_type(p, spec->fallback, &args[0].at, a, operands);
}

/* Whether `name` is a parameter of `op` besides its operands (in its attribute schema). */
static int known_parameter(ane_op op, const char *name) {
    ANE_FOR_EACH_ATTR(op, spec)
        if (spec->mil && strcmp(spec->mil, name) == 0) return 1;
    return 0;
}

typedef struct declared_output {
    mil_type type;
    char name[ANE_NAME_MAX];
    token at;
} declared_output;

static int same_type(const mil_type *declared, const ane_node *node) {
    int rank = declared->kind == TYPE_TENSOR ? declared->rank : 0;
    if (declared->dtype != node->dtype || rank != node->rank) return 0;
    for (int i = 0; i < rank; i++)
        if (declared->dims[i] != node->shape[i]) return 0;
    return 1;
}

static void check_declared(parser *p, const declared_output *out, const ane_node *node) {
    if (failed(p) || same_type(&out->type, node)) return;
    char declared[160], shape[128];
    type_string(&out->type, declared, sizeof declared);
    fail_at(p, &out->at, "'%s' is declared %s but %s gives %s%s", out->name, declared, ane_op_table[node->op].name,
            ane_dtype_name(node->dtype), ane_node_shape_string(node, shape, sizeof shape));
}

/* ------------------------------------------------------------------ constexpr weights */

/* The quantized-weight ops expand at parse time into the fp16/fp32 const the device
 * computes from them (the device stores them compressed; sim keeps the dense values):
 *   constexpr_affine_dequantize  (quantized_data - zero_point) * scale, per tensor or along axis
 *   constexpr_blockwise_shift_scale  (data - offset) * scale, scale and offset per block
 *   constexpr_lut_to_dense  lut[indices]: iOS16 (packed uint8 indices, a [2^bits] lut, shape)
 *                           or iOS18 (indices of the output's shape, lut [groups..., 2^bits, 1])
 * Their parameters are literals or names of consts; every value is checked against its shape. */

/* A tensor or scalar parameter (a literal, or the const it names); NULL when absent. */
static const mil_value *quantization_param(parser *p, argument *args, int nargs, const char *name, int required,
                                           const char *op, token at) {
    argument *arg = find_argument(args, nargs, name);
    if (!arg) {
        if (required) fail_at(p, &at, "%s needs %s", op, name);
        return NULL;
    }
    const mil_value *v = resolve_literal(p, arg->value, name);
    if (v && v->kind != VAL_TENSOR && v->kind != VAL_FLOAT && v->kind != VAL_INT) {
        fail_at(p, &arg->at, "%s: %s must be a tensor or a number", op, name);
        return NULL;
    }
    return v;
}


/* A new tensor value of the declared type, its elements to be filled. */
static mil_value *dense_value(parser *p, const declared_output *out, int64_t numel, const char *op) {
    if (out->type.kind != TYPE_TENSOR || type_numel(&out->type) != numel) {
        fail_at(p, &out->at, "%s: '%s' is declared with %lld elements, the weights have %lld", op, out->name,
                (long long)(out->type.kind == TYPE_TENSOR ? type_numel(&out->type) : 1), (long long)numel);
        return NULL;
    }
    if (ane_dtype_kind_of(out->type.dtype) != ANE_KIND_FLOAT) {
        fail_at(p, &out->at, "%s gives floats: declare '%s' fp16 or fp32", op, out->name);
        return NULL;
    }
    mil_value *value = new_value(p, VAL_TENSOR);
    if (!value) return NULL;
    value->at = out->at;
    value->type = out->type;
    value->elements = ane_arena_alloc(&p->arena, (size_t)(numel ? numel : 1) * sizeof(double));
    if (!value->elements) {
        p->lex.status = ane_fail(p->lex.err, ANE_ERR_NOMEM, "%s: out of memory", p->lex.source);
        return NULL;
    }
    return value;
}

/* The block (or group) of element i of `shape` in a per-block tensor of `blocks` (each of
 * its dims divides shape's), as a flat index into that tensor. */
static int64_t block_of(int64_t i, const int64_t *shape, const int64_t *blocks, int rank) {
    int64_t index = 0, stride = 1;
    for (int d = rank - 1; d >= 0; d--) {
        int64_t coordinate = i % shape[d];
        i /= shape[d];
        index += coordinate / (shape[d] / blocks[d]) * stride;
        stride *= blocks[d];
    }
    return index;
}

/* Checks a per-block parameter's shape against the data's: same rank, each dim dividing. */
static int blocks_fit(parser *p, const mil_value *param, const mil_value *data, const char *op, const char *name) {
    if (param->kind != VAL_TENSOR || param->type.rank != data->type.rank) {
        fail_at(p, &param->at, "%s: %s must have the rank of data (%d)", op, name, data->type.rank);
        return 0;
    }
    for (int d = 0; d < data->type.rank; d++)
        if (data->type.dims[d] % param->type.dims[d]) {
            fail_at(p, &param->at, "%s: %s's dimension %d (%lld) does not divide data's (%lld)", op, name, d,
                    (long long)param->type.dims[d], (long long)data->type.dims[d]);
            return 0;
        }
    return 1;
}

/* The weight kept compressed (sim's kernels read it as stored) when it is one of the
 * encodings of tensor/quantize.h: rows along dimension 0, a float result of rank 1..5, and
 * the codes straight from a weight file. Everything else is expanded to dense values. */
static mil_value *encoded_value(parser *p, const declared_output *out, ane_weight_encoding encoding,
                                const mil_value *codes, const mil_value *table, int per_row) {
    const mil_type *t = &out->type;
    if (t->kind != TYPE_TENSOR || t->rank < 1 || t->rank > ANE_IR_MAX_RANK || (t->dtype != ANE_FP16 && t->dtype != ANE_FP32) ||
        !codes->blob || t->dims[0] < 1)
        return NULL;
    int64_t numel = type_numel(t);
    if (encoding == ANE_ENCODING_LUT4 && (numel / t->dims[0]) % 2) return NULL;
    mil_value *value = new_value(p, VAL_ENCODED);
    if (!value) return NULL;
    value->at = out->at;
    value->type = *t;
    value->encoding = encoding;
    value->codes = codes;
    value->table = table;
    value->table_per_row = per_row;
    return value;
}

static int all_zero(const mil_value *v) {
    for (int64_t i = 0; v && i < param_numel(v); i++)
        if (param_at(v, i) != 0) return 0;
    return 1;
}

static mil_value *expand_affine(parser *p, const declared_output *out, argument *args, int nargs, const char *op) {
    const mil_value *q = quantization_param(p, args, nargs, "quantized_data", 1, op, out->at);
    const mil_value *scale = q ? quantization_param(p, args, nargs, "scale", 1, op, out->at) : NULL;
    const mil_value *zero = scale ? quantization_param(p, args, nargs, "zero_point", 0, op, out->at) : NULL;
    if (!scale || failed(p)) return NULL;
    if (q->kind != VAL_TENSOR) {
        fail_at(p, &q->at, "%s: quantized_data must be a tensor", op);
        return NULL;
    }
    int64_t axis = 0;
    argument *axis_arg = find_argument(args, nargs, "axis");
    if (axis_arg && !literal_int(p, axis_arg->value, "axis", &axis)) return NULL;
    if (axis < 0) axis += q->type.rank;
    if (axis < 0 || axis >= q->type.rank) {
        fail_at(p, axis_arg ? &axis_arg->at : &out->at, "%s: axis %lld is outside quantized_data's rank %d", op,
                (long long)axis, q->type.rank);
        return NULL;
    }
    int64_t channels = q->type.dims[axis], inner = 1;
    for (int d = (int)axis + 1; d < q->type.rank; d++) inner *= q->type.dims[d];
    const mil_value *per_channel[2] = {scale, zero};
    for (int k = 0; k < 2; k++)
        if (per_channel[k] && param_numel(per_channel[k]) != 1 && param_numel(per_channel[k]) != channels) {
            fail_at(p, &per_channel[k]->at, "%s: %s has %lld values; it needs 1 (per tensor) or %lld (one per channel "
                    "along axis %lld)", op, k ? "zero_point" : "scale", (long long)param_numel(per_channel[k]),
                    (long long)channels, (long long)axis);
            return NULL;
        }
    int64_t numel = type_numel(&q->type);
    if (q->type.dtype == ANE_INT8 && !q->type.bits && axis == 0 && all_zero(zero) &&
        numel == type_numel(&out->type) && !failed(p)) { /* int8 per row: kept as stored */
        mil_value *encoded = encoded_value(p, out, ANE_ENCODING_INT8, q, scale, param_numel(scale) != 1);
        if (encoded || failed(p)) return encoded;
    }
    mil_value *value = dense_value(p, out, numel, op);
    if (!value) return NULL;
    for (int64_t i = 0; i < numel; i++) {
        int64_t c = i / inner % channels;
        double zp = zero ? param_at(zero, param_numel(zero) == 1 ? 0 : c) : 0;
        value->elements[i] = (element_at(q, i) - zp) * param_at(scale, param_numel(scale) == 1 ? 0 : c);
    }
    return value;
}

/* Whether n bytes, read as int8 (lowest < 0) or uint8, all lie in [lowest, highest] (a loop the
 * compiler vectorizes: a weight file's codes). */
static int bytes_within(const uint8_t *bytes, int64_t n, int lowest, int highest) {
    int outside = 0;
    if (lowest < 0)
        for (int64_t i = 0; i < n; i++) outside |= (int8_t)bytes[i] < lowest || (int8_t)bytes[i] > highest;
    else
        for (int64_t i = 0; i < n; i++) outside |= bytes[i] < lowest || bytes[i] > highest;
    return !outside;
}

static mil_value *expand_blockwise(parser *p, const declared_output *out, argument *args, int nargs, const char *op) {
    const mil_value *data = quantization_param(p, args, nargs, "data", 1, op, out->at);
    const mil_value *scale = data ? quantization_param(p, args, nargs, "scale", 1, op, out->at) : NULL;
    const mil_value *offset = scale ? quantization_param(p, args, nargs, "offset", 0, op, out->at) : NULL;
    if (!scale || failed(p)) return NULL;
    if (data->kind != VAL_TENSOR) {
        fail_at(p, &data->at, "%s: data must be a tensor", op);
        return NULL;
    }
    if (!blocks_fit(p, scale, data, op, "scale") || (offset && !blocks_fit(p, offset, data, op, "offset"))) return NULL;
    int64_t numel = type_numel(&data->type);
    /* GGUF's Q8_0 and Q4_0 (int8 / int4 data, a scale per 32 along dimension 1 of [rows, k, 1, ...],
     * no offset): kept as stored */
    int rank = data->type.rank, blocks_of_32 = rank >= 2 && scale->type.rank == rank && data->type.dtype == ANE_INT8 &&
        (data->type.bits == 0 || data->type.bits == 4) && all_zero(offset) && numel == type_numel(&out->type) &&
        scale->type.dims[0] == data->type.dims[0] && scale->type.dims[1] * ANE_ENCODING_BLOCK == data->type.dims[1];
    for (int d = 2; blocks_of_32 && d < rank; d++) blocks_of_32 = data->type.dims[d] == 1 && scale->type.dims[d] == 1;
    if (blocks_of_32 && !failed(p)) {
        mil_value *encoded = encoded_value(p, out, data->type.bits ? ANE_ENCODING_Q4_0 : ANE_ENCODING_Q8_0, data, scale, 1);
        if (encoded || failed(p)) return encoded;
    }
    /* GGUF's Q6_K (int8 codes -32..31, a scale per 16 along dimension 1 of [rows, k, 1, ...], k a
     * multiple of 256, no offset): kept in blocks of its codes (tensor/quantize.h) */
    int blocks_of_16 = rank >= 2 && scale->type.rank == rank && data->type.dtype == ANE_INT8 && data->type.bits == 0 &&
        all_zero(offset) && numel == type_numel(&out->type) && scale->type.dims[0] == data->type.dims[0] &&
        scale->type.dims[1] * ANE_Q6_K_GROUP == data->type.dims[1] && data->type.dims[1] % ANE_Q6_K_WEIGHTS == 0;
    for (int d = 2; blocks_of_16 && d < rank; d++) blocks_of_16 = data->type.dims[d] == 1 && scale->type.dims[d] == 1;
    if (blocks_of_16)
        blocks_of_16 = data->blob && (codes_origin(p, data, ANE_ENCODING_Q6_K) || bytes_within(data->blob, numel, -32, 31));
    if (blocks_of_16 && !failed(p)) {
        mil_value *encoded = encoded_value(p, out, ANE_ENCODING_Q6_K, data, scale, 1);
        if (encoded || failed(p)) return encoded;
    }
    /* GGUF's Q4_K and Q5_K as tensor/quantize.h keeps them (uint4 or uint8 data, a float scale and
     * offset per 32 along dimension 1): kept as stored */
    int shifted_blocks = rank >= 2 && scale->type.rank == rank && data->type.dtype == ANE_UINT8 &&
        (data->type.bits == 4 || data->type.bits == 0) &&
        offset && offset->kind == VAL_TENSOR && offset->type.bits == 0 &&
        (offset->type.dtype == ANE_FP16 || offset->type.dtype == ANE_FP32) && offset->type.rank == rank &&
        numel == type_numel(&out->type) && scale->type.dims[0] == data->type.dims[0] &&
        scale->type.dims[1] * ANE_ENCODING_BLOCK == data->type.dims[1];
    for (int d = 0; shifted_blocks && d < rank; d++)
        shifted_blocks = offset->type.dims[d] == scale->type.dims[d] && (d < 2 || data->type.dims[d] == 1);
    if (shifted_blocks && data->type.bits == 0) /* Q5_K's codes are 5 bits (its kernels take them so): else dense */
        shifted_blocks = data->blob && (codes_origin(p, data, ANE_ENCODING_Q5_K) || bytes_within(data->blob, numel, 0, 31));
    if (shifted_blocks && !failed(p)) {
        mil_value *encoded = encoded_value(p, out, data->type.bits ? ANE_ENCODING_Q4_K : ANE_ENCODING_Q5_K, data, scale, 1);
        if (encoded) encoded->offsets = offset;
        if (encoded || failed(p)) return encoded;
    }
    mil_value *value = dense_value(p, out, numel, op);
    if (!value) return NULL;
    for (int64_t i = 0; i < numel; i++) {
        double shift = offset ? element_at(offset, block_of(i, data->type.dims, offset->type.dims, data->type.rank)) : 0;
        value->elements[i] =
            (element_at(data, i) - shift) * element_at(scale, block_of(i, data->type.dims, scale->type.dims, data->type.rank));
    }
    return value;
}

static int log2_exact(int64_t n) {
    for (int bits = 1; bits <= 8; bits++)
        if (n == (1ll << bits)) return bits;
    return 0;
}

static mil_value *expand_lut(parser *p, const declared_output *out, argument *args, int nargs, const char *op) {
    const mil_value *indices = quantization_param(p, args, nargs, "indices", 1, op, out->at);
    const mil_value *lut = indices ? quantization_param(p, args, nargs, "lut", 1, op, out->at) : NULL;
    if (!lut || failed(p)) return NULL;
    if (indices->kind != VAL_TENSOR || lut->kind != VAL_TENSOR) {
        fail_at(p, &out->at, "%s: indices and lut must be tensors", op);
        return NULL;
    }
    argument *shape_arg = find_argument(args, nargs, "shape");
    if (shape_arg) { /* iOS16: packed indices, one palette, the output's shape */
        ane_int_list shape;
        if (!literal_ints(p, shape_arg->value, "shape", &shape)) return NULL;
        int bits = log2_exact(type_numel(&lut->type));
        if (!bits || indices->type.bits || indices->type.dtype != ANE_UINT8) {
            fail_at(p, &out->at, "%s with shape: the lut needs 2, 4, ..., 256 entries and indices packed uint8 bytes", op);
            return NULL;
        }
        int64_t numel = 1;
        for (int d = 0; d < shape.count; d++) numel *= shape.values[d];
        if (numel * bits > type_numel(&indices->type) * 8) {
            fail_at(p, &indices->at, "%s: %lld indices of %d bits need %lld bytes; indices has %lld", op, (long long)numel,
                    bits, (long long)((numel * bits + 7) / 8), (long long)type_numel(&indices->type));
            return NULL;
        }
        if (bits == 4 && lut->kind == VAL_TENSOR && numel == type_numel(&out->type)) { /* one 16-entry palette */
            mil_value *encoded = encoded_value(p, out, ANE_ENCODING_LUT4, indices, lut, 0);
            if (encoded || failed(p)) return encoded;
        }
        mil_value *value = dense_value(p, out, numel, op);
        if (!value) return NULL;
        for (int64_t i = 0; i < numel; i++) {
            unsigned index = 0;
            for (int b = 0; b < bits; b++) {
                int64_t bit = i * bits + b;
                index |= (unsigned)(((unsigned)element_at(indices, bit / 8) >> (bit % 8)) & 1u) << b;
            }
            value->elements[i] = element_at(lut, index);
        }
        return value;
    }
    /* iOS18: indices of the output's shape; lut [groups per dim..., 2^bits, vector size 1] */
    int rank = indices->type.rank;
    int64_t entries = lut->type.rank == rank + 2 ? lut->type.dims[rank] : 0;
    if (!entries || lut->type.dims[rank + 1] != 1) {
        fail_at(p, &lut->at, "%s: lut must be [groups along each of indices' %d dims..., entries, 1] (vector "
                "palettization is not supported)", op, rank);
        return NULL;
    }
    for (int d = 0; d < rank; d++)
        if (indices->type.dims[d] % lut->type.dims[d]) {
            fail_at(p, &lut->at, "%s: lut's %lld groups along dimension %d do not divide indices' %lld", op,
                    (long long)lut->type.dims[d], d, (long long)indices->type.dims[d]);
            return NULL;
        }
    int64_t numel = type_numel(&indices->type);
    int palette_per_row = lut->type.dims[0] == indices->type.dims[0] && indices->type.dims[0] > 1;
    int row_palettes = entries == ANE_LUT4_ENTRIES && indices->type.bits == 4 && indices->type.dtype == ANE_UINT8 &&
                       numel == type_numel(&out->type);
    for (int d = 1; row_palettes && d < rank; d++) row_palettes = lut->type.dims[d] == 1;
    if (row_palettes && (palette_per_row || lut->type.dims[0] == 1)) { /* a 16-entry palette per row (or one for all) */
        mil_value *encoded = encoded_value(p, out, ANE_ENCODING_LUT4, indices, lut, palette_per_row);
        if (encoded || failed(p)) return encoded;
    }
    mil_value *value = dense_value(p, out, numel, op);
    if (!value) return NULL;
    for (int64_t i = 0; i < numel; i++) {
        double index = element_at(indices, i);
        if (index < 0 || index >= (double)entries) {
            fail_at(p, &indices->at, "%s: index %g at element %lld is outside the lut's %lld entries", op, index,
                    (long long)i, (long long)entries);
            return NULL;
        }
        value->elements[i] = element_at(lut, block_of(i, indices->type.dims, lut->type.dims, rank) * entries + (int64_t)index);
    }
    return value;
}

static const struct {
    const char *name;
    mil_value *(*expand)(parser *p, const declared_output *out, argument *args, int nargs, const char *op);
} constexpr_ops[] = {
    {"constexpr_affine_dequantize", expand_affine},
    {"constexpr_blockwise_shift_scale", expand_blockwise},
    {"constexpr_lut_to_dense", expand_lut},
};

static int is_const_op(const char *name) {
    if (strcmp(name, "const") == 0) return 1;
    for (size_t i = 0; i < sizeof constexpr_ops / sizeof constexpr_ops[0]; i++)
        if (strcmp(name, constexpr_ops[i].name) == 0) return 1;
    return 0;
}

/* const()[name = ..., val = ...] and the constexpr weight ops above. */
static void define_const(parser *p, const char *op_name, const declared_output *out, argument *args, int nargs) {
    argument *val = find_argument(args, nargs, "val");
    mil_value *value = val ? val->value : NULL;
    for (size_t i = 0; i < sizeof constexpr_ops / sizeof constexpr_ops[0]; i++)
        if (strcmp(op_name, constexpr_ops[i].name) == 0) {
            value = constexpr_ops[i].expand(p, out, args, nargs, op_name);
            if (!value) return;
        }
    if (!value) {
        fail_at(p, &out->at, "const '%s' has no val", out->name);
        return;
    }
    if (value->kind == VAL_NAME || value->kind == VAL_TUPLE || value->kind == VAL_DICT) {
        fail_at(p, &value->at, "const val must be a literal");
        return;
    }
    /* The declared type must agree with the literal's. */
    int literal_rank = value->kind == VAL_TENSOR || value->kind == VAL_ENCODED ? value->type.rank : 0;
    int declared_rank = out->type.kind == TYPE_TENSOR ? out->type.rank : 0;
    int matches = literal_rank == declared_rank && (value->type.kind == TYPE_STRING) == (out->type.kind == TYPE_STRING) &&
                  (value->type.kind == TYPE_STRING || out->type.kind == TYPE_UINT64 ||
                   (value->type.dtype == out->type.dtype && value->type.bits == out->type.bits));
    for (int i = 0; matches && i < literal_rank; i++) matches = value->type.dims[i] == out->type.dims[i];
    if (!matches) {
        char declared[160], literal[160];
        type_string(&out->type, declared, sizeof declared);
        type_string(&value->type, literal, sizeof literal);
        fail_at(p, &out->at, "const '%s' is declared %s but its value is %s", out->name, declared, literal);
        return;
    }
    symbol *s = define(p, out->name, SYM_CONST, &out->at);
    if (s) s->value = value;
}

static void parse_statement(parser *p) {
    declared_output outputs[MAX_OUTPUTS];
    int noutputs = 0;
    do {
        if (noutputs == MAX_OUTPUTS) {
            fail_at(p, &p->lex.tok, "more than %d outputs in one statement", MAX_OUTPUTS);
            return;
        }
        declared_output *out = &outputs[noutputs++];
        out->at = p->lex.tok;
        if (!parse_type(p, &out->type) || !expect_ident(p, out->name, "the name of the result")) return;
    } while (accept_punct(p, ','));
    if (!expect_punct(p, '=', "after the result")) return;
    token op_at = p->lex.tok;
    char op_name[ANE_NAME_MAX];
    if (!expect_ident(p, op_name, "an op name") || !expect_punct(p, '(', "after the op name")) return;

    argument args[MAX_ARGS];
    int nargs = 0;
    /* Arguments in parentheses, then attributes in brackets; both are name = value. */
    for (int part = 0; part < 2 && !failed(p); part++) {
        char close = part == 0 ? ')' : ']';
        if (part == 1 && !accept_punct(p, '[')) break;
        int first = 1;
        while (!failed(p) && !is_punct(p, close)) {
            if (!first && !expect_punct(p, ',', "between arguments")) return;
            first = 0;
            if (nargs == MAX_ARGS) {
                fail_at(p, &p->lex.tok, "more than %d arguments", MAX_ARGS);
                return;
            }
            argument *arg = &args[nargs];
            arg->at = p->lex.tok;
            if (!expect_ident(p, arg->name, "an argument name") || !expect_punct(p, '=', "after the argument name")) return;
            if (find_argument(args, nargs, arg->name)) {
                fail_at(p, &arg->at, "argument '%s' is given twice", arg->name);
                return;
            }
            arg->value = parse_value(p);
            if (!arg->value) return;
            nargs++;
        }
        if (!expect_punct(p, close, part == 0 ? "to close the arguments" : "to close the attributes")) return;
    }
    if (!expect_punct(p, ';', "at the end of the statement")) return;

    if (is_const_op(op_name)) {
        if (noutputs != 1) {
            fail_at(p, &op_at, "const has one result");
            return;
        }
        define_const(p, op_name, &outputs[0], args, nargs);
        return;
    }
    ane_op op;
    if (!ane_op_from_name(op_name, &op) || op == ANE_OP_INPUT || op == ANE_OP_CONST) {
        const char *hint = missing_op_hint(op_name);
        fail_at(p, &op_at, "unknown op '%s'%s%s", op_name, hint ? ": " : "", hint ? hint : "");
        return;
    }

    if (op == ANE_OP_CONV && find_argument(args, nargs, "bias")) {
        fail_at(p, &find_argument(args, nargs, "bias")->at, "conv takes no bias (ANE-13); add the bias with a separate add");
        return;
    }
    /* Operands by their parameter names; everything else must be a known parameter. */
    ane_node *operands[64] = {0};
    int noperands = 0;
    const ane_op_info *info = &ane_op_table[op];
    for (int i = 0; i < info->max_operands && !failed(p); i++) {
        char param[32];
        ane_op_operand_name(op, i, param, sizeof param);
        argument *arg = find_argument(args, nargs, param);
        if (op == ANE_OP_CONCAT) {
            if (!arg || arg->value->kind != VAL_TUPLE) {
                fail_at(p, &op_at, "concat needs values = (a, b, ...)");
                return;
            }
            for (int k = 0; k < arg->value->count && k < 64; k++) operands[noperands++] = resolve_operand(p, arg->value->items[k]);
            break;
        }
        if (!arg) {
            if (i < info->min_operands) fail_at(p, &op_at, "%s needs '%s'", op_name, param);
            break;
        }
        operands[noperands++] = resolve_operand(p, arg->value);
    }
    if (failed(p)) return;
    for (int i = 0; i < nargs; i++) {
        const char *name = args[i].name;
        if (strcmp(name, "name") == 0) continue;
        int is_operand = 0;
        for (int k = 0; k < info->max_operands && !is_operand; k++) {
            char param[32];
            is_operand = strcmp(ane_op_operand_name(op, k, param, sizeof param), name) == 0;
        }
        if (!is_operand && !known_parameter(op, name)) {
            fail_at(p, &args[i].at, "%s has no parameter '%s'", op_name, name);
            return;
        }
    }
    ane_node_attrs attrs;
    bind_attributes(p, op, args, nargs, &attrs, operands);
    if (failed(p)) return;

    if (op == ANE_OP_SPLIT) { /* one node per declared piece */
        argument *count_arg = find_argument(args, nargs, "num_splits");
        if (attrs.sizes.count == 0 && count_arg && operands[0]) {
            int64_t pieces;
            if (!literal_int(p, count_arg->value, "num_splits", &pieces)) return;
            int64_t axis = attrs.axis < 0 ? attrs.axis + operands[0]->rank : attrs.axis;
            if (pieces < 1 || pieces > ANE_LIST_MAX || axis < 0 || axis >= operands[0]->rank ||
                operands[0]->shape[axis] % pieces) {
                fail_at(p, &count_arg->at, "num_splits %lld does not divide the axis", (long long)pieces);
                return;
            }
            attrs.sizes.count = (int)pieces;
            for (int i = 0; i < pieces; i++) attrs.sizes.values[i] = operands[0]->shape[axis] / pieces;
        }
        if (attrs.sizes.count != noutputs) {
            fail_at(p, &op_at, "split makes %d pieces but %d results are declared", attrs.sizes.count, noutputs);
            return;
        }
        for (int piece = 0; piece < noutputs && !failed(p); piece++) {
            attrs.index = piece;
            ane_node *node = NULL;
            ane_error inner;
            if (ane_graph_op(p->graph, op, outputs[piece].name, operands, noperands, &attrs, &node, &inner)) {
                fail_at(p, &op_at, "%s", inner.message);
                return;
            }
            check_declared(p, &outputs[piece], node);
            symbol *s = define(p, outputs[piece].name, SYM_NODE, &outputs[piece].at);
            if (s) s->node = node;
        }
        return;
    }
    if (noutputs != 1) {
        fail_at(p, &outputs[1].at, "%s has one result", op_name);
        return;
    }
    if (lookup(p, outputs[0].name)) {
        fail_at(p, &outputs[0].at, "'%s' is defined twice", outputs[0].name);
        return;
    }
    ane_node *node = NULL;
    ane_error inner;
    if (ane_graph_op(p->graph, op, outputs[0].name, operands, noperands, &attrs, &node, &inner)) {
        fail_at(p, &op_at, "%s", inner.message);
        return;
    }
    check_declared(p, &outputs[0], node);
    symbol *s = define(p, outputs[0].name, SYM_NODE, &outputs[0].at);
    if (s) s->node = node;
}

/* ------------------------------------------------------------------ functions and programs */

static void reset_symbols(parser *p) {
    p->table = NULL;
    p->table_capacity = p->table_count = 0;
}

/* func name<target>(inputs) { statements } -> (outputs); */
static ane_graph *parse_function(parser *p, char *name) {
    next(p); /* func */
    if (!expect_ident(p, name, "the function name")) return NULL;
    if (accept_punct(p, '<')) {
        char target[ANE_NAME_MAX];
        if (!expect_ident(p, target, "the target (ios18)") || !expect_punct(p, '>', "after the target")) return NULL;
    }
    ane_error inner;
    if (ane_graph_new(name, &p->graph, &inner)) {
        fail_at(p, &p->lex.tok, "%s", inner.message);
        return NULL;
    }
    reset_symbols(p);
    if (!expect_punct(p, '(', "to open the inputs")) return NULL;
    while (!failed(p) && !is_punct(p, ')')) {
        if (p->graph->count > 0 && !expect_punct(p, ',', "between inputs")) return NULL;
        mil_type type;
        char input[ANE_NAME_MAX];
        token at = p->lex.tok;
        if (!parse_type(p, &type) || !expect_ident(p, input, "the input name")) return NULL;
        if (type.kind != TYPE_TENSOR && type.kind != TYPE_SCALAR) {
            fail_at(p, &at, "input '%s' must be a tensor", input);
            return NULL;
        }
        ane_node *node = NULL;
        if (ane_graph_input(p->graph, input, type.dtype, type.kind == TYPE_TENSOR ? type.rank : 0, type.dims, &node, &inner)) {
            fail_at(p, &at, "%s", inner.message);
            return NULL;
        }
        symbol *s = define(p, input, SYM_NODE, &at);
        if (s) s->node = node;
    }
    if (!expect_punct(p, ')', "to close the inputs") || !expect_punct(p, '{', "to open the function body")) return NULL;
    while (!failed(p) && !is_punct(p, '}') && p->lex.tok.kind != T_EOF) parse_statement(p);
    if (!expect_punct(p, '}', "to close the function body")) return NULL;
    if (p->lex.tok.kind != T_ARROW) {
        char found[64];
        fail_at(p, &p->lex.tok, "expected '->' and the returned names, found %s", describe(&p->lex.tok, found, sizeof found));
        return NULL;
    }
    next(p);
    if (!expect_punct(p, '(', "to open the returned names")) return NULL;
    int returned = 0;
    while (!failed(p) && !is_punct(p, ')')) {
        if (returned && !expect_punct(p, ',', "between returned names")) return NULL;
        token at = p->lex.tok;
        char output[ANE_NAME_MAX];
        if (!expect_ident(p, output, "a returned name")) return NULL;
        symbol *s = lookup(p, output);
        if (!s || s->kind != SYM_NODE || !s->node) {
            fail_at(p, &at, "returned name '%s' is not a live node of the function (ANE-14)", output);
            return NULL;
        }
        if (ane_graph_output_node(p->graph, output, s->node, &inner)) {
            fail_at(p, &at, "%s", inner.message);
            return NULL;
        }
        returned++;
    }
    if (!expect_punct(p, ')', "to close the returned names")) return NULL;
    accept_punct(p, ';');
    if (failed(p)) return NULL;
    if (returned == 0) {
        fail_at(p, &p->lex.tok, "function '%s' returns nothing", name);
        return NULL;
    }
    ane_graph *g = p->graph;
    p->graph = NULL;
    return g;
}

ane_status ane_parse_mil(const char *text, size_t length, const char *source, const ane_mil_file *files,
                         int nfiles, const char *function, ane_graph **out, ane_notes *notes, ane_error *err) {
    if (nfiles > 16) return ane_fail(err, ANE_ERR_ARGUMENT, "%s: at most 16 weight files per program", source ? source : "<mil>");
    parser p;
    memset(&p, 0, sizeof p);
    p.files = files;
    p.nfiles = nfiles;
    p.notes = notes;
    *out = NULL;
    mil_lex_init(&p.lex, text, length, source ? source : "<mil>", err);

    ane_graph *chosen = NULL;
    int functions = 0;
    if (!is_word(&p, "program")) {
        char found[64];
        fail_at(&p, &p.lex.tok, "expected 'program', found %s", describe(&p.lex.tok, found, sizeof found));
    } else {
        next(&p);
        double version = 0;
        if (expect_punct(&p, '(', "after program") && p.lex.tok.kind == T_NUMBER && parse_number_token(&p, &version))
            expect_punct(&p, ')', "after the version");
        else fail_at(&p, &p.lex.tok, "expected the program version, e.g. program(1.3)");
        if (accept_punct(&p, '[')) { /* program attributes: [buildInfo = dict<...>(...)] */
            while (!failed(&p) && !is_punct(&p, ']')) {
                char key[ANE_NAME_MAX];
                accept_punct(&p, ',');
                if (!expect_ident(&p, key, "an attribute name") || !expect_punct(&p, '=', "after the attribute name")) break;
                if (!parse_value(&p)) break;
            }
            expect_punct(&p, ']', "to close the program attributes");
        }
        expect_punct(&p, '{', "to open the program");
        while (!failed(&p) && is_word(&p, "func")) {
            char name[ANE_NAME_MAX];
            ane_graph *g = parse_function(&p, name);
            if (!g) break;
            functions++;
            int wanted = function ? strcmp(name, function) == 0 : strcmp(name, "main") == 0 || !chosen;
            if (wanted && (!chosen || (!function && strcmp(name, "main") == 0))) {
                ane_graph_free(chosen);
                chosen = g;
            } else {
                ane_graph_free(g);
            }
        }
        if (!failed(&p)) {
            expect_punct(&p, '}', "to close the program");
            if (!failed(&p) && p.lex.tok.kind != T_EOF) {
                char found[64];
                fail_at(&p, &p.lex.tok, "unexpected %s after the program", describe(&p.lex.tok, found, sizeof found));
            }
        }
    }
    if (!failed(&p) && functions == 0) fail_at(&p, &p.lex.tok, "the program has no functions");
    if (!failed(&p) && !chosen) fail_at(&p, &p.lex.tok, "the program has no function '%s'", function ? function : "main");
    ane_graph_free(p.graph);
    ane_arena_free(&p.arena);
    if (failed(&p)) {
        ane_graph_free(chosen);
        return p.lex.status;
    }
    *out = chosen;
    return ANE_OK;
}
