/* Benchmark: fp32 -> fp16 and fp16 -> fp32 conversion throughput, as a ratio of memcpy
 * bandwidth over the same bytes measured in the same run. Two sizes: one that fits in the
 * L2 cache and one that streams from memory. Ratios use the bytes written by each side
 * (the fp16 side moves half the bytes of the fp32 side). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ane_core/base/fp16.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef void (*kernel)(void *dst, const void *src, size_t n);

static void k_memcpy_fp32(void *dst, const void *src, size_t n) { memcpy(dst, src, n * 4); }
static void k_to_fp16(void *dst, const void *src, size_t n) { ane_fp32_to_fp16_n(dst, src, n); }
static void k_to_fp32(void *dst, const void *src, size_t n) { ane_fp16_to_fp32_n(dst, src, n); }

/* Best time of several repetitions, each long enough to be timed reliably. */
static double best_seconds(kernel k, void *dst, const void *src, size_t n) {
    size_t repeats = 1;
    while (1) {
        double start = now_seconds();
        for (size_t r = 0; r < repeats; r++) k(dst, src, n);
        double elapsed = now_seconds() - start;
        if (elapsed > 0.02) break;
        repeats *= 2;
    }
    double best = 1e30;
    for (int trial = 0; trial < 7; trial++) {
        double start = now_seconds();
        for (size_t r = 0; r < repeats; r++) k(dst, src, n);
        double per_call = (now_seconds() - start) / (double)repeats;
        if (per_call < best) best = per_call;
    }
    return best;
}

static void run(size_t n, const char *label, int simd) {
    ane_fp16_set_simd(simd);
    float *fp32 = aligned_alloc(64, n * 4), *fp32_out = aligned_alloc(64, n * 4);
    uint16_t *fp16 = aligned_alloc(64, n * 2);
    for (size_t i = 0; i < n; i++) fp32[i] = (float)((double)(i % 10007) * 0.37 - 1800.0);
    ane_fp32_to_fp16_n(fp16, fp32, n);
    memset(fp32_out, 1, n * 4);
    double copy = best_seconds(k_memcpy_fp32, fp32_out, fp32, n); /* reads 4n, writes 4n */
    double to16 = best_seconds(k_to_fp16, fp16, fp32, n);         /* reads 4n, writes 2n */
    double to32 = best_seconds(k_to_fp32, fp32_out, fp16, n);     /* reads 2n, writes 4n */
    double copy_gbs = 8.0 * n / copy / 1e9;
    double to16_gbs = 6.0 * n / to16 / 1e9, to32_gbs = 6.0 * n / to32 / 1e9;
    printf("%-8s %-7s %9zu elems  memcpy %6.1f GB/s | fp32->fp16 %6.1f GB/s %6.2f Gelem/s ratio %.2f"
           " | fp16->fp32 %6.1f GB/s %6.2f Gelem/s ratio %.2f\n",
           label, ane_fp16_simd_name(), n, copy_gbs, to16_gbs, n / to16 / 1e9, to16_gbs / copy_gbs, to32_gbs,
           n / to32 / 1e9, to32_gbs / copy_gbs);
    free(fp32);
    free(fp32_out);
    free(fp16);
}

int main(void) {
    printf("ratio = conversion bytes moved per second / memcpy bytes moved per second (same run)\n");
    run(1 << 16, "L2", 1);
    run(1 << 25, "memory", 1);
    run(1 << 16, "L2", 0);
    run(1 << 25, "memory", 0);
    return 0;
}
