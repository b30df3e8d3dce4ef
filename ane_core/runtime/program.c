/* Programs over backends: cache, compile budget, binding by name, staging through
 * surfaces, patching, and the process-wide statistics (see program.h). One thread (one Lua
 * state) drives it; only evals also run on the asynchronous helpers (async.c), which never
 * touch the cache, and whose statistics are kept under a lock. */
#include "program.h"

#include "../base/budget.h"
#include "async.h"
#include "../base/hash.h"
#include "../tensor/intern.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct cache_entry {
    uint64_t hash;
    const ane_backend *backend;
    ane_compiled *compiled;
    ane_compile_options options;
    int users;                     /* loaded programs using it */
    uint64_t last_used;            /* use_clock at its last compile, load or close */
} cache_entry;

/* A caller's name for a cached program (a model's "llama#3/decode", say): a shortcut past emitting
 * and hashing its MIL again. Every load of a model names its programs afresh, so the names are
 * kept to the KEY_LIMIT most recent (a name forgotten costs one emit and a hash hit), looked up
 * by their hash first. */
typedef struct cache_key {
    char *key;
    uint64_t hash; /* of key */
    cache_entry *entry;
} cache_key;

enum { KEY_LIMIT = 1024 };

struct ane_program {
    cache_entry *entry;
    ane_loaded *instance;
    ane_surface **staged_inputs;   /* [ninputs], created on first use (profile ane) */
    ane_surface **staged_outputs;  /* [noutputs] */
    unsigned char *resident;       /* [ninputs]: 1 once write_input kept the input in the program */
    int *input_order, *output_order; /* [ninputs], [noutputs]: port indices by name (strcmp order) */
};

static cache_entry **entries;
static int nentries, entries_capacity;
static cache_key *keys;
static int nkeys, keys_capacity;
static ane_runtime_stats stats;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t cache_limit = ANE_DEFAULT_CACHE_LIMIT, cache_evictions;
static uint64_t use_clock;

static void destroy_surfaces(ane_surface **surfaces, int count) {
    for (int i = 0; surfaces && i < count; i++) ane_surface_destroy(surfaces[i]);
    free(surfaces);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

void ane_runtime_stats_get(ane_runtime_stats *out) {
    *out = stats;
    out->compile_budget = ane_budget_limit();
    out->budget_left = ane_budget_limit() - ane_budget_used();
    out->backend_compiles = ane_budget_backend_compiles();
    out->restart_cost_ms = (double)(ane_budget_used() / ane_budget_limit()) * ANE_RESTART_COST_MS;
    out->cached_programs = nentries;
    out->cache_limit = cache_limit;
    out->cache_evictions = cache_evictions;
}

void ane_runtime_stats_reset(void) { memset(&stats, 0, sizeof stats); }

ane_status ane_runtime_set_compile_budget(int64_t budget, ane_error *err) { return ane_budget_set_limit(budget, err); }

/* Frees one cached program (no loaded program uses it) and the keys that name it; entry i
 * leaves the array. */
static void evict(int i) {
    cache_entry *entry = entries[i];
    int k = 0;
    for (int j = 0; j < nkeys; j++) {
        if (keys[j].entry == entry) free(keys[j].key);
        else keys[k++] = keys[j];
    }
    nkeys = k;
    entry->backend->close(entry->compiled);
    free(entry);
    entries[i] = entries[--nentries];
}

/* Evicts the least recently used unused programs beyond the cache limit. */
static void enforce_cache_limit(void) {
    for (;;) {
        int unused = 0, oldest = -1;
        for (int i = 0; i < nentries; i++) {
            if (entries[i]->users > 0) continue;
            unused++;
            if (oldest < 0 || entries[i]->last_used < entries[oldest]->last_used) oldest = i;
        }
        if (unused <= cache_limit) return;
        evict(oldest);
        cache_evictions++;
    }
}

ane_status ane_runtime_set_cache_limit(int64_t limit, ane_error *err) {
    if (limit < 0) return ane_fail(err, ANE_ERR_ARGUMENT, "the cache limit must be >= 0 (0 restores %d), got %lld",
                                   ANE_DEFAULT_CACHE_LIMIT, (long long)limit);
    cache_limit = limit > 0 ? limit : ANE_DEFAULT_CACHE_LIMIT;
    enforce_cache_limit();
    return ANE_OK;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const ane_mil_file *)a)->path, ((const ane_mil_file *)b)->path);
}

/* A piece of a compile's weight file into the key: interned weights (the pieces that point
 * at a graph's consts) by their entry's number, which stands for their bytes without reading
 * them (tensor/intern.h); the file's own bytes as they are. */
static void add_piece(ane_hash_stream *key, const ane_mil_piece *piece) {
    uint64_t serial;
    if (!ane_intern_serial(piece->bytes, (size_t)piece->size, &serial)) {
        ane_hash_stream_add(key, piece->bytes, (size_t)piece->size);
        return;
    }
    const uint64_t record[3] = {0x696E7465726E6564ull /* "interned" */, serial, piece->size};
    ane_hash_stream_add(key, record, sizeof record);
}

