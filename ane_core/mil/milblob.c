/* MILBlob v2 writing and validating reading (see milblob.h). */
#include "milblob.h"

#include <stdlib.h>
#include <string.h>

#include "../base/bytes.h"

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

/* ------------------------------------------------------------------ files in pieces */

const ane_mil_piece *ane_mil_file_piece(const ane_mil_file *file, uint64_t offset, uint64_t n) {
    if (file->bytes || offset > file->size || n > file->size - offset || file->npieces == 0) return NULL;
    int low = 0, high = file->npieces - 1; /* the last piece starting at or before offset */
    while (low < high) {
        int middle = (low + high + 1) / 2;
        if (file->pieces[middle].offset <= offset) low = middle;
        else high = middle - 1;
    }
    const ane_mil_piece *piece = &file->pieces[low];
    if (offset < piece->offset || offset - piece->offset > piece->size || n > piece->size - (offset - piece->offset))
        return NULL;
    return piece;
}

const uint8_t *ane_mil_file_range(const ane_mil_file *file, uint64_t offset, uint64_t n) {
    if (offset > file->size || n > file->size - offset) return NULL;
    if (file->bytes) return file->bytes + offset;
    const ane_mil_piece *piece = ane_mil_file_piece(file, offset, n);
    return piece ? piece->bytes + (offset - piece->offset) : NULL;
}

void ane_mil_file_copy(const ane_mil_file *file, uint8_t *out) {
    if (file->bytes) {
        memcpy(out, file->bytes, file->size);
        return;
    }
    for (int i = 0; i < file->npieces; i++) memcpy(out + file->pieces[i].offset, file->pieces[i].bytes, file->pieces[i].size);
}

/* ------------------------------------------------------------------ writing */

static void append_own(ane_milblob_writer *w, const void *bytes, uint64_t size, int *ok);

static void writer_init(ane_milblob_writer *w, int by_reference) {
    memset(w, 0, sizeof *w);
    w->by_reference = by_reference;
    uint8_t header[ANE_MILBLOB_ALIGN] = {0};
    ane_put_u32_le(header + 4, ANE_MILBLOB_VERSION);
    int ok = 1;
    append_own(w, header, sizeof header, &ok);
    if (!ok) w->bytes.failed = 1;
}

void ane_milblob_writer_init(ane_milblob_writer *w) { writer_init(w, 0); }
void ane_milblob_writer_init_by_reference(ane_milblob_writer *w) { writer_init(w, 1); }

static int add_part(ane_milblob_writer *w, const uint8_t *borrowed, uint64_t size) {
    ane_milblob_part *last = w->nparts ? &w->parts[w->nparts - 1] : NULL;
    if (!borrowed && last && !last->borrowed) { /* the writer's own bytes continue the last part */
        last->size += size;
        return 1;
    }
    if (w->nparts == w->parts_capacity) {
        int capacity = w->parts_capacity ? 2 * w->parts_capacity : 16;
        ane_milblob_part *grown = realloc(w->parts, (size_t)capacity * sizeof *grown);
        if (!grown) return 0;
        w->parts = grown;
        w->parts_capacity = capacity;
    }
    w->parts[w->nparts++] = (ane_milblob_part){.offset = w->length, .size = size, .borrowed = borrowed,
                                                .own_at = borrowed ? 0 : w->bytes.length};
    return 1;
}

/* The writer's own bytes appended to the file (*ok cleared when listing them fails). */
static void append_own(ane_milblob_writer *w, const void *bytes, uint64_t size, int *ok) {
    if (w->by_reference && !add_part(w, NULL, size)) *ok = 0;
    ane_text_append_bytes(&w->bytes, bytes, (size_t)size);
    w->length += size;
}

/* A blob, borrowed (borrow: a writer by reference keeps the pointer where the blob is large
 * enough) or copied. *borrowed_part (may be NULL): the index of the part that points at data,
 * or -1 where the blob was copied. */
