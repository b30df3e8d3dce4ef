/* base/parallel.c: the ranges of ane_parallel_for (and of ane_parallel_for_chunks, for several
 * chunk counts) cover 0..n-1 exactly once for many n and grains (each index counted
 * atomically), also for n = 0 and for a call made inside a body. ane_parallel_warm: helpers
 * waiting for a loop read the posted spans (a child process whose span is unreadable dies of
 * it), and no helper reads a span after the call that replaced it returns (spans made
 * unreadable then, while helpers keep polling: a read would kill this process). */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

static void nothing(void *context, int64_t first, int64_t last) { (void)context, (void)first, (void)last; }

/* Has the helpers poll: a loop over them, then `microseconds` of waiting. */
static void helpers_poll(int microseconds) {
    ane_parallel_for(64, 1, nothing, NULL);
    struct timespec wait = {0, microseconds * 1000L};
    nanosleep(&wait, NULL);
}

enum { SPAN_BYTES = 1 << 16, READ_IT = 41, SURVIVED = 42, NO_SPAN = 43 };

static void on_fault(int signal) {
    (void)signal;
    _exit(READ_IT);
}

/* In a child: an unreadable span posted, then helpers polling. A helper's read of it faults,
 * and the child exits READ_IT; SURVIVED means no helper read the span. */
static void warm_reads_the_span(void) {
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
        printf("parallel: one core, no helpers: the warming checks are skipped\n");
        return;
    }
    pid_t child = fork();
    if (child == 0) {
        struct sigaction fault = {.sa_handler = on_fault};
        sigaction(SIGSEGV, &fault, NULL);
        sigaction(SIGBUS, &fault, NULL);
        void *span = mmap(NULL, SPAN_BYTES, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (span == MAP_FAILED) _exit(NO_SPAN);
        ane_parallel_warm(&(ane_span){span, SPAN_BYTES}, 1);
        for (int i = 0; i < 200; i++) helpers_poll(100);
        _exit(SURVIVED);
    }
    int status = 0;
    CHECK(child > 0 && waitpid(child, &status, 0) == child, "fork / waitpid failed");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == READ_IT, "the helpers did not read the posted span (child status %d)",
          status);
}

/* Spans replaced (by others, or by nothing) and made unreadable at once, helpers polling: a
 * helper's read of one would end the process. */
static void replaced_spans_are_left_alone(void) {
    for (int round = 0; round < 1000; round++) {
        char *spans[2];
        for (int i = 0; i < 2; i++) {
            spans[i] = mmap(NULL, SPAN_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            CHECK(spans[i] != MAP_FAILED, "mmap failed");
            if (spans[i] == MAP_FAILED) return;
        }
        ane_parallel_warm(&(ane_span){spans[0], SPAN_BYTES}, 1);
        helpers_poll(round % 7 * 10);
        ane_parallel_warm(&(ane_span){spans[1], SPAN_BYTES}, 1); /* replaces spans[0] */
        mprotect(spans[0], SPAN_BYTES, PROT_NONE);
        helpers_poll(round % 5 * 10);
        ane_parallel_warm(NULL, 0);
        mprotect(spans[1], SPAN_BYTES, PROT_NONE);
        helpers_poll(20);
        for (int i = 0; i < 2; i++) munmap(spans[i], SPAN_BYTES);
    }
}

int main(void) {
    warm_reads_the_span(); /* (first: the child starts helpers of its own) */
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
    if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) replaced_spans_are_left_alone();
    return check_summary("parallel");
}