static uint64_t content_hash(const ane_backend *backend, const ane_compile_options *options, const char *mil, size_t length,
                             const ane_mil_file *files, int nfiles) {
    uint64_t h = ANE_HASH_SEED;
    h = ane_hash64(h, backend->name, strlen(backend->name));
    h = ane_hash64(h, &options->precision, sizeof options->precision);
    h = ane_hash64(h, &options->profile, sizeof options->profile);
    h = ane_hash64(h, &options->target, sizeof options->target);
    h = ane_hash64(h, &options->activations, sizeof options->activations);
    h = ane_hash64(h, &options->step_by_step, sizeof options->step_by_step);
    h = ane_hash64(h, options->name, strlen(options->name));
    ane_hash_stream text; /* the MIL and the weight files: read whole, so the faster hash */
    ane_hash_stream_init(&text, h);
    ane_hash_stream_add(&text, mil, length);
    h = ane_hash_stream_end(&text);
    ane_mil_file sorted[16];
    int n = nfiles < 16 ? nfiles : 16;
    memcpy(sorted, files, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, by_path);
    for (int i = 0; i < n; i++) {
        ane_hash_stream file;
        ane_hash_stream_init(&file, ane_hash64(h, sorted[i].path, strlen(sorted[i].path) + 1));
        if (sorted[i].bytes) ane_hash_stream_add(&file, sorted[i].bytes, sorted[i].size);
        else
            for (int p = 0; p < sorted[i].npieces; p++) add_piece(&file, &sorted[i].pieces[p]);
        h = ane_hash_stream_end(&file);
    }
    return h;
}

static int same_options(const ane_compile_options *a, const ane_compile_options *b) {
    return a->precision == b->precision && a->profile == b->profile && !memcmp(&a->target, &b->target, sizeof a->target) &&
           a->activations == b->activations && a->step_by_step == b->step_by_step && strcmp(a->name, b->name) == 0;
}

static cache_entry *find_by_hash(uint64_t hash, const ane_backend *backend, const ane_compile_options *options) {
    for (int i = 0; i < nentries; i++)
        if (entries[i]->hash == hash && entries[i]->backend == backend && same_options(&entries[i]->options, options))
            return entries[i];
    return NULL;
}

static int key_index(const char *key, uint64_t hash) {
    for (int i = 0; i < nkeys; i++)
        if (keys[i].hash == hash && strcmp(keys[i].key, key) == 0) return i;
    return -1;
}

static cache_entry *find_by_key(const char *key) {
    int i = key_index(key, ane_hash64(0, key, strlen(key)));
    return i < 0 ? NULL : keys[i].entry;
}

static ane_status remember_key(const char *key, cache_entry *entry, ane_error *err) {
    uint64_t hash = ane_hash64(0, key, strlen(key));
    int found = key_index(key, hash);
    if (found >= 0) {
        keys[found].entry = entry; /* the key now names the newer program */
        return ANE_OK;
    }
    if (nkeys == KEY_LIMIT) { /* the oldest name goes */
        free(keys[0].key);
        memmove(keys, keys + 1, (size_t)(--nkeys) * sizeof *keys);
    }
    if (nkeys == keys_capacity) {
        int capacity = keys_capacity ? keys_capacity * 2 : 32;
        cache_key *grown = realloc(keys, (size_t)capacity * sizeof *grown);
        if (!grown) return ane_fail(err, ANE_ERR_NOMEM, "out of memory caching program key '%s'", key);
        keys = grown;
        keys_capacity = capacity;
    }
    keys[nkeys].key = strdup(key);
    if (!keys[nkeys].key) return ane_fail(err, ANE_ERR_NOMEM, "out of memory caching program key '%s'", key);
    keys[nkeys].hash = hash;
    keys[nkeys++].entry = entry;
    return ANE_OK;
}

/* Ports by name, for the lookups of every eval (a batched step binds dozens of caches by
 * name): the indices sorted once (an insertion sort: a program has at most a few dozen), binary
 * searches after. */
static int *name_order(const ane_port *ports, int count) {
    int *order = malloc((size_t)(count ? count : 1) * sizeof *order);
    if (!order) return NULL;
    for (int i = 0; i < count; i++) {
        int at = i;
        for (; at > 0 && strcmp(ports[order[at - 1]].name, ports[i].name) > 0; at--) order[at] = order[at - 1];
        order[at] = i;
    }
    return order;
}

static int name_orders(ane_program *program) {
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    program->input_order = name_order(in_ports, nin);
    program->output_order = name_order(out_ports, nout);
    if (program->input_order && program->output_order) return 0;
    free(program->input_order);
    free(program->output_order);
    return 1;
}

/* The port called `name` (order: the ports' indices by name): its index, or -1. */
static int port_named(const ane_port *ports, const int *order, int count, const char *name) {
    int low = 0, high = count - 1;
    while (low <= high) {
        int middle = (low + high) / 2, compared = strcmp(ports[order[middle]].name, name);
        if (compared == 0) return order[middle];
        if (compared < 0) low = middle + 1;
        else high = middle - 1;
    }
    return -1;
}

