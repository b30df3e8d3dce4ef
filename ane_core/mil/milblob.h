/* MILBlob v2 weight files (weight.bin), byte-exact to docs/reference/milblob.md.
 *
 *   offset 0   header: u32 count, u32 version = 2, 56 zero bytes
 *   then per blob, each at a 64-byte aligned offset: a 64-byte record
 *     +0 u32 sentinel 0xDEADBEEF, +4 u32 dtype code, +8 u64 data size,
 *     +16 u64 absolute data offset (= record offset + 64), +24 u64 sub-byte padding bits,
 *     +32 32 zero bytes
 *   followed at once by the data, padded with zeros to the next 64-byte boundary.
 * MIL's BLOBFILE offset is the offset of the record (64 for the first blob, ANE-08). */
#ifndef ANE_MIL_MILBLOB_H
#define ANE_MIL_MILBLOB_H

#include <stddef.h>
#include <stdint.h>

#include "../base/notes.h"
#include "../base/status.h"
#include "../base/text.h"
#include "../tensor/dtype.h"

#define ANE_MILBLOB_SENTINEL 0xDEADBEEFu
#define ANE_MILBLOB_VERSION 2
#define ANE_MILBLOB_ALIGN 64

/* The data type codes of the format. */
typedef enum ane_milblob_code {
    MILBLOB_FLOAT16 = 1, MILBLOB_FLOAT32 = 2, MILBLOB_UINT8 = 3, MILBLOB_INT8 = 4, MILBLOB_BFLOAT16 = 5,
    MILBLOB_INT16 = 6, MILBLOB_UINT16 = 7, MILBLOB_INT4 = 8, MILBLOB_UINT1 = 9, MILBLOB_UINT2 = 10,
    MILBLOB_UINT4 = 11, MILBLOB_UINT3 = 12, MILBLOB_UINT6 = 13, MILBLOB_INT32 = 14, MILBLOB_UINT32 = 15,
    MILBLOB_FLOAT8E4M3FN = 16, MILBLOB_FLOAT8E5M2 = 17,
} ane_milblob_code;

/* The code for a tensor dtype; 0 when the format has none (int64, bool). */
uint32_t ane_milblob_code_for(ane_dtype dtype);

/* `size` bytes of a weight file, at file offset `offset`. A piece a writer derived from another
 * form of the same values (the emitter's Q5_K / Q6_K codes, a byte each, unpacked from a graph
 * const's packed ones) names that form as its origin, which a reader in the same process may
 * take in place of the bytes (the parser: the packed tensor, not packing them again). */
typedef struct ane_mil_piece {
    uint64_t offset, size;
    const uint8_t *bytes;
    const void *origin; /* what the bytes were made from, or NULL: the writer's to say (emit.c: an ane_tensor) */
    int origin_kind;    /* which form origin is (emit.c: the const's ane_encoding) */
} ane_mil_piece;

/* A weight file as a MIL program's BLOBFILE names it: its bytes in one run, or (bytes NULL)
 * pieces in order of offset that cover [0, size) -- what a writer by reference gives (the
 * weights' bytes stay where they lie; see below). */
typedef struct ane_mil_file {
    const char *path;            /* as BLOBFILE names it: "@model_path/weights/weight.bin" */
    const uint8_t *bytes;        /* [size], or NULL: the pieces */
    size_t size;
    const ane_mil_piece *pieces; /* [npieces] when bytes is NULL */
    int npieces;
} ane_mil_file;

/* The file's bytes [offset, offset + n) where they lie in one run; NULL when the range
 * leaves the file or crosses from one piece into the next. */
const uint8_t *ane_mil_file_range(const ane_mil_file *file, uint64_t offset, uint64_t n);
/* The piece that holds [offset, offset + n) whole; NULL for a file in one run, or when the
 * range leaves the file or crosses pieces. */
