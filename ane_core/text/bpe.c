/* Byte-level BPE (see bpe.h). */
#include "bpe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hashmap.h"

enum { CACHE_LIMIT_IDS = 1 << 22 };

struct ane_bpe {
    ane_hashmap token_ids;    /* raw bytes -> id */
    ane_hashmap pairs;        /* (left id, right id) as 8 bytes -> rank << 32 | merged id */
    const char **token_bytes; /* [vocab] raw bytes of each id (NULL for unused ids), token_ids' own keys */
    uint32_t *token_lengths;  /* [vocab] */
    int32_t vocab;            /* capacity of the two arrays */
    int32_t size;             /* highest id + 1 */
    int32_t byte_token[256];  /* single-byte tokens, -1 when missing */
    int merges;
    int splits;               /* split stages, applied in order (0 until finished) */
    pcre2_code *pattern[ANE_BPE_MAX_SPLITS];
    pcre2_match_data *match[ANE_BPE_MAX_SPLITS];
    ane_hashmap cache;        /* piece bytes -> offset << 20 | count into cache_ids */
    int32_t *cache_ids;
    size_t cache_used, cache_capacity;
    int32_t *work;            /* scratch symbols for one piece */
    size_t work_capacity;
};

/* ------------------------------------------------------------------ the byte alphabet */

/* GPT-2 shows every byte as a printable code point: printable Latin-1 bytes as themselves,
 * the others (controls, space, 127-160, 173) as 256, 257, ... in byte order. */
static int byte_to_codepoint(int byte) {
    static int table[256];
    static int ready = 0;
    if (!ready) {
        int next = 256;
        for (int b = 0; b < 256; b++) {
            int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            table[b] = printable ? b : next++;
        }
        ready = 1;
    }
    return table[byte];
}

static int codepoint_to_byte(int codepoint) {
    static int table[512];
    static int ready = 0;
    if (!ready) {
        for (int i = 0; i < 512; i++) table[i] = -1;
        for (int b = 0; b < 256; b++) table[byte_to_codepoint(b)] = b;
        ready = 1;
    }
    return codepoint >= 0 && codepoint < 512 ? table[codepoint] : -1;
}

/* Length of the valid UTF-8 sequence at s (0 when invalid): no overlongs, no surrogates,
 * nothing above U+10FFFF. */
static size_t utf8_sequence(const unsigned char *s, size_t available, int *codepoint) {
    unsigned c = s[0];
    if (c < 0x80) return *codepoint = (int)c, 1;
    size_t n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
    if (n == 0 || c > 0xF4 || n > available) return 0;
    int value = (int)(c & (0x3F >> (n - 1)));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        value = (value << 6) | (s[i] & 0x3F);
    }
    if ((n == 3 && value < 0x800) || (n == 4 && (value < 0x10000 || value > 0x10FFFF)) || (value >= 0xD800 && value <= 0xDFFF))
        return 0;
    *codepoint = value;
    return n;
}

/* Unicode-alphabet text -> raw bytes (in out, which holds at least length bytes). */
static ane_status unicode_form_to_bytes(const char *text, size_t length, char *out, size_t *out_length, ane_error *err) {
    size_t n = 0;
    for (size_t i = 0; i < length;) {
        int codepoint;
        size_t step = utf8_sequence((const unsigned char *)text + i, length - i, &codepoint);
        int byte = step ? codepoint_to_byte(codepoint) : -1;
        if (byte < 0)
            return ane_fail(err, ANE_ERR_FORMAT, "token '%.*s' has a character outside GPT-2's byte alphabet at byte %zu",
                            (int)(length > 60 ? 60 : length), text, i);
        out[n++] = (char)byte;
        i += step;
    }
    *out_length = n;
    return ANE_OK;
}

/* ------------------------------------------------------------------ building */

ane_status ane_bpe_new(ane_bpe **out, ane_error *err) {
    ane_bpe *bpe = calloc(1, sizeof *bpe);
    if (!bpe) return ane_fail(err, ANE_ERR_NOMEM, "out of memory creating a tokenizer");
    for (int b = 0; b < 256; b++) bpe->byte_token[b] = -1;
    *out = bpe;
    return ANE_OK;
}

