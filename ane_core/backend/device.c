/* The `ane` backend: the Neural Engine through the private AppleNeuralEngine framework
 * (reference/private-api.md). It is not built yet; every entry point says so, and the
 * runtime never falls back to another backend silently. */
#include <stdio.h>

#include "backend.h"

static int device_available(char *why, size_t size) {
#if defined(__APPLE__)
    snprintf(why, size, "backend 'ane' is not implemented in this build yet; use backend 'sim'");
#else
    snprintf(why, size, "backend 'ane' needs macOS with AppleNeuralEngine.framework; this machine has no ANE (use 'sim')");
#endif
    return 0;
}

static ane_status unavailable(ane_error *err) {
    char why[256];
    device_available(why, sizeof why);
    return ane_fail(err, ANE_ERR_UNAVAILABLE, "%s", why);
}

static ane_status device_compile(const ane_compile_options *options, const char *mil, size_t length,
                                 const ane_mil_file *files, int nfiles, ane_compiled **out, ane_error *err) {
    (void)options, (void)mil, (void)length, (void)files, (void)nfiles, (void)out;
    return unavailable(err);
}

static void device_ports(const ane_compiled *program, const ane_port **inputs, int *ninputs, const ane_port **outputs,
                         int *noutputs) {
    (void)program;
    *inputs = *outputs = NULL;
    *ninputs = *noutputs = 0;
}

static ane_status device_load(ane_compiled *program, ane_loaded **out, ane_error *err) {
    (void)program, (void)out;
    return unavailable(err);
}

static ane_status device_eval(ane_loaded *instance, const ane_binding *inputs, int ninputs, ane_binding *outputs,
                              int noutputs, ane_error *err) {
    (void)instance, (void)inputs, (void)ninputs, (void)outputs, (void)noutputs;
    return unavailable(err);
}

static ane_status device_patch(ane_loaded *instance, const char *name, const ane_tensor *value, int64_t *sanitized,
                               ane_error *err) {
    (void)instance, (void)name, (void)value, (void)sanitized;
    return unavailable(err);
}

static void device_weights(const ane_compiled *program, void (*visit)(void *, const ane_node *), void *context) {
    (void)program, (void)visit, (void)context;
}

static void device_unload(ane_loaded *instance) { (void)instance; }
static void device_close(ane_compiled *program) { (void)program; }

const ane_backend ane_device_backend = {
    .name = "ane",
    .available = device_available,
    .supports_op = ane_device_op_set,
    .compile = device_compile,
    .ports = device_ports,
    .load = device_load,
    .eval = device_eval,
    .patch = device_patch,
    .weights = device_weights,
    .unload = device_unload,
    .close = device_close,
};