const ane_mil_piece *ane_mil_file_piece(const ane_mil_file *file, uint64_t offset, uint64_t n);
/* The whole file's bytes into out [file->size]. */
void ane_mil_file_copy(const ane_mil_file *file, uint8_t *out);

/* Writer: appends blobs to a growing byte buffer, or, by reference, leaves the data of
 * blobs added with ane_milblob_add_borrowed where it lies (at least ANE_MILBLOB_BORROW_MIN
 * bytes: the weights a compile would otherwise copy, hash and compare again). */
#define ANE_MILBLOB_BORROW_MIN 4096

typedef struct ane_milblob_part {
    uint64_t offset, size;     /* of the file */
    const uint8_t *borrowed;   /* the bytes where they lie, or NULL: the writer's own, from own_at */
    size_t own_at;
    uint8_t *owned;            /* borrowed bytes the writer frees (ane_milblob_add_derived), or NULL */
    const void *origin;        /* as ane_mil_piece's */
    int origin_kind;
} ane_milblob_part;

typedef struct ane_milblob_writer {
    ane_text bytes;            /* the file so far; by reference, its own parts (header, records, padding, small data) */
    uint32_t count;
    int by_reference;
    uint64_t length;           /* of the file */
    ane_milblob_part *parts;   /* by reference: the file, in order */
    int nparts, parts_capacity;
    ane_mil_piece *pieces;     /* what ane_milblob_writer_file hands out */
} ane_milblob_writer;

void ane_milblob_writer_init(ane_milblob_writer *w);
void ane_milblob_writer_init_by_reference(ane_milblob_writer *w);
/* Appends one blob (a copy of data); *record_offset is what BLOBFILE's offset must say. */
ane_status ane_milblob_add(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size,
                           uint64_t *record_offset, ane_error *err);
/* The same for data that outlives the file: a writer by reference keeps a pointer to it. */
ane_status ane_milblob_add_borrowed(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size,
                                    uint64_t *record_offset, ane_error *err);
/* The same for bytes made for the file from another form of the values (`origin`, of
 * `origin_kind`: see ane_mil_piece), which lives as long as the file is read: a writer by
 * reference keeps `data` (malloc'd) as a piece of its own that names the origin, and frees it
 * with the writer; any other appends a copy and frees `data` at once, as it does on failure. */
ane_status ane_milblob_add_derived(ane_milblob_writer *w, uint32_t code, uint8_t *data, uint64_t size, const void *origin,
                                   int origin_kind, uint64_t *record_offset, ane_error *err);
/* The file written so far, valid until the next add or the writer is freed. */
ane_status ane_milblob_writer_file(ane_milblob_writer *w, const char *path, ane_mil_file *file, ane_error *err);
void ane_milblob_writer_free(ane_milblob_writer *w);

/* One record of a file being read, its fields as the file has them. */
typedef struct ane_milblob_record {
    uint64_t record_offset;
    uint32_t code;
    uint64_t size;
    uint64_t data_offset;
} ane_milblob_record;

/* Reads every record as the device would find them. Fails only on what holds no blob at
 * all (a short file, a version other than 2, no record at offset 64); what other writers do
 * differently (a header count that disagrees, unaligned records, data offset fields of 0,
 * sizes that overrun, trailing bytes) goes to `notes` (may be NULL). `name` labels
 * messages (file path). *records is malloc'd. */
ane_status ane_milblob_parse(const ane_mil_file *file, const char *name, ane_milblob_record **records, int *count,
                             ane_notes *notes, ane_error *err);

/* The data of the blob whose record is at a BLOBFILE offset, as the device reads it: the
 * offset must be a record (its sentinel; ANE-08: not the data), and the `expected_size`
 * bytes the MIL's type needs are read right after the record and must lie inside the file.
 * A record whose type code, size or data offset disagree with that is noted. */
ane_status ane_milblob_lookup(const ane_mil_file *file, const char *name, uint64_t record_offset, uint32_t code,
                              uint64_t expected_size, const uint8_t **data, ane_notes *notes, ane_error *err);

#endif
