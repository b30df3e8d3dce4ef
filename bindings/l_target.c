/* Compile targets from Lua: `target =` of ane.compile, ane.compile_mil and g:validate.
 *
 *   "generic" | "m1" .. "m5" | "unchecked"   a built-in target (passes/target.h)
 *   "path/report.json"                        a probe report (ane.probe.target_of)
 *   { base = "m4", name =, rules = { ["ANE-01"] = "off" | "warning" | "error" },
 *     max_conv_channels =, max_kernel_width =, min_io_width =, max_spatial =,
 *     sdpa_mask_honoured = true, sdpa_mask_one_plane = true, refused_ops = { "exp" },
 *     accepted_ops = { "concat" }, max_weight_bytes =, cast_refused = true,
 *     matmul_inf_at = 32752, offset_slice_limit = 4094, nan_to_zero = true,
 *     io_rows = "64-bytes" | "packed" | "32-elements" }
 * plus `max_conv_channels =` beside `target` in the options, which overrides ANE-16.
 * Options without a target use the process's default: generic, or ane.set_default_target(t)
 * (the examples' --target), or the ANELUA_TARGET environment variable. */
#include <stdlib.h>
#include <string.h>

#include "ane_lua.h"

static const char *const levels[] = {"catalogue", "error", "warning", "off", NULL};

static int64_t limit_field(lua_State *L, int index, const char *key, int64_t fallback) {
    lua_getfield(L, index, key);
    int64_t value = fallback;
    if (!lua_isnil(L, -1)) {
        int is_integer;
        value = lua_tointegerx(L, -1, &is_integer);
        if (!is_integer || value < 1) luaL_error(L, "target field '%s' must be a positive integer", key);
    }
    lua_pop(L, 1);
    return value;
}

