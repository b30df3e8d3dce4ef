/* tensor/blas.c against base/cpu.c: the BLAS names its kernels, and the better set it asks
 * for is exactly the documented one: none unless OpenBLAS fell back to its generic Prescott
 * kernels, then SkylakeX on a CPU with Skylake-SP's AVX-512, Haswell on one with AVX2 + FMA,
 * none on older ones. (The host's re-exec that applies it: host_spec.) ane_blas_rest_threads
 * leaves OpenBLAS without its polling threads (counted in /proc/self/task) and the next
 * product both correct and served by them again. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ane_core/base/cpu.h"
#include "ane_core/tensor/blas.h"
#include "check.h"

#if defined(__linux__)
/* This process's threads, or -1 where /proc is not there. */
static int thread_count(void) {
    DIR *tasks = opendir("/proc/self/task");
    if (!tasks) return -1;
    int count = 0;
    for (struct dirent *entry; (entry = readdir(tasks));) count += entry->d_name[0] != '.';
    closedir(tasks);
    return count;
}

/* The thread count once it reads `expected`, waiting up to a second: a joined thread leaves
 * /proc/self/task a moment after pthread_join returns (the kernel wakes the joiner while the
 * thread is still exiting; under qemu-user the host thread outlives the guest's by more). */
static int thread_count_settled(int expected) {
    int count = thread_count();
    for (int tries = 0; count != expected && tries < 100; tries++) {
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
        count = thread_count();
    }
    return count;
}

/* A [n, n] x [n, n] product large enough for OpenBLAS to use its threads, against sums in
 * double (inputs small integers: every sum exact in fp32 too). */
static void check_product_after_rest(int n) {
    float *a = malloc(sizeof(float) * n * n), *b = malloc(sizeof(float) * n * n), *c = malloc(sizeof(float) * n * n);
    for (int i = 0; i < n * n; i++) a[i] = (float)(i % 7 - 3), b[i] = (float)(i % 5 - 2);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
    int wrong = 0;
    for (int i = 0; i < n; i += 37)
        for (int j = 0; j < n; j += 41) {
            double sum = 0;
            for (int k = 0; k < n; k++) sum += (double)a[i * n + k] * b[k * n + j];
            wrong += c[i * n + j] != (float)sum;
        }
    CHECK(wrong == 0, "a product after the threads rested: %d sampled elements wrong", wrong);
    free(a), free(b), free(c);
}
#endif

int main(void) {
    const char *kernels = ane_blas_kernels(), *better = ane_blas_better_kernels();
    CHECK(kernels && kernels[0], "the BLAS names its kernels");
    const char *expected = NULL;
    if (strcmp(kernels, "Prescott") == 0)
        expected = ane_cpu_has_avx512_skylake() ? "SkylakeX" : ane_cpu_has_avx2_fma_f16c() ? "Haswell" : NULL;
    CHECK((better == NULL && expected == NULL) || (better && expected && strcmp(better, expected) == 0),
          "kernels %s: better %s, expected %s", kernels, better ? better : "(none)", expected ? expected : "(none)");
    printf("blas: kernels %s, better %s\n", kernels, better ? better : "(none)");

#if defined(__linux__)
    /* OpenBLAS's pthreads build (1) starts its threads when it loads; an OpenMP or sequential
     * build has none to rest, and only the products are checked */
    int pthreads = openblas_get_parallel() == 1, blas_threads = openblas_get_num_threads();
    int before = thread_count();
    ane_blas_rest_threads();
    int rested = pthreads ? thread_count_settled(before - (blas_threads - 1)) : thread_count();
    if (pthreads) /* blas_threads - 1 helpers and this thread */
        CHECK(rested == before - (blas_threads - 1), "threads before %d, after resting %d (OpenBLAS runs %d)", before,
              rested, blas_threads);
    check_product_after_rest(512);
    int after = thread_count();
    if (pthreads) CHECK(after == before, "a product starts OpenBLAS's threads again: %d, were %d", after, before);
    ane_blas_rest_threads(); /* twice in a row: nothing to rest */
    ane_blas_rest_threads();
    if (pthreads) {
        int twice = thread_count_settled(rested);
        CHECK(twice == rested, "resting twice leaves %d threads, once %d", twice, rested);
    }
    check_product_after_rest(300);
#endif
    return check_summary("blas");
}
