/* The byte layer of safetensors files: mapping, bounds checks, tensor views, atomic writes.
 *
 * Layout: u64 little-endian header length N, N bytes of JSON header, then the data; each
 * tensor's data_offsets are relative to the end of the header. The JSON itself is parsed
 * by the caller (the Lua layer uses lua-cjson, see lua/ane/io.lua), which hands every
 * entry to ane_safetensors_tensor for validation; this keeps one JSON parser in the
 * project. */
#ifndef ANE_IO_SAFETENSORS_H
#define ANE_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../tensor/tensor.h"

#define ANE_SAFETENSORS_MAX_HEADER (100u << 20) /* the format's own limit: 100 MB */

typedef struct ane_safetensors_file {
    ane_storage *storage;   /* the whole file, mapped read-only */
    const char *header;     /* [header_len] JSON bytes inside the mapping */
    size_t header_len;
    size_t data_start;      /* 8 + header_len */
    size_t data_size;       /* file size - data_start */
} ane_safetensors_file;

/* Maps `path` and checks the header length against the file size. */
ane_status ane_safetensors_map(const char *path, ane_safetensors_file *out, ane_error *err);
void ane_safetensors_unmap(ane_safetensors_file *file);

/* A read-only view of one tensor after checking its dtype code, shape and byte range. */
ane_status ane_safetensors_tensor(const ane_safetensors_file *file, const char *path, const char *name,
                                  const char *dtype_code, int ndim, const int64_t *shape, uint64_t begin,
                                  uint64_t end, ane_tensor *out, ane_error *err);

/* Checks that byte ranges [begin[i], end[i]) do not overlap; names[i] label errors. */
ane_status ane_safetensors_check_overlaps(const char *path, size_t count, const char *const *names,
                                          const uint64_t *begin, const uint64_t *end, ane_error *err);

/* Writes header + tensors (in order, each as contiguous bytes of its dtype) atomically:
 * a temporary file beside `path`, fsync, rename, fsync of the directory. On any failure
 * (a full disk included) the temporary file is removed and `path` is untouched. */
ane_status ane_safetensors_write(const char *path, const char *header_json, size_t header_len,
                                 const ane_tensor *const *tensors, size_t count, ane_error *err);

/* The same atomic protocol for any file: `prefix` bytes, then each tensor's bytes. */
ane_status ane_write_file_atomic(const char *path, const void *prefix, size_t prefix_len,
                                const ane_tensor *const *tensors, size_t count, ane_error *err);

#endif
