/* ane.graph: building graphs from Lua (types "ane.Graph" and "ane.Node").
 *
 * Builders are methods named after the MIL ops (g:conv, g:matmul, g:add, ...) and follow
 * MIL's conventions: axes are 0-based and may be negative, slice ends are exclusive.
 * Each builder takes its operand nodes, then op-specific arguments, then an optional
 * options table ({name = "q_proj", ...}). A number where a second operand is expected
 * becomes a scalar const of the first operand's dtype. Shape and dtype errors are Lua
 * errors naming the node. Node userdata keep their graph alive (user value 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ane_core/ir/autodiff.h"
#include "../ane_core/mil/emit.h"
#include "../ane_core/mil/parse.h"
#include "../ane_core/passes/passes.h"
#include "ane_lua.h"

#define ANE_NODE_TYPE "ane.Node"

typedef struct graph_box {
    ane_graph *graph; /* NULL once closed */
} graph_box;

typedef struct node_box {
    ane_graph *graph; /* to check the node is used with its own graph */
    ane_node *node;
} node_box;

ane_graph *ane_lua_check_graph(lua_State *L, int index) {
    graph_box *box = luaL_checkudata(L, index, ANE_GRAPH_TYPE);
    if (!box->graph) luaL_error(L, "attempt to use a closed graph");
    return box->graph;
}
#define check_graph ane_lua_check_graph

static int graph_release(lua_State *L) {
    graph_box *box = luaL_checkudata(L, 1, ANE_GRAPH_TYPE);
    ane_graph_free(box->graph);
    box->graph = NULL;
    return 0;
}

static void push_node(lua_State *L, int graph_index, ane_node *node) {
    graph_index = lua_absindex(L, graph_index);
    node_box *box = lua_newuserdatauv(L, sizeof *box, 1);
    box->graph = ((graph_box *)lua_touserdata(L, graph_index))->graph;
    box->node = node;
    luaL_setmetatable(L, ANE_NODE_TYPE);
    lua_pushvalue(L, graph_index);
    lua_setiuservalue(L, -2, 1);
}

/* The node at `index`, checked to belong to graph g and to be alive. */
static ane_node *check_node(lua_State *L, int index, ane_graph *g) {
    node_box *box = luaL_checkudata(L, index, ANE_NODE_TYPE);
    if (box->graph != g) luaL_argerror(L, index, "node belongs to another graph");
    if (box->node->dead) luaL_argerror(L, index, lua_pushfstring(L, "node '%s' was removed by an optimization", box->node->name));
    return box->node;
}

/* ------------------------------------------------------------------ option helpers */

static const char *opt_name(lua_State *L, int index) {
    if (!lua_istable(L, index)) return NULL;
    lua_getfield(L, index, "name");
    const char *name = lua_tostring(L, -1); /* anchored by the options table */
    lua_pop(L, 1);
    return name;
}

static int64_t opt_int(lua_State *L, int index, const char *key, int64_t fallback) {
    if (!lua_istable(L, index)) return fallback;
    lua_getfield(L, index, key);
    int is_integer;
    int64_t value = lua_tointegerx(L, -1, &is_integer);
    if (!is_integer) {
        if (!lua_isnil(L, -1)) luaL_error(L, "option '%s' must be an integer", key);
        value = fallback;
    }
    lua_pop(L, 1);
    return value;
}

static int opt_bool(lua_State *L, int index, const char *key, int fallback) {
    if (!lua_istable(L, index)) return fallback;
    lua_getfield(L, index, key);
    int value = lua_isnil(L, -1) ? fallback : lua_toboolean(L, -1);
    lua_pop(L, 1);
    return value;
}

/* Reads an integer list (a table, or a single integer) into list. */
static void read_int_list(lua_State *L, int index, ane_int_list *list, const char *what) {
    if (lua_isinteger(L, index)) {
        list->count = 1;
        list->values[0] = lua_tointeger(L, index);
        return;
    }
    if (!lua_istable(L, index)) luaL_error(L, "%s must be a table of integers", what);
    lua_Integer n = luaL_len(L, index);
    if (n > ANE_LIST_MAX) luaL_error(L, "%s has %d entries (at most %d)", what, (int)n, ANE_LIST_MAX);
    list->count = (int)n;
    for (int i = 0; i < n; i++) {
        lua_geti(L, index, i + 1);
        int is_integer;
        list->values[i] = lua_tointegerx(L, -1, &is_integer);
        if (!is_integer) luaL_error(L, "%s[%d] must be an integer", what, i + 1);
        lua_pop(L, 1);
    }
}