static ane_status add_blob(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size, int borrow,
                           uint64_t *record_offset, int *borrowed_part, ane_error *err) {
    if (borrowed_part) *borrowed_part = -1;
    if (code < MILBLOB_FLOAT16 || code > MILBLOB_FLOAT8E5M2)
        return ane_fail(err, ANE_ERR_ARGUMENT, "MILBlob: unknown data type code %u", code);
    uint64_t offset = w->length; /* always 64-aligned: records and padding keep it so */
    uint8_t record[ANE_MILBLOB_ALIGN] = {0};
    ane_put_u32_le(record, ANE_MILBLOB_SENTINEL);
    ane_put_u32_le(record + 4, code);
    ane_put_u64_le(record + 8, size);
    ane_put_u64_le(record + 16, offset + ANE_MILBLOB_ALIGN);
    int ok = 1;
    append_own(w, record, sizeof record, &ok);
    if (borrow && w->by_reference && size >= ANE_MILBLOB_BORROW_MIN) {
        ok = ok && add_part(w, data, size);
        if (ok && borrowed_part) *borrowed_part = w->nparts - 1;
        w->length += size;
    } else {
        append_own(w, data, size, &ok);
    }
    static const uint8_t zeros[ANE_MILBLOB_ALIGN] = {0};
    append_own(w, zeros, align_up(w->length) - w->length, &ok);
    if (!ok || w->bytes.failed)
        return ane_fail(err, ANE_ERR_NOMEM, "MILBlob: out of memory at %llu bytes", (unsigned long long)offset);
    ane_put_u32_le((uint8_t *)w->bytes.data, ++w->count);
    *record_offset = offset;
    return ANE_OK;
}

ane_status ane_milblob_add(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size,
                           uint64_t *record_offset, ane_error *err) {
    return add_blob(w, code, data, size, 0, record_offset, NULL, err);
}

ane_status ane_milblob_add_borrowed(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size,
                                    uint64_t *record_offset, ane_error *err) {
    return add_blob(w, code, data, size, 1, record_offset, NULL, err);
}

ane_status ane_milblob_add_derived(ane_milblob_writer *w, uint32_t code, uint8_t *data, uint64_t size, const void *origin,
                                   int origin_kind, uint64_t *record_offset, ane_error *err) {
    int part = -1;
    ane_status status = add_blob(w, code, data, size, 1, record_offset, &part, err);
    if (status || part < 0) { /* (copied, or not added) */
        free(data);
        return status;
    }
    w->parts[part].owned = data, w->parts[part].origin = origin, w->parts[part].origin_kind = origin_kind;
    return ANE_OK;
}

ane_status ane_milblob_writer_file(ane_milblob_writer *w, const char *path, ane_mil_file *file, ane_error *err) {
    memset(file, 0, sizeof *file);
    file->path = path;
    file->size = (size_t)w->length;
    if (!w->by_reference) {
        file->bytes = (const uint8_t *)w->bytes.data;
        return ANE_OK;
    }
    free(w->pieces);
    w->pieces = malloc((size_t)(w->nparts ? w->nparts : 1) * sizeof *w->pieces);
    if (!w->pieces) return ane_fail(err, ANE_ERR_NOMEM, "MILBlob: out of memory listing the file's pieces");
    for (int i = 0; i < w->nparts; i++) {
        const ane_milblob_part *part = &w->parts[i];
        w->pieces[i] = (ane_mil_piece){.offset = part->offset, .size = part->size,
                                       .bytes = part->borrowed ? part->borrowed : (const uint8_t *)w->bytes.data + part->own_at,
                                       .origin = part->origin, .origin_kind = part->origin_kind};
    }
    file->pieces = w->pieces;
    file->npieces = w->nparts;
    return ANE_OK;
}

void ane_milblob_writer_free(ane_milblob_writer *w) {
    for (int i = 0; i < w->nparts; i++) free(w->parts[i].owned);
    ane_text_free(&w->bytes);
    free(w->parts);
    free(w->pieces);
    memset(w, 0, sizeof *w);
}

