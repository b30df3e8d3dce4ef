/* Refcounted byte storage behind host tensors and surfaces.
 *
 * A storage is a block of bytes plus the allocator that knows how to give it back: the
 * heap (zeroed, 64-byte aligned), a read-only mmap of a file (safetensors, checkpoints),
 * or a surface (IOSurface on macOS, aligned anonymous memory elsewhere). Tensors and
 * views hold references; the last release frees the bytes through the allocator. */
#ifndef ANE_TENSOR_STORAGE_H
#define ANE_TENSOR_STORAGE_H

#include <stddef.h>

#include "../base/status.h"

typedef struct ane_storage ane_storage;

typedef struct ane_allocator {
    const char *name;                      /* "heap", "mmap", "surface" */
    void (*release)(ane_storage *storage); /* frees data and context */
} ane_allocator;

struct ane_storage {
    int refcount;                   /* atomic; starts at 1 */
    void *data;                     /* [nbytes] */
    size_t nbytes;
    int readonly;                   /* writes through tensors on it are refused */
    const ane_allocator *allocator;
    void *context;                  /* allocator-specific (mapping length, IOSurfaceRef) */
};

/* Zeroed, 64-byte aligned heap bytes (large blocks come from anonymous mmap, so the
 * pages are only touched when written). */
ane_status ane_storage_new_heap(size_t nbytes, ane_storage **out, ane_error *err);
/* The same without zeroing, for results that are about to be overwritten in full: comes
 * from malloc, whose recycled blocks spare the page faults of fresh mappings. */
ane_status ane_storage_new_heap_uninitialized(size_t nbytes, ane_storage **out, ane_error *err);

/* Zeroed, 64-byte aligned bytes that live as long as a model (its weights): carved from
 * regions of 2 MB pages (storage.c), which a decoding step reads far faster than malloc's 4 KB
 * pages. Counted with the heap's (ane_storage_live_heap_bytes). */
ane_status ane_storage_new_lasting(size_t nbytes, ane_storage **out, ane_error *err);

/* The whole file mapped read-only; *out->nbytes is the file size. */
ane_status ane_storage_map_file(const char *path, ane_storage **out, ane_error *err);

/* Wraps bytes owned by someone else; `allocator->release` is called at the last release. */
ane_status ane_storage_wrap(void *data, size_t nbytes, int readonly, const ane_allocator *allocator,
                            void *context, ane_storage **out, ane_error *err);

/* Bytes of heap storage alive now (what a garbage-collected host should count as pressure:
 * its collector sees only the small boxes that hold these). */
size_t ane_storage_live_heap_bytes(void);

/* Whether [offset, offset + nbytes) of the storage can be read: always, but for a file mapping
 * whose file has since been cut short (reading its pages past the file's end would fault the
 * process: SIGBUS). The file's size is asked of the kernel each call. */
int ane_storage_readable(const ane_storage *storage, size_t offset, size_t nbytes);

/* For a file mapping: gives back the pages of [offset, offset + nbytes) this process has
 * read (they leave its resident memory; reading them again brings them back from the file
 * or the page cache). Other storages: nothing. */
void ane_storage_release_pages(ane_storage *storage, size_t offset, size_t nbytes);

void ane_storage_retain(ane_storage *storage);
void ane_storage_release(ane_storage *storage); /* NULL is fine */

#endif