/* Reads options[key] (when present) into out[0..n-1]; otherwise out keeps its value. */
static void opt_ints(lua_State *L, int index, const char *key, int64_t *out, int n) {
    if (!lua_istable(L, index)) return;
    lua_getfield(L, index, key);
    if (!lua_isnil(L, -1)) {
        ane_int_list list;
        read_int_list(L, lua_gettop(L), &list, key);
        if (list.count != n) luaL_error(L, "option '%s' needs %d integers", key, n);
        memcpy(out, list.values, (size_t)n * sizeof *out);
    }
    lua_pop(L, 1);
}

/* Reads an op's attributes as its schema (the op table) describes them: the positional
 * ones from argument `index` on (an integer one with a default, softmax's or gather's
 * axis, only when a number stands there), then the others from the options table after them, defaults for
 * what is not given. Returns the index of the options table. */
static int read_attributes(lua_State *L, ane_op op, int index, ane_node_attrs *attrs) {
    ane_attrs_defaults(op, attrs);
    ANE_FOR_EACH_ATTR(op, spec) {
        if (!spec->lua || !spec->positional) continue;
        if (spec->kind == ANE_ATTR_INT && spec->fallback && lua_type(L, index) != LUA_TNUMBER) continue; /* left out */
        void *field = ane_attr_field(attrs, spec);
        switch (spec->kind) {
        case ANE_ATTR_INT: *(int64_t *)field = luaL_checkinteger(L, index); break;
        case ANE_ATTR_FLOAT: *(double *)field = luaL_checknumber(L, index); break;
        case ANE_ATTR_INTS: read_int_list(L, index, field, spec->lua); break;
        case ANE_ATTR_DTYPE:
            luaL_argcheck(L, !lua_isnoneornil(L, index), index, "dtype expected");
            *(ane_dtype *)field = ane_lua_check_dtype(L, index, ANE_FP16);
            break;
        default: luaL_error(L, "%s: attribute '%s' cannot be positional", ane_op_table[op].name, spec->lua);
        }
        index++;
    }
    int opts = index;
    if (!lua_istable(L, opts)) return opts;
    ANE_FOR_EACH_ATTR(op, spec) {
        if (!spec->lua || spec->positional || spec->kind == ANE_ATTR_PIECE) continue;
        void *field = ane_attr_field(attrs, spec);
        switch (spec->kind) {
        case ANE_ATTR_INT: *(int64_t *)field = opt_int(L, opts, spec->lua, *(int64_t *)field); break;
        case ANE_ATTR_BOOL: *(int *)field = opt_bool(L, opts, spec->lua, *(int *)field); break;
        case ANE_ATTR_PAIR: opt_ints(L, opts, spec->lua, field, 2); break;
        case ANE_ATTR_QUAD: opt_ints(L, opts, spec->lua, field, 4); break;
        case ANE_ATTR_FLOAT:
        case ANE_ATTR_STRING:
        case ANE_ATTR_DTYPE:
            lua_getfield(L, opts, spec->lua);
            if (!lua_isnil(L, -1)) {
                if (spec->kind == ANE_ATTR_FLOAT) *(double *)field = luaL_checknumber(L, -1);
                else if (spec->kind == ANE_ATTR_DTYPE) *(ane_dtype *)field = ane_lua_check_dtype(L, lua_gettop(L), ANE_FP16);
                else snprintf(field, sizeof attrs->mode, "%s", luaL_checkstring(L, -1));
            }
            lua_pop(L, 1);
            break;
        default: break;
        }
    }
    return opts;
}

/* ------------------------------------------------------------------ builders */

static int finish_node(lua_State *L, ane_graph *g, ane_status status, const ane_error *err, ane_node *node) {
    if (status) return ane_lua_raise(L, err);
    push_node(L, 1, node);
    (void)g;
    return 1;
}

