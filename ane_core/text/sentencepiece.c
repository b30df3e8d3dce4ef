/* SentencePiece BPE (see sentencepiece.h). */
#include "sentencepiece.h"

#include <stdlib.h>
#include <string.h>

#include "../base/bytes.h"
#include "../base/hashmap.h"

struct ane_spm {
    ane_hashmap ids;       /* piece bytes -> id */
    char **pieces;         /* [size] */
    uint32_t *lengths;     /* [size] */
    float *scores;         /* [size] */
    int32_t size, capacity;
    uint32_t max_length;     /* longest piece in bytes */
    int32_t byte_piece[256]; /* id of <0xXX>, -1 when absent */
};

static const char SPACE[] = "\xE2\x96\x81"; /* U+2581, shown for spaces */

ane_status ane_spm_new(ane_spm **out, ane_error *err) {
    ane_spm *spm = calloc(1, sizeof *spm);
    if (!spm) return ane_fail(err, ANE_ERR_NOMEM, "out of memory creating a tokenizer");
    for (int i = 0; i < 256; i++) spm->byte_piece[i] = -1;
    *out = spm;
    return ANE_OK;
}

void ane_spm_free(ane_spm *spm) {
    if (!spm) return;
    for (int32_t i = 0; i < spm->size; i++) free(spm->pieces[i]);
    free(spm->pieces);
    free(spm->lengths);
    free(spm->scores);
    ane_hashmap_free(&spm->ids);
    free(spm);
}

int32_t ane_spm_vocab_size(const ane_spm *spm) { return spm->size; }

const char *ane_spm_piece(const ane_spm *spm, int32_t id, size_t *length, float *score) {
    *length = spm->lengths[id];
    *score = spm->scores[id];
    return spm->pieces[id];
}

ane_status ane_spm_check_encodes(const ane_spm *spm, ane_error *err) {
    if (spm->size < ANE_SPM_CONTROL_PIECES)
        return ane_fail(err, ANE_ERR_FORMAT,
                        "has %d pieces; a SentencePiece vocabulary starts with <unk>, <s> and </s> (ids 0-2), which "
                        "encoding uses for unknown characters and the start of text",
                        spm->size);
    return ANE_OK;
}

ane_status ane_spm_add_llama2c_pieces(ane_spm *spm, const unsigned char *bytes, size_t size, int32_t *count,
                                      ane_error *err) {
    if (size < 4) return ane_fail(err, ANE_ERR_FORMAT, "too short for the 4-byte header");
    char *piece = NULL; /* [capacity]: the piece with its spaces as U+2581 (3 bytes each) */
    size_t capacity = 0;
    ane_status status = ANE_OK;
    int32_t id = 0;
    for (size_t at = 4; at < size; id++) {
        if (size - at < 8) {
            status = ane_fail(err, ANE_ERR_FORMAT, "token %d at offset %zu is truncated", id, at);
            break;
        }
        uint32_t score_bits = ane_get_u32_le(bytes + at);
        int32_t length = (int32_t)ane_get_u32_le(bytes + at + 4);
        if (length < 0 || (size_t)length > size - at - 8) {
            status = ane_fail(err, ANE_ERR_FORMAT, "token %d at offset %zu has length %d past the end of the file", id, at,
                              length);
            break;
        }
        if (capacity < 3 * (size_t)length + 1) {
            capacity = 3 * (size_t)length + 1;
            char *grown = realloc(piece, capacity);
            if (!grown) {
                status = ane_fail(err, ANE_ERR_NOMEM, "out of memory reading token %d", id);
                break;
            }
            piece = grown;
        }
        size_t written = 0;
        for (const unsigned char *c = bytes + at + 8, *end = c + length; c < end; c++) {
            if (*c == ' ') {
                memcpy(piece + written, SPACE, 3);
                written += 3;
            } else {
                piece[written++] = (char)*c;
            }
        }
        float score;
        memcpy(&score, &score_bits, sizeof score);
        status = ane_spm_add_piece(spm, piece, written, score, id, err);
        if (status) break;
        at += 8 + (size_t)length;
    }
    free(piece);
    *count = id;
    return status;
}

