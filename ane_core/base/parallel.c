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
 * finishing their last chunk: no loop waits for a helper that has not woken yet. */
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

/* Polls until done(state) holds or the spin time is over; returns whether it holds. */
static int spin_until(int (*done)(unsigned), unsigned state) {
    int64_t deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 0;; i++) {
        if (done(state)) return 1;
        cpu_relax();
        if ((i & 63) == 63 && now_nanoseconds() > deadline) return 0;
    }
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
        if (!spin_until(new_round, seen)) {
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
    if (!spin_until(helpers_finished, (unsigned)helpers)) {
        pthread_mutex_lock(&pool.lock);
        while (!helpers_finished((unsigned)helpers)) pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.owner);
}
