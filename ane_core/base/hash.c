/* ane_hash64 and ane_hash_stream (see hash.h): word-at-a-time multiply-xorshift, then a final
 * avalanche; the stream runs four such chains side by side. */
#include "hash.h"

#include <string.h>

/* One 8-byte word into a chain: multiply, then fold the high half down. */
static uint64_t mix(uint64_t h, uint64_t word) {
    h = (h ^ word) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

uint64_t ane_hash64(uint64_t h, const void *data, size_t size) {
    const unsigned char *p = data;
    size_t i = 0;
    for (; i + 8 <= size; i += 8) {
        uint64_t word;
        memcpy(&word, p + i, 8);
        h = mix(h, word);
    }
    for (; i < size; i++) h = (h ^ p[i]) * 1099511628211ull;
    h ^= (uint64_t)size;
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    return h ^ (h >> 33);
}

enum { STREAM_STEP = 32 };

void ane_hash_stream_init(ane_hash_stream *s, uint64_t seed) {
    memset(s, 0, sizeof *s);
    for (int lane = 0; lane < 4; lane++) s->lanes[lane] = seed ^ (0x2545F4914F6CDD1Dull * (uint64_t)(lane + 1));
}

/* One 32-byte step: an 8-byte word into each lane. */
static void stream_step(ane_hash_stream *s, const unsigned char *p) {
    for (int lane = 0; lane < 4; lane++) {
        uint64_t word;
        memcpy(&word, p + 8 * lane, 8);
        s->lanes[lane] = mix(s->lanes[lane], word);
    }
}

void ane_hash_stream_add(ane_hash_stream *s, const void *data, size_t size) {
    const unsigned char *p = data;
    s->length += size;
    if (s->npending) { /* complete the step a previous part began */
        size_t take = STREAM_STEP - s->npending < size ? STREAM_STEP - s->npending : size;
        memcpy(s->pending + s->npending, p, take);
        s->npending += take, p += take, size -= take;
        if (s->npending < STREAM_STEP) return;
        stream_step(s, s->pending);
        s->npending = 0;
    }
    for (; size >= STREAM_STEP; p += STREAM_STEP, size -= STREAM_STEP) stream_step(s, p);
    memcpy(s->pending, p, size);
    s->npending = size;
}

uint64_t ane_hash_stream_end(const ane_hash_stream *s) {
    uint64_t h = s->lanes[0];
    for (int lane = 1; lane < 4; lane++) h = mix(h, s->lanes[lane]);
    return ane_hash64(h ^ s->length, s->pending, s->npending); /* the tail, the length, the avalanche */
}