/* g:input(name, shape, [dtype = "fp16"]) */
static int g_input(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    const char *name = luaL_checkstring(L, 2);
    int64_t shape[ANE_MAX_DIMS];
    luaL_checktype(L, 3, LUA_TTABLE);
    int rank = ane_lua_check_shape(L, 3, shape);
    ane_dtype dtype = ane_lua_check_dtype(L, 4, ANE_FP16);
    ane_node *node = NULL;
    ane_error err;
    ane_status status = ane_graph_input(g, name, dtype, rank, shape, &node, &err);
    return finish_node(L, g, status, &err, node);
}

/* g:const([name], tensor or quantized weight) */
static int g_const(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    const char *name = NULL;
    int tensor_index = 2;
    if (lua_type(L, 2) == LUA_TSTRING) {
        name = lua_tostring(L, 2);
        tensor_index = 3;
    } else if (lua_isnil(L, 2) && !lua_isnone(L, 3)) {
        tensor_index = 3;
    }
    ane_node *node = NULL;
    ane_error err;
    ane_quantized_weight *q = ane_lua_test_quantized(L, tensor_index);
    if (q) {
        ane_status status = ane_graph_const_encoded(g, name, q->dtype, q->rank, q->shape, q->encoding, &q->data, &q->table,
                                                    &node, &err);
        return finish_node(L, g, status, &err, node);
    }
    ane_tensor *value = ane_lua_check_tensor(L, tensor_index);
    ane_status status = ane_graph_const(g, name, value, &node, &err);
    return finish_node(L, g, status, &err, node);
}

/* A node operand, or a number turned into a scalar const of `like`'s dtype. */
static ane_node *operand_or_scalar(lua_State *L, int index, ane_graph *g, const ane_node *like) {
    if (lua_type(L, index) != LUA_TNUMBER) return check_node(L, index, g);
    ane_tensor scalar;
    ane_error err;
    if (ane_tensor_zeros(&scalar, 0, NULL, like->dtype, &err)) ane_lua_raise(L, &err);
    ane_dtype_store(ane_tensor_data(&scalar), like->dtype, lua_tonumber(L, index));
    ane_node *node = NULL;
    ane_status status = ane_graph_const(g, NULL, &scalar, &node, &err);
    ane_tensor_release(&scalar);
    if (status) ane_lua_raise(L, &err);
    return node;
}

/* Every op builder: the upvalue is the op. The operands come first (as the op's shape rule
 * takes them), then its attributes (read_attributes), then an options table with `name`
 * and the non-positional attributes. */
static int g_op(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    ane_op op = (ane_op)lua_tointeger(L, lua_upvalueindex(1));
    ane_node *operands[64];
    int n = 0, next = 2;
    switch (ane_op_table[op].shape_rule) {
    case SHAPE_BROADCAST: /* (x, y or a number) */
        operands[n++] = check_node(L, next++, g);
        operands[n++] = operand_or_scalar(L, next++, g, operands[0]);
        break;
    case SHAPE_SELECT: /* (cond, a, b or a number) */
        operands[n++] = check_node(L, next++, g);
        operands[n++] = check_node(L, next++, g);
        operands[n++] = operand_or_scalar(L, next++, g, operands[1]);
        break;
    case SHAPE_CONCAT: { /* ({a, b, ...}, ...) */
        luaL_checktype(L, next, LUA_TTABLE);
        lua_Integer count = luaL_len(L, next);
        if (count < 1 || count > 64) return luaL_error(L, "concat takes 1 to 64 values, got %d", (int)count);
        for (int i = 1; i <= count; i++) {
            lua_geti(L, next, i);
            operands[n++] = check_node(L, -1, g);
            lua_pop(L, 1);
        }
        next++;
        break;
    }
    case SHAPE_SOURCE: return luaL_error(L, "use g:input and g:const");
    default: /* the nodes the op needs, then its optional ones (sdpa's attn_mask, quantize's
              * zero_point): a node, or nil to leave one out before the options */
        for (int i = 0; i < ane_op_table[op].min_operands; i++) operands[n++] = check_node(L, next++, g);
        while (n < ane_op_table[op].max_operands) {
            if (luaL_testudata(L, next, ANE_NODE_TYPE)) operands[n++] = check_node(L, next++, g);
            else if (lua_isnil(L, next) && !lua_isnone(L, next + 1)) next++;
            else break;
        }
        break;
    }
    ane_node_attrs attrs;
    int opts = read_attributes(L, op, next, &attrs);
    if (!lua_isnoneornil(L, opts) && !lua_istable(L, opts))
        return luaL_argerror(L, opts, "options table expected");
    ane_error err;
    if (op == ANE_OP_SPLIT) { /* split(x, sizes, axis) -> one node per piece */
        const char *base = opt_name(L, opts);
        for (int piece = 0; piece < attrs.sizes.count; piece++) {
            attrs.index = piece;
            char name[ANE_NAME_MAX];
            if (base) snprintf(name, sizeof name, "%s_%d", base, piece);
            ane_node *node = NULL;
            if (ane_graph_op(g, ANE_OP_SPLIT, base ? name : NULL, operands, 1, &attrs, &node, &err)) return ane_lua_raise(L, &err);
            push_node(L, 1, node);
        }
        return attrs.sizes.count;
    }
    ane_node *node = NULL;
    ane_status status = ane_graph_op(g, op, opt_name(L, opts), operands, n, &attrs, &node, &err);
    return finish_node(L, g, status, &err, node);
}

