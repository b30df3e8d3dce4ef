/* Benchmark: how fast this machine hands a process memory it has not used before. Maps N GB
 * of fresh anonymous memory (transparent huge pages where the kernel gives them on request,
 * as the project's large buffers ask) and writes one byte per 4 KB page, then does the same
 * again in a second mapping after unmapping the first; prints GB/s for each. On a virtual
 * machine whose host backs guest memory lazily (Firecracker here), the first touch of guest
 * memory no process has used yet runs far slower than later ones, and a training process's
 * first step is mostly such touches (docs/performance-log.md). Run with N near the machine's free
 * memory once to measure steps as they would run on warmed (or physical) memory.
 *   build/bench_first_touch [N_GB] */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GB/s writing one byte per page of a fresh mapping of `bytes`; negative if it cannot map. */
static double touch_rate(size_t bytes) {
    volatile char *data = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) return -1.0;
#if defined(MADV_HUGEPAGE)
    madvise((void *)data, bytes, MADV_HUGEPAGE);
#endif
    double start = now_seconds();
    for (size_t i = 0; i < bytes; i += 4096) data[i] = 1;
    double seconds = now_seconds() - start;
    munmap((void *)data, bytes);
    return (double)bytes / 1e9 / seconds;
}

int main(int argc, char **argv) {
    char *end = NULL;
    unsigned long gigabytes = argc > 1 ? strtoul(argv[1], &end, 10) : 1;
    if (argc > 2 || (argc > 1 && (*end || gigabytes == 0 || gigabytes > 4096))) {
        fprintf(stderr, "usage: %s [N_GB] (a whole number of gigabytes, 1-4096)\n", argv[0]);
        return 2;
    }
    size_t bytes = (size_t)gigabytes << 30;
    for (int pass = 1; pass <= 2; pass++) {
        double rate = touch_rate(bytes);
        if (rate < 0) {
            fprintf(stderr, "%s: cannot map %lu GB of memory\n", argv[0], gigabytes);
            return 1;
        }
        printf("pass %d: first touch of a fresh %lu GB mapping: %.2f GB/s\n", pass, gigabytes, rate);
    }
    return 0;
}
