/* The fp16-weight matrix-vector product (see gemv_fp16.h). Large products split their rows
 * over a few helper threads that sleep between calls: a spinning pool would take the CPU
 * from the BLAS threads on small machines. */
#include "gemv_fp16.h"

#include <pthread.h>
#include <stdint.h>
#include <unistd.h>

#include "../base/fp16.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

static int has_avx2_fma_f16c(void) {
    static int answer = -1;
    if (answer >= 0) return answer;
    unsigned a, b, c, d;
    answer = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 12)) && (c & (1u << 29)) && (c & (1u << 27)) &&
        __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5))) {
        unsigned lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        (void)hi;
        answer = (lo & 6u) == 6u;
    }
    return answer;
}

__attribute__((target("avx2,fma,f16c"))) static float dot_avx2(const uint16_t *w, const float *x, int64_t k) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= k; j += 16) {
        __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j)));
        __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + j + 8)));
        a0 = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + j), a0);
        a1 = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + j + 8), a1);
    }
    __m256 sum = _mm256_add_ps(a0, a1);
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    half = _mm_add_ss(half, _mm_shuffle_ps(half, half, 1));
    float total = _mm_cvtss_f32(half);
    for (; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}
#endif

static float dot_scalar(const uint16_t *w, const float *x, int64_t k) {
    float total = 0.0f;
    for (int64_t j = 0; j < k; j++) total += ane_fp16_to_fp32(w[j]) * x[j];
    return total;
}

typedef struct gemv_job {
    float *y;
    const uint16_t *w;
    const float *x;
    int64_t first, last, k;
} gemv_job;

static void run_rows(const gemv_job *job) {
    float (*dot)(const uint16_t *, const float *, int64_t) = dot_scalar;
#if defined(__x86_64__)
    if (has_avx2_fma_f16c()) dot = dot_avx2;
#endif
    for (int64_t r = job->first; r < job->last; r++) job->y[r] = dot(job->w + r * job->k, job->x, job->k);
}

/* A small pool of helper threads that sleep between products (no spinning): the caller
 * posts one share per helper, works on its own share, and waits for the others. */
enum { MAX_HELPERS = 7 };

static struct {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    gemv_job jobs[MAX_HELPERS];
    int helpers;        /* threads started */
    unsigned round;     /* incremented per posted product */
    int pending;        /* shares not finished in this round */
    int active;         /* shares posted in this round */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

static void *helper_main(void *argument) {
    int index = (int)(intptr_t)argument;
    unsigned seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.round == seen) pthread_cond_wait(&pool.work, &pool.lock);
        seen = pool.round;
        if (index >= pool.active) continue;
        gemv_job job = pool.jobs[index];
        pthread_mutex_unlock(&pool.lock);
        run_rows(&job);
        pthread_mutex_lock(&pool.lock);
        if (--pool.pending == 0) pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* Starts the helpers once (cores - 1 of them); returns how many are running. */
static int start_helpers(void) {
    static int started = 0;
    if (started) return pool.helpers;
    started = 1;
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
    return pool.helpers;
}

void ane_gemv_fp16(float *y, const uint16_t *w, const float *x, int64_t rows, int64_t k) {
    int helpers = rows * k >= (1 << 18) ? start_helpers() : 0;
    int shares = helpers + 1;
    if (shares == 1) {
        gemv_job all = {y, w, x, 0, rows, k};
        run_rows(&all);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < helpers; i++) pool.jobs[i] = (gemv_job){y, w, x, rows * (i + 1) / shares, rows * (i + 2) / shares, k};
    pool.active = helpers;
    pool.pending = helpers;
    pool.round++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.lock);
    gemv_job mine = {y, w, x, 0, rows / shares, k};
    run_rows(&mine);
    pthread_mutex_lock(&pool.lock);
    while (pool.pending > 0) pthread_cond_wait(&pool.done, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
}