/* g:output(name, node) */
static int g_output(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    const char *name = luaL_checkstring(L, 2);
    ane_node *node = check_node(L, 3, g);
    ane_error err;
    if (ane_graph_output_node(g, name, node, &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

/* ------------------------------------------------------------------ passes and emission */

void ane_lua_push_diagnostics(lua_State *L, const ane_report *report) {
    lua_createtable(L, report->count, 0);
    for (int i = 0; i < report->count; i++) {
        const ane_diagnostic *d = &report->items[i];
        lua_createtable(L, 0, 4);
        ane_lua_set_string(L, "id", d->id);
        ane_lua_set_string(L, "node", d->node);
        ane_lua_set_string(L, "message", d->message);
        ane_lua_set_string(L, "severity", d->severity == ANE_SEVERITY_ERROR ? "error" : "warning");
        lua_rawseti(L, -2, i + 1);
    }
}

/* g:optimize([{dump =, verify =, max_rounds =}]) -> {rounds =, changes =, warnings =, dump =} */
static int g_optimize(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    ane_optimize_options options = {
        .dump = opt_bool(L, 2, "dump", 0),
        .verify = opt_bool(L, 2, "verify", 0),
        .max_rounds = (int)opt_int(L, 2, "max_rounds", 0),
    };
    ane_report report = {0};
    ane_error err;
    ane_status status = ane_optimize(g, &options, &report, &err);
    if (status) {
        ane_report_free(&report);
        return ane_lua_raise(L, &err);
    }
    lua_createtable(L, 0, 4);
    lua_pushinteger(L, report.rounds);
    lua_setfield(L, -2, "rounds");
    lua_pushinteger(L, report.changes);
    lua_setfield(L, -2, "changes");
    ane_lua_push_diagnostics(L, &report);
    lua_setfield(L, -2, "warnings");
    if (report.dump.data) {
        lua_pushlstring(L, report.dump.data, report.dump.length);
        lua_setfield(L, -2, "dump");
        const char *env = getenv("ANELUA_DUMP");
        if (!options.dump && env && strstr(env, "passes")) fputs(report.dump.data, stderr);
    }
    ane_report_free(&report);
    return 1;
}

/* g:validate([{target =, max_conv_channels =}]) -> list of {id, node, message, severity}
 * (targets as ane.compile takes them, l_target.c) */
static int g_validate(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    ane_target target;
    ane_lua_read_target(L, 2, &target);
    ane_validate_options options = {.target = &target};
    ane_report report = {0};
    ane_pass_validate_ane(g, &options, &report);
    ane_lua_push_diagnostics(L, &report);
    ane_report_free(&report);
    return 1;
}

/* g:mil() -> text, { ["@model_path/weights/weight.bin"] = bytes } */
static int g_mil(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    ane_mil_program program;
    ane_error err;
    if (ane_emit_mil(g, &program, &err)) return ane_lua_raise(L, &err);
    lua_pushlstring(L, program.text, program.text_length);
    lua_newtable(L);
    if (program.weights) {
        lua_pushlstring(L, (const char *)program.weights, program.weights_size);
        lua_setfield(L, -2, ANE_MIL_WEIGHT_PATH);
    }
    ane_mil_program_free(&program);
    return 2;
}

static int g_dump(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    char *text = ane_graph_dump(g);
    if (!text) return luaL_error(L, "out of memory dumping graph");
    lua_pushstring(L, text);
    free(text);
    return 1;
}

static int g_stats(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    ane_graph_stats stats;
    ane_graph_stats_compute(g, &stats);
    lua_createtable(L, 0, 7);
    lua_pushinteger(L, stats.nodes);
    lua_setfield(L, -2, "nodes");
    lua_pushinteger(L, stats.flops);
    lua_setfield(L, -2, "flops");
    lua_pushinteger(L, stats.weight_bytes);
    lua_setfield(L, -2, "weight_bytes");
    lua_pushinteger(L, stats.peak_working_set_bytes);
    lua_setfield(L, -2, "peak_working_set");
    lua_pushinteger(L, stats.inputs);
    lua_setfield(L, -2, "inputs");
    lua_pushinteger(L, stats.outputs);
    lua_setfield(L, -2, "outputs");
    lua_pushinteger(L, stats.consts);
    lua_setfield(L, -2, "consts");
    return 1;
}

/* g:node(name) -> node or nil */
static int g_node(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    ane_node *node = ane_graph_find(g, luaL_checkstring(L, 2));
    if (!node) return 0;
    push_node(L, 1, node);
    return 1;
}

/* g:outputs() -> { [output name] = name of the node it outputs } */
static int g_outputs(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    lua_createtable(L, 0, g->noutputs);
    for (int i = 0; i < g->noutputs; i++) {
        lua_pushstring(L, g->outputs[i].node->name);
        lua_setfield(L, -2, g->outputs[i].name);
    }
    return 1;
}

static int g_name(lua_State *L) {
    lua_pushstring(L, check_graph(L, 1)->name);
    return 1;
}

static int g_tostring(lua_State *L) {
    graph_box *box = luaL_checkudata(L, 1, ANE_GRAPH_TYPE);
    if (!box->graph) lua_pushliteral(L, "ane.graph (closed)");
    else lua_pushfstring(L, "ane.graph %s (%d nodes, %d outputs)", box->graph->name, box->graph->count, box->graph->noutputs);
    return 1;
}

/* ------------------------------------------------------------------ nodes */

static node_box *node_arg(lua_State *L) {
    node_box *box = luaL_checkudata(L, 1, ANE_NODE_TYPE);
    lua_getiuservalue(L, 1, 1);
    graph_box *owner = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (!owner || !owner->graph) luaL_error(L, "attempt to use a node of a closed graph");
    return box;
}

static int n_name(lua_State *L) {
    lua_pushstring(L, node_arg(L)->node->name);
    return 1;
}

/* node:rename(name) -> node: a free, valid MIL identifier */
static int n_rename(lua_State *L) {
    node_box *box = node_arg(L);
    ane_error err;
    if (ane_graph_rename(box->graph, box->node, luaL_checkstring(L, 2), &err)) return ane_lua_raise(L, &err);
    lua_settop(L, 1);
    return 1;
}

static int n_shape(lua_State *L) {
    ane_node *node = node_arg(L)->node;
    lua_createtable(L, node->rank, 0);
    for (int i = 0; i < node->rank; i++) {
        lua_pushinteger(L, node->shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int n_dtype(lua_State *L) {
    lua_pushstring(L, ane_dtype_name(node_arg(L)->node->dtype));
    return 1;
}

static int n_op(lua_State *L) {
    lua_pushstring(L, ane_op_table[node_arg(L)->node->op].name);
    return 1;
}

static int n_tostring(lua_State *L) {
    ane_node *node = node_arg(L)->node;
    char shape[128];
    lua_pushfstring(L, "ane.node %s = %s %s%s%s", node->name, ane_op_table[node->op].name, ane_dtype_name(node->dtype),
                    ane_node_shape_string(node, shape, sizeof shape), node->dead ? " (removed)" : "");
    return 1;
}

/* ane.graph(name) */
static int graph_new(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    graph_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->graph = NULL;
    luaL_setmetatable(L, ANE_GRAPH_TYPE);
    ane_error err;
    if (ane_graph_new(name, &box->graph, &err)) return ane_lua_raise(L, &err);
    return 1;
}

/* ane.graph.parse(text, [weights], [{function =, source =}]) -> graph, notes | nil, message
 * (notes: what the weight files do differently from the format, read as the device does) */
static int graph_parse(lua_State *L) {
    size_t length;
    const char *text = luaL_checklstring(L, 1, &length);
    ane_mil_file files[16];
    int nfiles = ane_lua_weight_files(L, 2, files, 16);
    const char *function = NULL, *source = "<mil>";
    if (lua_istable(L, 3)) {
        lua_getfield(L, 3, "function");
        function = lua_tostring(L, -1);
        lua_getfield(L, 3, "source");
        if (lua_isstring(L, -1)) source = lua_tostring(L, -1);
    }
    graph_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->graph = NULL;
    luaL_setmetatable(L, ANE_GRAPH_TYPE);
    ane_error err;
    ane_notes notes = {0};
    if (ane_parse_mil(text, length, source, files, nfiles, function, &box->graph, &notes, &err)) {
        lua_pushnil(L);
        lua_pushstring(L, err.message);
        return 2;
    }
    ane_lua_push_notes(L, &notes);
    return 2;
}

/* The strings of list field `field` of the options table at index 2 (at most 256; the
 * table stays on the stack and anchors them); returns the count, 0 when absent. */
static int string_list(lua_State *L, const char *field, const char **names) {
    lua_getfield(L, 2, field);
    if (lua_isnil(L, -1)) return 0;
    luaL_argcheck(L, lua_istable(L, -1), 2, "a list of names expected");
    int list = lua_gettop(L);
    int count = (int)luaL_len(L, list);
    if (count > 256) return luaL_error(L, "grad: %s takes at most 256 names", field);
    for (int i = 0; i < count; i++) {
        lua_geti(L, list, i + 1);
        names[i] = luaL_checkstring(L, -1); /* anchored by the list */
        lua_pop(L, 1);
    }
    return count;
}

/* ane.grad(graph, {wrt = {"x", "w", ...}, saved = {"node", ...}, device_layout = bool})
 * -> the backward graph (see ir/autodiff.h): inputs = the forward inputs + the saved
 * activations + "grad_<output>" cotangents; outputs = "grad_<name>". */
static int l_grad(lua_State *L) {
    ane_graph *g = check_graph(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    const char *wrt[256], *saved[256];
    int nwrt = string_list(L, "wrt", wrt);
    if (nwrt < 1) return luaL_error(L, "grad: wrt needs 1 to 256 names");
    int nsaved = string_list(L, "saved", saved);
    lua_getfield(L, 2, "device_layout");
    ane_autodiff_options options = {wrt, nwrt, saved, nsaved, lua_toboolean(L, -1)};
    graph_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->graph = NULL;
    luaL_setmetatable(L, ANE_GRAPH_TYPE);
    ane_error err;
    if (ane_autodiff(g, &options, &box->graph, &err)) return ane_lua_raise(L, &err);
    return 1;
}

static int graph_call(lua_State *L) {
    lua_remove(L, 1);
    return graph_new(L);
}

/* ane.graph.ops() -> the op table: one entry per op (inputs and consts included) with
 * name, operands, min_operands, max_operands, differentiable, elementwise, and its
 * attributes { mil =, lua =, kind =, default =, positional = } in schema order. */
static int graph_ops(lua_State *L) {
    static const char *const kinds[] = {"end", "int", "bool", "float", "ints", "pair", "quad", "dtype", "string",
                                        "piece", "pad_type", "false", "ones", "zero", "ignored", "rejected"};
    lua_createtable(L, ANE_OP_COUNT, 0);
    for (int op = 0; op < ANE_OP_COUNT; op++) {
        const ane_op_info *info = &ane_op_table[op];
        lua_createtable(L, 0, 8);
        ane_lua_set_string(L, "name", info->name);
        ane_lua_set_string(L, "operands", info->operands);
        ane_lua_set_integer(L, "min_operands", info->min_operands);
        ane_lua_set_integer(L, "max_operands", info->max_operands);
        ane_lua_set_boolean(L, "differentiable", (info->flags & ANE_OP_DIFFERENTIABLE) != 0);
        ane_lua_set_boolean(L, "has_gradient_rule", ane_autodiff_has_rule((ane_op)op));
        ane_lua_set_boolean(L, "elementwise", (info->flags & ANE_OP_ELEMENTWISE) != 0);
        lua_newtable(L);
        int count = 0;
        ANE_FOR_EACH_ATTR((ane_op)op, spec) {
            lua_createtable(L, 0, 5);
            if (spec->mil) ane_lua_set_string(L, "mil", spec->mil);
            if (spec->lua) ane_lua_set_string(L, "lua", spec->lua);
            ane_lua_set_string(L, "kind", kinds[spec->kind]);
            if (spec->fallback && spec->kind != ANE_ATTR_REJECTED) ane_lua_set_string(L, "default", spec->fallback);
            ane_lua_set_boolean(L, "positional", spec->positional);
            lua_rawseti(L, -2, ++count);
        }
        lua_setfield(L, -2, "attributes");
        lua_rawseti(L, -2, op + 1);
    }
    return 1;
}

/* Graph method lookup: the builders and methods, and for a name that is neither an error
 * that says so, with the nearest names and the ane.nn composite it may mean (ane.repl). */
static int graph_index(lua_State *L) {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    if (!lua_isnil(L, -1) || lua_type(L, 2) != LUA_TSTRING) return 1;
    const char *key = lua_tostring(L, 2);
    luaL_where(L, 1);
    lua_getglobal(L, "require");
    lua_pushliteral(L, "ane.repl");
    if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_istable(L, -1)) {
        lua_getfield(L, -1, "unknown_builder");
        lua_pushvalue(L, 2);
        if (lua_pcall(L, 1, 1, 0) == LUA_OK && lua_isstring(L, -1)) {
            lua_remove(L, -2);
            lua_concat(L, 2);
            return lua_error(L);
        }
    }
    lua_settop(L, 2);
    return luaL_error(L, "a graph has no builder '%s'", key);
}

void ane_lua_open_graph(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"input", g_input}, {"const", g_const}, {"output", g_output}, {"optimize", g_optimize},
        {"validate", g_validate}, {"mil", g_mil}, {"dump", g_dump}, {"stats", g_stats},
        {"node", g_node}, {"outputs", g_outputs}, {"name", g_name}, {"close", graph_release}, {NULL, NULL},
    };
    static const luaL_Reg meta[] = {
        {"__gc", graph_release}, {"__close", graph_release}, {"__tostring", g_tostring}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_GRAPH_TYPE);
    luaL_setfuncs(L, meta, 0);
    luaL_newlib(L, methods);
    for (int op = 0; op < ANE_OP_COUNT; op++) {
        if (op == ANE_OP_INPUT || op == ANE_OP_CONST) continue;
        lua_pushinteger(L, op);
        lua_pushcclosure(L, g_op, 1);
        lua_setfield(L, -2, ane_op_table[op].name);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__methods"); /* the table itself, for help and completion */
    lua_pushcclosure(L, graph_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    static const luaL_Reg node_methods[] = {
        {"name", n_name}, {"rename", n_rename}, {"shape", n_shape}, {"dtype", n_dtype}, {"op", n_op}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_NODE_TYPE);
    lua_pushcfunction(L, n_tostring);
    lua_setfield(L, -2, "__tostring");
    luaL_newlib(L, node_methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);

    lua_newtable(L);
    lua_pushcfunction(L, graph_parse);
    lua_setfield(L, -2, "parse");
    lua_pushcfunction(L, l_grad);
    lua_setfield(L, -2, "grad");
    lua_pushcfunction(L, graph_ops);
    lua_setfield(L, -2, "ops");
    lua_newtable(L);
    lua_pushcfunction(L, graph_call);
    lua_setfield(L, -2, "__call");
    lua_setmetatable(L, -2);
}
