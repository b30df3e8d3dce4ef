/* The helper-thread pool behind ane_parallel_for (see parallel.h).
 *
 * A posted loop bumps `round`; helpers wait for it, first by polling for a short while
 * (decoding posts dozens of products per token, microseconds apart, and waking a sleeping
 * thread costs tens of microseconds), then asleep on a condition variable, so an idle
 * pool takes no CPU. The loop is cut into chunks that every thread, the caller included,
 * claims from one counter until none are left, so a helper that wakes late simply takes
 * fewer. Each helper has a slot per round: it joins the round by moving its slot from
 * WAITING to JOINED (under the lock, with the loop's description) and marks it FINISHED
 * when it runs out of chunks. The caller, out of chunks itself, revokes every slot still
 * WAITING (that helper then skips the round) and waits only for the JOINED ones, which are
 * finishing their last chunk: no loop waits for a helper that has not woken yet.
 *
 * While a helper polls it reads the spans ane_parallel_warm posted, a piece at a time, and
 * looks for a new round between pieces. A poster replacing spans first sets their count to
 * 0, then waits until no helper is inside a piece; a helper counts itself in before it reads
 * the count (both sequentially consistent), so it either sees 0 or is waited for: after the
 * call no helper reads the old spans, and their memory may go. */
#include "parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

enum { MAX_HELPERS = 7 };

/* How long a waiting thread polls before it sleeps. */
#define SPIN_NANOSECONDS 300000

/* Chunks per thread a loop is cut into (a few, so a late helper's part is taken by others). */
#define CHUNKS_PER_THREAD 4

enum { SLOT_WAITING, SLOT_JOINED, SLOT_FINISHED, SLOT_REVOKED };

/* Spans a post holds at most, and the bytes a helper reads between two looks for a new round
 * (16 lines: a piece takes well under a microsecond, so a loop posted meanwhile is joined
 * about as soon as without warming). Stories110M Q4_0 decodes, warming against none inside
 * one process: 0.95-1.01x the time a token with 1 KB pieces, 0.95-0.99x with 0.5, 2 and 4 KB
 * (no size stands out: docs/performance-log.md, stop 74). */
enum { MAX_WARM_SPANS = 8, WARM_PIECE = 1024 };

typedef struct loop {
    ane_range_body body;
    void *context;
    int64_t n, chunk;
} loop;

