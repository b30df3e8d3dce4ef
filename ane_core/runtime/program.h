/* Programs: the runtime's lifecycle over a backend (compile -> load -> eval -> unload), a
 * cache, the per-process compile budget, name-based binding, and delta patching.
 *
 * Compiled programs are cached twice: by the caller's composite key (program name, layer,
 * shape bucket, weights version: any string) and by a content hash of the MIL text, the
 * weight bytes, the backend and its options, so identical programs never compile twice in
 * a process. A program handle is one loaded instance with its own weights; patching one
 * never changes another.
 *
 * Binding is by NAME: the runtime computes the device's positional order (alphabetical,
 * ANE-03/19) and, in the `ane` profile, stages plain tensors through surfaces that all share
 * one allocation size (ANE-02/18) of at least 49,152 bytes (ANE-04), so callers never meet
 * those rules. */
#ifndef ANE_RUNTIME_PROGRAM_H
#define ANE_RUNTIME_PROGRAM_H

#include "../backend/backend.h"
#include "../base/budget.h"
#include "../tensor/surface.h"

typedef struct ane_program ane_program;

typedef struct ane_runtime_stats {
    int64_t compiles, cache_hits, loads, evals, patches, unloads;
    int64_t compile_budget, budget_left;   /* ANE-05 */
    int64_t backend_compiles;              /* of those, the backend's own (patch checks, fallbacks) */
    int64_t sanitized_values;              /* NaN/inf replaced while patching */
    int64_t sram_warnings;                 /* programs with a node beyond 32 MB (ANE-27) */
    int64_t cached_programs;               /* compiled programs held, in use or not */
    int64_t cache_limit, cache_evictions;  /* unused programs kept at most; evicted so far (LRU) */
    double compile_ms, load_ms, eval_ms, patch_ms;
    double restart_cost_ms;                /* exec() restarts the compiles would force on the device (ANE-15) */
} ane_runtime_stats;

#define ANE_DEFAULT_CACHE_LIMIT 256 /* compiled programs no loaded program uses */
#define ANE_RESTART_COST_MS 50.0

void ane_runtime_stats_get(ane_runtime_stats *out);
void ane_runtime_stats_reset(void);
/* Frees cached compiled programs that no loaded program uses; returns how many. */
int ane_runtime_cache_clear(void);
/* Sets the per-process compile budget (ANE-05); 0 restores the default. A negative budget
 * is an argument error. */
ane_status ane_runtime_set_compile_budget(int64_t budget, ane_error *err);
/* Sets how many unused compiled programs the cache keeps (least recently used evicted
 * first); 0 restores the default, a negative limit is an argument error. */
ane_status ane_runtime_set_cache_limit(int64_t limit, ane_error *err);

/* Compiles (or finds in the cache) and loads a program. `key` may be NULL. */
ane_status ane_program_create(const char *backend_name, const ane_compile_options *options, const char *key,
                              const char *mil, size_t length, const ane_mil_file *files, int nfiles, ane_program **out,
                              ane_error *err);
/* Loads another instance of a cached program by key; *out is NULL when the key is unknown. */
ane_status ane_program_from_cache(const char *key, ane_program **out, ane_error *err);
void ane_program_close(ane_program *program); /* unloads; NULL is fine */

/* Ports in binding order. */
/* What the backend's parser noticed about the program's weight files (mil/milblob.h). */
const ane_notes *ane_program_notes(const ane_program *program);
void ane_program_ports(const ane_program *program, const ane_port **inputs, int *ninputs, const ane_port **outputs,
                       int *noutputs);
const char *ane_program_name(const ane_program *program);
const char *ane_program_backend(const ane_program *program);
const ane_compile_options *ane_program_options(const ane_program *program);

/* One value bound by name: a tensor, or a surface (exactly one of the two). */
typedef struct ane_io {
    const char *name;
    const ane_tensor *tensor;
    ane_surface *surface;
} ane_io;

/* Evaluates with inputs by name. `destinations` (may be NULL/0) name outputs the caller
 * provides (tensors or surfaces, written in place); every other output is returned in
 * results[i] (indexed like the output ports) as a new tensor; the others stay empty. */
