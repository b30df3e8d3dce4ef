/* Refcounted storage and its three allocators: heap, file mmap, and wrapped memory. */
#include "storage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { HEAP_ALIGNMENT = 64, MMAP_THRESHOLD = 1 << 16 };

static size_t live_heap_bytes = 0; /* atomic */

size_t ane_storage_live_heap_bytes(void) { return __atomic_load_n(&live_heap_bytes, __ATOMIC_RELAXED); }

static void heap_release(ane_storage *storage) {
    __atomic_sub_fetch(&live_heap_bytes, storage->nbytes, __ATOMIC_RELAXED);
    if (storage->context) /* context holds the mapping length for mmap'd blocks */
        munmap(storage->data, (size_t)(uintptr_t)storage->context);
    else
        free(storage->data);
}

static void mapped_file_release(ane_storage *storage) {
    if (storage->data) munmap(storage->data, storage->nbytes);
}

static const ane_allocator heap_allocator = {"heap", heap_release};
static const ane_allocator mapped_file_allocator = {"mmap", mapped_file_release};

static ane_storage *storage_shell(ane_error *err) {
    ane_storage *storage = calloc(1, sizeof *storage);
    if (!storage) ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating a storage header");
    else storage->refcount = 1;
    return storage;
}

ane_status ane_storage_new_heap(size_t nbytes, ane_storage **out, ane_error *err) {
    ane_storage *storage = storage_shell(err);
    if (!storage) return ANE_ERR_NOMEM;
    storage->allocator = &heap_allocator;
    storage->nbytes = nbytes;
    if (nbytes >= MMAP_THRESHOLD) {
        void *data = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (data == MAP_FAILED) {
            free(storage);
            return ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating %zu bytes", nbytes);
        }
        storage->data = data;
        storage->context = (void *)(uintptr_t)nbytes;
    } else {
        void *data = NULL;
        if (posix_memalign(&data, HEAP_ALIGNMENT, nbytes ? nbytes : HEAP_ALIGNMENT) != 0) {
            free(storage);
            return ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating %zu bytes", nbytes);
        }
        memset(data, 0, nbytes);
        storage->data = data;
    }
    __atomic_add_fetch(&live_heap_bytes, nbytes, __ATOMIC_RELAXED);
    *out = storage;
    return ANE_OK;
}

#if defined(__GLIBC__)
#include <malloc.h>
#endif

/* glibc serves blocks above 128 KB with fresh mmaps (page faults on every touch) until a
 * free raises that threshold; tensors of a few hundred KB come and go every decoding
 * step, so raise it once, up front. */
static void tune_malloc_once(void) {
#if defined(__GLIBC__)
    static int done = 0;
    if (!done) {
        mallopt(M_MMAP_THRESHOLD, 32 << 20);
        mallopt(M_TRIM_THRESHOLD, 256 << 20); /* and keep freed memory for the next step */
        done = 1;
    }
#endif
}

ane_status ane_storage_new_heap_uninitialized(size_t nbytes, ane_storage **out, ane_error *err) {
    tune_malloc_once();
    ane_storage *storage = storage_shell(err);
    if (!storage) return ANE_ERR_NOMEM;
    void *data = NULL;
    if (posix_memalign(&data, HEAP_ALIGNMENT, nbytes ? nbytes : HEAP_ALIGNMENT) != 0) {
        free(storage);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating %zu bytes", nbytes);
    }
    storage->allocator = &heap_allocator;
    storage->nbytes = nbytes;
    storage->data = data;
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
    close(fd);
    ane_storage *storage = storage_shell(err);
    if (!storage) {
        if (data) munmap(data, size);
        return ANE_ERR_NOMEM;
    }
    storage->data = data;
    storage->nbytes = size;
    storage->readonly = 1;
    storage->allocator = &mapped_file_allocator;
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

void ane_storage_retain(ane_storage *storage) {
    __atomic_add_fetch(&storage->refcount, 1, __ATOMIC_RELAXED);
}

void ane_storage_release(ane_storage *storage) {
    if (!storage) return;
    if (__atomic_sub_fetch(&storage->refcount, 1, __ATOMIC_ACQ_REL) != 0) return;
    if (storage->allocator && storage->allocator->release) storage->allocator->release(storage);
    free(storage);
}