static ane_status load_instance(cache_entry *entry, ane_program **out, ane_error *err) {
    ane_program *program = calloc(1, sizeof *program);
    if (!program) return ane_fail(err, ANE_ERR_NOMEM, "out of memory creating a program");
    double start = now_ms();
    ane_status status = entry->backend->load(entry->compiled, &program->instance, err);
    if (status) {
        free(program);
        return status;
    }
    program->entry = entry;
    if (name_orders(program)) {
        entry->backend->unload(program->instance);
        free(program);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory creating a program");
    }
    stats.loads++;
    stats.load_ms += now_ms() - start;
    entry->users++;
    entry->last_used = ++use_clock;
    *out = program;
    return ANE_OK;
}

/* The compile budget models the device's per-process limit (ANE-05), so it counts the
 * programs that follow the device's rules: the device's own and sim's `ane` profile. sim's
 * `cpu` profile is a CPU path no device ever runs, and its compiles are free. */
static int counts_against_budget(const ane_backend *backend, const ane_compile_options *options) {
    return options->profile != ANE_PROFILE_CPU || strcmp(backend->name, "sim") != 0;
}

ane_status ane_program_create(const char *backend_name, const ane_compile_options *options, const char *key,
                              const char *mil, size_t length, const ane_mil_file *files, int nfiles, ane_program **out,
                              ane_error *err) {
    const ane_backend *backend = ane_backend_find(backend_name);
    if (!backend) return ane_fail(err, ANE_ERR_ARGUMENT, "unknown backend '%s' (known: sim, ane)", backend_name);
    char why[ANE_ERROR_MESSAGE_MAX];
    if (!backend->available(why, sizeof why))
        return ane_fail(err, ANE_ERR_UNAVAILABLE, "backend '%s' is not available: %s", backend->name, why);
    if (nfiles > 16) return ane_fail(err, ANE_ERR_ARGUMENT, "at most 16 weight files per program");
    if (options->activations != ANE_ACTIVATIONS_FLOAT && (options->profile != ANE_PROFILE_CPU || strcmp(backend->name, "sim")))
        return ane_fail(err, ANE_ERR_ARGUMENT,
                        "activations '%s' is an option of sim's cpu profile (the device multiplies in fp16); this "
                        "program is for backend %s, profile %s",
                        ane_activations_name(options->activations), backend->name,
                        options->profile == ANE_PROFILE_CPU ? "cpu" : "ane");

    uint64_t hash = content_hash(backend, options, mil, length, files, nfiles);
    cache_entry *entry = find_by_hash(hash, backend, options);
    if (entry) {
        stats.cache_hits++;
    } else {
        char what[ANE_NAME_MAX + 16];
        snprintf(what, sizeof what, "program '%s'", options->name[0] ? options->name : "(unnamed)");
        ane_status over = counts_against_budget(backend, options) ? ane_budget_check(what, err) : ANE_OK;
        if (over) return over;
        entry = calloc(1, sizeof *entry);
        if (!entry) return ane_fail(err, ANE_ERR_NOMEM, "out of memory caching a program");
        if (nentries == entries_capacity) {
            int capacity = entries_capacity ? entries_capacity * 2 : 32;
            cache_entry **grown = realloc(entries, (size_t)capacity * sizeof *grown);
            if (!grown) {
                free(entry);
                return ane_fail(err, ANE_ERR_NOMEM, "out of memory caching a program");
            }
            entries = grown;
            entries_capacity = capacity;
        }
        double start = now_ms();
        ane_status status = backend->compile(options, mil, length, files, nfiles, &entry->compiled, err);
        if (status) {
            free(entry);
            return status;
        }
        if (counts_against_budget(backend, options)) ane_budget_count(0);
        stats.compiles++;
        stats.compile_ms += now_ms() - start;
        stats.sram_warnings += entry->compiled->sram_spill_nodes > 0;
        entry->hash = hash;
        entry->backend = backend;
        entry->options = *options;
        entries[nentries++] = entry;
    }
    if (key && *key) {
        ane_status status = remember_key(key, entry, err);
        if (status) return status;
    }
    return load_instance(entry, out, err);
}

int ane_runtime_cache_clear(void) {
    int freed = 0;
    for (int i = nentries - 1; i >= 0; i--) {
        if (entries[i]->users > 0) continue;
        evict(i);
        freed++;
    }
    return freed;
}

ane_status ane_program_from_cache(const char *key, ane_program **out, ane_error *err) {
    *out = NULL;
    cache_entry *entry = find_by_key(key);
    if (!entry) return ANE_OK;
    stats.cache_hits++;
    return load_instance(entry, out, err);
}

void ane_program_close(ane_program *program) {
    if (!program) return;
    ane_async_wait_idle(program);
    const ane_backend *backend = program->entry->backend;
    backend->unload(program->instance);
    stats.unloads++;
    const ane_port *inputs, *outputs;
    int ninputs, noutputs;
    ane_program_ports(program, &inputs, &ninputs, &outputs, &noutputs);
    destroy_surfaces(program->staged_inputs, ninputs);
    destroy_surfaces(program->staged_outputs, noutputs);
    free(program->resident);
    free(program->input_order);
    free(program->output_order);
    program->entry->users--;
    program->entry->last_used = ++use_clock;
    free(program);
    enforce_cache_limit();
}

