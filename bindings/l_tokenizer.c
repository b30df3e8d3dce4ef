/* ane._bpe: the C half of lua/ane/tokenizer.lua (type "ane.BPE"). The Lua side reads the
 * vocabulary files (vocab.json and tokenizer.json with lua-cjson, merges.txt, llm.c's
 * tokenizer.bin) and hands the decoded tables and texts over whole; building the tables,
 * encoding and decoding run here. */
#include <stdlib.h>

#include "../ane_core/text/bpe.h"
#include "../ane_core/text/normalize.h"
#include "../ane_core/text/sentencepiece.h"
#include "ane_lua.h"

#define ANE_BPE_TYPE "ane.BPE"

typedef struct bpe_box {
    ane_bpe *bpe;
} bpe_box;

static ane_bpe *check_bpe(lua_State *L) {
    bpe_box *box = luaL_checkudata(L, 1, ANE_BPE_TYPE);
    if (!box->bpe) luaL_error(L, "attempt to use a freed tokenizer");
    return box->bpe;
}

static int bpe_gc(lua_State *L) {
    bpe_box *box = luaL_checkudata(L, 1, ANE_BPE_TYPE);
    ane_bpe_free(box->bpe);
    box->bpe = NULL;
    return 0;
}

/* Every builder returns true, or nil and a message (a malformed vocabulary is the
 * environment's fault, not the caller's). */
static int result(lua_State *L, ane_status status, const ane_error *err) {
    if (status) return ane_lua_fail(L, err);
    lua_pushboolean(L, 1);
    return 1;
}

/* Pushes ids as a Lua array. */
static void push_ids(lua_State *L, const int32_t *ids, size_t count) {
    lua_createtable(L, (int)count, 0);
    for (size_t i = 0; i < count; i++) {
        lua_pushinteger(L, ids[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
}

/* Reads the Lua array at `index` into an int32 array owned by a new userdata. */
static int32_t *read_ids(lua_State *L, int index, size_t *count) {
    luaL_checktype(L, index, LUA_TTABLE);
    *count = (size_t)luaL_len(L, index);
    int32_t *ids = lua_newuserdatauv(L, (*count + 1) * sizeof *ids, 0);
    for (size_t i = 0; i < *count; i++) {
        lua_geti(L, index, (lua_Integer)i + 1);
        int is_integer;
        lua_Integer id = lua_tointegerx(L, -1, &is_integer);
        if (!is_integer) luaL_error(L, "decode: ids[%d] is not an integer", (int)i + 1);
        ids[i] = id < INT32_MIN || id > INT32_MAX ? -1 : (int32_t)id;
        lua_pop(L, 1);
    }
    return ids;
}

/* A token id or merge rank from a vocabulary file: an integer in 0 .. INT32_MAX, else a
 * malformed file (nil, message; never truncated to 32 bits). Returns 1 when it pushed the
 * failure. */
static int out_of_range(lua_State *L, int arg, const char *what, int32_t *out) {
    lua_Integer value = luaL_checkinteger(L, arg);
    if (value >= 0 && value <= INT32_MAX) {
        *out = (int32_t)value;
        return 0;
    }
    lua_pushnil(L);
    lua_pushfstring(L, "%s %I is out of range (0..2147483647)", what, value);
    return 1;
}

static int m_add_token_bytes(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    size_t length;
    const char *bytes = luaL_checklstring(L, 2, &length);
    int32_t id;
    if (out_of_range(L, 3, "token id", &id)) return 2;
    ane_error err;
    return result(L, ane_bpe_add_token_bytes(bpe, bytes, length, id, &err), &err);
}

/* A failure while reading a vocabulary table: nil and "<what> <n>: <message>". */
static int fail_entry(lua_State *L, const char *what, lua_Integer n, const ane_error *err) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s %I: %s", what, n, err->message);
    return 2;
}

/* bpe:add_vocabulary(vocab) -> the number of tokens, or nil and a message. vocab maps each
 * token (unicode alphabet) to its integer id, as lua-cjson decodes vocab.json / "model.vocab";
 * one C loop instead of a Lua call per token. */
static int m_add_vocabulary(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer count = 0;
    ane_error err;
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        int is_integer;
        lua_Integer id = lua_tointegerx(L, -1, &is_integer);
        if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TNUMBER || !is_integer) {
            const char *token = luaL_tolstring(L, -2, NULL), *value = luaL_tolstring(L, -2, NULL);
            lua_pushnil(L);
            lua_pushfstring(L, "vocabulary entry %s is not a token -> integer id (%s)", token, value);
            return 2;
        }
        size_t length;
        const char *token = lua_tolstring(L, -2, &length);
        if (id < 0 || id > INT32_MAX) {
            lua_pushnil(L);
            lua_pushfstring(L, "token id %I is out of range (0..2147483647)", id);
            return 2;
        }
        if (ane_bpe_add_token(bpe, token, length, (int32_t)id, &err)) return ane_lua_fail(L, &err);
        lua_pop(L, 1);
        count++;
    }
    lua_pushinteger(L, count);
    return 1;
}

