/* libFuzzer harness for the MILBlob reader: a weight file is walked record by record
 * (ane_milblob_parse, what ane.milblob.read and the MIL parser use) and each record found
 * is then looked up as a BLOBFILE reference would (ane_milblob_lookup) with its own type and
 * size. Any input must give a record list or an error, never a crash, a read out of bounds
 * or undefined behaviour (run under ASan + UBSan by scripts/fuzz.sh; replayed by ctest). */
#include <stdint.h>
#include <stdlib.h>

#include "ane_core/mil/milblob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ane_milblob_record *records = NULL;
    int count = 0;
    ane_error err;
    ane_notes notes = {0};
    if (ane_milblob_parse(data, size, "fuzz.bin", &records, &count, &notes, &err) != ANE_OK) return 0;
    for (int i = 0; i < count; i++) {
        const uint8_t *bytes;
        (void)ane_milblob_lookup(data, size, "fuzz.bin", records[i].record_offset, records[i].code, records[i].size, &bytes,
                                 &notes, &err);
        (void)ane_milblob_lookup(data, size, "fuzz.bin", records[i].record_offset + 64, records[i].code, records[i].size,
                                 &bytes, &notes, &err);
    }
    free(records);
    return 0;
}
