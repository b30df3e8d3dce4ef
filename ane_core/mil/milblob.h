/* MILBlob v2 weight files (weight.bin), byte-exact to reference/milblob.md.
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

/* Writer: appends blobs to a growing byte buffer. */
typedef struct ane_milblob_writer {
    ane_text bytes;   /* the file so far (header count patched on each add) */
    uint32_t count;
} ane_milblob_writer;

void ane_milblob_writer_init(ane_milblob_writer *w);
/* Appends one blob; *record_offset is what BLOBFILE's offset must say. */
ane_status ane_milblob_add(ane_milblob_writer *w, uint32_t code, const void *data, uint64_t size,
                           uint64_t *record_offset, ane_error *err);
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
ane_status ane_milblob_parse(const uint8_t *bytes, size_t size, const char *name, ane_milblob_record **records,
                             int *count, ane_notes *notes, ane_error *err);

/* The data of the blob whose record is at a BLOBFILE offset, as the device reads it: the
 * offset must be a record (its sentinel; ANE-08: not the data), and the `expected_size`
 * bytes the MIL's type needs are read right after the record and must lie inside the file.
 * A record whose type code, size or data offset disagree with that is noted. */
ane_status ane_milblob_lookup(const uint8_t *bytes, size_t size, const char *name, uint64_t record_offset,
                              uint32_t code, uint64_t expected_size, const uint8_t **data, ane_notes *notes,
                              ane_error *err);

#endif