const ane_notes *ane_program_notes(const ane_program *program) { return &program->entry->compiled->notes; }

void ane_program_ports(const ane_program *program, const ane_port **inputs, int *ninputs, const ane_port **outputs,
                       int *noutputs) {
    program->entry->backend->ports(program->entry->compiled, inputs, ninputs, outputs, noutputs);
}

const char *ane_program_name(const ane_program *program) { return program->entry->compiled->name; }
const char *ane_program_backend(const ane_program *program) { return program->entry->backend->name; }
const ane_compile_options *ane_program_options(const ane_program *program) { return &program->entry->options; }

/* ------------------------------------------------------------------ eval */

/* The dtype values travel in: the port's, or fp32 everywhere in fp32 precision (the
 * reference never rounds). */
static ane_dtype io_dtype(const ane_program *program, const ane_port *port) {
    if (program->entry->options.precision == ANE_PRECISION_FP32 && ane_dtype_kind_of(port->dtype) == ANE_KIND_FLOAT)
        return ANE_FP32;
    return port->dtype;
}

/* Staging surfaces for every port, all of one allocation size (ANE-02 / ANE-18): the
 * largest any port needs, or the caller's own surfaces' size when that is larger, so the
 * staged ones match surfaces the caller passes for the other ports. Recreated when that
 * size changes. */
static ane_status stage_surfaces(const ane_program *program, const ane_port *ports, int count, const ane_io *given,
                                 int ngiven, ane_surface ***surfaces_inout, ane_error *err) {
    size_t common = 0;
    for (int i = 0; i < count; i++) {
        size_t row, size;
        if (!ane_port_is_surface(&ports[i])) continue;
        ane_status status = ane_surface_layout(ports[i].shape[1], ports[i].shape[3], io_dtype(program, &ports[i]), &row, &size, err);
        if (status) return status;
        if (size > common) common = size;
    }
    for (int i = 0; i < ngiven; i++)
        if (given[i].surface && given[i].surface->alloc_size > common) common = given[i].surface->alloc_size;
    ane_surface **existing = *surfaces_inout;
    int reusable = existing != NULL;
    for (int i = 0; reusable && i < count; i++)
        if (existing[i] && existing[i]->alloc_size != common) reusable = 0;
    if (reusable) return ANE_OK;
    destroy_surfaces(existing, count);
    *surfaces_inout = NULL;
    ane_surface **surfaces = calloc((size_t)count + 1, sizeof *surfaces);
    if (!surfaces) return ane_fail(err, ANE_ERR_NOMEM, "out of memory staging surfaces");
    for (int i = 0; i < count; i++) {
        if (!ane_port_is_surface(&ports[i])) continue;
        ane_status status =
            ane_surface_create(&surfaces[i], ports[i].shape[1], ports[i].shape[3], io_dtype(program, &ports[i]), common, err);
        if (status) {
            destroy_surfaces(surfaces, count);
            return status;
        }
    }
    *surfaces_inout = surfaces;
    return ANE_OK;
}

static ane_status unknown_name(const ane_program *program, const char *role, const char *name, const ane_port *ports,
                               int count, ane_error *err) {
    char names[400] = "";
    size_t used = 0;
    for (int i = 0; i < count && used < sizeof names; i++)
        used += (size_t)snprintf(names + used, sizeof names - used, i ? ", %s" : "%s", ports[i].name);
    return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' has no %s '%s' (%ss: %s)", ane_program_name(program), role, name,
                    role, names);
}

/* A view of `tensor` shaped like the port: as is, or reshaped when only unit dims differ. */
static ane_status view_for_port(const ane_tensor *tensor, const ane_port *port, const char *role, ane_tensor *out,
                                ane_error *err) {
    int64_t numel = 1;
    for (int i = 0; i < port->rank; i++) numel *= port->shape[i];
    int same = tensor->ndim == port->rank;
    for (int i = 0; same && i < port->rank; i++) same = tensor->shape[i] == port->shape[i];
    if (same) {
        ane_tensor_share(out, tensor);
        return ANE_OK;
    }
    /* The dims other than 1 must agree in order: a [C, S] tensor binds to [1, C, 1, S], but an
     * [S, C] one (or a flat one) is refused rather than silently reinterpreted. */
    int64_t port_dims[ANE_MAX_DIMS], tensor_dims[ANE_MAX_DIMS];
    int nport = 0, ntensor = 0;
    for (int i = 0; i < port->rank; i++) if (port->shape[i] != 1) port_dims[nport++] = port->shape[i];
    for (int i = 0; i < tensor->ndim; i++) if (tensor->shape[i] != 1) tensor_dims[ntensor++] = tensor->shape[i];
    int unit_dims_only = nport == ntensor;
    for (int i = 0; unit_dims_only && i < nport; i++) unit_dims_only = port_dims[i] == tensor_dims[i];
    char want[128], got[128];
    if (!unit_dims_only || ane_tensor_numel(tensor) != numel || !ane_tensor_is_contiguous(tensor))
        return ane_fail(err, ANE_ERR_SHAPE, "%s '%s' is %s, got a %s tensor (only dims of size 1 may differ)", role,
                        port->name, ane_shape_string(want, sizeof want, port->rank, port->shape),
                        ane_shape_string(got, sizeof got, tensor->ndim, tensor->shape));
    return ane_tensor_reshape(out, tensor, port->rank, port->shape, err);
}

