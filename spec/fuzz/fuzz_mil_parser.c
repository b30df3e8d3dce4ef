/* libFuzzer harness for the MIL parser: any bytes as MIL text, with one small valid weight
 * file available, must parse or fail with a message; never crash, leak or hang. When a
 * program parses, emitting it again must work too (the round trip the runtime relies on).
 * Built and run by scripts/fuzz.sh; the corpus replay test runs it over spec/golden/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ane_core/mil/emit.h"
#include "ane_core/mil/milblob.h"
#include "ane_core/mil/parse.h"

static ane_mil_file weight_file(void) {
    static ane_milblob_writer writer;
    static int ready = 0;
    if (!ready) { /* two fp16 blobs of 64 and 4096 elements */
        uint16_t data[4096] = {0};
        uint64_t offset;
        ane_milblob_writer_init(&writer);
        ane_milblob_add(&writer, MILBLOB_FLOAT16, data, 64 * 2, &offset, NULL);
        ane_milblob_add(&writer, MILBLOB_FLOAT16, data, sizeof data, &offset, NULL);
        ready = 1;
    }
    ane_mil_file file = {ANE_MIL_WEIGHT_PATH, (const uint8_t *)writer.bytes.data, writer.bytes.length};
    return file;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ane_mil_file file = weight_file();
    ane_graph *graph = NULL;
    ane_error err;
    if (ane_parse_mil((const char *)data, size, "fuzz", &file, 1, NULL, &graph, &err) == ANE_OK) {
        ane_mil_program program;
        if (ane_emit_mil(graph, &program, &err) == ANE_OK) ane_mil_program_free(&program);
        ane_graph_free(graph);
    }
    return 0;
}
