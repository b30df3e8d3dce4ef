/* libFuzzer harness for the MIL parser and the sim backend: any bytes as MIL text, with one
 * small valid weight file available, must parse or fail with a message; never crash, leak
 * or hang. When a program parses, emitting it again must work, and when it is small it is
 * compiled (cpu profile) and evaluated on zero inputs, so the kernels see odd programs too.
 * Built and run by scripts/fuzz.sh; the corpus replay test runs it over spec/golden/. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ane_core/mil/emit.h"
#include "ane_core/mil/milblob.h"
#include "ane_core/mil/parse.h"
#include "ane_core/runtime/program.h"

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
    ane_mil_file file = {.path = ANE_MIL_WEIGHT_PATH, .bytes = (const uint8_t *)writer.bytes.data, .size = writer.bytes.length};
    return file;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ane_mil_file file = weight_file();
    ane_graph *graph = NULL;
    ane_error err;
    ane_notes notes = {0};
    if (ane_parse_mil((const char *)data, size, "fuzz", &file, 1, NULL, &graph, &notes, &err) != ANE_OK) return 0;
    ane_mil_program text;
    if (ane_emit_mil(graph, &text, &err) == ANE_OK) ane_mil_program_free(&text);
    int64_t values = 0; /* evaluate only programs whose buffers stay small */
    for (int i = 0; i < graph->count; i++) values += ane_node_numel(graph->nodes[i]);
    ane_graph_free(graph);
    if (values > (1 << 18)) return 0;
    ane_compile_options options = {.precision = ANE_PRECISION_FP16, .profile = ANE_PROFILE_CPU};
    ane_error budget_err;
    (void)ane_runtime_set_compile_budget(INT64_MAX, &budget_err); /* fuzzing compiles far more than 119 programs */
    ane_program *program;
    if (ane_program_create("sim", &options, NULL, (const char *)data, size, &file, 1, &program, &err) != ANE_OK) return 0;
    const ane_port *inputs, *outputs;
    int ninputs, noutputs;
    ane_program_ports(program, &inputs, &ninputs, &outputs, &noutputs);
    ane_tensor zeros[64] = {{0}}, results[64] = {{0}};
    ane_io ios[64];
    int ok = ninputs <= 64 && noutputs <= 64;
    for (int i = 0; ok && i < ninputs; i++) {
        ok = ane_tensor_zeros(&zeros[i], inputs[i].rank, inputs[i].shape, inputs[i].dtype, &err) == ANE_OK;
        ios[i] = (ane_io){inputs[i].name, &zeros[i], NULL};
    }
    if (ok && ane_program_eval(program, ios, ninputs, NULL, 0, results, &err) == ANE_OK)
        for (int i = 0; i < noutputs; i++) ane_tensor_release(&results[i]);
    for (int i = 0; i < ninputs && i < 64; i++) ane_tensor_release(&zeros[i]);
    ane_program_close(program);
    ane_runtime_cache_clear();
    return 0;
}
