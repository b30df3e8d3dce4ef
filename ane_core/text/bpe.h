/* Byte-level BPE (GPT-2's tokenizer): text is pre-split by a regex (PCRE2, Unicode
 * properties), each piece's UTF-8 bytes start as single-byte tokens and are merged by rank.
 *
 * Vocabularies come in two forms: GPT-2's vocab.json/merges.txt, whose tokens are written
 * in the "byte-level unicode" alphabet (each byte shown as a printable code point), or
 * llm.c's gpt2_tokenizer.bin, whose tokens are raw bytes (decode only: it has no merges).
 * Internally every token is its raw bytes, so decode(encode(text)) returns the text's bytes
 * exactly, invalid UTF-8 included (invalid bytes become their own single-byte pieces). */
#ifndef ANE_TEXT_BPE_H
#define ANE_TEXT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"

typedef struct ane_bpe ane_bpe;

/* GPT-2's pre-split pattern, and how many split stages a tokenizer may chain. */
enum { ANE_BPE_MAX_SPLITS = 4 };
#define ANE_GPT2_SPLIT_PATTERN "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

ane_status ane_bpe_new(ane_bpe **out, ane_error *err);
void ane_bpe_free(ane_bpe *bpe);

/* Sizes the tables for a whole vocabulary at once (optional: they grow as needed). */
ane_status ane_bpe_reserve(ane_bpe *bpe, size_t tokens, size_t merges, ane_error *err);
/* A token in the byte-level unicode alphabet (vocab.json), or as raw bytes (llm.c). */
ane_status ane_bpe_add_token(ane_bpe *bpe, const char *text, size_t length, int32_t id, ane_error *err);
ane_status ane_bpe_add_token_bytes(ane_bpe *bpe, const char *bytes, size_t length, int32_t id, ane_error *err);
/* One line of merges.txt, "left right" in the unicode alphabet, with its rank (0 = first). */
ane_status ane_bpe_add_merge(ane_bpe *bpe, const char *left, size_t left_length, const char *right,
                             size_t right_length, int32_t rank, ane_error *err);
/* A merge written as one line, "left right" (one space between two runs of non-space). */
ane_status ane_bpe_add_merge_line(ane_bpe *bpe, const char *line, size_t length, int32_t rank, ane_error *err);
/* A whole merges.txt: a line per merge, ranked in order; empty lines and "#version" lines
 * are skipped, a trailing CR is dropped. *count is the number of merges; errors name the line. */
ane_status ane_bpe_add_merges_text(ane_bpe *bpe, const char *text, size_t length, int32_t *count, ane_error *err);
/* Compiles the split patterns once all tokens and merges are in: `count` stages applied in
 * order, each cutting every piece of the one before into its matches and the text between
 * them (a NULL pattern, or count 0, is GPT-2's). */
ane_status ane_bpe_finish(ane_bpe *bpe, const char *const *patterns, int count, ane_error *err);

int32_t ane_bpe_vocab_size(const ane_bpe *bpe);  /* highest id + 1 */
int ane_bpe_can_encode(const ane_bpe *bpe);       /* has merges and every single byte */
int ane_bpe_first_missing_byte(const ane_bpe *bpe); /* the first byte with no token of its own, or -1 */

/* *ids is malloc'd. */
ane_status ane_bpe_encode(ane_bpe *bpe, const char *text, size_t length, int32_t **ids, size_t *count, ane_error *err);
/* *text is malloc'd (NUL-terminated; *length excludes the NUL). */
ane_status ane_bpe_decode(const ane_bpe *bpe, const int32_t *ids, size_t count, char **text, size_t *length,
                          ane_error *err);

#endif