/* bpe:add_merges(merges) -> the number of merges, or nil and "merge <n>: <message>". merges is
 * tokenizer.json's "model.merges" as decoded: pairs { left, right } or strings "left right",
 * ranked in order. */
static int m_add_merges(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer count = (lua_Integer)lua_rawlen(L, 2);
    ane_error err;
    if (count > INT32_MAX || ane_bpe_reserve(bpe, 0, (size_t)count, &err)) return ane_lua_fail(L, &err);
    for (lua_Integer i = 1; i <= count; i++) {
        int type = lua_rawgeti(L, 2, i);
        ane_status status;
        if (type == LUA_TSTRING) {
            size_t length;
            const char *line = lua_tolstring(L, -1, &length);
            status = ane_bpe_add_merge_line(bpe, line, length, (int32_t)(i - 1), &err);
        } else if (type == LUA_TTABLE && lua_rawgeti(L, -1, 1) == LUA_TSTRING && lua_rawgeti(L, -2, 2) == LUA_TSTRING) {
            size_t left_length, right_length;
            const char *left = lua_tolstring(L, -2, &left_length), *right = lua_tolstring(L, -1, &right_length);
            status = ane_bpe_add_merge(bpe, left, left_length, right, right_length, (int32_t)(i - 1), &err);
        } else {
            status = ane_fail(&err, ANE_ERR_FORMAT, "not a pair of tokens");
        }
        if (status) return fail_entry(L, "merge", i, &err);
        lua_settop(L, 2);
    }
    lua_pushinteger(L, count);
    return 1;
}

/* bpe:add_merges_text(text) -> the number of merges, or nil and "line <n>: <message>": the
 * whole of a merges.txt. */
static int m_add_merges_text(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    size_t length;
    const char *text = luaL_checklstring(L, 2, &length);
    int32_t count;
    ane_error err;
    if (ane_bpe_add_merges_text(bpe, text, length, &count, &err)) return ane_lua_fail(L, &err);
    lua_pushinteger(L, count);
    return 1;
}

/* bpe:finish([patterns]): nil for GPT-2's split, a pattern, or an array of split stages in
 * order (false in it for GPT-2's). The strings stay on the Lua stack while C compiles them. */
static int m_finish(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    const char *patterns[ANE_BPE_MAX_SPLITS];
    int count = 0;
    if (lua_type(L, 2) == LUA_TSTRING) {
        patterns[count++] = lua_tostring(L, 2);
    } else if (lua_istable(L, 2)) {
        lua_Integer n = luaL_len(L, 2);
        if (n > ANE_BPE_MAX_SPLITS) return luaL_error(L, "finish: %d split patterns (at most %d)", (int)n, ANE_BPE_MAX_SPLITS);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 2, i);
            if (lua_type(L, -1) == LUA_TSTRING) patterns[count++] = lua_tostring(L, -1);
            else if (lua_toboolean(L, -1) == 0) patterns[count++] = NULL;
            else return luaL_error(L, "finish: split pattern %d is not a string or false", (int)i);
        }
    } else if (!lua_isnoneornil(L, 2) && lua_toboolean(L, 2)) {
        return luaL_typeerror(L, 2, "split pattern, array of them, or nil");
    }
    ane_error err;
    return result(L, ane_bpe_finish(bpe, patterns, count, &err), &err);
}