void ane_bpe_free(ane_bpe *bpe) {
    if (!bpe) return;
    ane_hashmap_free(&bpe->token_ids);
    ane_hashmap_free(&bpe->pairs);
    ane_hashmap_free(&bpe->cache);
    free(bpe->token_bytes);
    free(bpe->token_lengths);
    free(bpe->cache_ids);
    free(bpe->work);
    for (int i = 0; i < bpe->splits; i++) {
        if (bpe->match[i]) pcre2_match_data_free(bpe->match[i]);
        pcre2_code_free(bpe->pattern[i]);
    }
    free(bpe);
}

ane_status ane_bpe_reserve(ane_bpe *bpe, size_t tokens, size_t merges, ane_error *err) {
    if (!ane_hashmap_reserve(&bpe->token_ids, tokens) || !ane_hashmap_reserve(&bpe->pairs, merges))
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory sizing a tokenizer of %zu tokens and %zu merges", tokens, merges);
    return ANE_OK;
}

ane_status ane_bpe_add_token_bytes(ane_bpe *bpe, const char *bytes, size_t length, int32_t id, ane_error *err) {
    if (id < 0 || id > (1 << 24)) return ane_fail(err, ANE_ERR_FORMAT, "token id %d is out of range", id);
    if (length == 0) return ane_fail(err, ANE_ERR_FORMAT, "token %d is empty", id);
    if (id >= bpe->vocab) {
        int32_t vocab = id + 1 > bpe->vocab * 2 ? id + 1 : bpe->vocab * 2;
        const char **bytes_table = realloc(bpe->token_bytes, (size_t)vocab * sizeof *bytes_table);
        if (bytes_table) bpe->token_bytes = bytes_table;
        uint32_t *lengths = realloc(bpe->token_lengths, (size_t)vocab * sizeof *lengths);
        if (lengths) bpe->token_lengths = lengths;
        if (!bytes_table || !lengths) return ane_fail(err, ANE_ERR_NOMEM, "out of memory growing the vocabulary");
        for (int32_t i = bpe->vocab; i < vocab; i++) bpe->token_bytes[i] = NULL, bpe->token_lengths[i] = 0;
        bpe->vocab = vocab;
    }
    if (bpe->token_bytes[id]) return ane_fail(err, ANE_ERR_FORMAT, "token id %d appears twice", id);
    const char *stored = ane_hashmap_put_key(&bpe->token_ids, bytes, length, id);
    if (!stored) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding token %d", id);
    bpe->token_bytes[id] = stored;
    bpe->token_lengths[id] = (uint32_t)length;
    if (id + 1 > bpe->size) bpe->size = id + 1;
    if (length == 1) bpe->byte_token[(unsigned char)bytes[0]] = id;
    return ANE_OK;
}

/* Scratch for a token's raw bytes: on the stack when short (nearly every token), else from
 * the heap. A raw form is never longer than its unicode form. */
enum { SHORT_TOKEN_BYTES = 256 };

ane_status ane_bpe_add_token(ane_bpe *bpe, const char *text, size_t length, int32_t id, ane_error *err) {
    char short_bytes[SHORT_TOKEN_BYTES];
    char *bytes = length <= sizeof short_bytes ? short_bytes : malloc(length);
    if (!bytes) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding token %d", id);
    size_t n;
    ane_status status = unicode_form_to_bytes(text, length, bytes, &n, err);
    if (!status) status = ane_bpe_add_token_bytes(bpe, bytes, n, id, err);
    if (bytes != short_bytes) free(bytes);
    return status;
}

