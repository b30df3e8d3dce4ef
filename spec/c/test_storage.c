/* tensor/storage.c's lasting blocks (a model's weights): zeroed, 64-byte aligned, disjoint
 * (each block filled with its own byte, all checked after every block is written), counted
 * in the live heap bytes and uncounted on release; a block too large for a shared region gets
 * a region of its own that starts on a 2 MB boundary (the kernel's huge pages need that) and
 * is gone from the address space once released (msync of an unmapped page fails with ENOMEM,
 * on Linux and macOS alike); on Linux, the regions carry the huge-page advice (smaps' "hg"),
 * checked where a mapping the test advises itself shows it (not under qemu-user, which takes
 * the advice and drops it);
 * blocks taken and released from the helper threads at once leave the count where it was. */
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ane_core/base/parallel.h"
#include "ane_core/tensor/storage.h"
#include "check.h"

#define HUGE_PAGE ((uintptr_t)2 << 20)

static int all_bytes(const unsigned char *data, size_t n, unsigned char value) {
    for (size_t i = 0; i < n; i++)
        if (data[i] != value) return 0;
    return 1;
}

static int mapped(const void *address) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    void *start = (void *)((uintptr_t)address / page * page);
    return msync(start, page, MS_ASYNC) == 0 || errno != ENOMEM;
}

#if defined(__linux__)
/* Whether the mapping holding `address` has the huge-page advice (VmFlags "hg"). */
static int advised_huge(const void *address) {
    FILE *smaps = fopen("/proc/self/smaps", "r");
    if (!smaps) return -1;
    char line[512];
    int inside = 0, advised = 0;
    while (fgets(line, sizeof line, smaps)) {
        unsigned long long begin, end;
        if (sscanf(line, "%llx-%llx ", &begin, &end) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = (uintptr_t)address >= begin && (uintptr_t)address < end;
        } else if (inside && strncmp(line, "VmFlags:", 8) == 0) {
            advised = strstr(line, " hg") != NULL;
            break;
        }
    }
    fclose(smaps);
    return advised;
}
#endif

static atomic_int thread_failures;

static void take_and_release(void *context, int64_t first, int64_t last) {
    (void)context;
    for (int64_t i = first; i < last; i++) {
        ane_storage *s = NULL;
        ane_error err;
        if (ane_storage_new_lasting((size_t)(i % 7 + 1) * 1000, &s, &err) != ANE_OK ||
            !all_bytes(s->data, s->nbytes, 0)) {
            atomic_fetch_add(&thread_failures, 1);
            continue;
        }
        memset(s->data, 0xAB, s->nbytes);
        ane_storage_release(s);
    }
}

int main(void) {
    const size_t sizes[] = {1, 100, 64, 65, 300 * 1024, 1 << 20, 7, 20 << 20, 3 << 20, 0, 5000};
    enum { COUNT = sizeof sizes / sizeof *sizes };
    ane_storage *blocks[COUNT];
    size_t before = ane_storage_live_heap_bytes(), total = 0;
    ane_error err;
    for (int i = 0; i < COUNT; i++) {
        CHECK(ane_storage_new_lasting(sizes[i], &blocks[i], &err) == ANE_OK, "lasting block of %zu bytes: %s", sizes[i],
              err.message);
        CHECK(blocks[i]->nbytes == sizes[i], "block %d holds %zu bytes, asked %zu", i, blocks[i]->nbytes, sizes[i]);
        CHECK((uintptr_t)blocks[i]->data % 64 == 0, "block %d is not 64-byte aligned", i);
        CHECK(all_bytes(blocks[i]->data, sizes[i], 0), "block %d is not zeroed", i);
        memset(blocks[i]->data, i + 1, sizes[i]);
        total += sizes[i];
    }
    for (int i = 0; i < COUNT; i++)
        CHECK(all_bytes(blocks[i]->data, sizes[i], (unsigned char)(i + 1)), "block %d overwritten by another", i);
    CHECK(ane_storage_live_heap_bytes() - before == total, "live heap bytes grew by %zu, the blocks hold %zu",
          ane_storage_live_heap_bytes() - before, total);

    const int own = 7; /* 20 MB: above a quarter of a region */
    CHECK((uintptr_t)blocks[own]->data % HUGE_PAGE == 0, "a block with a region of its own starts off a 2 MB boundary");
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    size_t control_bytes = 4 * HUGE_PAGE;
    void *control = mmap(NULL, control_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    int shown = control != MAP_FAILED && madvise(control, control_bytes, MADV_HUGEPAGE) == 0 && advised_huge(control) == 1;
    if (control != MAP_FAILED) munmap(control, control_bytes);
    if (shown) {
        CHECK(advised_huge(blocks[own]->data) == 1, "a region of its own lacks the huge-page advice");
        CHECK(advised_huge(blocks[4]->data) == 1, "a shared region lacks the huge-page advice");
    } else {
        printf("storage: this system does not show huge-page advice in smaps; not checked\n");
    }
#endif
    void *own_data = blocks[own]->data;
    CHECK(mapped(own_data), "a live block's page is not mapped");
    for (int i = 0; i < COUNT; i++) ane_storage_release(blocks[i]);
    CHECK(!mapped(own_data), "a released block's own region is still mapped");
    CHECK(ane_storage_live_heap_bytes() == before, "live heap bytes %zu after every release, %zu before",
          ane_storage_live_heap_bytes(), before);

    /* more than a region's worth in blocks: earlier regions go when their blocks do */
    enum { MANY = 40 };
    ane_storage *many[MANY];
    for (int i = 0; i < MANY; i++)
        CHECK(ane_storage_new_lasting(4 << 20, &many[i], &err) == ANE_OK, "block %d of 4 MB: %s", i, err.message);
    void *first = many[0]->data;
    for (int i = 0; i < MANY; i++) ane_storage_release(many[i]);
    CHECK(!mapped(first), "a region whose blocks are all released (not the current one) is still mapped");

    ane_parallel_for(20000, 16, take_and_release, NULL);
    CHECK(atomic_load(&thread_failures) == 0, "%d blocks taken on the helper threads were missing or not zeroed",
          atomic_load(&thread_failures));
    CHECK(ane_storage_live_heap_bytes() == before, "live heap bytes %zu after the threads, %zu before",
          ane_storage_live_heap_bytes(), before);
    return check_summary("storage");
}
