/* Fast 64-bit hashes of byte strings: the checkpoints' per-tensor checksums (ane_hash64) and
 * the runtime's program-cache keys (ane_hash_stream). They detect corruption (flipped bits,
 * truncation), not tampering. */
#ifndef ANE_BASE_HASH_H
#define ANE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define ANE_HASH_SEED 0xCBF29CE484222325ull

/* Continues hash h over size bytes (eight at a step) and finishes with an avalanche. */
uint64_t ane_hash64(uint64_t h, const void *data, size_t size);

/* A hash of one byte string given in any number of parts (the same value however it is cut),
 * four independent lanes of 8-byte words at a time: ~4x ane_hash64's speed on long inputs.
 * The runtime's program-cache keys (MIL text, weight files); ane_hash64 stays the
 * checkpoints' checksum. */
typedef struct ane_hash_stream {
    uint64_t lanes[4];
    uint8_t pending[32]; /* the bytes of a 32-byte step not yet complete */
    size_t npending;
    uint64_t length;
} ane_hash_stream;

void ane_hash_stream_init(ane_hash_stream *s, uint64_t seed);
void ane_hash_stream_add(ane_hash_stream *s, const void *data, size_t size);
uint64_t ane_hash_stream_end(const ane_hash_stream *s);

#endif
