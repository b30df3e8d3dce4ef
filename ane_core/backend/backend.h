/* The backend interface: one vtable that the `sim` backend (CPU, everywhere) and the `ane`
 * backend (the device, macOS) implement. The runtime drives it:
 *
 *   compile  MIL text + weight files -> a compiled program (immutable, shareable)
 *   load     a compiled program -> a loaded instance with its own copy of the weights
 *   eval     inputs and outputs bound by POSITION in alphabetical order of their names,
 *            as the device binds them (ANE-03, ANE-19); each buffer is a tensor view (a
 *            surface's padded rows, or a plain tensor in the cpu profile) plus the size of
 *            the allocation behind it (0 when it is not a surface)
 *   patch    replace one baked weight of a loaded instance, no compile (delta patching)
 *   unload / close
 * Everything that can fail returns an ane_status with a message naming the program, node
 * or buffer and the constraint ID where one applies. */
#ifndef ANE_BACKEND_BACKEND_H
#define ANE_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "../base/status.h"
#include "../ir/graph.h"
#include "../ir/profile.h"
#include "../mil/parse.h"
#include "../passes/passes.h"
#include "../passes/target.h"
#include "../tensor/optim.h"
#include "../tensor/quantize.h"
#include "../tensor/tensor.h"

typedef struct ane_compile_options {
    ane_precision precision;
    ane_profile profile;
    ane_target target;           /* the device the rules check against (generic unless chosen) */
    char name[ANE_NAME_MAX];     /* the program's name for messages ("" = the MIL function's) */
    ane_activations activations; /* products with quantized weights: float activations (the device's
                                    fp16), or int8 / int16 blocks, sim's cpu profile only (tensor/gemv.h) */
    int step_by_step;            /* sim: every node its own step, no fused chains (sim_plan.c): the
                                    fusions' baseline; the same values either way */
    int rules_checked;           /* the compile pipeline (runtime/compile.c) checked the device rules on
                                    the graph this MIL comes from and counted its SRAM spills
                                    (sram_spill_nodes): the backend does neither again. Not part of the
                                    program's identity (the cache key) */
    int sram_spill_nodes;
} ane_compile_options;

/* One bound buffer of an eval. */
typedef struct ane_binding {
    const char *name;
    ane_tensor view;             /* the bytes as the program reads/writes them */
    size_t alloc_size;           /* bytes allocated behind it (surfaces); 0 = not a surface */
    void *surface_handle;        /* the surface's IOSurfaceRef, or NULL */
    int resident;                /* inputs: nothing bound; the program reads its own buffer as
                                    write_input left it (view and alloc_size unused) */
    int zeros_after_written;     /* inputs: the positions of the last axis from `written` on hold
                                    zeros (an appended cache: ane_eval_options) */
    int64_t written;
    int64_t positions_read;      /* outputs: the caller reads only this many leading positions of the
                                    last axis (an output an append consumes, ane_eval_options); 0: all */
    int append_to;               /* outputs: the input binding this output's first position is appended
                                    to, at that input's `written` position; -1: none */
    int appended;                /* outputs: set by a backend that wrote that append itself during the
                                    eval (the runtime writes the others after it) */
    double append_clamp;         /* outputs: the appended values beyond +-append_clamp are written as
                                    +-append_clamp and NaNs as 0 (ane_eval_options.clamp_limit; 0:
                                    as computed), counted in the two below by whoever appends */
    int64_t append_clamped, append_nans;
} ane_binding;

/* Clamps an output's appended position `target` (the input's one position just written) at its
 * binding's append_clamp, counting into the binding; nothing when it has none. */
static inline ane_status ane_binding_clamp_append(ane_binding *output, ane_tensor *target, ane_error *err) {
    if (!(output->append_clamp > 0)) return ANE_OK;
    int64_t clamped = 0, nans = 0;
    ane_status status = ane_clamp_activations(target, output->append_clamp, &clamped, &nans, err);
    output->append_clamped += clamped, output->append_nans += nans;
    return status;
}

/* Port descriptions of a compiled program, in binding (alphabetical) order. */
typedef struct ane_port {
    char name[ANE_NAME_MAX];
    ane_dtype dtype;
    int rank;
    int64_t shape[ANE_IR_MAX_RANK];
} ane_port;

typedef struct ane_backend ane_backend;

/* Each backend's compiled program and loaded instance start with these headers and cast. */
typedef struct ane_compiled {
    const ane_backend *backend;
    char name[ANE_NAME_MAX];     /* the MIL function's name */
    int sram_spill_nodes;        /* nodes whose working set exceeds the SRAM (ANE-27) */
    ane_notes notes;             /* what the parser noticed in the weight files */
} ane_compiled;

typedef struct ane_loaded {
    const ane_backend *backend;
} ane_loaded;

