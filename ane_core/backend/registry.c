/* The backends this build knows, by name, and what they share (the op set, refusals). */
#include <string.h>

#include "backend.h"

static const ane_backend *const all_backends[] = {&ane_sim_backend, &ane_device_backend};

const ane_backend *ane_backend_at(int i) {
    return i >= 0 && (size_t)i < sizeof all_backends / sizeof all_backends[0] ? all_backends[i] : NULL;
}

const ane_backend *ane_backend_find(const char *name) {
    for (int i = 0; ane_backend_at(i); i++)
        if (strcmp(ane_backend_at(i)->name, name) == 0) return ane_backend_at(i);
    return NULL;
}

int ane_device_op_set(ane_op op, ane_profile profile) {
    return profile == ANE_PROFILE_CPU || !(ane_op_table[op].flags & ANE_OP_HOST_ONLY);
}

ane_status ane_refuse_encoded_patch(const char *program, const ane_node *node, ane_error *err) {
    return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s': weight '%s' is %s-quantized (stored as codes and %s), so it "
                    "cannot be patched; build the program again from the new weights, or patch a dense weight",
                    program, node->name, ane_encoding_name(node->encoding),
                    node->encoding == ANE_ENCODING_INT8 ? "per-row scales"
                    : node->encoding == ANE_ENCODING_LUT4 ? "per-row palettes"
                    : node->encoding == ANE_ENCODING_Q6_K ? "a scale per 16" : "a scale per block of 32");
}
