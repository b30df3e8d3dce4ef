/* A small pool of helper threads for memory-bound loops (AdamW, fp16 matrix-vector
 * products, large elementwise kernels). Helpers sleep between calls: a spinning pool would
 * take the CPU from the BLAS threads on small machines.
 *
 * ane_parallel_for(n, grain, body, context) runs body(context, first, last) over disjoint
 * ranges covering 0..n-1 (a few chunks per thread, claimed by whichever thread is free,
 * the caller included) and returns when all are done. Loops shorter than `grain` elements
 * per thread, and calls made from inside a body, run on the caller alone. */
#ifndef ANE_BASE_PARALLEL_H
#define ANE_BASE_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

typedef void (*ane_range_body)(void *context, int64_t first, int64_t last);

void ane_parallel_for(int64_t n, int64_t grain, ane_range_body body, void *context);

/* The same loop cut into chunks_per_thread chunks a thread (ane_parallel_for: 4): fewer where a
 * chunk's start costs (the row products of decoding start new streams of weights per chunk). */
void ane_parallel_for_chunks(int64_t n, int64_t grain, int chunks_per_thread, ane_range_body body, void *context);

/* Memory a loop will read soon (the next product's weights): helpers waiting for a loop read
 * these spans, in order, into their caches, the caller's serial work meanwhile. Replaces what
 * was posted before (count 0: nothing); on return no helper reads the replaced spans any more,
 * so their memory may be freed or written. A span's bytes must stay valid until the next call. */
typedef struct ane_span {
    const void *start;
    size_t size;
} ane_span;

void ane_parallel_warm(const ane_span *spans, int count);

#endif