static void op_list(lua_State *L, int index, const char *key, uint64_t set[2]) {
    if (lua_getfield(L, index, key) == LUA_TTABLE) {
        for (lua_Integer i = 1; lua_rawgeti(L, -1, i) != LUA_TNIL; i++) {
            ane_op op;
            const char *name = lua_tostring(L, -1);
            if (!name || !ane_op_from_name(name, &op)) luaL_error(L, "target field '%s': no op '%s'", key, name ? name : "?");
            ane_target_set_op(set, op);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    } else if (!lua_isnil(L, -1)) {
        luaL_error(L, "target field '%s' must be a list of op names", key);
    }
    lua_pop(L, 1);
}

static void read_table(lua_State *L, int index, ane_target *out) {
    lua_getfield(L, index, "base");
    const char *base = luaL_optstring(L, -1, "generic");
    if (!ane_target_builtin(base, out))
        luaL_error(L, "target base '%s' is not a built-in target (%s)", base, ane_target_names());
    lua_pop(L, 1);
    lua_getfield(L, index, "name");
    if (lua_isstring(L, -1)) snprintf(out->name, sizeof out->name, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    if (lua_getfield(L, index, "rules") == LUA_TTABLE) {
        lua_pushnil(L);
        while (lua_next(L, -2)) {
            const char *id = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
            int number = ane_rule_number(id);
            if (!number) luaL_error(L, "target rules: '%s' is no rule ID (ANE-01 .. ANE-%d)", id, ANE_RULE_MAX - 1);
            out->level[number] = (signed char)luaL_checkoption(L, -1, NULL, levels);
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    out->max_conv_channels = limit_field(L, index, "max_conv_channels", out->max_conv_channels);
    out->max_kernel_width = limit_field(L, index, "max_kernel_width", out->max_kernel_width);
    out->min_io_width = limit_field(L, index, "min_io_width", out->min_io_width);
    out->max_spatial = limit_field(L, index, "max_spatial", out->max_spatial);
    out->max_weight_bytes = limit_field(L, index, "max_weight_bytes", out->max_weight_bytes);
    static const char *const flags[] = {"cast_refused", "nan_to_zero"};
    int *flag_fields[] = {&out->cast_refused, &out->nan_to_zero};
    for (int k = 0; k < 2; k++) {
        lua_getfield(L, index, flags[k]);
        if (!lua_isnil(L, -1)) *flag_fields[k] = lua_toboolean(L, -1);
        lua_pop(L, 1);
    }
    lua_getfield(L, index, "io_rows");
    if (!lua_isnil(L, -1) && !ane_io_rows_from_name(lua_tostring(L, -1), &out->io_rows))
        luaL_error(L, "target field 'io_rows' must be '64-bytes', 'packed' or '32-elements'");
    lua_pop(L, 1);
    out->matmul_inf_at = ane_lua_option_number(L, index, "matmul_inf_at", out->matmul_inf_at);
    out->offset_slice_limit = ane_lua_option_number(L, index, "offset_slice_limit", out->offset_slice_limit);
    lua_getfield(L, index, "sdpa_mask_honoured");
    if (!lua_isnil(L, -1)) out->sdpa_mask_honoured = lua_toboolean(L, -1);
    lua_getfield(L, index, "sdpa_mask_one_plane");
    if (!lua_isnil(L, -1)) out->sdpa_mask_one_plane = lua_toboolean(L, -1);
    lua_pop(L, 2);
    op_list(L, index, "refused_ops", out->ops_refused);
    op_list(L, index, "accepted_ops", out->ops_accepted);
}

static ane_target default_target;
static int default_target_read; /* ANELUA_TARGET looked at */

static void read_target_value(lua_State *L, int value_index, ane_target *out);

static int read_environment_target(lua_State *L) {
    read_target_value(L, 1, &default_target);
    return 0;
}

/* The process's default target (generic until set; ANELUA_TARGET on first use). */
static const ane_target *current_default(lua_State *L) {
    if (!default_target_read) {
        default_target_read = 1;
        ane_target_generic(&default_target);
        const char *env = getenv("ANELUA_TARGET");
        if (env && *env) {
            lua_pushcfunction(L, read_environment_target);
            lua_pushstring(L, env);
            if (lua_pcall(L, 1, 0, 0) != LUA_OK) {
                ane_target_generic(&default_target);
                luaL_error(L, "ANELUA_TARGET=%s: %s", env, lua_tostring(L, -1));
            }
        }
    }
    return &default_target;
}

void ane_lua_read_target(lua_State *L, int options_index, ane_target *out) {
    *out = *current_default(L);
    if (!lua_istable(L, options_index)) return;
    options_index = lua_absindex(L, options_index);
    lua_getfield(L, options_index, "target");
    if (!lua_isnil(L, -1)) read_target_value(L, lua_gettop(L), out);
    lua_pop(L, 1);
    out->max_conv_channels = limit_field(L, options_index, "max_conv_channels", out->max_conv_channels);
}

/* A target given as a name, a report's path or a table (at value_index) into *out. */
static void read_target_value(lua_State *L, int value_index, ane_target *out) {
    ane_target_generic(out);
    lua_pushvalue(L, value_index);
    int type = lua_type(L, -1);
    if (type == LUA_TSTRING && !ane_target_builtin(lua_tostring(L, -1), out)) {
        /* a report file: ane.probe turns it into a target table */
        const char *path = lua_tostring(L, -1);
        if (!strstr(path, ".json"))
            luaL_error(L, "target '%s' is neither a built-in target (%s) nor a probe report (.json)", path, ane_target_names());
        lua_getglobal(L, "require");
        lua_pushstring(L, "ane.probe");
        lua_call(L, 1, 1);
        lua_getfield(L, -1, "target_of");
        lua_pushvalue(L, -3);
        lua_call(L, 1, 1);
        read_table(L, lua_gettop(L), out);
        lua_pop(L, 2);
    } else if (type == LUA_TTABLE) {
        read_table(L, lua_gettop(L), out);
    } else if (type != LUA_TSTRING) {
        luaL_error(L, "target must be a name, a probe report's path or a table, not a %s", lua_typename(L, type));
    }
    lua_pop(L, 1);
}

/* ane.set_default_target(name | report | table | nil): the target of compiles that name
 * none (nil: generic again) */
static int l_set_default_target(lua_State *L) {
    (void)current_default(L);
    if (lua_isnoneornil(L, 1)) ane_target_generic(&default_target);
    else read_target_value(L, 1, &default_target);
    return 0;
}

/* ane.default_target() -> its name */
static int l_default_target(lua_State *L) {
    lua_pushstring(L, current_default(L)->name);
    return 1;
}

/* ane.target(name or table or report) -> the target as a table (what the validator checks) */
static int l_target(lua_State *L) {
    lua_settop(L, 1);
    lua_createtable(L, 0, 1);
    lua_pushvalue(L, 1);
    lua_setfield(L, -2, "target");
    ane_target t;
    ane_lua_read_target(L, 2, &t);
    lua_createtable(L, 0, 8);
    ane_lua_set_string(L, "name", t.name);
    ane_lua_set_integer(L, "max_conv_channels", t.max_conv_channels);
    ane_lua_set_integer(L, "max_kernel_width", t.max_kernel_width);
    ane_lua_set_integer(L, "min_io_width", t.min_io_width);
    ane_lua_set_integer(L, "max_spatial", t.max_spatial);
    ane_lua_set_integer(L, "max_weight_bytes", t.max_weight_bytes);
    ane_lua_set_boolean(L, "cast_refused", t.cast_refused);
    ane_lua_set_number(L, "matmul_inf_at", t.matmul_inf_at);
    ane_lua_set_number(L, "offset_slice_limit", t.offset_slice_limit);
    ane_lua_set_boolean(L, "nan_to_zero", t.nan_to_zero);
    ane_target_complete(&t, &t);
    ane_lua_set_string(L, "io_rows", ane_io_rows_name(t.io_rows));
    ane_lua_set_boolean(L, "sdpa_mask_honoured", t.sdpa_mask_honoured);
    ane_lua_set_boolean(L, "sdpa_mask_one_plane", t.sdpa_mask_one_plane);
    lua_newtable(L);
    for (int i = 1; i < ANE_RULE_MAX; i++)
        if (t.level[i]) {
            char id[16];
            snprintf(id, sizeof id, "ANE-%02d", i);
            lua_pushstring(L, levels[t.level[i]]);
            lua_setfield(L, -2, id);
        }
    lua_setfield(L, -2, "rules");
    for (int side = 0; side < 2; side++) {
        lua_newtable(L);
        int n = 0;
        for (int op = 0; op < ANE_OP_COUNT; op++)
            if (ane_target_has_op(side ? t.ops_accepted : t.ops_refused, (ane_op)op) && strcmp(t.name, "unchecked") != 0) {
                lua_pushstring(L, ane_op_table[op].name);
                lua_rawseti(L, -2, ++n);
            }
        lua_setfield(L, -2, side ? "accepted_ops" : "refused_ops");
    }
    return 1;
}

/* Adds ane.target, ane.set_default_target and ane.default_target to the table on top. */
void ane_lua_open_target(lua_State *L) {
    static const luaL_Reg functions[] = {
        {"target", l_target}, {"set_default_target", l_set_default_target}, {"default_target", l_default_target},
        {NULL, NULL},
    };
    luaL_setfuncs(L, functions, 0);
}
