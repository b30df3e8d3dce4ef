/* base/hash.c: what the checksums rely on. Every single-bit flip and every truncation of a
 * message changes its hash; the hash depends on the seed and on every byte position (also
 * the tail bytes past the last full 8-byte step); and a flipped input bit flips about half
 * of the output bits (avalanche: the mean over 64 x 512 flips lies within 32 +- 1, where a
 * fair coin per bit has a standard error of 0.04). The stream hash (program-cache keys) has
 * the same properties, and gives one value however its input is cut into parts. */
#include <stdint.h>
#include <string.h>

#include "ane_core/base/hash.h"
#include "check.h"

static int popcount64(uint64_t x) {
    int n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

int main(void) {
    unsigned char message[77];
    for (size_t i = 0; i < sizeof message; i++) message[i] = (unsigned char)(i * 31 + 5);
    const uint64_t seed = 0x1234;
    uint64_t base = ane_hash64(seed, message, sizeof message);
    CHECK(base == ane_hash64(seed, message, sizeof message), "the hash is deterministic");
    CHECK(base != ane_hash64(seed + 1, message, sizeof message), "the seed changes the hash");

    int flips_detected = 0;
    for (size_t bit = 0; bit < 8 * sizeof message; bit++) {
        message[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        flips_detected += ane_hash64(seed, message, sizeof message) != base;
        message[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    CHECK(flips_detected == 8 * (int)sizeof message, "%d of %d single-bit flips change the hash", flips_detected,
          8 * (int)sizeof message);

    int truncations_detected = 0;
    for (size_t n = 0; n < sizeof message; n++) truncations_detected += ane_hash64(seed, message, n) != base;
    CHECK(truncations_detected == (int)sizeof message, "%d of %zu truncations change the hash", truncations_detected,
          sizeof message);

    /* zero bytes appended to a message: a length-blind hash would not see them */
    unsigned char zeros[16] = { 0 };
    int zero_lengths_distinct = 1;
    for (size_t n = 1; n < sizeof zeros; n++)
        zero_lengths_distinct &= ane_hash64(seed, zeros, n) != ane_hash64(seed, zeros, n - 1);
    CHECK(zero_lengths_distinct, "runs of zero bytes of different lengths hash differently");

    long long flipped_bits = 0, trials = 0;
    unsigned char block[64];
    uint32_t state = 99;
    for (int round = 0; round < 64; round++) {
        for (size_t i = 0; i < sizeof block; i++) {
            state = state * 1664525u + 1013904223u;
            block[i] = (unsigned char)(state >> 24);
        }
        uint64_t h = ane_hash64(0, block, sizeof block);
        for (int bit = 0; bit < 512; bit++) {
            block[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            flipped_bits += popcount64(h ^ ane_hash64(0, block, sizeof block));
            block[bit / 8] ^= (unsigned char)(1u << (bit % 8));
            trials++;
        }
    }
    double mean = (double)flipped_bits / (double)trials;
    CHECK(mean > 31.0 && mean < 33.0, "a flipped input bit flips %.2f output bits on average, expected ~32", mean);

    /* ane_hash_stream over a message longer than a few of its 32-byte steps */
    unsigned char text[203];
    for (size_t i = 0; i < sizeof text; i++) text[i] = (unsigned char)(i * 151 + 7);
    ane_hash_stream s;
    ane_hash_stream_init(&s, seed);
    ane_hash_stream_add(&s, text, sizeof text);
    uint64_t whole = ane_hash_stream_end(&s);
    int cuts_agree = 1;
    for (size_t i = 0; i <= sizeof text; i++)
        for (size_t j = i; j <= sizeof text; j += 5) {
            ane_hash_stream_init(&s, seed);
            ane_hash_stream_add(&s, text, i);
            ane_hash_stream_add(&s, text + i, j - i);
            ane_hash_stream_add(&s, text + j, sizeof text - j);
            cuts_agree &= ane_hash_stream_end(&s) == whole;
        }
    CHECK(cuts_agree, "the stream hash is the same however its input is cut in three");
    ane_hash_stream_init(&s, seed + 1);
    ane_hash_stream_add(&s, text, sizeof text);
    CHECK(ane_hash_stream_end(&s) != whole, "the seed changes the stream hash");
    int stream_flips = 0, stream_truncations = 0;
    long long stream_bits = 0;
    for (size_t bit = 0; bit < 8 * sizeof text; bit++) {
        text[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        ane_hash_stream_init(&s, seed);
        ane_hash_stream_add(&s, text, sizeof text);
        uint64_t h = ane_hash_stream_end(&s);
        stream_flips += h != whole;
        stream_bits += popcount64(h ^ whole);
        text[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    for (size_t n = 0; n < sizeof text; n++) {
        ane_hash_stream_init(&s, seed);
        ane_hash_stream_add(&s, text, n);
        stream_truncations += ane_hash_stream_end(&s) != whole;
    }
    CHECK(stream_flips == 8 * (int)sizeof text, "%d of %d single-bit flips change the stream hash", stream_flips,
          8 * (int)sizeof text);
    CHECK(stream_truncations == (int)sizeof text, "%d of %zu truncations change the stream hash", stream_truncations,
          sizeof text);
    double stream_mean = (double)stream_bits / (8.0 * sizeof text); /* 1,624 flips: standard error 0.1 */
    CHECK(stream_mean > 31.0 && stream_mean < 33.0, "a flipped bit flips %.2f of the stream hash's bits, expected ~32",
          stream_mean);
    int stream_zero_lengths = 1;
    for (size_t n = 1; n < sizeof zeros; n++) {
        ane_hash_stream a, b;
        ane_hash_stream_init(&a, seed);
        ane_hash_stream_add(&a, zeros, n);
        ane_hash_stream_init(&b, seed);
        ane_hash_stream_add(&b, zeros, n - 1);
        stream_zero_lengths &= ane_hash_stream_end(&a) != ane_hash_stream_end(&b);
    }
    CHECK(stream_zero_lengths, "runs of zero bytes of different lengths stream-hash differently");
    return check_summary("hash");
}
