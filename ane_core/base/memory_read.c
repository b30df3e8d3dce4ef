/* ane_xor_words (see memory_read.h): blocks of the buffer shared over the helper threads,
 * each folded with a few independent vector accumulators (no dependence chain limits the
 * loads), the blocks' folds combined with an atomic XOR. */
#include "memory_read.h"

#include <stdatomic.h>
#include <string.h>

#include "parallel.h"

enum { BLOCK_BYTES = 1 << 16, VECTOR_BYTES = 32, ACCUMULATORS = 4 };

typedef uint64_t words4 __attribute__((vector_size(VECTOR_BYTES)));

typedef struct xor_job {
    const unsigned char *data;
    size_t bytes;
    _Atomic uint64_t fold;
} xor_job;

static uint64_t little_endian_word(const unsigned char *bytes, size_t count) {
    uint64_t word = 0;
    for (size_t i = 0; i < count; i++) word |= (uint64_t)bytes[i] << (8 * i);
    return word;
}

static uint64_t xor_range(const unsigned char *data, size_t bytes) {
    words4 sums[ACCUMULATORS] = {{0}};
    size_t i = 0, step = VECTOR_BYTES * ACCUMULATORS;
    for (; i + step <= bytes; i += step)
        for (int a = 0; a < ACCUMULATORS; a++) {
            words4 v;
            memcpy(&v, data + i + (size_t)a * VECTOR_BYTES, sizeof v); /* one unaligned vector load */
            sums[a] ^= v;
        }
    uint64_t fold = 0;
    for (int a = 0; a < ACCUMULATORS; a++)
        for (int w = 0; w < VECTOR_BYTES / 8; w++) fold ^= sums[a][w];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    fold = __builtin_bswap64(fold); /* the vector loads read native words */
#endif
    for (; i < bytes; i += 8) fold ^= little_endian_word(data + i, bytes - i < 8 ? bytes - i : 8);
    return fold;
}

static void xor_blocks(void *context, int64_t first, int64_t last) {
    xor_job *job = context;
    size_t start = (size_t)first * BLOCK_BYTES, end = (size_t)last * BLOCK_BYTES;
    if (end > job->bytes) end = job->bytes;
    atomic_fetch_xor_explicit(&job->fold, xor_range(job->data + start, end - start), memory_order_relaxed);
}

uint64_t ane_xor_words(const void *data, size_t bytes) {
    xor_job job = {.data = data, .bytes = bytes};
    atomic_init(&job.fold, 0);
    ane_parallel_for((int64_t)((bytes + BLOCK_BYTES - 1) / BLOCK_BYTES), 4, xor_blocks, &job);
    return atomic_load(&job.fold);
}
