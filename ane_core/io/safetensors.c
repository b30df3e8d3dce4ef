/* safetensors bytes: mapping and validation of entries, atomic writing (see safetensors.h). */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/bytes.h"

ane_status ane_safetensors_map(const char *path, ane_safetensors_file *out, ane_error *err) {
    memset(out, 0, sizeof *out);
    ane_storage *storage;
    ane_status status = ane_storage_map_file(path, &storage, err);
    if (status) return status;
    const unsigned char *bytes = storage->data;
    size_t size = storage->nbytes;
    if (size < 8) {
        ane_storage_release(storage);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: file is %zu bytes, too short for the 8-byte header length",
                        path, size);
    }
    uint64_t header_len = ane_get_u64_le(bytes);
    if (header_len > size - 8) {
        ane_storage_release(storage);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header length %llu at offset 0 runs past the end of the %zu-byte file",
                        path, (unsigned long long)header_len, size);
    }
    if (header_len > ANE_SAFETENSORS_MAX_HEADER) {
        ane_storage_release(storage);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header length %llu exceeds the format's 100 MB limit", path,
                        (unsigned long long)header_len);
    }
    out->storage = storage;
    out->header = (const char *)bytes + 8;
    out->header_len = (size_t)header_len;
    out->data_start = 8 + (size_t)header_len;
    out->data_size = storage->nbytes - out->data_start;
    return ANE_OK;
}

void ane_safetensors_unmap(ane_safetensors_file *file) {
    ane_storage_release(file->storage);
    file->storage = NULL;
}

ane_status ane_safetensors_tensor(const ane_safetensors_file *file, const char *path, const char *name,
                                  const char *dtype_code, int ndim, const int64_t *shape, uint64_t begin,
                                  uint64_t end, ane_tensor *out, ane_error *err) {
    ane_dtype dtype;
    if (!ane_dtype_from_safetensors_code(dtype_code, &dtype))
        return ane_fail(err, ANE_ERR_FORMAT, "%s: tensor '%s' has unsupported dtype '%s'", path, name, dtype_code);
    if (ndim < 0 || ndim > ANE_MAX_DIMS)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: tensor '%s' has %d dimensions (at most %d supported)", path, name,
                        ndim, ANE_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && numel > UINT64_MAX / 16 / (uint64_t)shape[i]))
            return ane_fail(err, ANE_ERR_FORMAT, "%s: tensor '%s' has an invalid shape entry %lld", path, name,
                            (long long)shape[i]);
        numel *= (uint64_t)shape[i];
    }
    if (begin > end)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: tensor '%s' has data_offsets [%llu, %llu] with begin > end", path,
                        name, (unsigned long long)begin, (unsigned long long)end);
    if (end > file->data_size)
        return ane_fail(err, ANE_ERR_FORMAT,
                        "%s: tensor '%s' data_offsets end %llu (file offset %llu) is past the end of the file "
                        "(%zu data bytes): truncated?",
                        path, name, (unsigned long long)end, (unsigned long long)(end + file->data_start),
                        file->data_size);
    uint64_t expected = numel * ane_dtype_size(dtype);
    if (end - begin != expected) {
        char text[128];
        return ane_fail(err, ANE_ERR_FORMAT, "%s: tensor '%s' %s %s needs %llu bytes but data_offsets span %llu",
                        path, name, dtype_code, ane_shape_string(text, sizeof text, ndim, shape),
                        (unsigned long long)expected, (unsigned long long)(end - begin));
    }
    size_t offset = file->data_start + (size_t)begin;
    ane_status status;
    if (offset % ane_dtype_size(dtype) == 0) {
        status = ane_tensor_on_storage(out, file->storage, offset, ndim, shape, NULL, dtype, err);
    } else {
        /* The format does not promise aligned data (a header of odd length shifts it): such a
         * tensor is copied rather than viewed, so no element is read misaligned. */
        status = ane_tensor_zeros(out, ndim, shape, dtype, err);
        if (!status && expected) memcpy(ane_tensor_data(out), (const uint8_t *)file->storage->data + offset, (size_t)expected);
    }
    if (status) ane_fail_context(err, "%s: tensor '%s'", path, name);
    return status;
}

typedef struct range_entry {
    uint64_t begin, end;
    const char *name;
} range_entry;

