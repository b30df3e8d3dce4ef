/* SentencePiece BPE (the Llama-2 tokenizer), as llama2.c and sentencepiece encode: spaces
 * become U+2581 with a dummy prefix, the text starts as one piece per character (unknown
 * characters fall back to <0xXX> byte pieces), and the adjacent pair whose concatenation is
 * the highest-scoring vocabulary piece merges first (the leftmost on ties), until none does.
 * Pieces come from the Lua side (tokenizer.model or llama2.c's tokenizer.bin). */
#ifndef ANE_TEXT_SENTENCEPIECE_H
#define ANE_TEXT_SENTENCEPIECE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

typedef struct ane_spm ane_spm;

ane_status ane_spm_new(ane_spm **out, ane_error *err);
void ane_spm_free(ane_spm *spm);
/* A vocabulary piece (UTF-8, spaces written as U+2581) with its score; byte pieces are
 * "<0xXX>". Ids are dense from 0. */
ane_status ane_spm_add_piece(ane_spm *spm, const char *piece, size_t length, float score, int32_t id, ane_error *err);
int32_t ane_spm_vocab_size(const ane_spm *spm);
/* Piece `id` (0 <= id < vocab size) as stored (spaces as U+2581, bytes as <0xXX>), its length
 * and score: what a GGUF writer copies into tokenizer.ggml.tokens / scores. */
const char *ane_spm_piece(const ane_spm *spm, int32_t id, size_t *length, float *score);
/* Adds the pieces of llama2.c's tokenizer.bin (`size` bytes): a u32 max_token_length, then per
 * piece an f32 score, an i32 length and the piece's bytes, little-endian, with spaces written
 * as plain spaces (turned back into U+2581 here). *count = the pieces added. A file shorter
 * than its header, a record cut short or a length past the end fails, naming the piece and
 * its byte offset. */
ane_status ane_spm_add_llama2c_pieces(ane_spm *spm, const unsigned char *bytes, size_t size, int32_t *count,
                                      ane_error *err);

/* Ids 0-2 are <unk>, <s> and </s> in Llama's vocabulary: encoding maps a character with
 * neither a piece nor a byte piece to 0 and bos prepends 1. */
#define ANE_SPM_CONTROL_PIECES 3

/* Fails unless the vocabulary can encode: it holds the control pieces 0-2 (a loader calls
 * this before it hands out a tokenizer; encode checks it again). */
ane_status ane_spm_check_encodes(const ane_spm *spm, ane_error *err);

/* *ids is malloc'd; bos prepends id 1. */
ane_status ane_spm_encode(const ane_spm *spm, const char *text, size_t length, int bos, int32_t **ids, size_t *count,
                          ane_error *err);
/* The text back: U+2581 -> space, byte pieces -> their byte, the dummy prefix space of the
 * first piece dropped, the control pieces 0-2 (<unk>, <s>, </s> in Llama's vocabulary)
 * skipped. *text is malloc'd. */
ane_status ane_spm_decode(const ane_spm *spm, const int32_t *ids, size_t count, char **text, size_t *length,
                          ane_error *err);

#endif
