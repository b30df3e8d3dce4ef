/* Surfaces (see surface.h): layout rules, allocation (IOSurfaces once the `ane` backend has
 * installed its platform allocator, anonymous pages otherwise), and conversion to and from
 * host tensors. */
#include "surface.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


static size_t round_up(size_t value, size_t multiple) { return (value + multiple - 1) / multiple * multiple; }

static size_t page_size(void) {
    long size = sysconf(_SC_PAGESIZE);
    return size > 0 ? (size_t)size : 4096;
}

ane_status ane_surface_layout(int64_t channels, int64_t seq, ane_dtype dtype, size_t *row_stride,
                              size_t *min_alloc, ane_error *err) {
    if (dtype != ANE_FP16 && dtype != ANE_FP32)
        return ane_fail(err, ANE_ERR_ARGUMENT, "a surface holds fp16 or fp32, not %s", ane_dtype_name(dtype));
    if (channels < 1 || seq < 1 || channels > (1 << 24) || seq > (1 << 24))
        return ane_fail(err, ANE_ERR_ARGUMENT, "surface channels and seq must be 1..16777216, got %lld and %lld",
                        (long long)channels, (long long)seq);
    *row_stride = round_up((size_t)seq * ane_dtype_size(dtype), ANE_SURFACE_ROW_ALIGN);
    size_t needed = (size_t)channels * *row_stride;
    if (needed < ANE_SURFACE_MIN_ALLOC) needed = ANE_SURFACE_MIN_ALLOC;
    *min_alloc = round_up(needed, page_size());
    return ANE_OK;
}

/* ---- the platform allocation behind the "surface" allocator ---- */

static const ane_surface_platform *platform; /* NULL: anonymous pages */

void ane_surface_use_platform(const ane_surface_platform *surfaces) { platform = surfaces; }
int ane_surface_platform_active(void) { return platform != NULL; }

