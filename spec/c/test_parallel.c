/* base/parallel.c: the ranges of ane_parallel_for (and of ane_parallel_for_chunks, for several
 * chunk counts) cover 0..n-1 exactly once for many n and grains (each index counted
 * atomically), also for n = 0 and for a call made inside a body. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "ane_core/base/parallel.h"
#include "check.h"

typedef struct {
    atomic_int *visits;
    int64_t n;
    atomic_int bad_ranges;
    int nested;
} job;

static void count(void *context, int64_t first, int64_t last) {
    job *j = context;
    if (first < 0 || last > j->n || first > last) atomic_fetch_add(&j->bad_ranges, 1);
    for (int64_t i = first; i < last && i < j->n; i++) atomic_fetch_add(&j->visits[i], 1);
}

static void nested_body(void *context, int64_t first, int64_t last) {
    job *j = context;
    for (int64_t i = first; i < last; i++) {
        job inner = { .visits = j->visits + i * 10, .n = 10 };
        atomic_init(&inner.bad_ranges, 0);
        ane_parallel_for(10, 1, count, &inner); /* runs on the caller alone */
        atomic_fetch_add(&j->bad_ranges, atomic_load(&inner.bad_ranges));
    }
}

int main(void) {
    const int64_t sizes[] = { 0, 1, 2, 3, 17, 1000, 4097, 100003 };
    const int64_t grains[] = { 1, 16, 1024, 1 << 20 };
    const int chunk_counts[] = { -1 /* ane_parallel_for */, 0, 1, 2, 7 };
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        for (size_t g = 0; g < sizeof grains / sizeof *grains; g++) {
            for (size_t c = 0; c < sizeof chunk_counts / sizeof *chunk_counts; c++) {
                int64_t n = sizes[s];
                job j = { .visits = calloc((size_t)n + 1, sizeof(atomic_int)), .n = n };
                atomic_init(&j.bad_ranges, 0);
                if (chunk_counts[c] < 0) ane_parallel_for(n, grains[g], count, &j);
                else ane_parallel_for_chunks(n, grains[g], chunk_counts[c], count, &j);
                int64_t wrong = 0;
                for (int64_t i = 0; i < n; i++) wrong += atomic_load(&j.visits[i]) != 1;
                CHECK(wrong == 0 && atomic_load(&j.bad_ranges) == 0,
                      "n %lld grain %lld chunks %d: %lld indices not visited once", (long long)n, (long long)grains[g],
                      chunk_counts[c], (long long)wrong);
                free(j.visits);
            }
        }
    }
    job outer = { .visits = calloc(64 * 10, sizeof(atomic_int)), .n = 64 };
    atomic_init(&outer.bad_ranges, 0);
    ane_parallel_for(64, 1, nested_body, &outer);
    int64_t wrong = 0;
    for (int64_t i = 0; i < 640; i++) wrong += atomic_load(&outer.visits[i]) != 1;
    CHECK(wrong == 0 && atomic_load(&outer.bad_ranges) == 0, "nested calls: %lld indices not visited once", (long long)wrong);
    free(outer.visits);
    return check_summary("parallel");
}
