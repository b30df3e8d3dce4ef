/* A fast 64-bit hash of byte strings: the runtime's program-cache keys and the checkpoints'
 * per-tensor checksums. It detects corruption (flipped bits, truncation), not tampering. */
#ifndef ANE_BASE_HASH_H
#define ANE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define ANE_HASH_SEED 0xCBF29CE484222325ull

/* Continues hash h over size bytes (eight at a step) and finishes with an avalanche. */
uint64_t ane_hash64(uint64_t h, const void *data, size_t size);

#endif
