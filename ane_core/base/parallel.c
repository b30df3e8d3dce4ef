/* The helper-thread pool behind ane_parallel_for (see parallel.h).
 *
 * A posted loop bumps `round`; helpers wait for it, first by polling for a short while
 * (decoding posts dozens of products per token, microseconds apart, and waking a sleeping
 * thread costs tens of microseconds), then asleep on a condition variable, so an idle
 * pool takes no CPU. The caller waits for its helpers the same way. */
#include "parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

enum { MAX_HELPERS = 7 };

/* How long a waiting thread polls before it sleeps. */
#define SPIN_NANOSECONDS 50000

typedef struct share {
    ane_range_body body;
    void *context;
    int64_t first, last;
} share;

static struct {
    pthread_mutex_t owner; /* held by the thread whose loop the helpers run */
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    share shares[MAX_HELPERS];
    int helpers;        /* threads started */
    atomic_uint round;  /* incremented per posted loop */
    atomic_int pending; /* shares not finished in this round */
    int active;         /* shares posted in this round */
} pool = {.owner = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Thread_local int inside_body; /* nested calls run inline */

static int64_t now_nanoseconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int new_round(unsigned seen) { return atomic_load_explicit(&pool.round, memory_order_acquire) != seen; }
static int all_done(unsigned unused) { return (void)unused, atomic_load_explicit(&pool.pending, memory_order_acquire) == 0; }

/* Polls until done(state) holds or the spin time is over; returns whether it holds. */
static int spin_until(int (*done)(unsigned), unsigned state) {
    int64_t deadline = now_nanoseconds() + SPIN_NANOSECONDS;
    for (int i = 0;; i++) {
        if (done(state)) return 1;
        if ((i & 63) == 63 && now_nanoseconds() > deadline) return 0;
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
        pthread_mutex_lock(&pool.lock);
        seen = atomic_load(&pool.round);
        int has_share = index < pool.active;
        share mine = pool.shares[index];
        pthread_mutex_unlock(&pool.lock);
        if (!has_share) continue;
        mine.body(mine.context, mine.first, mine.last);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.lock);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.lock);
        }
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
    int shares = helpers + 1;
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < helpers; i++)
        pool.shares[i] = (share){body, context, n * (i + 1) / shares, n * (i + 2) / shares};
    pool.active = helpers;
    atomic_store(&pool.pending, helpers);
    atomic_fetch_add_explicit(&pool.round, 1, memory_order_release);
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    inside_body = 1;
    body(context, 0, n / shares);
    inside_body = 0;
    if (!spin_until(all_done, 0)) {
        pthread_mutex_lock(&pool.lock);
        while (!all_done(0)) pthread_cond_wait(&pool.done, &pool.lock);
        pthread_mutex_unlock(&pool.lock);
    }
    pthread_mutex_unlock(&pool.owner);
}