static struct {
    pthread_mutex_t owner; /* held by the thread whose loop the helpers run */
    pthread_mutex_t lock;  /* guards `posted`, `active` and the joins */
    pthread_cond_t work, done;
    loop posted;          /* the current round's loop */
    int helpers;          /* threads started */
    int active;           /* helpers invited to the current round */
    atomic_uint round;    /* incremented per posted loop */
    atomic_llong next;    /* first index of the current loop not yet claimed */
    atomic_int slots[MAX_HELPERS];
} pool = {.owner = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static struct {
    pthread_mutex_t posting; /* one poster at a time */
    atomic_uintptr_t start[MAX_WARM_SPANS];
    atomic_size_t size[MAX_WARM_SPANS];
    atomic_int count;     /* spans posted; 0 while they are replaced */
    atomic_size_t cursor; /* bytes of the spans, in order, claimed by a piece */
    atomic_int readers;   /* helpers inside a piece */
} warm = {.posting = PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int inside_body; /* nested calls run inline */

static int64_t now_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int new_round(unsigned seen) { return atomic_load_explicit(&pool.round, memory_order_acquire) != seen; }

static int helpers_finished(unsigned count) {
    for (unsigned i = 0; i < count; i++)
        if (atomic_load_explicit(&pool.slots[i], memory_order_acquire) == SLOT_JOINED) return 0;
    return 1;
}

/* Polls until done(state) holds or the spin time is over, doing meanwhile() between looks
 * (pausing where there is none, or it had nothing to do); returns whether done holds. */
static int spin_until(int (*done)(unsigned), unsigned state, int (*meanwhile)(void)) {
    int64_t deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 0;; i++) {
        if (done(state)) return 1;
        if (!meanwhile || !meanwhile()) cpu_relax();
        if ((i & 63) == 63 && now_nanoseconds() > deadline) return 0;
    }
}

/* Reads one piece of the posted spans (a load a cache line); 0 when none is left. */
static int warm_piece(void) {
    atomic_fetch_add(&warm.readers, 1);
    int count = atomic_load(&warm.count), read = 0;
    size_t at = count > 0 ? atomic_fetch_add_explicit(&warm.cursor, WARM_PIECE, memory_order_relaxed) : 0;
    for (int i = 0; i < count && !read; i++) {
        size_t size = atomic_load_explicit(&warm.size[i], memory_order_relaxed);
        if (at >= size) {
            at -= size;
            continue;
        }
        uintptr_t start = atomic_load_explicit(&warm.start[i], memory_order_relaxed);
        const volatile unsigned char *bytes = (const unsigned char *)start + at;
        size_t end = size - at < WARM_PIECE ? size - at : WARM_PIECE;
        for (size_t offset = 0; offset < end; offset += 64) (void)bytes[offset];
        read = 1;
    }
    atomic_fetch_sub(&warm.readers, 1);
    return read;
}

void ane_parallel_warm(const ane_span *spans, int count) {
    if (count > MAX_WARM_SPANS) count = MAX_WARM_SPANS;
    pthread_mutex_lock(&warm.posting);
    atomic_store(&warm.count, 0);
    while (atomic_load(&warm.readers) > 0) cpu_relax();
    for (int i = 0; i < count; i++) {
        atomic_store_explicit(&warm.start[i], (uintptr_t)spans[i].start, memory_order_relaxed);
        atomic_store_explicit(&warm.size[i], spans[i].size, memory_order_relaxed);
    }
    atomic_store_explicit(&warm.cursor, 0, memory_order_relaxed);
    if (count > 0) atomic_store(&warm.count, count);
    pthread_mutex_unlock(&warm.posting);
}

/* Claims and runs chunks of the loop until none are left. */
static void run_chunks(const loop *work) {
    for (;;) {
        int64_t first = atomic_fetch_add_explicit(&pool.next, work->chunk, memory_order_relaxed);
        if (first >= work->n) return;
        work->body(work->context, first, first + work->chunk < work->n ? first + work->chunk : work->n);
    }
}

static void *helper_main(void *argument) {
    int index = (int)(intptr_t)argument;
    unsigned seen = 0;
    inside_body = 1;
    for (;;) {
        if (!spin_until(new_round, seen, warm_piece)) { /* (reading posted spans meanwhile) */
            pthread_mutex_lock(&pool.lock);
            while (!new_round(seen)) pthread_cond_wait(&pool.work, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
        }
        pthread_mutex_lock(&pool.lock); /* join under the lock: no new loop can be posted meanwhile */
        seen = atomic_load(&pool.round);
        int waiting = SLOT_WAITING;
        int joined = index < pool.active && atomic_compare_exchange_strong(&pool.slots[index], &waiting, SLOT_JOINED);
        loop work = pool.posted;
        pthread_mutex_unlock(&pool.lock);
        if (!joined) continue; /* not invited, or revoked: the others did this loop */
        run_chunks(&work);
        pthread_mutex_lock(&pool.lock);
        atomic_store_explicit(&pool.slots[index], SLOT_FINISHED, memory_order_release);
        pthread_cond_signal(&pool.done);
        pthread_mutex_unlock(&pool.lock);
    }
    return NULL;
}

/* Starts cores - 1 helpers (at most MAX_HELPERS). */
static void start_pool(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int wanted = cores > 1 ? (int)(cores - 1 > MAX_HELPERS ? MAX_HELPERS : cores - 1) : 0;
    for (int i = 0; i < wanted; i++) {
        pthread_t thread;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&thread, &attributes, helper_main, (void *)(intptr_t)i) == 0) pool.helpers++;
        pthread_attr_destroy(&attributes);
    }
}

/* Starts the helpers once; returns how many are running. */
static int start_helpers(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, start_pool);
    return pool.helpers;
}

void ane_parallel_for(int64_t n, int64_t grain, ane_range_body body, void *context) {
    ane_parallel_for_chunks(n, grain, CHUNKS_PER_THREAD, body, context);
}

void ane_parallel_for_chunks(int64_t n, int64_t grain, int chunks_per_thread, ane_range_body body, void *context) {
    if (n <= 0) return;
    int helpers = inside_body || n < 2 * grain ? 0 : start_helpers();
    if (helpers > 0 && n / (helpers + 1) < grain) helpers = (int)(n / grain) - 1;
    if (helpers <= 0) {
        body(context, 0, n);
        return;
    }
    /* one caller at a time owns the helpers; a second thread (an asynchronous eval) runs alone */
    if (pthread_mutex_trylock(&pool.owner) != 0) {
        body(context, 0, n);
        return;
    }
    int64_t pieces = (int64_t)(helpers + 1) * (chunks_per_thread > 0 ? chunks_per_thread : 1);
    loop work = {body, context, n, (n + pieces - 1) / pieces};
    pthread_mutex_lock(&pool.lock);
    pool.posted = work;
    atomic_store_explicit(&pool.next, 0, memory_order_relaxed);
    for (int i = 0; i < helpers; i++) atomic_store_explicit(&pool.slots[i], SLOT_WAITING, memory_order_relaxed);
    pool.active = helpers;
    atomic_fetch_add_explicit(&pool.round, 1, memory_order_release);
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    inside_body = 1;
    run_chunks(&work);
    inside_body = 0;
    for (int i = 0; i < helpers; i++) { /* helpers that have not joined yet skip this loop */
        int waiting = SLOT_WAITING;
        atomic_compare_exchange_strong(&pool.slots[i], &waiting, SLOT_REVOKED);
    }
    if (!spin_until(helpers_finished, (unsigned)helpers, NULL)) {
        pthread_mutex_lock(&pool.lock);
        while (!helpers_finished((unsigned)helpers)) pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.owner);
}