ane_status ane_bpe_add_merge(ane_bpe *bpe, const char *left, size_t left_length, const char *right,
                             size_t right_length, int32_t rank, ane_error *err) {
    char short_joined[2 * SHORT_TOKEN_BYTES];
    char *joined = left_length + right_length <= sizeof short_joined ? short_joined : malloc(left_length + right_length);
    if (!joined) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding merge %d", rank);
    size_t a, b;
    ane_status status = unicode_form_to_bytes(left, left_length, joined, &a, err);
    if (!status) status = unicode_form_to_bytes(right, right_length, joined + a, &b, err);
    int64_t left_id, right_id, merged_id;
    if (!status && (!ane_hashmap_get(&bpe->token_ids, joined, a, &left_id) ||
                    !ane_hashmap_get(&bpe->token_ids, joined + a, b, &right_id) ||
                    !ane_hashmap_get(&bpe->token_ids, joined, a + b, &merged_id)))
        status = ane_fail(err, ANE_ERR_FORMAT, "merge %d ('%.*s' + '%.*s') names a token that is not in the vocabulary",
                          rank + 1, (int)left_length, left, (int)right_length, right);
    if (!status) {
        int32_t key[2] = {(int32_t)left_id, (int32_t)right_id};
        int64_t existing;
        /* The first (lowest-ranked) occurrence of a pair wins. */
        if (!ane_hashmap_get(&bpe->pairs, key, sizeof key, &existing) &&
            !ane_hashmap_put(&bpe->pairs, key, sizeof key, ((int64_t)rank << 32) | merged_id))
            status = ane_fail(err, ANE_ERR_NOMEM, "out of memory adding merge %d", rank);
        bpe->merges++;
    }
    if (joined != short_joined) free(joined);
    return status;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

ane_status ane_bpe_add_merge_line(ane_bpe *bpe, const char *line, size_t length, int32_t rank, ane_error *err) {
    size_t split = 0;
    while (split < length && !is_space(line[split])) split++;
    size_t right = split + 1, end = right;
    while (end < length && !is_space(line[end])) end++;
    if (split == 0 || split == length || line[split] != ' ' || end == right || end != length)
        return ane_fail(err, ANE_ERR_FORMAT, "'%.*s' is not 'left right'", (int)(length > 60 ? 60 : length), line);
    return ane_bpe_add_merge(bpe, line, split, line + right, end - right, rank, err);
}

ane_status ane_bpe_add_merges_text(ane_bpe *bpe, const char *text, size_t length, int32_t *count, ane_error *err) {
    int32_t rank = 0, line_number = 0;
    for (size_t start = 0; start <= length;) {
        const char *newline = memchr(text + start, '\n', length - start);
        size_t end = newline ? (size_t)(newline - text) : length, line_length = end - start;
        line_number++;
        if (line_length > 0 && text[end - 1] == '\r') line_length--;
        const char *line = text + start;
        int is_version = line_length >= 8 && memcmp(line, "#version", 8) == 0;
        if (line_length > 0 && !is_version) {
            ane_status status = ane_bpe_add_merge_line(bpe, line, line_length, rank, err);
            if (status) {
                if (err) ane_fail_context(err, "line %d", line_number);
                return status;
            }
            rank++;
        }
        start = end + 1;
    }
    *count = rank;
    return ANE_OK;
}

ane_status ane_bpe_finish(ane_bpe *bpe, const char *const *patterns, int count, ane_error *err) {
    static const char *const gpt2[] = {ANE_GPT2_SPLIT_PATTERN};
    if (count <= 0) patterns = gpt2, count = 1;
    if (count > ANE_BPE_MAX_SPLITS)
        return ane_fail(err, ANE_ERR_ARGUMENT, "%d split patterns (at most %d)", count, ANE_BPE_MAX_SPLITS);
    if (bpe->splits) return ane_fail(err, ANE_ERR_ARGUMENT, "this tokenizer is finished already");
    for (int i = 0; i < count; i++) {
        const char *pattern = patterns[i] ? patterns[i] : ANE_GPT2_SPLIT_PATTERN;
        int code;
        PCRE2_SIZE offset;
        pcre2_code *compiled =
            pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code, &offset, NULL);
        if (!compiled) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(code, message, sizeof message);
            return ane_fail(err, ANE_ERR_FORMAT, "split pattern %d: %s at offset %zu", i + 1, (const char *)message,
                            (size_t)offset);
        }
        pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
        bpe->pattern[bpe->splits] = compiled;
        bpe->match[bpe->splits] = pcre2_match_data_create_from_pattern(compiled, NULL);
        bpe->splits++;
        if (!bpe->match[bpe->splits - 1]) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling the split pattern");
    }
    return ANE_OK;
}