static int by_begin(const void *a, const void *b) {
    const range_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

ane_status ane_safetensors_check_overlaps(const char *path, size_t count, const char *const *names,
                                          const uint64_t *begin, const uint64_t *end, ane_error *err) {
    if (count < 2) return ANE_OK;
    range_entry *entries = malloc(count * sizeof *entries);
    if (!entries) return ane_fail(err, ANE_ERR_NOMEM, "out of memory checking %s", path);
    for (size_t i = 0; i < count; i++) entries[i] = (range_entry){begin[i], end[i], names[i]};
    qsort(entries, count, sizeof *entries, by_begin);
    ane_status status = ANE_OK;
    for (size_t i = 1; i < count && !status; i++) {
        /* Empty tensors occupy no bytes and overlap nothing. */
        if (entries[i].begin == entries[i].end || entries[i - 1].begin == entries[i - 1].end) continue;
        if (entries[i].begin < entries[i - 1].end)
            status = ane_fail(err, ANE_ERR_FORMAT, "%s: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", path,
                              entries[i - 1].name, (unsigned long long)entries[i - 1].begin,
                              (unsigned long long)entries[i - 1].end, entries[i].name,
                              (unsigned long long)entries[i].begin, (unsigned long long)entries[i].end);
    }
    free(entries);
    return status;
}

/* ------------------------------------------------------------------ writing */

static ane_status write_all(int fd, const void *data, size_t size, const char *path, size_t *written,
                            ane_error *err) {
    const char *p = data;
    while (size > 0) {
        ssize_t n = write(fd, p, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            return ane_fail(err, ANE_ERR_IO, "%s: write failed after %zu bytes: %s", path, *written,
                            n < 0 ? strerror(errno) : "no progress");
        p += n;
        size -= (size_t)n;
        *written += (size_t)n;
    }
    return ANE_OK;
}

static ane_status write_tensor_bytes(int fd, const ane_tensor *t, const char *path, size_t *written,
                                     ane_error *err) {
    size_t bytes = (size_t)ane_tensor_numel(t) * ane_dtype_size(t->dtype);
    if (ane_tensor_is_contiguous(t)) return write_all(fd, ane_tensor_data(t), bytes, path, written, err);
    ane_tensor packed;
    ane_status status = ane_tensor_to(&packed, t, t->dtype, err);
    if (status) return status;
    status = write_all(fd, ane_tensor_data(&packed), bytes, path, written, err);
    ane_tensor_release(&packed);
    return status;
}

static void fsync_directory_of(const char *path) {
    char copy[4096];
    snprintf(copy, sizeof copy, "%s", path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

ane_status ane_write_file_atomic(const char *path, const void *prefix, size_t prefix_len,
                                const ane_tensor *const *tensors, size_t count, ane_error *err) {
    char temp_path[4200];
    snprintf(temp_path, sizeof temp_path, "%s.tmp-%ld", path, (long)getpid());
    int fd = open(temp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ane_fail(err, ANE_ERR_IO, "%s: cannot create temporary file %s: %s", path, temp_path, strerror(errno));
    size_t written = 0;
    ane_status status = write_all(fd, prefix, prefix_len, path, &written, err);
    for (size_t i = 0; i < count && !status; i++) status = write_tensor_bytes(fd, tensors[i], path, &written, err);
    if (!status && fsync(fd) != 0) status = ane_fail(err, ANE_ERR_IO, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) != 0 && !status) status = ane_fail(err, ANE_ERR_IO, "%s: close failed: %s", path, strerror(errno));
    if (!status && rename(temp_path, path) != 0)
        status = ane_fail(err, ANE_ERR_IO, "%s: cannot rename the temporary file into place: %s", path, strerror(errno));
    if (status) {
        unlink(temp_path);
        return status;
    }
    fsync_directory_of(path);
    return ANE_OK;
}

ane_status ane_safetensors_write(const char *path, const char *header_json, size_t header_len,
                                 const ane_tensor *const *tensors, size_t count, ane_error *err) {
    /* 8-byte little-endian header length, the JSON header padded with spaces to a multiple
     * of 8 bytes (so the data starts aligned), then the tensor bytes. */
    size_t padded = (header_len + 7) / 8 * 8;
    unsigned char *prefix = malloc(8 + padded);
    if (!prefix) return ane_fail(err, ANE_ERR_NOMEM, "%s: out of memory for a %zu-byte header", path, header_len);
    ane_put_u64_le(prefix, padded);
    memcpy(prefix + 8, header_json, header_len);
    memset(prefix + 8 + header_len, ' ', padded - header_len);
    ane_status status = ane_write_file_atomic(path, prefix, 8 + padded, tensors, count, err);
    free(prefix);
    return status;
}
