/* libFuzzer harness for the MILBlob reader: a weight file is walked record by record
 * (ane_milblob_parse, what ane.milblob.read and the MIL parser use) and each record found
 * is then looked up as a BLOBFILE reference would (ane_milblob_lookup) with its own type and
 * size, from the bytes in one run and cut into three pieces. Any input must give a record list or an error, never a crash, a read out of bounds
 * or undefined behaviour (run under ASan + UBSan by scripts/fuzz.sh; replayed by ctest). */
#include <stdint.h>
#include <stdlib.h>

#include "ane_core/mil/milblob.h"

static void walk(const ane_mil_file *file) {
    ane_milblob_record *records = NULL;
    int count = 0;
    ane_error err;
    ane_notes notes = {0};
    if (ane_milblob_parse(file, "fuzz.bin", &records, &count, &notes, &err) != ANE_OK) return;
    for (int i = 0; i < count; i++) {
        const uint8_t *bytes;
        (void)ane_milblob_lookup(file, "fuzz.bin", records[i].record_offset, records[i].code, records[i].size, &bytes,
                                 &notes, &err);
        (void)ane_milblob_lookup(file, "fuzz.bin", records[i].record_offset + 64, records[i].code, records[i].size, &bytes,
                                 &notes, &err);
    }
    free(records);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ane_mil_file whole = {.path = "fuzz.bin", .bytes = data, .size = size};
    walk(&whole);
    /* the same bytes as three pieces (how a compile hands sim its file), cut where no
     * record or data range need respect the cuts: a range across one is refused, never read */
    ane_mil_piece pieces[3] = {{.offset = 0, .size = size / 3, .bytes = data},
                               {.offset = size / 3, .size = size / 2 - size / 3, .bytes = data + size / 3},
                               {.offset = size / 2, .size = size - size / 2, .bytes = data + size / 2}};
    ane_mil_file cut = {.path = "fuzz.bin", .size = size, .pieces = pieces, .npieces = 3};
    walk(&cut);
    return 0;
}