int32_t ane_bpe_vocab_size(const ane_bpe *bpe) { return bpe->size; }

int ane_bpe_first_missing_byte(const ane_bpe *bpe) {
    for (int b = 0; b < 256; b++)
        if (bpe->byte_token[b] < 0) return b;
    return -1;
}

int ane_bpe_can_encode(const ane_bpe *bpe) {
    return bpe->merges && bpe->splits && ane_bpe_first_missing_byte(bpe) < 0;
}

/* ------------------------------------------------------------------ encoding */

typedef struct id_list {
    int32_t *ids;
    size_t count, capacity;
} id_list;

static int push_ids(id_list *list, const int32_t *ids, size_t count) {
    if (list->count + count > list->capacity) {
        size_t capacity = list->capacity ? list->capacity : 256;
        while (capacity < list->count + count) capacity *= 2;
        int32_t *grown = realloc(list->ids, capacity * sizeof *grown);
        if (!grown) return 0;
        list->ids = grown;
        list->capacity = capacity;
    }
    memcpy(list->ids + list->count, ids, count * sizeof *ids);
    list->count += count;
    return 1;
}

static void remember(ane_bpe *bpe, const char *piece, size_t length, const int32_t *ids, size_t count) {
    if (count >= (1 << 20)) return;
    if (bpe->cache_used + count > CACHE_LIMIT_IDS) { /* full: start over */
        ane_hashmap_free(&bpe->cache);
        bpe->cache_used = 0;
    }
    if (bpe->cache_used + count > bpe->cache_capacity) {
        size_t capacity = bpe->cache_capacity ? bpe->cache_capacity * 2 : 4096;
        while (capacity < bpe->cache_used + count) capacity *= 2;
        int32_t *grown = realloc(bpe->cache_ids, capacity * sizeof *grown);
        if (!grown) return;
        bpe->cache_ids = grown;
        bpe->cache_capacity = capacity;
    }
    memcpy(bpe->cache_ids + bpe->cache_used, ids, count * sizeof *ids);
    if (ane_hashmap_put(&bpe->cache, piece, length, (int64_t)(bpe->cache_used << 20 | count))) bpe->cache_used += count;
}

/* BPE on one piece: start from bytes, merge the lowest-ranked adjacent pair until none. */
static int encode_piece(ane_bpe *bpe, const char *piece, size_t length, id_list *out) {
    int64_t found;
    if (ane_hashmap_get(&bpe->token_ids, piece, length, &found)) { /* a whole token */
        int32_t id = (int32_t)found;
        return push_ids(out, &id, 1);
    }
    if (ane_hashmap_get(&bpe->cache, piece, length, &found))
        return push_ids(out, bpe->cache_ids + (found >> 20), (size_t)(found & ((1 << 20) - 1)));
    if (length > bpe->work_capacity) {
        int32_t *work = realloc(bpe->work, length * sizeof *work);
        if (!work) return 0;
        bpe->work = work;
        bpe->work_capacity = length;
    }
    int32_t *symbols = bpe->work;
    size_t n = length;
    for (size_t i = 0; i < length; i++) symbols[i] = bpe->byte_token[(unsigned char)piece[i]];
    while (n > 1) {
        int64_t best_rank = INT64_MAX;
        size_t best = 0;
        int32_t merged = -1;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t key[2] = {symbols[i], symbols[i + 1]};
            int64_t value;
            if (ane_hashmap_get(&bpe->pairs, key, sizeof key, &value) && (value >> 32) < best_rank) {
                best_rank = value >> 32;
                best = i;
                merged = (int32_t)(value & 0xFFFFFFFF);
            }
        }
        if (merged < 0) break;
        symbols[best] = merged;
        memmove(symbols + best + 1, symbols + best + 2, (n - best - 2) * sizeof *symbols);
        n--;
    }
    remember(bpe, piece, length, symbols, n);
    return push_ids(out, symbols, n);
}

