/* MILBlob v2 writing and validating reading (see milblob.h). */
#include "milblob.h"

#include <stdlib.h>
#include <string.h>

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static uint64_t align_up(uint64_t value) { return (value + ANE_MILBLOB_ALIGN - 1) / ANE_MILBLOB_ALIGN * ANE_MILBLOB_ALIGN; }

uint32_t ane_milblob_code_for(ane_dtype dtype) {
    switch (dtype) {
    case ANE_FP16: return MILBLOB_FLOAT16;
    case ANE_FP32: return MILBLOB_FLOAT32;
    case ANE_BF16: return MILBLOB_BFLOAT16;
    case ANE_UINT8: return MILBLOB_UINT8;
    case ANE_INT8: return MILBLOB_INT8;
    case ANE_INT16: return MILBLOB_INT16;
    case ANE_UINT16: return MILBLOB_UINT16;
    case ANE_INT32: return MILBLOB_INT32;
    default: return 0;
    }
}

void ane_milblob_writer_init(ane_milblob_writer *w) {
    memset(w, 0, sizeof *w);
    uint8_t header[ANE_MILBLOB_ALIGN] = {0};
    put_u32(header + 4, ANE_MILBLOB_VERSION);
    ane_text_append_bytes(&w->bytes, header, sizeof header);
}

ane_status ane_milblob_add(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size,
                           uint64_t *record_offset, ane_error *err) {
    if (code < MILBLOB_FLOAT16 || code > MILBLOB_FLOAT8E5M2)
        return ane_fail(err, ANE_ERR_ARGUMENT, "MILBlob: unknown data type code %u", code);
    uint64_t offset = w->bytes.length; /* always 64-aligned: records and padding keep it so */
    uint8_t record[ANE_MILBLOB_ALIGN] = {0};
    put_u32(record, ANE_MILBLOB_SENTINEL);
    put_u32(record + 4, code);
    put_u64(record + 8, size);
    put_u64(record + 16, offset + ANE_MILBLOB_ALIGN);
    ane_text_append_bytes(&w->bytes, record, sizeof record);
    ane_text_append_bytes(&w->bytes, data, (size_t)size);
    static const uint8_t zeros[ANE_MILBLOB_ALIGN] = {0};
    ane_text_append_bytes(&w->bytes, zeros, (size_t)(align_up(w->bytes.length) - w->bytes.length));
    if (w->bytes.failed) return ane_fail(err, ANE_ERR_NOMEM, "MILBlob: out of memory at %llu bytes", (unsigned long long)offset);
    put_u32((uint8_t *)w->bytes.data, ++w->count);
    *record_offset = offset;
    return ANE_OK;
}

void ane_milblob_writer_free(ane_milblob_writer *w) { ane_text_free(&w->bytes); }

/* Validates the record at `offset`; fills *out. */
static ane_status read_record(const uint8_t *bytes, size_t size, const char *name, uint64_t offset,
                              ane_milblob_record *out, ane_error *err) {
    if (offset % ANE_MILBLOB_ALIGN)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record offset %llu is not 64-byte aligned (ANE-08)", name,
                        (unsigned long long)offset);
    if (offset + ANE_MILBLOB_ALIGN > size)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu runs past the end of the %zu-byte file", name,
                        (unsigned long long)offset, size);
    const uint8_t *r = bytes + offset;
    uint32_t sentinel = get_u32(r);
    if (sentinel != ANE_MILBLOB_SENTINEL)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: sentinel is 0x%08X, not 0xDEADBEEF (ANE-08)", name,
                        (unsigned long long)offset, sentinel);
    out->record_offset = offset;
    out->code = get_u32(r + 4);
    out->size = get_u64(r + 8);
    out->data_offset = get_u64(r + 16);
    if (out->code < MILBLOB_FLOAT16 || out->code > MILBLOB_FLOAT8E5M2)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: unknown data type code %u", name,
                        (unsigned long long)offset, out->code);
    if (out->data_offset != offset + ANE_MILBLOB_ALIGN)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: data offset %llu should be %llu", name,
                        (unsigned long long)offset, (unsigned long long)out->data_offset,
                        (unsigned long long)(offset + ANE_MILBLOB_ALIGN));
    if (out->size > size || out->data_offset > size - out->size)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: %llu data bytes at offset %llu run past the end "
                        "of the %zu-byte file",
                        name, (unsigned long long)offset, (unsigned long long)out->size,
                        (unsigned long long)out->data_offset, size);
    return ANE_OK;
}

ane_status ane_milblob_parse(const uint8_t *bytes, size_t size, const char *name, ane_milblob_record **records,
                             int *count, ane_error *err) {
    *records = NULL;
    *count = 0;
    if (size < ANE_MILBLOB_ALIGN)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: %zu bytes is too short for the 64-byte MILBlob header", name, size);
    uint32_t declared = get_u32(bytes), version = get_u32(bytes + 4);
    if (version != ANE_MILBLOB_VERSION)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header at offset 4: version %u, expected 2", name, version);
    /* Walk records until the end of the file: loose writers declare count = 1 for many. */
    int capacity = 8, found = 0;
    ane_milblob_record *list = malloc((size_t)capacity * sizeof *list);
    if (!list) return ane_fail(err, ANE_ERR_NOMEM, "%s: out of memory", name);
    uint64_t offset = ANE_MILBLOB_ALIGN;
    static const uint8_t zeros[ANE_MILBLOB_ALIGN] = {0};
    while (offset + ANE_MILBLOB_ALIGN <= size) {
        if (memcmp(bytes + offset, zeros, sizeof zeros) == 0) break; /* trailing zero padding */
        if (found == capacity) {
            capacity *= 2;
            ane_milblob_record *grown = realloc(list, (size_t)capacity * sizeof *list);
            if (!grown) {
                free(list);
                return ane_fail(err, ANE_ERR_NOMEM, "%s: out of memory", name);
            }
            list = grown;
        }
        ane_status status = read_record(bytes, size, name, offset, &list[found], err);
        if (status) {
            free(list);
            return status;
        }
        offset = align_up(list[found].data_offset + list[found].size);
        found++;
    }
    if (found == 0 && declared > 0) {
        free(list);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header declares %u blobs but the file holds none (truncated?)", name,
                        declared);
    }
    if ((uint32_t)found < declared) {
        free(list);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header declares %u blobs but only %d follow (truncated?)", name, declared,
                        found);
    }
    *records = list;
    *count = found;
    return ANE_OK;
}

ane_status ane_milblob_lookup(const uint8_t *bytes, size_t size, const char *name, uint64_t record_offset,
                              uint32_t code, uint64_t expected_size, const uint8_t **data, ane_error *err) {
    ane_milblob_record record;
    ane_status status = read_record(bytes, size, name, record_offset, &record, err);
    if (status) return status;
    if (record.code != code)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu holds type code %u, the MIL type needs %u", name,
                        (unsigned long long)record_offset, record.code, code);
    /* Loose writers store the size as a u32; a zero high half reads the same. */
    if (record.size != expected_size)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu holds %llu bytes, the MIL type needs %llu", name,
                        (unsigned long long)record_offset, (unsigned long long)record.size,
                        (unsigned long long)expected_size);
    *data = bytes + record.data_offset;
    return ANE_OK;
}