static int hex_value(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

ane_status ane_spm_add_piece(ane_spm *spm, const char *piece, size_t length, float score, int32_t id, ane_error *err) {
    if (id != spm->size) return ane_fail(err, ANE_ERR_FORMAT, "piece %d arrives out of order (expected id %d)", id, spm->size);
    if (spm->size == spm->capacity) {
        int32_t capacity = spm->capacity ? spm->capacity * 2 : 1024;
        char **pieces = realloc(spm->pieces, (size_t)capacity * sizeof *pieces);
        if (pieces) spm->pieces = pieces;
        uint32_t *lengths = realloc(spm->lengths, (size_t)capacity * sizeof *lengths);
        if (lengths) spm->lengths = lengths;
        float *scores = realloc(spm->scores, (size_t)capacity * sizeof *scores);
        if (scores) spm->scores = scores;
        if (!pieces || !lengths || !scores) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding piece %d", id);
        spm->capacity = capacity;
    }
    char *copy = malloc(length + 1);
    if (!copy) return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding piece %d", id);
    memcpy(copy, piece, length);
    copy[length] = '\0';
    int64_t existing;
    /* The first occurrence of a piece keeps the lookup (a few vocabularies repeat pieces). */
    if (!ane_hashmap_get(&spm->ids, piece, length, &existing) && !ane_hashmap_put(&spm->ids, piece, length, id)) {
        free(copy);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory adding piece %d", id);
    }
    spm->pieces[id] = copy;
    spm->lengths[id] = (uint32_t)length;
    spm->scores[id] = score;
    if (length > spm->max_length) spm->max_length = (uint32_t)length;
    spm->size++;
    if (length == 6 && memcmp(piece, "<0x", 3) == 0 && piece[5] == '>' && hex_value(piece[3]) >= 0 && hex_value(piece[4]) >= 0)
        spm->byte_piece[hex_value(piece[3]) * 16 + hex_value(piece[4])] = id;
    return ANE_OK;
}

static size_t utf8_length(unsigned char c) {
    return c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
}

ane_status ane_spm_encode(const ane_spm *spm, const char *text, size_t length, int bos, int32_t **ids, size_t *count,
                          ane_error *err) {
    ane_status usable = ane_spm_check_encodes(spm, err);
    if (usable) return usable;
    /* The normalized text: dummy prefix, spaces as U+2581. */
    size_t spaces = 0;
    for (size_t i = 0; i < length; i++) spaces += text[i] == ' ';
    size_t normalized_length = length ? length + 2 * spaces + 3 : 0;
    char *normalized = malloc(normalized_length + 1);
    int32_t *symbols = malloc((normalized_length + 2) * sizeof *symbols);
    /* Two adjacent pieces, each at most the longest piece: a byte piece like "<0xE2>" spells
     * one byte of text in six, so the text's length is no bound. */
    char *buffer = malloc(2 * (size_t)spm->max_length + 1);
    if (!normalized || !symbols || !buffer) {
        free(normalized), free(symbols), free(buffer);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory encoding %zu bytes", length);
    }
    size_t n = 0;
    if (length) {
        memcpy(normalized, SPACE, 3);
        n = 3;
        for (size_t i = 0; i < length; i++) {
            if (text[i] == ' ') memcpy(normalized + n, SPACE, 3), n += 3;
            else normalized[n++] = text[i];
        }
    }
    /* One symbol per character, or per byte where the character is not a piece. */
    size_t count_symbols = 0;
    if (bos) symbols[count_symbols++] = 1;
    size_t first = count_symbols;
    for (size_t i = 0; i < n;) {
        size_t step = utf8_length((unsigned char)normalized[i]);
        if (i + step > n) step = 1;
        int64_t id;
        if (ane_hashmap_get(&spm->ids, normalized + i, step, &id)) {
            symbols[count_symbols++] = (int32_t)id;
        } else {
            for (size_t b = 0; b < step; b++) {
                int32_t byte_id = spm->byte_piece[(unsigned char)normalized[i + b]];
                symbols[count_symbols++] = byte_id >= 0 ? byte_id : 0; /* 0 = <unk> */
            }
        }
        i += step;
    }
    /* Merge the best-scoring adjacent pair until no pair forms a piece. */
    for (;;) {
        float best_score = -1e30f;
        int32_t best_id = -1;
        size_t best_at = 0;
        for (size_t i = first; i + 1 < count_symbols; i++) {
            uint32_t la = spm->lengths[symbols[i]], lb = spm->lengths[symbols[i + 1]];
            memcpy(buffer, spm->pieces[symbols[i]], la);
            memcpy(buffer + la, spm->pieces[symbols[i + 1]], lb);
            int64_t id;
            if (ane_hashmap_get(&spm->ids, buffer, la + lb, &id) && spm->scores[id] > best_score) {
                best_score = spm->scores[id];
                best_id = (int32_t)id;
                best_at = i;
            }
        }
        if (best_id < 0) break;
        symbols[best_at] = best_id;
        memmove(symbols + best_at + 1, symbols + best_at + 2, (count_symbols - best_at - 2) * sizeof *symbols);
        count_symbols--;
    }
    free(normalized);
    free(buffer);
    *ids = symbols;
    *count = count_symbols;
    return ANE_OK;
}

ane_status ane_spm_decode(const ane_spm *spm, const int32_t *ids, size_t count, char **text, size_t *length,
                          ane_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) {
        if (ids[i] < 0 || ids[i] >= spm->size)
            return ane_fail(err, ANE_ERR_RANGE, "id %d at position %zu is not in the vocabulary (0..%d)", ids[i], i + 1,
                            spm->size - 1);
        total += spm->lengths[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return ane_fail(err, ANE_ERR_NOMEM, "out of memory decoding");
    size_t n = 0;
    int at_start = 1;
    for (size_t i = 0; i < count; i++) {
        const char *piece = spm->pieces[ids[i]];
        uint32_t piece_length = spm->lengths[ids[i]];
        if (ids[i] <= 2) continue; /* <unk>, <s>, </s> (llama2.c writes them as "\n<s>\n") */
        int byte = -1;
        if (piece_length == 6 && memcmp(piece, "<0x", 3) == 0 && piece[5] == '>')
            byte = hex_value(piece[3]) * 16 + hex_value(piece[4]);
        if (byte >= 0) {
            out[n++] = (char)byte;
            at_start = 0;
            continue;
        }
        for (uint32_t j = 0; j < piece_length;) {
            if (j + 3 <= piece_length && memcmp(piece + j, SPACE, 3) == 0) {
                if (!at_start) out[n++] = ' ';
                j += 3;
            } else {
                out[n++] = piece[j++];
            }
            at_start = 0;
        }
    }
    out[n] = '\0';
    *text = out;
    *length = n;
    return ANE_OK;
}