ane_status ane_program_eval(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                            int ndestinations, ane_tensor *results, ane_error *err);

/* One position appended to an input the caller holds (a KV cache a session owns) after an
 * eval: input[..., at] = output[..., 0] (the output's first position), or `value` when output
 * is NULL (a mask opening the position). */
typedef struct ane_append {
    const char *input;  /* an input port bound to the caller's tensor or surface */
    const char *output; /* an output port of the same shape but the last axis; NULL: `value` */
    double value;
    int64_t at;         /* the position (0-based), or -1: the eval's (several sessions' caches in
                           one eval are each at their own) */
} ane_append;

/* What an eval does besides binding: appends at position `at` (0-based), in C, so the appended
 * values never travel to the caller (while the eval runs, an appended input holds data in
 * positions [0, at) and zeros from `at` on: a cache written only by appends, from zeros; the
 * backend may leave those zeros out of its products; an output an append consumes is not
 * returned unless it is among the destinations); and `positions_read` (0: all), the leading
 * positions of the last axis the caller reads of every output (a one-position program's: the
 * rest are its padding), which a backend may leave as they were. With `clamp_limit` (> 0) the
 * values an append takes from an output are written clamped at +-clamp_limit, NaN as 0 (what
 * a model's activation clamp makes of the output, numerics.md), and counted into *clamped and
 * *nans (either may be NULL); the output itself, where returned, is as computed. */
typedef struct ane_eval_options {
    const ane_append *appends;
    int nappends;
    int64_t at;
    int64_t positions_read;
    double clamp_limit;
    int64_t *clamped, *nans;
} ane_eval_options;

/* ane_program_eval_now with options (NULL: none). */
ane_status ane_program_eval_with(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                                 int ndestinations, const ane_eval_options *options, ane_tensor *results, ane_error *err);

/* ane_program_eval without waiting for a submitted eval of the program (async.c runs it;
 * the caller guarantees none is in flight). */
ane_status ane_program_eval_now(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                                int ndestinations, ane_tensor *results, ane_error *err);
/* Resident inputs: the program keeps input `name` in its own buffer (on the device, its own
 * input surface), so a KV cache is written a position at a time instead of copied in whole
 * at every eval. Writes `value` (the input's shape with any number of positions on the last
 * axis) at positions offset .. offset + n - 1 (0-based); the rest of the buffer starts as
 * zeros. From then on an eval given no tensor for `name` reads the buffer; one given a
 * tensor reads that tensor (and the buffer keeps what it held or not: backends differ, so
 * write again after binding). Waits for the program's submitted evals first. */
ane_status ane_program_write_input(ane_program *program, const char *name, int64_t offset, const ane_tensor *value,
                                   ane_error *err);
/* The resident input's buffer as a new tensor (the input's shape). */
ane_status ane_program_read_input(ane_program *program, const char *name, ane_tensor *out, ane_error *err);
/* Forgets what write_input kept for input `name`: the next write starts from zeros again (a
 * cache handed to a new session), and until it, evals must bind the input. */
ane_status ane_program_reset_input(ane_program *program, const char *name, ane_error *err);

/* Applies patches waiting for the next eval now (a device rewrites a whole weight file per
 * batch of patches); a no-op for backends that patch in place. */
ane_status ane_program_commit(ane_program *program, ane_error *err);

/* Replaces baked weights without compiling: shape checked, converted to the weight's dtype,
 * NaN -> 0 and +-inf (or values beyond fp16's range) -> +-65504, counted in the stats. */
ane_status ane_program_patch(ane_program *program, const char *name, const ane_tensor *value, ane_error *err);
/* The same patch into several distinct programs, e.g. a layer's forward and
 * backward programs after an optimizer step: the sim backend writes the weight once into
 * bytes they then share, until one of them is patched alone (the others keep theirs). */
ane_status ane_program_patch_together(ane_program *const *programs, int count, const char *name,
                                      const ane_tensor *value, ane_error *err);

/* The patchable weights (name, dtype, shape) via a callback. */
void ane_program_weights(const ane_program *program, void (*visit)(void *context, const ane_node *node), void *context);

#endif