ane_status ane_program_eval(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                            int ndestinations, ane_tensor *results, ane_error *err) {
    ane_async_wait_idle(program);
    return ane_program_eval_now(program, inputs, ninputs, destinations, ndestinations, results, err);
}

ane_status ane_program_commit(ane_program *program, ane_error *err) {
    const ane_backend *backend = program->entry->backend;
    return backend->commit ? backend->commit(program->instance, err) : ANE_OK;
}

/* Checks an append: its input bound to a tensor or surface of the caller's, its output of the
 * input's shape but the last axis, `at` inside the input's positions. */
static ane_status check_append(const ane_program *program, const ane_append *append, int input, int output, int bound,
                               int64_t at, ane_error *err) {
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    if (input < 0) return unknown_name(program, "input", append->input, in_ports, nin, err);
    if (!bound)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s': input '%s' takes an append, so it must be bound to a tensor "
                        "or surface of the caller's", ane_program_name(program), append->input);
    const ane_port *in = &in_ports[input];
    int64_t positions = in->rank ? in->shape[in->rank - 1] : 0;
    if (at < 0 || at >= positions)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s': an append at position %lld does not fit input '%s' of %lld "
                        "positions", ane_program_name(program), (long long)at, append->input, (long long)positions);
    if (!append->output) return ANE_OK;
    if (output < 0) return unknown_name(program, "output", append->output, out_ports, nout, err);
    const ane_port *out = &out_ports[output];
    int same = out->rank == in->rank;
    for (int d = 0; same && d < in->rank - 1; d++) same = out->shape[d] == in->shape[d];
    if (!same) {
        char want[128], got[128];
        return ane_fail(err, ANE_ERR_SHAPE, "program '%s': output '%s' is %s, which cannot be appended to input '%s' %s "
                        "(all but the last axis must agree)", ane_program_name(program), append->output,
                        ane_shape_string(got, sizeof got, out->rank, out->shape), append->input,
                        ane_shape_string(want, sizeof want, in->rank, in->shape));
    }
    return ANE_OK;
}

/* Writes one append: position `at` of the caller's input takes the output binding's first
 * position (or the append's value). */
static ane_status write_append(const ane_program *program, const ane_append *append, int input, const ane_io *io,
                               ane_binding *source, int64_t at, ane_error *err) {
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    const ane_port *port = &in_ports[input];
    ane_tensor whole = {0}, target = {0}, first = {0};
    ane_status status = io->surface ? ane_surface_view(io->surface, &whole, err)
                                    : view_for_port(io->tensor, port, "input", &whole, err);
    if (!status) status = ane_tensor_slice(&target, &whole, port->rank - 1, at, at + 1, err);
    ane_surface_lock(io->surface, 0);
    if (!status && source) {
        status = ane_tensor_slice(&first, &source->view, source->view.ndim - 1, 0, 1, err);
        if (!status) status = ane_tensor_copy_into(&target, &first, err);
        if (!status) status = ane_binding_clamp_append(source, &target, err);
    } else if (!status) {
        status = ane_tensor_fill(&target, append->value, err);
    }
    ane_surface_unlock(io->surface, 0);
    ane_tensor_release(&first);
    ane_tensor_release(&target);
    ane_tensor_release(&whole);
    return status;
}

ane_status ane_program_eval_now(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                                int ndestinations, ane_tensor *results, ane_error *err) {
    return ane_program_eval_with(program, inputs, ninputs, destinations, ndestinations, NULL, results, err);
}

