/* The training maths of the `ane.tensor` module: the cross-entropy loss and its gradient,
 * the AdamW step, the global-norm sum of squares and the activation clamp (the kernels are
 * in ane_core/tensor/loss.c and optim.c). */
#include "../ane_core/tensor/optim.h"
#include "ane_lua.h"

/* ane.tensor.cross_entropy(logits [N, V], targets {0-based}, [scale = 1/N])
 * -> mean loss, gradient [N, V] (scaled by `scale`) */
static int tensor_cross_entropy(lua_State *L) {
    ane_tensor *logits = ane_lua_check_tensor(L, 1);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer n = luaL_len(L, 2);
    if (logits->ndim != 2 || n != logits->shape[0]) return luaL_error(L, "cross_entropy: logits [N, V] and N targets expected");
    double scale = luaL_optnumber(L, 3, n > 0 ? 1.0 / (double)n : 1.0), loss_sum;
    lua_settop(L, 2);
    int64_t *targets = ane_lua_read_integers(L, 2, "target", &n);
    ane_tensor *grad = ane_lua_new_tensor_slot(L);
    ane_error err;
    if (ane_cross_entropy(logits, targets, scale, &loss_sum, grad, &err)) return ane_lua_raise(L, &err);
    lua_pushnumber(L, n > 0 ? loss_sum / (double)n : 0);
    lua_insert(L, -2);
    return 2;
}

/* ane.tensor.adamw(param, grad, m, v, {lr =, beta1 =, beta2 =, eps =, weight_decay =, step =}
 * and optional grad_scale (applied to the gradient first) updates param, m and v in place
 * (contiguous fp32). */
static int tensor_adamw(lua_State *L) {
    ane_tensor *param = ane_lua_check_tensor(L, 1), *grad = ane_lua_check_tensor(L, 2);
    ane_tensor *m = ane_lua_check_tensor(L, 3), *v = ane_lua_check_tensor(L, 4);
    luaL_checktype(L, 5, LUA_TTABLE);
    ane_adamw_options o = {
        .lr = ane_lua_option_number(L, 5, "lr", 1e-3), .beta1 = ane_lua_option_number(L, 5, "beta1", 0.9),
        .beta2 = ane_lua_option_number(L, 5, "beta2", 0.999), .eps = ane_lua_option_number(L, 5, "eps", 1e-8),
        .weight_decay = ane_lua_option_number(L, 5, "weight_decay", 0), .step = (int64_t)ane_lua_option_number(L, 5, "step", 1),
        .grad_scale = ane_lua_option_number(L, 5, "grad_scale", 1),
    };
    ane_error err;
    if (ane_adamw_step(param, grad, m, v, &o, &err)) return ane_lua_raise(L, &err);
    return 0;
}

/* t:sum_of_squares() -> the fp64 sum of squares (global-norm clipping) */
static int m_sum_of_squares(lua_State *L) {
    double sum;
    ane_error err;
    if (ane_sum_of_squares(ane_lua_check_tensor(L, 1), &sum, &err)) return ane_lua_raise(L, &err);
    lua_pushnumber(L, sum);
    return 1;
}

/* t:clamp_activations(limit) -> clamped, nans: in place, beyond +-limit -> +-limit, NaN -> 0 */
static int m_clamp_activations(lua_State *L) {
    int64_t clamped, nans;
    ane_error err;
    if (ane_clamp_activations(ane_lua_check_tensor(L, 1), luaL_checknumber(L, 2), &clamped, &nans, &err))
        return ane_lua_raise(L, &err);
    lua_pushinteger(L, (lua_Integer)clamped);
    lua_pushinteger(L, (lua_Integer)nans);
    return 2;
}

const luaL_Reg ane_lua_train_functions[] = {
    {"cross_entropy", tensor_cross_entropy}, {"adamw", tensor_adamw}, {NULL, NULL},
};

const luaL_Reg ane_lua_train_methods[] = {
    {"sum_of_squares", m_sum_of_squares}, {"clamp_activations", m_clamp_activations}, {NULL, NULL},
};
