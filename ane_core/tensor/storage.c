/* Refcounted storage and its four allocators: heap, lasting, file mmap, and wrapped memory.
 *
 * Heap blocks below 32 MB come from malloc (tuned once so that glibc keeps and reuses them:
 * tune_malloc_once); larger ones are mappings of their own, and a freed one waits in a small
 * pool for the next request of about its size, so a training step's large gradients and
 * logits reuse the pages of the step before instead of faulting fresh zero pages in (and
 * the kernel clearing them) every step. Mappings ask for transparent huge pages (malloc's heap
 * keeps small ones: a compile's many small blocks would each clear a whole 2 MB page).
 *
 * Lasting blocks (a model's weights, read again at every decoding step) are carved one after
 * another from regions of 2 MB pages: a decode step reads ~70 MB of 4-bit weights, and on 4 KB
 * pages every one of their ~17,000 pages costs a TLB miss, a page walk (two-level under a
 * virtual machine) and a restart of the prefetchers, which stop at 4 KB boundaries. A region is
 * unmapped when the last block carved from it goes (its pages are never reused for other
 * blocks: weights live as long as their model). */
#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <pthread.h>

enum { HEAP_ALIGNMENT = 64 };
#define LARGE_BLOCK ((size_t)32 << 20)   /* from here on, blocks are mappings (glibc's largest mmap threshold) */
#define POOL_BLOCKS 8                    /* freed mappings kept for reuse ... */
#define POOL_BYTES ((size_t)1 << 30)     /* ... at most this many bytes of them */

static size_t live_heap_bytes = 0; /* atomic */

size_t ane_storage_live_heap_bytes(void) { return __atomic_load_n(&live_heap_bytes, __ATOMIC_RELAXED); }

static struct {
    pthread_mutex_t lock; /* blocks are freed on the asynchronous helpers too */
    void *data[POOL_BLOCKS];
    size_t size[POOL_BLOCKS];
    size_t bytes;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A mapping of at least nbytes: a pooled one no more than 1/8 larger, else a new one
 * (*fresh = 1: its pages are zero). Its length goes to *length. */
static void *large_block(size_t nbytes, size_t *length, int *fresh) {
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < POOL_BLOCKS; i++) {
        if (!pool.data[i] || pool.size[i] < nbytes || pool.size[i] - nbytes > nbytes / 8) continue;
        void *data = pool.data[i];
        *length = pool.size[i];
        pool.bytes -= pool.size[i];
        pool.data[i] = NULL;
        pthread_mutex_unlock(&pool.lock);
        *fresh = 0;
        return data;
    }
    pthread_mutex_unlock(&pool.lock);
    void *data = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    *length = nbytes;
    *fresh = 1;
    if (data == MAP_FAILED) return NULL;
#if defined(MADV_HUGEPAGE)
    /* 2 MB pages where the kernel has them (transparent huge pages in "madvise" mode): a
     * first touch faults 512x fewer times, which on a virtual machine is most of its cost */
    madvise(data, nbytes, MADV_HUGEPAGE);
#endif
    return data;
}

static int pool_has_room(size_t length) {
    if (pool.bytes + length > POOL_BYTES) return 0;
    for (int i = 0; i < POOL_BLOCKS; i++)
        if (!pool.data[i]) return 1;
    return 0;
}

/* Into the pool, unmapping pooled blocks (first slots first) until it fits; a block larger
 * than the whole pool is unmapped at once. */
static void release_large_block(void *data, size_t length) {
    if (length > POOL_BYTES) {
        munmap(data, length);
        return;
    }
    pthread_mutex_lock(&pool.lock);
    for (int i = 0; i < POOL_BLOCKS && !pool_has_room(length); i++)
        if (pool.data[i]) {
            munmap(pool.data[i], pool.size[i]);
            pool.bytes -= pool.size[i];
            pool.data[i] = NULL;
        }
    for (int i = 0; i < POOL_BLOCKS; i++)
        if (!pool.data[i]) {
            pool.data[i] = data, pool.size[i] = length;
            pool.bytes += length;
            break;
        }
    pthread_mutex_unlock(&pool.lock);
}

/* ------------------------------------------------ lasting blocks */

#define HUGE_PAGE ((size_t)2 << 20)
#define REGION_BYTES ((size_t)64 << 20) /* blocks above a quarter of this get a region of their own */

typedef struct lasting_region {
    char *base;
    size_t size, used;
    int live; /* blocks carved from it not yet released */
} lasting_region;

static struct {
    pthread_mutex_t lock;
    lasting_region *current; /* where the next block is carved, or NULL */
} lasting = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* A mapping of nbytes (a multiple of HUGE_PAGE) that starts on a 2 MB boundary, so that the
 * kernel can back all of it with 2 MB pages; NULL when there is no memory. */