/* Reading follows the device: a BLOBFILE offset must point at a record (its sentinel), and
 * the data the MIL's type needs is read right after the 64-byte record, whatever the
 * record's own fields say. Fields that disagree (data offset, size, type code, alignment,
 * the header's count; other writers' files have each of these) are noted, not fatal. */

/* The record at `offset`: its sentinel is checked, its fields read as they are. */
static ane_status read_record(const ane_mil_file *file, const char *name, uint64_t offset, ane_milblob_record *out,
                              ane_error *err) {
    size_t size = file->size;
    if (offset < ANE_MILBLOB_ALIGN || offset > size || size - offset < ANE_MILBLOB_ALIGN)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: no record at offset %llu: a record is 64 bytes inside the %zu-byte file, "
                        "after the 64-byte header (ANE-08)", name, (unsigned long long)offset, size);
    const uint8_t *r = ane_mil_file_range(file, offset, ANE_MILBLOB_ALIGN);
    if (!r)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: no record at offset %llu: the 64 bytes there cross from one piece of "
                        "the file into the next", name, (unsigned long long)offset);
    uint32_t sentinel = ane_get_u32_le(r);
    if (sentinel != ANE_MILBLOB_SENTINEL)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: sentinel is 0x%08X, not 0xDEADBEEF (ANE-08)", name,
                        (unsigned long long)offset, sentinel);
    out->record_offset = offset;
    out->code = ane_get_u32_le(r + 4);
    out->size = ane_get_u64_le(r + 8);
    out->data_offset = ane_get_u64_le(r + 16);
    return ANE_OK;
}

static int sentinel_at(const ane_mil_file *file, uint64_t offset) {
    const uint8_t *p = ane_mil_file_range(file, offset, 4);
    return p && ane_get_u32_le(p) == ANE_MILBLOB_SENTINEL;
}

/* Notes what in a record disagrees with where the device reads its data. */
static void note_record(const ane_milblob_record *r, const char *name, ane_notes *notes) {
    if (r->record_offset % ANE_MILBLOB_ALIGN)
        ane_notes_add(notes, "%s: record at offset %llu is not 64-byte aligned (the format aligns records; the device "
                      "reads it anyway)", name, (unsigned long long)r->record_offset);
    if (r->data_offset != r->record_offset + ANE_MILBLOB_ALIGN)
        ane_notes_add(notes, "%s: record at offset %llu: its data offset field says %llu; the data is read at %llu, "
                      "after the record, as the device reads it", name, (unsigned long long)r->record_offset,
                      (unsigned long long)r->data_offset, (unsigned long long)(r->record_offset + ANE_MILBLOB_ALIGN));
    if (r->code < MILBLOB_FLOAT16 || r->code > MILBLOB_FLOAT8E5M2)
        ane_notes_add(notes, "%s: record at offset %llu: unknown data type code %u (the MIL's type is what counts)", name,
                      (unsigned long long)r->record_offset, r->code);
}