/* Returns the zeroed bytes; *alloc_size may grow to what the platform allocated. */
static void *platform_allocate(size_t *alloc_size, void **handle, ane_error *err) {
    if (platform) {
        void *data = platform->create(alloc_size, handle, err);
        if (data) memset(data, 0, *alloc_size);
        return data;
    }
    void *data = mmap(NULL, *alloc_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (data == MAP_FAILED) {
        ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating a %zu-byte surface", *alloc_size);
        return NULL;
    }
    *handle = NULL;
    return data;
}

static void platform_release(ane_storage *storage) {
    if (storage->context) platform->release(storage->context);
    else munmap(storage->data, storage->nbytes);
}

static const ane_allocator surface_allocator = {"surface", platform_release};

ane_status ane_surface_create(ane_surface **out, int64_t channels, int64_t seq, ane_dtype dtype,
                              size_t alloc_size, ane_error *err) {
    return ane_surface_create_sized(out, channels, seq, dtype, alloc_size, 0, err);
}

ane_status ane_surface_create_sized(ane_surface **out, int64_t channels, int64_t seq, ane_dtype dtype,
                                    size_t alloc_size, int below_minimum, ane_error *err) {
    size_t row_stride = 0, min_alloc = 0;
    ane_status status = ane_surface_layout(channels, seq, dtype, &row_stride, &min_alloc, err);
    if (status) return status;
    if (below_minimum) min_alloc = (size_t)channels * row_stride; /* the data alone */
    if (alloc_size == 0) alloc_size = min_alloc;
    if (alloc_size < min_alloc)
        return ane_fail(err, ANE_ERR_ARGUMENT,
                        "alloc_size %zu is smaller than the %zu bytes a [1, %lld, 1, %lld] %s surface needs",
                        alloc_size, min_alloc, (long long)channels, (long long)seq, ane_dtype_name(dtype));
    alloc_size = round_up(alloc_size, page_size());

    ane_surface *surface = calloc(1, sizeof *surface);
    if (!surface) return ane_fail(err, ANE_ERR_NOMEM, "out of memory allocating a surface");
    void *handle = NULL;
    void *data = platform_allocate(&alloc_size, &handle, err);
    if (!data) {
        free(surface);
        return err ? err->status : ANE_ERR_NOMEM;
    }
    status = ane_storage_wrap(data, alloc_size, 0, &surface_allocator, handle, &surface->storage, err);
    if (status) {
        ane_storage fake = {.data = data, .nbytes = alloc_size, .context = handle};
        platform_release(&fake);
        free(surface);
        return status;
    }
    surface->channels = channels;
    surface->seq = seq;
    surface->dtype = dtype;
    surface->row_stride = row_stride;
    surface->alloc_size = alloc_size;
    surface->platform_handle = handle;
    *out = surface;
    return ANE_OK;
}

void ane_surface_destroy(ane_surface *surface) {
    if (!surface) return;
    ane_storage_release(surface->storage);
    free(surface);
}

ane_status ane_surface_view(const ane_surface *surface, ane_tensor *out, ane_error *err) {
    int64_t element = (int64_t)ane_dtype_size(surface->dtype);
    int64_t row = (int64_t)surface->row_stride / element;
    int64_t shape[4] = {1, surface->channels, 1, surface->seq};
    int64_t strides[4] = {surface->channels * row, row, row, 1};
    return ane_tensor_on_storage(out, surface->storage, 0, 4, shape, strides, surface->dtype, err);
}

void ane_surface_lock(const ane_surface *surface, int readonly) {
    if (surface && surface->platform_handle) platform->lock(surface->platform_handle, readonly);
}

void ane_surface_unlock(const ane_surface *surface, int readonly) {
    if (surface && surface->platform_handle) platform->unlock(surface->platform_handle, readonly);
}

ane_status ane_surface_write(ane_surface *surface, const ane_tensor *src, ane_error *err) {
    int fits = (src->ndim == 4 && src->shape[0] == 1 && src->shape[1] == surface->channels &&
                src->shape[2] == 1 && src->shape[3] == surface->seq) ||
               (src->ndim == 2 && src->shape[0] == surface->channels && src->shape[1] == surface->seq);
    if (!fits) {
        char shape[128];
        return ane_fail(err, ANE_ERR_SHAPE, "cannot write a %s tensor to a [1, %lld, 1, %lld] surface "
                        "(expected [1, %lld, 1, %lld] or [%lld, %lld])",
                        ane_shape_string(shape, sizeof shape, src->ndim, src->shape),
                        (long long)surface->channels, (long long)surface->seq, (long long)surface->channels,
                        (long long)surface->seq, (long long)surface->channels, (long long)surface->seq);
    }
    ane_tensor view, source4;
    ane_status status = ane_surface_view(surface, &view, err);
    if (status) return status;
    ane_tensor_share(&source4, src);
    if (src->ndim == 2) { /* [C, S] -> [1, C, 1, S]: insert unit dims */
        source4.ndim = 4;
        source4.shape[0] = 1, source4.shape[1] = src->shape[0], source4.shape[2] = 1, source4.shape[3] = src->shape[1];
        source4.strides[0] = 0, source4.strides[1] = src->strides[0], source4.strides[2] = 0, source4.strides[3] = src->strides[1];
    }
    ane_surface_lock(surface, 0);
    status = ane_tensor_copy_into(&view, &source4, err);
    ane_surface_unlock(surface, 0);
    ane_tensor_release(&source4);
    ane_tensor_release(&view);
    return status;
}

ane_status ane_surface_read(const ane_surface *surface, ane_dtype dtype, ane_tensor *out,
                            ane_error *err) {
    ane_tensor view;
    ane_status status = ane_surface_view(surface, &view, err);
    if (status) return status;
    ane_surface_lock(surface, 1);
    status = ane_tensor_to(out, &view, dtype, err);
    ane_surface_unlock(surface, 1);
    ane_tensor_release(&view);
    return status;
}
