/* Little-endian integers in byte buffers (file formats: MILBlob, llama2.c's tokenizer.bin),
 * read and written a byte at a time, so the host's own byte order and alignment do not matter. */
#ifndef ANE_BASE_BYTES_H
#define ANE_BASE_BYTES_H

#include <stdint.h>

static inline void ane_put_u32_le(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void ane_put_u64_le(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t ane_get_u32_le(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t ane_get_u64_le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

#endif