/* A piece of a valid UTF-8 run at split stage `stage`: the stage's pattern cuts it into its
 * matches and the text between them (both kept, as Hugging Face's "Isolated" splits and
 * llama.cpp's regex lists do); each part goes to the next stage, the last stage's parts are
 * merged into tokens. */
static ane_status split_and_encode(ane_bpe *bpe, int stage, const char *text, size_t length, id_list *out,
                                   ane_error *err) {
    if (stage == bpe->splits) {
        if (!encode_piece(bpe, text, length, out)) return ane_fail(err, ANE_ERR_NOMEM, "out of memory encoding");
        return ANE_OK;
    }
    size_t offset = 0;
    ane_status status = ANE_OK;
    while (offset < length && !status) {
        int rc = pcre2_match(bpe->pattern[stage], (PCRE2_SPTR)text, length, offset, PCRE2_NO_UTF_CHECK,
                             bpe->match[stage], NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return split_and_encode(bpe, stage + 1, text + offset, length - offset, out, err);
        if (rc < 0)
            return ane_fail(err, ANE_ERR_FORMAT, "split pattern %d failed at byte %zu (PCRE2 error %d)", stage + 1,
                            offset, rc);
        PCRE2_SIZE *span = pcre2_get_ovector_pointer(bpe->match[stage]);
        size_t start = span[0], end = span[1];
        if (end == start) { /* an empty match takes nothing: step over one character */
            end = start + 1;
            while (end < length && ((unsigned char)text[end] & 0xC0) == 0x80) end++;
        }
        if (start > offset) status = split_and_encode(bpe, stage + 1, text + offset, start - offset, out, err);
        if (!status) status = split_and_encode(bpe, stage + 1, text + start, end - start, out, err);
        offset = end;
    }
    return status;
}

static ane_status encode_valid_run(ane_bpe *bpe, const char *text, size_t length, id_list *out, ane_error *err) {
    return split_and_encode(bpe, 0, text, length, out, err);
}

ane_status ane_bpe_encode(ane_bpe *bpe, const char *text, size_t length, int32_t **ids, size_t *count, ane_error *err) {
    *ids = NULL;
    *count = 0;
    if (!ane_bpe_can_encode(bpe))
        return ane_fail(err, ANE_ERR_ARGUMENT, "this tokenizer can only decode (it has no merges or lacks byte tokens)");
    id_list out = {0};
    const unsigned char *bytes = (const unsigned char *)text;
    size_t run = 0, i = 0;
    ane_status status = ANE_OK;
    while (i < length && !status) {
        int codepoint;
        size_t step = utf8_sequence(bytes + i, length - i, &codepoint);
        if (step) {
            i += step;
            continue;
        }
        /* An invalid byte: encode the valid run before it, then the byte on its own. */
        if (i > run) status = encode_valid_run(bpe, text + run, i - run, &out, err);
        if (!status && !push_ids(&out, &bpe->byte_token[bytes[i]], 1)) status = ane_fail(err, ANE_ERR_NOMEM, "out of memory encoding");
        run = ++i;
    }
    if (!status && length > run) status = encode_valid_run(bpe, text + run, length - run, &out, err);
    if (status) {
        free(out.ids);
        return status;
    }
    *ids = out.ids;
    *count = out.count;
    return ANE_OK;
}

ane_status ane_bpe_decode(const ane_bpe *bpe, const int32_t *ids, size_t count, char **text, size_t *length,
                          ane_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (ids[i] < 0 || ids[i] >= bpe->size || !bpe->token_bytes[ids[i]])
            return ane_fail(err, ANE_ERR_RANGE, "id %d at position %zu is not in the vocabulary (0..%d)", ids[i], i + 1,
                            bpe->size - 1);
        total += bpe->token_lengths[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return ane_fail(err, ANE_ERR_NOMEM, "out of memory decoding %zu ids", count);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        memcpy(out + n, bpe->token_bytes[ids[i]], bpe->token_lengths[ids[i]]);
        n += bpe->token_lengths[ids[i]];
    }
    out[n] = '\0';
    *text = out;
    *length = n;
    return ANE_OK;
}