ane_status ane_program_eval_with(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                                 int ndestinations, const ane_eval_options *options, ane_tensor *results, ane_error *err) {
    const ane_eval_options none = {0};
    if (!options) options = &none;
    const ane_append *appends = options->appends;
    int nappends = options->nappends;
    int64_t at = options->at;
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    int device_rules = program->entry->options.profile == ANE_PROFILE_ANE;
    if (nin > 64 || nout > 64) return ane_fail(err, ANE_ERR_ARGUMENT, "at most 64 inputs and outputs");
    if (nappends > 64) return ane_fail(err, ANE_ERR_ARGUMENT, "at most 64 appends an eval");
    /* the names resolved once: the caller's io of each port (the first of a name; -1: none),
     * each append's input and output ports (-1: unknown, or a value's) */
    int input_io[64], output_io[64], append_input[64], append_output[64];
    for (int k = 0; k < nin; k++) input_io[k] = -1;
    for (int k = 0; k < nout; k++) output_io[k] = -1;
    for (int i = 0; i < ninputs; i++) {
        int k = port_named(in_ports, program->input_order, nin, inputs[i].name);
        if (k < 0) return unknown_name(program, "input", inputs[i].name, in_ports, nin, err);
        if (input_io[k] < 0) input_io[k] = i;
    }
    for (int i = 0; i < ndestinations; i++) {
        int k = port_named(out_ports, program->output_order, nout, destinations[i].name);
        if (k < 0) return unknown_name(program, "output", destinations[i].name, out_ports, nout, err);
        if (output_io[k] < 0) output_io[k] = i;
    }
    ane_status status = ANE_OK;
    for (int i = 0; i < nappends && !status; i++) {
        int input = port_named(in_ports, program->input_order, nin, appends[i].input);
        append_input[i] = input;
        append_output[i] = appends[i].output ? port_named(out_ports, program->output_order, nout, appends[i].output) : -1;
        status = check_append(program, &appends[i], input, append_output[i], input >= 0 && input_io[input] >= 0,
                              appends[i].at >= 0 ? appends[i].at : at, err);
    }
    if (status) return status;
    if (device_rules) {
        status = stage_surfaces(program, in_ports, nin, inputs, ninputs, &program->staged_inputs, err);
        if (!status) status = stage_surfaces(program, out_ports, nout, destinations, ndestinations, &program->staged_outputs, err);
        if (status) return status;
    }
    ane_binding in_bindings[64], out_bindings[64]; /* [nin], [nout] used (cleared: 13 KB each whole) */
    memset(in_bindings, 0, (size_t)nin * sizeof *in_bindings);
    memset(out_bindings, 0, (size_t)nout * sizeof *out_bindings);
    int bound_in = 0, bound_out = 0;

    /* Inputs in port (alphabetical) order. */
    for (int i = 0; i < nin && !status; i++, bound_in++) {
        const ane_io *io = input_io[i] >= 0 ? &inputs[input_io[i]] : NULL;
        ane_binding *b = &in_bindings[i];
        b->name = in_ports[i].name;
        for (int k = 0; k < nappends; k++)
            if (append_input[k] == i)
                b->zeros_after_written = 1, b->written = appends[k].at >= 0 ? appends[k].at : at;
        if (!io && program->resident && program->resident[i]) {
            b->resident = 1; /* the program's own buffer, as write_input left it */
            continue;
        }
        if (!io) {
            status = ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' needs input '%s'", ane_program_name(program), in_ports[i].name);
            break;
        }
        if (io->surface) {
            status = ane_surface_view(io->surface, &b->view, err);
            b->alloc_size = io->surface->alloc_size;
            b->surface_handle = io->surface->platform_handle;
        } else if (device_rules && program->staged_inputs[i]) {
            status = ane_surface_write(program->staged_inputs[i], io->tensor, err);
            if (!status) status = ane_surface_view(program->staged_inputs[i], &b->view, err);
            b->alloc_size = program->staged_inputs[i]->alloc_size;
            b->surface_handle = program->staged_inputs[i]->platform_handle;
        } else {
            status = view_for_port(io->tensor, &in_ports[i], "input", &b->view, err);
        }
    }
    /* Outputs: the caller's buffers, staged surfaces, or new tensors. */
    for (int i = 0; i < nout && !status; i++, bound_out++) {
        const ane_io *io = output_io[i] >= 0 ? &destinations[output_io[i]] : NULL;
        ane_binding *b = &out_bindings[i];
        b->name = out_ports[i].name;
        b->positions_read = options->positions_read;
        b->append_to = -1;
        b->append_clamp = options->clamp_limit;
        for (int k = 0; k < nappends; k++) {
            if (append_output[k] != i) continue;
            if (!io) b->positions_read = 1; /* consumed by an append: its first position alone is read */
            /* the backend may write it itself, while the appended input is still at hand (a
             * tensor the caller holds: a surface's appends lock it, below) */
            int own = !inputs[input_io[append_input[k]]].surface && !device_rules;
            b->append_to = own && b->append_to == -1 ? append_input[k] : -2; /* (-2: more than one) */
        }
        if (b->append_to < 0) b->append_to = -1;
        if (io && io->surface) {
            status = ane_surface_view(io->surface, &b->view, err);
            b->alloc_size = io->surface->alloc_size;
            b->surface_handle = io->surface->platform_handle;
        } else if (device_rules && program->staged_outputs[i]) {
            status = ane_surface_view(program->staged_outputs[i], &b->view, err);
            b->alloc_size = program->staged_outputs[i]->alloc_size;
            b->surface_handle = program->staged_outputs[i]->platform_handle;
        } else if (io) {
            status = view_for_port(io->tensor, &out_ports[i], "output", &b->view, err);
        } else {
            status = ane_tensor_empty(&results[i], out_ports[i].rank, out_ports[i].shape, io_dtype(program, &out_ports[i]), err);
            if (!status) ane_tensor_share(&b->view, &results[i]);
        }
    }
    if (!status) {
        double start = now_ms();
        status = program->entry->backend->eval(program->instance, in_bindings, nin, out_bindings, nout, err);
        pthread_mutex_lock(&stats_lock); /* evals also run on the asynchronous helpers */
        stats.evals += status == ANE_OK;
        stats.eval_ms += now_ms() - start;
        pthread_mutex_unlock(&stats_lock);
    }
    /* The appends, from the output bindings; an output they consume is not returned. */
    unsigned char consumed[64] = {0};
    for (int k = 0; k < nappends && !status; k++) {
        int output = append_output[k];
        ane_binding *source = output >= 0 ? &out_bindings[output] : NULL;
        const ane_io *given = output >= 0 && output_io[output] >= 0 ? &destinations[output_io[output]] : NULL;
        /* the surface the output was written to: the caller's, or the staged one (none: a tensor) */
        ane_surface *written = given && given->surface ? given->surface
                               : source && device_rules ? program->staged_outputs[output] : NULL;
        if (output >= 0 && !given) consumed[output] = 1;
        if (output >= 0 && out_bindings[output].appended) continue; /* (the backend wrote it) */
        ane_surface_lock(written, 1);
        status = write_append(program, &appends[k], append_input[k], &inputs[input_io[append_input[k]]], source,
                              appends[k].at >= 0 ? appends[k].at : at, err);
        ane_surface_unlock(written, 1);
    }
    for (int i = 0; i < nout; i++) {
        if (consumed[i]) ane_tensor_release(&results[i]); /* (a new tensor in the cpu profile; none when staged) */
        if (options->clamped) *options->clamped += out_bindings[i].append_clamped;
        if (options->nans) *options->nans += out_bindings[i].append_nans;
    }
    /* Staged outputs go to the caller's tensors or to new result tensors. */
    for (int i = 0; i < nout && !status; i++) {
        const ane_io *io = output_io[i] >= 0 ? &destinations[output_io[i]] : NULL;
        if (!device_rules || !program->staged_outputs[i] || (io && io->surface) || consumed[i]) continue;
        if (io) {
            ane_tensor target;
            status = view_for_port(io->tensor, &out_ports[i], "output", &target, err);
            if (!status) status = ane_tensor_copy_into(&target, &out_bindings[i].view, err);
            ane_tensor_release(&target);
        } else {
            status = ane_surface_read(program->staged_outputs[i], io_dtype(program, &out_ports[i]), &results[i], err);
        }
    }
    for (int i = 0; i < bound_in; i++) ane_tensor_release(&in_bindings[i].view);
    for (int i = 0; i < bound_out; i++) ane_tensor_release(&out_bindings[i].view);
    if (status)
        for (int i = 0; i < nout; i++) ane_tensor_release(&results[i]);
    return status;
}

