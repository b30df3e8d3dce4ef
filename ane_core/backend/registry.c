/* The backends this build knows, by name. */
#include <string.h>

#include "backend.h"

const ane_backend *ane_backend_find(const char *name) {
    static const ane_backend *const all[] = {&ane_sim_backend, &ane_device_backend};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}

int ane_device_op_set(ane_op op, ane_profile profile) {
    return profile == ANE_PROFILE_CPU || !(ane_op_table[op].flags & ANE_OP_HOST_ONLY);
}