ane_status ane_milblob_parse(const ane_mil_file *file, const char *name, ane_milblob_record **records, int *count,
                             ane_notes *notes, ane_error *err) {
    *records = NULL;
    *count = 0;
    size_t size = file->size;
    const uint8_t *header = ane_mil_file_range(file, 0, ANE_MILBLOB_ALIGN);
    if (!header)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: %zu bytes is too short for the 64-byte MILBlob header", name, size);
    uint32_t declared = ane_get_u32_le(header), version = ane_get_u32_le(header + 4);
    if (version != ANE_MILBLOB_VERSION)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header at offset 4: version %u, expected 2", name, version);
    int capacity = 8, found = 0;
    ane_milblob_record *list = malloc((size_t)capacity * sizeof *list);
    if (!list) return ane_fail(err, ANE_ERR_NOMEM, "%s: out of memory", name);
    static const uint8_t zeros[ANE_MILBLOB_ALIGN] = {0};
    uint64_t offset = ANE_MILBLOB_ALIGN;
    /* Walk the records: each one's data follows it; the next sits at the next 64-byte
     * boundary, or right after the data where a writer packs records unaligned. */
    const uint8_t *at;
    while ((at = ane_mil_file_range(file, offset, ANE_MILBLOB_ALIGN)) && memcmp(at, zeros, sizeof zeros) != 0) {
        if (ane_get_u32_le(at) != ANE_MILBLOB_SENTINEL) {
            if (found == 0) {
                free(list);
                return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset 64: sentinel is 0x%08X, not 0xDEADBEEF: the "
                                "file holds no blob (ANE-08)", name, ane_get_u32_le(at));
            }
            ane_notes_add(notes, "%s: the %zu bytes from offset %llu, after the last record, are not a record (ignored)",
                          name, size - (size_t)offset, (unsigned long long)offset);
            break;
        }
        if (found == capacity) {
            capacity *= 2;
            ane_milblob_record *grown = realloc(list, (size_t)capacity * sizeof *list);
            if (!grown) {
                free(list);
                return ane_fail(err, ANE_ERR_NOMEM, "%s: out of memory", name);
            }
            list = grown;
        }
        ane_milblob_record *r = &list[found++];
        read_record(file, name, offset, r, NULL); /* the sentinel was checked above */
        note_record(r, name, notes);
        uint64_t data = offset + ANE_MILBLOB_ALIGN;
        if (r->size > size - data) {
            ane_notes_add(notes, "%s: record at offset %llu claims %llu data bytes; only %llu follow it (a lookup reads what "
                          "the MIL's type needs)", name, (unsigned long long)offset, (unsigned long long)r->size,
                          (unsigned long long)(size - data));
            break;
        }
        uint64_t next = data + r->size;
        offset = sentinel_at(file, next) ? next : align_up(next); /* packed, or after the zero padding */
    }
    if (found == 0 && declared > 0) {
        free(list);
        return ane_fail(err, ANE_ERR_FORMAT, "%s: header declares %u blobs but the file holds none (truncated?)", name,
                        declared);
    }
    if ((uint32_t)found != declared)
        ane_notes_add(notes, "%s: the header declares %u blob%s, the file holds %d", name, declared, declared == 1 ? "" : "s",
                      found);
    *records = list;
    *count = found;
    return ANE_OK;
}

ane_status ane_milblob_lookup(const ane_mil_file *file, const char *name, uint64_t record_offset, uint32_t code,
                              uint64_t expected_size, const uint8_t **data, ane_notes *notes, ane_error *err) {
    size_t size = file->size;
    ane_milblob_record record;
    ane_status status = read_record(file, name, record_offset, &record, err);
    if (status) return status;
    uint64_t start = record_offset + ANE_MILBLOB_ALIGN;
    if (expected_size > size - start)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: the MIL's type needs %llu data bytes at offset "
                        "%llu, past the end of the %zu-byte file", name, (unsigned long long)record_offset,
                        (unsigned long long)expected_size, (unsigned long long)start, size);
    note_record(&record, name, notes);
    if (record.code != code)
        ane_notes_add(notes, "%s: record at offset %llu holds type code %u, the MIL's type is code %u: read as the MIL "
                      "says, as the device does", name, (unsigned long long)record_offset, record.code, code);
    if (record.size != expected_size)
        ane_notes_add(notes, "%s: record at offset %llu says %llu data bytes, the MIL's type needs %llu: read as the MIL "
                      "says, as the device does", name, (unsigned long long)record_offset,
                      (unsigned long long)record.size, (unsigned long long)expected_size);
    *data = ane_mil_file_range(file, start, expected_size);
    if (!*data)
        return ane_fail(err, ANE_ERR_FORMAT, "%s: record at offset %llu: the %llu data bytes the MIL's type needs at offset "
                        "%llu cross from one piece of the file into the next", name, (unsigned long long)record_offset,
                        (unsigned long long)expected_size, (unsigned long long)start);
    return ANE_OK;
}