struct ane_backend {
    const char *name;
    /* 1 when usable here; otherwise 0 and a reason in why. */
    int (*available)(char *why, size_t size);
    /* Whether programs of this profile may use the op: the one place a backend says what
     * it runs (the validator asks it). */
    int (*supports_op)(ane_op op, ane_profile profile);
    ane_status (*compile)(const ane_compile_options *options, const char *mil, size_t length, const ane_mil_file *files,
                          int nfiles, ane_compiled **out, ane_error *err);
    /* Ports of a compiled program, alphabetical. */
    void (*ports)(const ane_compiled *program, const ane_port **inputs, int *ninputs, const ane_port **outputs,
                  int *noutputs);
    ane_status (*load)(ane_compiled *program, ane_loaded **out, ane_error *err);
    ane_status (*eval)(ane_loaded *instance, const ane_binding *inputs, int ninputs, ane_binding *outputs, int noutputs,
                       ane_error *err);
    /* Replaces the baked weight `name` with `value` (same number of elements, any float
     * dtype), converted as a fresh compile would convert it (rounded to the weight's dtype)
     * after sanitizing: NaN -> 0, +-inf and values beyond fp16's range -> +-65504 (for fp16
     * weights; +-FLT_MAX for fp32). Adds the number of replaced values to *sanitized. */
    ane_status (*patch)(ane_loaded *instance, const char *name, const ane_tensor *value, int64_t *sanitized,
                        ane_error *err);
    /* The same patch into `count` distinct instances of this backend at once, which may then
     * read one copy of the weight until one of them is patched alone (NULL: patched one by
     * one). */
    ane_status (*patch_together)(ane_loaded *const *instances, int count, const char *name, const ane_tensor *value,
                                 int64_t *sanitized, ane_error *err);
    /* Applies patches batched since the last eval (NULL: patches apply at once). The eval
     * commits by itself too; the runtime commits before handing an eval to another thread. */
    ane_status (*commit)(ane_loaded *instance, ane_error *err);
    /* Resident inputs (a KV cache the program reads every eval): writes `value` (the port's
     * shape but `count` positions on the last axis) into the instance's own buffer for input
     * `port`, at positions offset .. offset + count - 1, converted as eval converts a bound
     * input. `first` is 1 on the port's first write: its buffer becomes zeros before it.
     * The runtime has checked the shapes. */
    ane_status (*write_input)(ane_loaded *instance, int port, int64_t offset, const ane_tensor *value, int first,
                              ane_error *err);
    /* Copies that buffer into `out` (the port's shape, the runtime's interface dtype). */
    ane_status (*read_input)(ane_loaded *instance, int port, ane_tensor *out, ane_error *err);
    /* Names, shapes, dtypes of the patchable weights (consts), via a callback. */
    void (*weights)(const ane_compiled *program, void (*visit)(void *context, const ane_node *node), void *context);
    void (*unload)(ane_loaded *instance);
    void (*close)(ane_compiled *program);
};

/* What the `ane` backend knows about the device in this process. */
typedef struct ane_device_stats {
    int bound, is_double;            /* the framework is open; it is the test double */
    const char *framework;           /* its path */
    const char *patch_strategy;      /* "unknown" until the first patch is checked, then "reload", "donor", "recompile" */
    char patch_check[200];           /* what that check saw, e.g. "reload stale, donor works, identifier hashes weights" */
    int identifier_hashes_weights;   /* 0 once a patch showed the identifier ignores weight bytes */
    int multi_input;                 /* programs with several inputs: 1 work, 0 refused (0x1d), -1 not seen */
    const char *port_listing;        /* how modelAttributes lists several ports: "alphabetical",
                                        "not alphabetical", or "unknown" until seen */
    int64_t loaded, loaded_limit;    /* programs loaded now; the device's limit */
    int64_t load_retries, requests_built, zero_copy_evals, copied_evals, ports_unverified, row_stride_mismatches;
    int64_t commits, patch_checks, reloads, donor_loads, recompiles, stale_dirs_removed;
} ane_device_stats;

void ane_device_stats_get(ane_device_stats *out);
/* The chip's name where the system says (e.g. "Apple M4"); 0 when unknown. */
int ane_device_chip(char *out, size_t size);
/* One line per message of the boundary: selector, expected and live type encodings. */
void ane_device_encoding_report(void (*line)(void *context, const char *text), void *context);

extern const ane_backend ane_sim_backend;
extern const ane_backend ane_device_backend;

/* The device's op set, as the op table flags it (ANE_OP_HOST_ONLY ops only in the cpu
 * profile): the supports_op of both backends, which run the same programs. */
int ane_device_op_set(ane_op op, ane_profile profile);

/* The ports of a parsed program in binding order (alphabetical, ANE-03/19); the caller
 * frees both arrays. */
ane_status ane_graph_ports(const ane_graph *g, ane_port **inputs, int *ninputs, ane_port **outputs, int *noutputs,
                           ane_error *err);
/* Whether a port is a [1, C, 1, S] fp16/fp32 activation, laid out on a surface in channel
 * rows (every other port is packed at the start of its buffer, ANE-20). */
int ane_port_is_surface(const ane_port *port);
/* The device rules of the `ane` profile: every error-severity rule is a compile error,
 * listed with its constraint ID; the warnings go to `warnings` (may be NULL). */
ane_status ane_check_device_rules(const ane_graph *g, const ane_compile_options *options,
                                  int (*supports_op)(ane_op op, ane_profile profile), ane_report *warnings,
                                  ane_error *err);
/* The nodes of g whose working set exceeds the SRAM (ANE-27), as annotated by the pipeline's
 * SRAM pass, or computed where no pass ran (a parsed program). */
int ane_sram_spill_nodes(const ane_graph *g);

/* The backend called `name` ("sim", "ane"), or NULL. */
const ane_backend *ane_backend_find(const char *name);
/* The i-th backend this build knows (0, 1, ...), or NULL past the last: the one list. */
const ane_backend *ane_backend_at(int i);

/* The error of patching a quantized weight: its codes are baked at load time, so a new
 * value means a new program (both backends say the same). */
ane_status ane_refuse_encoded_patch(const char *program, const ane_node *node, ane_error *err);

#endif
