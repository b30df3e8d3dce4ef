/* Unicode normalization of text before tokenizing (Hugging Face tokenizers' "NFC"
 * normalizer), through utf8proc. Bytes that are not valid UTF-8 pass through unchanged, so
 * the byte-level tokenizers after it still see every byte. */
#ifndef ANE_TEXT_NORMALIZE_H
#define ANE_TEXT_NORMALIZE_H

#include <stddef.h>

#include "../base/status.h"

/* *out (malloc'd, NUL-terminated, *out_length bytes) = text in NFC. */
ane_status ane_text_nfc(const char *text, size_t length, char **out, size_t *out_length, ane_error *err);

#endif