static char *map_huge_aligned(size_t nbytes) {
    char *raw = mmap(NULL, nbytes + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    char *start = (char *)(((uintptr_t)raw + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
    if (start > raw) munmap(raw, (size_t)(start - raw));
    size_t tail = (size_t)(raw + nbytes + HUGE_PAGE - (start + nbytes));
    if (tail) munmap(start + nbytes, tail);
#if defined(MADV_HUGEPAGE)
    madvise(start, nbytes, MADV_HUGEPAGE);
#endif
    return start;
}

static lasting_region *new_region(size_t nbytes) {
    lasting_region *region = calloc(1, sizeof *region);
    if (!region) return NULL;
    region->size = (nbytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    region->base = map_huge_aligned(region->size);
    if (!region->base) {
        free(region);
        return NULL;
    }
    return region;
}

static void drop_region(lasting_region *region) {
    munmap(region->base, region->size);
    free(region);
}

/* nbytes (zero: fresh pages) from the current region, or a new one; its region in *from. */
static void *lasting_block(size_t nbytes, lasting_region **from) {
    size_t rounded = (nbytes + HEAP_ALIGNMENT - 1) / HEAP_ALIGNMENT * HEAP_ALIGNMENT;
    if (!rounded) rounded = HEAP_ALIGNMENT;
    pthread_mutex_lock(&lasting.lock);
    lasting_region *region = lasting.current;
    if (rounded > REGION_BYTES / 4) { /* a region of its own */
        region = new_region(rounded);
    } else if (!region || region->size - region->used < rounded) {
        if (region && region->live == 0) drop_region(region); /* (else its last release drops it) */
        region = lasting.current = new_region(REGION_BYTES);
    }
    void *data = NULL;
    if (region) {
        data = region->base + region->used;
        region->used += rounded;
        region->live++;
        *from = region;
    }
    pthread_mutex_unlock(&lasting.lock);
    return data;
}

static void lasting_release(ane_storage *storage) {
    __atomic_sub_fetch(&live_heap_bytes, storage->nbytes, __ATOMIC_RELAXED);
    lasting_region *region = storage->context;
    pthread_mutex_lock(&lasting.lock);
    if (--region->live == 0 && region != lasting.current) drop_region(region);
    pthread_mutex_unlock(&lasting.lock);
}

static const ane_allocator lasting_allocator = {"lasting", lasting_release};

static void heap_release(ane_storage *storage) {
    __atomic_sub_fetch(&live_heap_bytes, storage->nbytes, __ATOMIC_RELAXED);
    if (storage->context) /* context holds the mapping length for large blocks */
        release_large_block(storage->data, (size_t)(uintptr_t)storage->context);
    else
        free(storage->data);
}

/* A mapping's context is its file's descriptor + 1 (kept open: ane_storage_readable). */
static void mapped_file_release(ane_storage *storage) {
    if (storage->data) munmap(storage->data, storage->nbytes);
    if (storage->context) close((int)((intptr_t)storage->context - 1));
}

static const ane_allocator heap_allocator = {"heap", heap_release};
static const ane_allocator mapped_file_allocator = {"mmap", mapped_file_release};

static ane_storage *storage_shell(ane_error *err) {
    ane_storage *storage = calloc(1, sizeof *storage);
    if (!storage) ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating a storage header");
    else storage->refcount = 1;
    return storage;
}

#if defined(__GLIBC__)
#include <malloc.h>
#endif

static void tune_malloc_once(void);

/* A heap block of nbytes: from malloc, or a large block (its mapping length in *length,
 * 0 for malloc's); zeroed when asked. */
static void *heap_block(size_t nbytes, int zeroed, size_t *length) {
    if (nbytes >= LARGE_BLOCK) {
        int fresh;
        void *data = large_block(nbytes, length, &fresh);
        if (data && zeroed && !fresh) memset(data, 0, nbytes);
        return data;
    }
    tune_malloc_once();
    *length = 0;
    void *data = NULL;
    if (posix_memalign(&data, HEAP_ALIGNMENT, nbytes ? nbytes : HEAP_ALIGNMENT) != 0) return NULL;
    if (zeroed) memset(data, 0, nbytes);
    return data;
}

static ane_status new_heap(size_t nbytes, int zeroed, ane_storage **out, ane_error *err) {
    ane_storage *storage = storage_shell(err);
    if (!storage) return ANE_ERR_NOMEM;
    size_t length;
    void *data = heap_block(nbytes, zeroed, &length);
    if (!data) {
        free(storage);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating %zu bytes", nbytes);
    }
    storage->allocator = &heap_allocator;
    storage->nbytes = nbytes;
    storage->data = data;
    storage->context = (void *)(uintptr_t)length;
    __atomic_add_fetch(&live_heap_bytes, nbytes, __ATOMIC_RELAXED);
    *out = storage;
    return ANE_OK;
}

ane_status ane_storage_new_heap(size_t nbytes, ane_storage **out, ane_error *err) {
    return new_heap(nbytes, 1, out, err);
}

/* glibc serves blocks above 128 KB with fresh mmaps (page faults on every touch) until a
 * free raises that threshold; tensors of a few hundred KB come and go every decoding
 * step, so raise it once, up front, to its largest value (LARGE_BLOCK). */
static void tune_malloc(void) {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, (int)LARGE_BLOCK);
    mallopt(M_TRIM_THRESHOLD, 256 << 20); /* and keep freed memory for the next step */
#endif
}

static void tune_malloc_once(void) { /* (the asynchronous helpers allocate too) */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tune_malloc);
}

ane_status ane_storage_new_heap_uninitialized(size_t nbytes, ane_storage **out, ane_error *err) {
    return new_heap(nbytes, 0, out, err);
}

ane_status ane_storage_new_lasting(size_t nbytes, ane_storage **out, ane_error *err) {
    ane_storage *storage = storage_shell(err);
    if (!storage) return ANE_ERR_NOMEM;
    lasting_region *region = NULL;
    void *data = lasting_block(nbytes, &region);
    if (!data) {
        free(storage);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating %zu bytes of weights", nbytes);
    }
    storage->allocator = &lasting_allocator;
    storage->nbytes = nbytes;
    storage->data = data;
    storage->context = region;
    __atomic_add_fetch(&live_heap_bytes, nbytes, __ATOMIC_RELAXED);
    *out = storage;
    return ANE_OK;
}

ane_status ane_storage_map_file(const char *path, ane_storage **out, ane_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ane_fail(err, ANE_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0) {
        int saved = errno;
        close(fd);
        return ane_fail(err, ANE_ERR_IO, "%s: cannot stat: %s", path, strerror(saved));
    }
    if (!S_ISREG(info.st_mode)) {
        close(fd);
        return ane_fail(err, ANE_ERR_IO, "%s: not a regular file", path);
    }
    size_t size = (size_t)info.st_size;
    void *data = NULL;
    if (size > 0) {
        data = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (data == MAP_FAILED) {
            int saved = errno;
            close(fd);
            return ane_fail(err, ANE_ERR_IO, "%s: cannot map %zu bytes: %s", path, size, strerror(saved));
        }
    }
    ane_storage *storage = storage_shell(err);
    if (!storage) {
        if (data) munmap(data, size);
        close(fd);
        return ANE_ERR_NOMEM;
    }
    storage->data = data;
    storage->nbytes = size;
    storage->readonly = 1;
    storage->allocator = &mapped_file_allocator;
    storage->context = (void *)(intptr_t)(fd + 1);
    *out = storage;
    return ANE_OK;
}

ane_status ane_storage_wrap(void *data, size_t nbytes, int readonly, const ane_allocator *allocator,
                            void *context, ane_storage **out, ane_error *err) {
    ane_storage *storage = storage_shell(err);
    if (!storage) return ANE_ERR_NOMEM;
    storage->data = data;
    storage->nbytes = nbytes;
    storage->readonly = readonly;
    storage->allocator = allocator;
    storage->context = context;
    *out = storage;
    return ANE_OK;
}

int ane_storage_readable(const ane_storage *storage, size_t offset, size_t nbytes) {
    if (!storage || storage->allocator != &mapped_file_allocator || !storage->context) return 1;
    struct stat info;
    if (fstat((int)((intptr_t)storage->context - 1), &info) != 0) return 0;
    return (uint64_t)info.st_size >= (uint64_t)offset + nbytes;
}

void ane_storage_release_pages(ane_storage *storage, size_t offset, size_t nbytes) {
    if (!storage || storage->allocator != &mapped_file_allocator || offset >= storage->nbytes) return;
    if (nbytes > storage->nbytes - offset) nbytes = storage->nbytes - offset;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), first = (uintptr_t)storage->data + offset;
    uintptr_t begin = (first + page - 1) / page * page, end = (first + nbytes) / page * page; /* whole pages inside */
    if (end > begin) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

void ane_storage_retain(ane_storage *storage) {
    __atomic_add_fetch(&storage->refcount, 1, __ATOMIC_RELAXED);
}

void ane_storage_release(ane_storage *storage) {
    if (!storage) return;
    if (__atomic_sub_fetch(&storage->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (storage->allocator && storage->allocator->release) storage->allocator->release(storage);
    free(storage);
}
