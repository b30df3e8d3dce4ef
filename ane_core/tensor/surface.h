/* Surfaces: the I/O buffers of ANE programs.
 *
 * A surface holds one activation of logical shape [1, C, 1, S] (channels, sequence) in
 * fp16 or fp32. Each channel row starts at a multiple of 64 bytes (ANE-21: the device lays
 * rows out at a 64-byte stride), the allocation is at least 49,152 bytes (ANE-04) and a
 * whole number of pages, and callers may ask for a larger common `alloc_size` so that all
 * surfaces of one program share one size (ANE-02, ANE-18). Once the `ane` backend is bound
 * the bytes are IOSurfaces (locked while the CPU touches them, the allocation size read
 * back from the surface); before that, and with `sim` alone, page-aligned anonymous memory
 * with the same layout. */
#ifndef ANE_TENSOR_SURFACE_H
#define ANE_TENSOR_SURFACE_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "tensor.h"

#define ANE_SURFACE_MIN_ALLOC 49152 /* ANE-04 */
#define ANE_SURFACE_ROW_ALIGN 64    /* ANE-21 */

typedef struct ane_surface {
    int64_t channels;       /* C */
    int64_t seq;            /* S, the last axis */
    ane_dtype dtype;        /* fp16 or fp32 */
    size_t row_stride;      /* bytes between channel rows, a multiple of 64 */
    size_t alloc_size;      /* bytes allocated, >= 49,152, a multiple of the page size */
    ane_storage *storage;   /* [alloc_size] bytes; allocator "surface" */
    void *platform_handle;  /* the IOSurfaceRef, or NULL for anonymous memory */
} ane_surface;

/* The allocator of the platform's surfaces (IOSurfaces), installed by the `ane` backend:
 * create returns the base address and may grow *alloc_size to the size it allocated. */
typedef struct ane_surface_platform {
    void *(*create)(size_t *alloc_size, void **handle, ane_error *err);
    void (*release)(void *handle);
    void (*lock)(void *handle, int readonly);
    void (*unlock)(void *handle, int readonly);
} ane_surface_platform;
/* Installs it for every surface created from then on (installed once, never removed). */
void ane_surface_use_platform(const ane_surface_platform *platform);
int ane_surface_platform_active(void);

/* The row stride and allocation a [1, C, 1, S] surface of this dtype needs. */
ane_status ane_surface_layout(int64_t channels, int64_t seq, ane_dtype dtype, size_t *row_stride,
                              size_t *min_alloc, ane_error *err);

/* alloc_size 0 means "the smallest valid"; a larger one is rounded up to a page multiple. */
ane_status ane_surface_create(ane_surface **out, int64_t channels, int64_t seq, ane_dtype dtype,
                              size_t alloc_size, ane_error *err);
/* The same, and with below_minimum the allocation may be smaller than ANE-04's minimum (as
 * small as the data): only the probes that look for the device's minimum make one. */
ane_status ane_surface_create_sized(ane_surface **out, int64_t channels, int64_t seq, ane_dtype dtype,
                                    size_t alloc_size, int below_minimum, ane_error *err);
void ane_surface_destroy(ane_surface *surface); /* NULL is fine */

/* A [1, C, 1, S] tensor view of the surface's memory with the padded row stride. */
ane_status ane_surface_view(const ane_surface *surface, ane_tensor *out, ane_error *err);

/* Copies a [1, C, 1, S] or [C, S] tensor in, converting its dtype; padding stays zero. */
ane_status ane_surface_write(ane_surface *surface, const ane_tensor *src, ane_error *err);
/* A new contiguous [1, C, 1, S] tensor of `dtype` holding the surface's values. */
ane_status ane_surface_read(const ane_surface *surface, ane_dtype dtype, ane_tensor *out,
                            ane_error *err);

/* CPU access brackets (IOSurfaceLock/Unlock on macOS; no-ops elsewhere). */
void ane_surface_lock(const ane_surface *surface, int readonly);
void ane_surface_unlock(const ane_surface *surface, int readonly);

#endif
