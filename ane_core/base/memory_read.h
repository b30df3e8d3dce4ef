/* Reading memory as fast as the machine can: the benches' measure of the read bandwidth
 * that bounds a decode step (every weight streamed once per token). */
#ifndef ANE_BASE_MEMORY_READ_H
#define ANE_BASE_MEMORY_READ_H

#include <stddef.h>
#include <stdint.h>

/* The XOR of the little-endian 8-byte words of data [bytes] (the last word zero-padded),
 * read on every core with no other work per byte, so its time is the memory's read time. */
uint64_t ane_xor_words(const void *data, size_t bytes);

#endif