static int m_encode(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    size_t length;
    const char *text = luaL_checklstring(L, 2, &length);
    int32_t *ids;
    size_t count;
    ane_error err;
    if (ane_bpe_encode(bpe, text, length, &ids, &count, &err)) return ane_lua_raise(L, &err);
    push_ids(L, ids, count);
    free(ids);
    return 1;
}

static int m_decode(lua_State *L) {
    ane_bpe *bpe = check_bpe(L);
    size_t count;
    int32_t *ids = read_ids(L, 2, &count);
    char *text;
    size_t length;
    ane_error err;
    if (ane_bpe_decode(bpe, ids, count, &text, &length, &err)) return ane_lua_raise(L, &err);
    lua_pushlstring(L, text, length);
    free(text);
    return 1;
}

static int m_vocab_size(lua_State *L) {
    lua_pushinteger(L, ane_bpe_vocab_size(check_bpe(L)));
    return 1;
}

/* bpe:first_missing_byte() -> the first byte value with no single-byte token, or nil */
static int m_first_missing_byte(lua_State *L) {
    int byte = ane_bpe_first_missing_byte(check_bpe(L));
    if (byte < 0) return 0;
    lua_pushinteger(L, byte);
    return 1;
}

static int m_can_encode(lua_State *L) {
    lua_pushboolean(L, ane_bpe_can_encode(check_bpe(L)));
    return 1;
}

static int bpe_new(lua_State *L) {
    bpe_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->bpe = NULL;
    luaL_setmetatable(L, ANE_BPE_TYPE);
    ane_error err;
    if (ane_bpe_new(&box->bpe, &err)) return ane_lua_raise(L, &err);
    return 1;
}

static int bpe_tostring(lua_State *L) {
    bpe_box *box = luaL_checkudata(L, 1, ANE_BPE_TYPE);
    if (!box->bpe) lua_pushliteral(L, "ane.bpe (freed)");
    else lua_pushfstring(L, "ane.bpe (%d tokens)", (int)ane_bpe_vocab_size(box->bpe));
    return 1;
}

/* ---- ane._spm: SentencePiece BPE (type "ane.SPM") ---- */

#define ANE_SPM_TYPE "ane.SPM"

typedef struct spm_box {
    ane_spm *spm;
} spm_box;

static ane_spm *check_spm(lua_State *L) {
    spm_box *box = luaL_checkudata(L, 1, ANE_SPM_TYPE);
    if (!box->spm) luaL_error(L, "attempt to use a freed tokenizer");
    return box->spm;
}

static int spm_gc(lua_State *L) {
    spm_box *box = luaL_checkudata(L, 1, ANE_SPM_TYPE);
    ane_spm_free(box->spm);
    box->spm = NULL;
    return 0;
}

static int spm_add_piece(lua_State *L) {
    ane_spm *spm = check_spm(L);
    size_t length;
    const char *piece = luaL_checklstring(L, 2, &length);
    float score = (float)luaL_checknumber(L, 3);
    int32_t id;
    if (out_of_range(L, 4, "piece id", &id)) return 2;
    ane_error err;
    return result(L, ane_spm_add_piece(spm, piece, length, score, id, &err), &err);
}

/* spm:add_llama2c_pieces(bytes) -> the number of pieces, or nil and a message. */
static int spm_add_llama2c_pieces(lua_State *L) {
    ane_spm *spm = check_spm(L);
    size_t size;
    const char *bytes = luaL_checklstring(L, 2, &size);
    int32_t count;
    ane_error err;
    if (ane_spm_add_llama2c_pieces(spm, (const unsigned char *)bytes, size, &count, &err)) return ane_lua_fail(L, &err);
    lua_pushinteger(L, count);
    return 1;
}