/* ------------------------------------------------------------------ resident inputs */

/* The input port called `name`: its index, or -1 with the error (the known names listed). */
static int input_port(ane_program *program, const char *name, const ane_port **port, ane_error *err) {
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    for (int i = 0; i < nin; i++)
        if (strcmp(in_ports[i].name, name) == 0) {
            *port = &in_ports[i];
            return i;
        }
    unknown_name(program, "input", name, in_ports, nin, err);
    return -1;
}

ane_status ane_program_write_input(ane_program *program, const char *name, int64_t offset, const ane_tensor *value,
                                   ane_error *err) {
    const ane_port *port;
    int index = input_port(program, name, &port, err);
    if (index < 0) return err->status;
    const ane_backend *backend = program->entry->backend;
    if (!backend->write_input)
        return ane_fail(err, ANE_ERR_UNAVAILABLE, "backend '%s' cannot keep inputs in its programs", backend->name);
    int matches = value->ndim == port->rank && port->rank > 0;
    for (int d = 0; matches && d < port->rank - 1; d++) matches = value->shape[d] == port->shape[d];
    int64_t positions = port->rank ? port->shape[port->rank - 1] : 0;
    int64_t count = matches ? value->shape[port->rank - 1] : 0;
    if (!matches || offset < 0 || count > positions - offset) {
        char want[128], got[128];
        return ane_fail(err, ANE_ERR_SHAPE,
                        "write_input: input '%s' of program '%s' is %s; a write at position %lld must match it but in "
                        "the last axis and fit in its %lld positions, not be %s",
                        name, ane_program_name(program), ane_shape_string(want, sizeof want, port->rank, port->shape),
                        (long long)offset, (long long)positions, ane_shape_string(got, sizeof got, value->ndim, value->shape));
    }
    if (ane_dtype_kind_of(value->dtype) != ane_dtype_kind_of(port->dtype))
        return ane_fail(err, ANE_ERR_ARGUMENT, "write_input: input '%s' of program '%s' is %s, not %s", name,
                        ane_program_name(program), ane_dtype_name(port->dtype), ane_dtype_name(value->dtype));
    const ane_port *in_ports, *out_ports;
    int nin, nout;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &nout);
    if (!program->resident && !(program->resident = calloc((size_t)nin, 1)))
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory keeping an input");
    ane_async_wait_idle(program);
    ane_status status = backend->write_input(program->instance, index, offset, value, !program->resident[index], err);
    if (!status) program->resident[index] = 1;
    return status;
}

