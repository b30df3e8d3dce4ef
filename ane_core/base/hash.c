/* ane_hash64 (see hash.h): word-at-a-time multiply-xorshift, then a final avalanche. */
#include "hash.h"

#include <string.h>

uint64_t ane_hash64(uint64_t h, const void *data, size_t size) {
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        h = (h ^ word) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 32;
    }
    for (; i < size; i++) h = (h ^ p[i]) * 1099511628211ull;
    h ^= (uint64_t)size;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 33);
}