/* spm:check_encodes() -> true, or nil and why this vocabulary cannot encode. */
static int spm_check_encodes(lua_State *L) {
    ane_error err;
    return result(L, ane_spm_check_encodes(check_spm(L), &err), &err);
}

static int spm_encode(lua_State *L) {
    ane_spm *spm = check_spm(L);
    size_t length;
    const char *text = luaL_checklstring(L, 2, &length);
    int32_t *ids;
    size_t count;
    ane_error err;
    if (ane_spm_encode(spm, text, length, lua_toboolean(L, 3), &ids, &count, &err)) return ane_lua_raise(L, &err);
    push_ids(L, ids, count);
    free(ids);
    return 1;
}

static int spm_decode(lua_State *L) {
    ane_spm *spm = check_spm(L);
    size_t count;
    int32_t *ids = read_ids(L, 2, &count);
    char *text;
    size_t length;
    ane_error err;
    if (ane_spm_decode(spm, ids, count, &text, &length, &err)) return ane_lua_raise(L, &err);
    lua_pushlstring(L, text, length);
    free(text);
    return 1;
}

static int spm_vocab_size(lua_State *L) {
    lua_pushinteger(L, ane_spm_vocab_size(check_spm(L)));
    return 1;
}

/* spm:piece(id) -> the piece (0-based id) and its score */
static int spm_piece(lua_State *L) {
    ane_spm *spm = check_spm(L);
    lua_Integer id = luaL_checkinteger(L, 2);
    if (id < 0 || id >= ane_spm_vocab_size(spm))
        return luaL_argerror(L, 2, lua_pushfstring(L, "id %I is outside the vocabulary of %d", id, (int)ane_spm_vocab_size(spm)));
    size_t length;
    float score;
    const char *piece = ane_spm_piece(spm, (int32_t)id, &length, &score);
    lua_pushlstring(L, piece, length);
    lua_pushnumber(L, score);
    return 2;
}

static int spm_new(lua_State *L) {
    spm_box *box = lua_newuserdatauv(L, sizeof *box, 0);
    box->spm = NULL;
    luaL_setmetatable(L, ANE_SPM_TYPE);
    ane_error err;
    if (ane_spm_new(&box->spm, &err)) return ane_lua_raise(L, &err);
    return 1;
}

void ane_lua_open_spm(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"add_piece", spm_add_piece}, {"add_llama2c_pieces", spm_add_llama2c_pieces}, {"encode", spm_encode},
        {"decode", spm_decode}, {"check_encodes", spm_check_encodes},
        {"vocab_size", spm_vocab_size}, {"piece", spm_piece}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_SPM_TYPE);
    lua_pushcfunction(L, spm_gc);
    lua_setfield(L, -2, "__gc");
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_pushcfunction(L, spm_new);
}

/* ane._nfc(text) -> text in Unicode NFC (invalid UTF-8 bytes kept as they are) */
static int l_nfc(lua_State *L) {
    size_t length;
    const char *text = luaL_checklstring(L, 1, &length);
    char *normalized;
    size_t normalized_length;
    ane_error err;
    if (ane_text_nfc(text, length, &normalized, &normalized_length, &err)) return ane_lua_raise(L, &err);
    lua_pushlstring(L, normalized, normalized_length);
    free(normalized);
    return 1;
}

void ane_lua_open_nfc(lua_State *L) { lua_pushcfunction(L, l_nfc); }

void ane_lua_open_bpe(lua_State *L) {
    static const luaL_Reg methods[] = {
        {"add_token_bytes", m_add_token_bytes}, {"add_vocabulary", m_add_vocabulary}, {"add_merges", m_add_merges},
        {"add_merges_text", m_add_merges_text},
        {"finish", m_finish}, {"encode", m_encode}, {"decode", m_decode}, {"vocab_size", m_vocab_size},
        {"can_encode", m_can_encode}, {"first_missing_byte", m_first_missing_byte}, {NULL, NULL},
    };
    luaL_newmetatable(L, ANE_BPE_TYPE);
    lua_pushcfunction(L, bpe_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, bpe_tostring);
    lua_setfield(L, -2, "__tostring");
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_pushcfunction(L, bpe_new);
}