ane_status ane_program_read_input(ane_program *program, const char *name, ane_tensor *out, ane_error *err) {
    const ane_port *port;
    int index = input_port(program, name, &port, err);
    if (index < 0) return err->status;
    if (!program->resident || !program->resident[index])
        return ane_fail(err, ANE_ERR_ARGUMENT, "read_input: input '%s' of program '%s' was never written with write_input",
                        name, ane_program_name(program));
    ane_async_wait_idle(program);
    ane_status status = ane_tensor_empty(out, port->rank, port->shape, io_dtype(program, port), err);
    if (!status) status = program->entry->backend->read_input(program->instance, index, out, err);
    if (status) ane_tensor_release(out);
    return status;
}

ane_status ane_program_reset_input(ane_program *program, const char *name, ane_error *err) {
    const ane_port *port;
    int index = input_port(program, name, &port, err);
    if (index < 0) return err->status;
    if (program->resident) program->resident[index] = 0; /* the next write clears the buffer (write_input's `first`) */
    return ANE_OK;
}

/* ------------------------------------------------------------------ patching */

typedef struct weight_search {
    const char *name;
    const ane_node *found;
} weight_search;

static void match_weight(void *context, const ane_node *node) {
    weight_search *search = context;
    if (strcmp(node->name, search->name) == 0) search->found = node;
}

void ane_program_weights(const ane_program *program, void (*visit)(void *context, const ane_node *node), void *context) {
    program->entry->backend->weights(program->entry->compiled, visit, context);
}

/* Same sizes once unit dimensions are dropped ([out, in] fits [out, in, 1, 1]). */
static int compatible_shape(const ane_tensor *value, const ane_node *node) {
    int64_t a[ANE_MAX_DIMS], b[ANE_IR_MAX_RANK];
    int na = 0, nb = 0;
    for (int i = 0; i < value->ndim; i++)
        if (value->shape[i] != 1) a[na++] = value->shape[i];
    for (int i = 0; i < node->rank; i++)
        if (node->shape[i] != 1) b[nb++] = node->shape[i];
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

/* Waits for the program's evals in flight and checks that it has a float weight `name` the
 * value fits. */
static ane_status check_patch(ane_program *program, const char *name, const ane_tensor *value, ane_error *err) {
    ane_async_wait_idle(program);
    weight_search search = {name, NULL};
    ane_program_weights(program, match_weight, &search);
    const ane_node *node = search.found;
    if (!node) return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' has no weight '%s'", ane_program_name(program), name);
    char want[128], got[128];
    if (!compatible_shape(value, node))
        return ane_fail(err, ANE_ERR_SHAPE, "weight '%s' of program '%s' is %s, the patch is %s", name,
                        ane_program_name(program), ane_node_shape_string(node, want, sizeof want),
                        ane_shape_string(got, sizeof got, value->ndim, value->shape));
    if (ane_dtype_kind_of(value->dtype) != ANE_KIND_FLOAT && ane_dtype_kind_of(node->dtype) == ANE_KIND_FLOAT)
        return ane_fail(err, ANE_ERR_ARGUMENT, "weight '%s' is %s; patch it with a float tensor, not %s", name,
                        ane_dtype_name(node->dtype), ane_dtype_name(value->dtype));
    return ANE_OK;
}

ane_status ane_program_patch(ane_program *program, const char *name, const ane_tensor *value, ane_error *err) {
    return ane_program_patch_together(&program, 1, name, value, err);
}

ane_status ane_program_patch_together(ane_program *const *programs, int count, const char *name,
                                      const ane_tensor *value, ane_error *err) {
    if (count < 1) return ane_fail(err, ANE_ERR_ARGUMENT, "patch together: no programs");
    const ane_backend *backend = programs[0]->entry->backend;
    int same_backend = 1;
    for (int i = 0; i < count; i++) {
        for (int j = 0; j < i; j++)
            if (programs[j] == programs[i])
                return ane_fail(err, ANE_ERR_ARGUMENT, "patch together: program '%s' is listed twice",
                                ane_program_name(programs[i]));
        ane_status status = check_patch(programs[i], name, value, err);
        if (status) return status;
        same_backend &= programs[i]->entry->backend == backend;
    }
    double start = now_ms();
    int64_t sanitized = 0;
    ane_status status = ANE_OK;
    ane_loaded **instances = count > 1 && same_backend && backend->patch_together
                                 ? malloc((size_t)count * sizeof *instances) : NULL; /* [count] */
    if (instances) {
        for (int i = 0; i < count; i++) instances[i] = programs[i]->instance;
        status = backend->patch_together(instances, count, name, value, &sanitized, err);
        free(instances);
    } else { /* one by one (also when there is no memory for the list) */
        for (int i = 0; i < count && !status; i++)
            status = programs[i]->entry->backend->patch(programs[i]->instance, name, value, &sanitized, err);
    }
    if (status) return status;
    stats.patches += count;
    stats.sanitized_values += sanitized;
    stats.patch_ms += now_ms() - start;
    return ANE_OK;
}
