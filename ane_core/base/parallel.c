/* The helper-thread pool behind ane_parallel_for (see parallel.h). */
#include "parallel.h"

#include <pthread.h>
#include <unistd.h>

enum { MAX_HELPERS = 7 };

typedef struct share {
    ane_range_body body;
    void *context;
    int64_t first, last;
} share;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    share shares[MAX_HELPERS];
    int helpers;        /* threads started */
    unsigned round;     /* incremented per posted loop */
    int pending;        /* shares not finished in this round */
    int active;         /* shares posted in this round */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static _Thread_local int inside_body; /* nested calls run inline */

static void *helper_main(void *argument) {
    int index = (int)(intptr_t)argument;
    unsigned seen = 0;
    inside_body = 1;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.round == seen) pthread_cond_wait(&pool.work, &pool.lock);
        seen = pool.round;
        if (index >= pool.active) continue;
        share mine = pool.shares[index];
        pthread_mutex_unlock(&pool.lock);
        mine.body(mine.context, mine.first, mine.last);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
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
    int shares = helpers + 1;
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < helpers; i++)
        pool.shares[i] = (share){body, context, n * (i + 1) / shares, n * (i + 2) / shares};
    pool.active = helpers;
    pool.pending = helpers;
    pool.round++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    inside_body = 1;
    body(context, 0, n / shares);
    inside_body = 0;
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
}
