/* The double's "AppleNeuralEngine": the five private classes, registered when this shared
 * object is dlopen'ed, each method assigned to the boundary table's typedef first (so a
 * prototype that disagrees with ane_core/backend/ane_objc.h does not compile) and
 * registered with the encoding a Mac reports (mac_methods.c: the double's own facts, each
 * with its source). Compiling reads model.mil and the weight files from
 * <tmp>/<identifier>/ as the real compiler does and "compiles" them with anelua's `sim`;
 * evaluation runs `sim` on the IOSurfaces' bytes, so outputs equal sim's bit for bit.
 *
 * The rules it enforces: MIL as NSData (ANE-09), a weights dictionary (ANE-11), evaluate
 * only after load, index arrays of numbers, live surfaces, ANE-02/04/18 answered 0x1d.
 * ANE_DOUBLE_MODE (comma-separated) selects the behaviours reports disagree on:
 *   budget-silent=N    compiles after the Nth succeed, load, and evaluate nothing
 *   budget-nil=N       compiles after the Nth return NO with a nil error
 *   compile-error      every compile fails with an NSError carrying an underlying error
 *   ports-declared     modelAttributes lists ports in declaration order (else alphabetical)
 *   ports-rotated      ... in alphabetical order rotated by one: with three ports, neither
 *                      alphabetical nor declared (ane-bridge-rs saw such an order on M5)
 *                      A request's index arrays are positions in the listed order, always.
 *   row-align=N        rows of [1,C,1,S] ports start every N bytes (else 64: the catalogue)
 *   rows=packed        ... back to back (Orion on M4)
 *   rows=32-elements   ... every 32 elements, 128 bytes in fp32 (ane-bridge-rs on M5)
 *   reports-row-stride modelAttributes gives each such port a RowStride (no device-run project
 *                      saw the key, so by default the double, like a Mac, does not)
 *   load-transient     the first load of the process fails once
 *   reload-effect      unload, overwrite the weight files, reload: the new weights count
 *                      (else the compiled program keeps the old ones, ANE-07)
 *   donor-stale        a load without compile from copied compiled files keeps the donor's
 *   donor-fails        ... fails (else it takes the new weights from `data`)
 *   id-paths           the identifier hashes the MIL and weight paths, not weight bytes
 *   multi-input-0x1d   programs with several inputs fail to evaluate with 0x1d
 *   encoding-mismatch  compileWithQoS: is registered with an NSUInteger QoS ("Q"), a wrong
 *                      row the bind step must refuse
 * and the chip-dependent answers the probes must tell apart (lua/ane/probes/); by default
 * the double is the `generic` target of the catalogue:
 *   accept=OP[+OP]     compiles these ops though the catalogue refuses them (concat: ANE-01)
 *   refuse=OP[+OP]     refuses programs using these ops at compile time (exp, sqrt, ...)
 *   min-width=N        refuses I/O narrower than N (ANE-21; else any width, as Orion's width-16 decode ran)
 *   conv-channels=N    the widest conv (ANE-16; else 16,384)
 *   kernel-width=N     the widest conv kernel (ANE-23; else 13)
 *   spatial=N          the longest width/contraction axis (ANE-31; else 16,384)
 *   sdpa-mask          scaled_dot_product_attention applies attn_mask (ANE-06; else ignored)
 *   sdpa-mask=one-plane  ... but a per-head mask's first plane to every head
 *   min-surface=N      the smallest surface allocation evaluated (ANE-04; else 49,152)
 *   uneven-allocs      surfaces of one side may differ in size (ANE-02/18; else 0x1d)
 *   load-limit=N       programs loaded at once (else 128)
 *   strict=ID[+ID]     these warnings of the catalogue are compile errors on this chip
 *                      (ANE-28 elementwise-only programs, ANE-29 reduce_mean, ANE-30 softmax)
 *   no-constexpr       refuses constexpr_* weight ops (quantized weights) as InvalidMILProgram */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../ane_core/backend/ane_objc.h"
#include "../../ane_core/backend/backend.h"
#include "../../ane_core/base/hash.h"
#include "../../ane_core/tensor/surface.h"
#include "double.h"

/* ---------------------------------------------------------------- modes */

static struct {
    long budget_silent, budget_nil;
    int no_constexpr, compile_error, ports_declared, ports_rotated, load_transient, reload_effect, donor_stale, donor_fails, id_paths,
        multi_input_refused, encoding_mismatch, rows_packed, rows_32_elements, reports_row_stride;
    long row_align, min_surface, load_limit, uneven_allocs;
    ane_target target;           /* the chip the compile checks programs against */
} mode = {.row_align = 64, .min_surface = 49152, .load_limit = 128};

/* "ANE-28+ANE-30" -> those rules are errors in the target; unknown IDs abort. */
static void mode_rules(const char *list, ane_target *target) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *id = strtok_r(copy, "+", &save); id; id = strtok_r(NULL, "+", &save)) {
        int rule = ane_rule_number(id);
        if (!rule) {
            fprintf(stderr, "ane-double: ANE_DOUBLE_MODE names no rule '%s'\n", id);
            abort();
        }
        target->level[rule] = ANE_RULE_ERROR;
    }
}

/* "concat+gelu" -> the ops' bits in set; unknown names abort (a typo in a test's mode). */
static void mode_ops(const char *list, uint64_t set[2]) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *save = NULL, *name = strtok_r(copy, "+", &save); name; name = strtok_r(NULL, "+", &save)) {
        ane_op op;
        if (!ane_op_from_name(name, &op)) {
            fprintf(stderr, "ane-double: ANE_DOUBLE_MODE names no op '%s'\n", name);
            abort();
        }
        ane_target_set_op(set, op);
    }
}

static void read_modes(void) {
    const char *text = getenv("ANE_DOUBLE_MODE");
    char copy[512];
    snprintf(copy, sizeof copy, "%s", text ? text : "");
    ane_target_generic(&mode.target);
    snprintf(mode.target.name, sizeof mode.target.name, "the double's device");
    for (char *save = NULL, *token = strtok_r(copy, ", ", &save); token; token = strtok_r(NULL, ", ", &save)) {
        long n = 0;
        if (!strncmp(token, "accept=", 7)) mode_ops(token + 7, mode.target.ops_accepted);
        else if (!strncmp(token, "refuse=", 7)) mode_ops(token + 7, mode.target.ops_refused);
        else if (sscanf(token, "min-width=%ld", &n) == 1 && n > 0) mode.target.min_io_width = n;
        else if (sscanf(token, "conv-channels=%ld", &n) == 1 && n > 0) mode.target.max_conv_channels = n;
        else if (sscanf(token, "kernel-width=%ld", &n) == 1 && n > 0) mode.target.max_kernel_width = n;
        else if (sscanf(token, "spatial=%ld", &n) == 1 && n > 0) mode.target.max_spatial = n;
        else if (!strcmp(token, "sdpa-mask")) mode.target.sdpa_mask_honoured = 1;
        else if (!strcmp(token, "sdpa-mask=one-plane")) mode.target.sdpa_mask_honoured = mode.target.sdpa_mask_one_plane = 1;
        else if (sscanf(token, "min-surface=%ld", &n) == 1 && n > 0) mode.min_surface = n;
        else if (!strcmp(token, "uneven-allocs")) mode.uneven_allocs = 1;
        else if (!strncmp(token, "strict=", 7)) mode_rules(token + 7, &mode.target);
        else if (!strcmp(token, "no-constexpr")) mode.no_constexpr = 1;
        else if (sscanf(token, "load-limit=%ld", &n) == 1 && n > 0) mode.load_limit = n;
        else if (sscanf(token, "budget-silent=%ld", &n) == 1) mode.budget_silent = n;
        else if (sscanf(token, "budget-nil=%ld", &n) == 1) mode.budget_nil = n;
        else if (sscanf(token, "row-align=%ld", &n) == 1 && n >= 64 && n % 64 == 0) mode.row_align = n;
        else if (!strcmp(token, "rows=packed")) mode.rows_packed = 1;
        else if (!strcmp(token, "rows=32-elements")) mode.rows_32_elements = 1;
        else if (!strcmp(token, "reports-row-stride")) mode.reports_row_stride = 1;
        else if (!strcmp(token, "compile-error")) mode.compile_error = 1;
        else if (!strcmp(token, "ports-declared")) mode.ports_declared = 1;
        else if (!strcmp(token, "ports-rotated")) mode.ports_rotated = 1;
        else if (!strcmp(token, "load-transient")) mode.load_transient = 1;
        else if (!strcmp(token, "reload-effect")) mode.reload_effect = 1;
        else if (!strcmp(token, "donor-stale")) mode.donor_stale = 1;
        else if (!strcmp(token, "donor-fails")) mode.donor_fails = 1;
        else if (!strcmp(token, "id-paths")) mode.id_paths = 1;
        else if (!strcmp(token, "multi-input-0x1d")) mode.multi_input_refused = 1;
        else if (!strcmp(token, "encoding-mismatch")) mode.encoding_mismatch = 1;
        else {
            fprintf(stderr, "ane-double: unknown ANE_DOUBLE_MODE entry '%s'\n", token);
            abort();
        }
    }
}

/* ---------------------------------------------------------------- aned's cache */

typedef struct compiled_entry {
    char identifier[40];
    ane_compiled *program;       /* sim's */
    ane_graph *graph;            /* the parsed MIL, for port order */
    uint8_t *weights;            /* the weight files it was compiled with, one after another */
    size_t weights_size;
    int hollow;                  /* compiled past the silent budget: evaluates nothing */
    int users;                   /* models that have it loaded */
    struct compiled_entry *next;
} compiled_entry;

static compiled_entry *cache;    /* the newest entry for an identifier comes first */
static long compiles, loaded_count;
static int transient_failed;

static compiled_entry *cache_find(const char *identifier) {
    for (compiled_entry *e = cache; e; e = e->next)
        if (!strcmp(e->identifier, identifier)) return e;
    return NULL;
}

/* ---------------------------------------------------------------- objects */

typedef struct descriptor_object {
    double_object base;
    id mil;                      /* NSData */
    id weights;                  /* NSDictionary path -> {offset, data} */
} descriptor_object;

typedef struct model_object {
    double_object base;
    descriptor_object *descriptor;
    char identifier[40];
    compiled_entry *entry;       /* loaded program */
    ane_loaded *instance;
} model_object;

typedef struct surface_wrapper {
    double_object base;
    IOSurfaceRef surface;
} surface_wrapper;

typedef struct request_object {
    double_object base;
    id inputs, input_indices, outputs, output_indices;
} request_object;

static Class Descriptor, Model, Request, SurfaceObject, Client;

static void descriptor_destroy(id self) {
    descriptor_object *d = (descriptor_object *)self;
    double_release(d->mil), double_release(d->weights);
}

static void forget(compiled_entry *entry) {
    for (compiled_entry **link = &cache; *link; link = &(*link)->next) {
        if (*link != entry) continue;
        *link = entry->next;
        ane_sim_backend.close(entry->program);
        ane_graph_free(entry->graph);
        free(entry->weights);
        free(entry);
        return;
    }
}

static void unload_instance(model_object *m) {
    if (!m->instance) return;
    ane_sim_backend.unload(m->instance);
    m->instance = NULL;
    m->entry->users--;
    m->entry = NULL;
    loaded_count--;
}

static model_object *live_models[4096]; /* model objects not yet freed */
static int nlive_models;

/* When the last model object of an identifier goes, aned may forget its compiled programs
 * (none is loaded any more): the cache stays bounded over a long run of patches. Unloading
 * alone keeps them (a reload finds them, with their baked weights: ANE-07). */
static void model_destroy(id self) {
    model_object *m = (model_object *)self;
    unload_instance(m);
    double_release((id)m->descriptor);
    int others = 0;
    for (int i = 0; i < nlive_models; i++) {
        if (live_models[i] == m) live_models[i--] = live_models[--nlive_models];
        else others += strcmp(live_models[i]->identifier, m->identifier) == 0;
    }
    if (others) return;
    for (compiled_entry *e = cache, *next; e; e = next) {
        next = e->next;
        if (!e->users && strcmp(e->identifier, m->identifier) == 0) forget(e);
    }
}

static void wrapper_destroy(id self) { double_release((id)((surface_wrapper *)self)->surface); }

static void request_destroy(id self) {
    request_object *r = (request_object *)self;
    double_release(r->inputs), double_release(r->input_indices), double_release(r->outputs),
        double_release(r->output_indices);
}

/* An evaluation failure as a Mac reports it: domain com.apple.appleneuralengine, code 8, the
 * status only inside the description, no underlying error (invoke-ai/InvokeAI#4356: status
 * 0x16; jundot/omlx#2940: status 0x2; the logs: 0x1d). What the double knows of the
 * cause goes to its standard error under ANE_DOUBLE_TRACE, never to the backend. */
static id fail_evaluation(id *error, long status, const char *cause) {
    if (getenv("ANE_DOUBLE_TRACE")) fprintf(stderr, "ane-double: evaluation fails with status 0x%lx: %s\n", status, cause);
    char text[300];
    snprintf(text, sizeof text, "processRequest:model:qos:qIndex:modelStringID:options:error:: "
             "ANEProgramProcessRequestDirect() Failed with status=0x%lx : statusType=0x9: Program Inference error", status);
    if (error) *error = double_autorelease(double_make_error(8, text, NULL));
    return NULL;
}

static id fail(id *error, long code, const char *text, const char *underlying) {
    if (error) {
        id inner = underlying ? double_make_error(1, underlying, NULL) : NULL;
        *error = double_autorelease(double_make_error(code, text, inner));
        double_release(inner);
    }
    return NULL;
}

/* ---------------------------------------------------------------- files */

static void program_dir(const char *identifier, char *out, size_t size) {
    const char *tmp = getenv("TMPDIR");
    char root[3000];
    snprintf(root, sizeof root, "%s", tmp && *tmp ? tmp : "/tmp");
    size_t n = strlen(root);
    if (n > 1 && root[n - 1] == '/') root[n - 1] = '\0';
    snprintf(out, size, "%s/%s", root, identifier);
}

static uint8_t *read_whole(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long length = ftell(f);
    rewind(f);
    uint8_t *bytes = malloc(length > 0 ? (size_t)length : 1);
    if (bytes && fread(bytes, 1, (size_t)length, f) != (size_t)length) {
        free(bytes);
        bytes = NULL;
    }
    fclose(f);
    *size = (size_t)length;
    return bytes;
}

static int write_whole(const char *path, const void *bytes, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return 0;
    int ok = fwrite(bytes, 1, size, f) == size;
    return fclose(f) == 0 && ok;
}

/* The weight files a descriptor names, read from the model's directory (or, for a load
 * without compile, cut from the compiled `data` file in the same order). */
typedef struct program_files {
    ane_mil_file files[16];
    uint8_t *owned[16];
    int count;
    uint8_t *concatenated;
    size_t concatenated_size;
    char *mil;
    size_t mil_size;
} program_files;

static void free_program_files(program_files *f) {
    for (int i = 0; i < f->count; i++) free(f->owned[i]);
    free(f->concatenated);
    free(f->mil);
}

static int read_program_files(const model_object *m, int from_data, program_files *out, char *why, size_t why_size) {
    memset(out, 0, sizeof *out);
    out->concatenated = malloc(1); /* never NULL, even for a program without weights */
    char dir[3100], path[3400];
    program_dir(m->identifier, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.mil", dir);
    out->mil = (char *)read_whole(path, &out->mil_size);
    if (!out->mil) {
        snprintf(why, why_size, "cannot read %s: %s", path, strerror(errno));
        return 0;
    }
    size_t data_size = 0, data_used = 0;
    uint8_t *data = NULL;
    if (from_data) {
        snprintf(path, sizeof path, "%s/data", dir);
        if (!(data = read_whole(path, &data_size))) {
            snprintf(why, why_size, "cannot read %s", path);
            return 0;
        }
    }
    const id weights = m->descriptor->weights;
    CFIndex count = double_dictionary_count(weights);
    for (CFIndex i = 0; i < count && i < 16; i++) {
        const char *key = double_string(double_dictionary_key_at(weights, i));
        size_t expected = 0;
        double_data(double_dictionary_get(double_dictionary_value_at(weights, i), "data"), &expected);
        const char *relative = !strncmp(key, "@model_path/", 12) ? key + 12 : key;
        uint8_t *bytes;
        size_t size;
        if (from_data) {
            if (data_used + expected > data_size) {
                snprintf(why, why_size, "the compiled data file is shorter than the weights");
                free(data);
                return 0;
            }
            bytes = malloc(expected ? expected : 1);
            memcpy(bytes, data + data_used, expected);
            size = expected;
            data_used += expected;
        } else {
            snprintf(path, sizeof path, "%s/%s", dir, relative);
            if (!(bytes = read_whole(path, &size))) {
                snprintf(why, why_size, "cannot read the weight file %s: %s", path, strerror(errno));
                return 0;
            }
        }
        out->owned[out->count] = bytes;
        out->files[out->count] = (ane_mil_file){.path = key, .bytes = bytes, .size = size};
        out->concatenated = realloc(out->concatenated, out->concatenated_size + size + 1);
        memcpy(out->concatenated + out->concatenated_size, bytes, size);
        out->concatenated_size += size;
        out->count++;
    }
    free(data);
    return 1;
}

/* Compiles with sim into a new cache entry for the model's identifier. */
static compiled_entry *compile_entry(const model_object *m, const program_files *f, char *why, size_t why_size) {
    ane_compile_options options = {.precision = ANE_PRECISION_FP16, .profile = ANE_PROFILE_ANE, .target = mode.target};
    ane_error err;
    compiled_entry *entry = calloc(1, sizeof *entry);
    if (ane_sim_backend.compile(&options, f->mil, f->mil_size, f->files, f->count, &entry->program, &err) ||
        ane_parse_mil(f->mil, f->mil_size, "model.mil", f->files, f->count, NULL, &entry->graph, NULL, &err)) {
        snprintf(why, why_size, "%s", err.message);
        if (entry->program) ane_sim_backend.close(entry->program);
        free(entry);
        return NULL;
    }
    snprintf(entry->identifier, sizeof entry->identifier, "%s", m->identifier);
    entry->weights = malloc(f->concatenated_size + 1);
    if (f->concatenated_size) memcpy(entry->weights, f->concatenated, f->concatenated_size);
    entry->weights_size = f->concatenated_size;
    entry->next = cache; /* older entries stay reachable (a loaded model may use one) */
    cache = entry;
    return entry;
}

/* ---------------------------------------------------------------- _ANEInMemoryModelDescriptor */

static id descriptor_create(id cls, SEL cmd, id mil, id weights, id options) {
    (void)cls, (void)cmd;
    if (double_string(mil)) double_violation("ANE-09: the MIL text was passed as a string object, not NSData (a Mac crashes)");
    else if (!double_is_kind(mil, double_NSData)) double_violation("modelWithMILText: was given no NSData");
    if (!weights) double_violation("ANE-11: modelWithMILText:weights:nil (the weights dictionary must be empty, never nil)");
    else if (!double_is_kind(weights, double_NSDictionary)) double_violation("modelWithMILText:weights: was given no NSDictionary");
    if (options && !double_is_kind(options, double_NSDictionary)) double_violation("optionsPlist: is neither nil nor a dictionary");
    if (weights && double_is_kind(weights, double_NSDictionary)) {
        for (CFIndex i = 0; i < double_dictionary_count(weights); i++) {
            id entry = double_dictionary_value_at(weights, i);
            size_t size;
            int64_t offset;
            if (!double_data(double_dictionary_get(entry, "data"), &size) ||
                !double_number(double_dictionary_get(entry, "offset"), &offset))
                double_violation("weights['%s'] is not {offset: NSNumber, data: NSData}",
                                 double_string(double_dictionary_key_at(weights, i)));
        }
    }
    descriptor_object *d = (descriptor_object *)double_new(Descriptor);
    d->mil = double_retain(mil);
    d->weights = double_retain(weights);
    return double_autorelease((id)d);
}

/* ---------------------------------------------------------------- _ANEInMemoryModel */

static id model_create(id cls, SEL cmd, id descriptor) {
    (void)cls, (void)cmd;
    if (!double_is_kind(descriptor, Descriptor)) double_violation("inMemoryModelWithDescriptor: was given no descriptor");
    model_object *m = (model_object *)double_new(Model);
    m->descriptor = (descriptor_object *)double_retain(descriptor);
    size_t size = 0;
    const uint8_t *mil = double_data(m->descriptor->mil, &size);
    uint64_t h1 = ane_hash64(0x9E3779B97F4A7C15ull, mil, size), h2 = ane_hash64(0xC2B2AE3D27D4EB4Full, mil, size);
    id weights = m->descriptor->weights;
    for (CFIndex i = 0; weights && i < double_dictionary_count(weights); i++) {
        const char *key = double_string(double_dictionary_key_at(weights, i));
        h1 = ane_hash64(h1, key, strlen(key));
        h2 = ane_hash64(h2, key, strlen(key));
        if (mode.id_paths) continue;
        size_t n = 0;
        const uint8_t *bytes = double_data(double_dictionary_get(double_dictionary_value_at(weights, i), "data"), &n);
        h1 = ane_hash64(h1, bytes, n);
        h2 = ane_hash64(h2, bytes, n);
    }
    snprintf(m->identifier, sizeof m->identifier, "%016llx%016llx", (unsigned long long)h1, (unsigned long long)h2);
    if (nlive_models < (int)(sizeof live_models / sizeof live_models[0])) live_models[nlive_models++] = m;
    return double_autorelease((id)m);
}

static id model_identifier(id self, SEL cmd) {
    (void)cmd;
    return double_autorelease(double_make_string(((model_object *)self)->identifier));
}

static BOOL model_compiled_exists(id self, SEL cmd) {
    (void)cmd;
    return cache_find(((model_object *)self)->identifier) != NULL;
}

static BOOL model_compile(id self, SEL cmd, unsigned int qos, id options, id *error) {
    (void)cmd, (void)qos, (void)options;
    model_object *m = (model_object *)self;
    compiles++;
    if (mode.budget_nil && compiles > mode.budget_nil) {
        if (error) *error = NULL;
        return NO;
    }
    if (mode.compile_error)
        return fail(error, 0x2, "ANECCompile() FAILED", "MIL compiler: unsupported op 'gelu' at model.mil:12 (emulated)"), NO;
    char why[ANE_ERROR_MESSAGE_MAX];
    program_files files;
    if (!read_program_files(m, 0, &files, why, sizeof why)) {
        free_program_files(&files);
        return fail(error, 0x3, "the compiler could not read the model directory", why), NO;
    }
    if (mode.no_constexpr && memmem(files.mil, files.mil_size, "constexpr_", 10)) {
        free_program_files(&files);
        return fail(error, 0x5, "InvalidMILProgram", "constexpr_* ops are not supported on this path (emulated)"), NO;
    }
    compiled_entry *entry = compile_entry(m, &files, why, sizeof why);
    if (!entry) {
        free_program_files(&files);
        return fail(error, 0x5, "ANECCompile() FAILED", why), NO;
    }
    entry->hollow = mode.budget_silent && compiles > mode.budget_silent;
    char dir[3100], path[3200], plist[200];
    program_dir(m->identifier, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/net.plist", dir);
    int n = snprintf(plist, sizeof plist, "<plist><key>identifier</key><string>%s</string></plist>\n", m->identifier);
    int ok = write_whole(path, plist, (size_t)n);
    snprintf(path, sizeof path, "%s/data", dir);
    ok &= write_whole(path, files.concatenated, files.concatenated_size);
    free_program_files(&files);
    if (!ok) return fail(error, 0x3, "the compiler could not write net.plist and data", dir), NO;
    return YES;
}

/* For a load without compile: the program the copied net.plist names (the donor), if aned
 * still has it; *compiled_files says whether the directory holds compiled files at all. */
static compiled_entry *donor_of(const model_object *m, int *compiled_files) {
    char dir[3100], path[3200];
    program_dir(m->identifier, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/net.plist", dir);
    size_t size;
    char *plist = (char *)read_whole(path, &size);
    *compiled_files = plist != NULL;
    if (!plist) return NULL;
    char identifier[40] = "";
    const char *start = strstr(plist, "<string>");
    if (start) sscanf(start + 8, "%39[0-9a-f]", identifier);
    free(plist);
    return identifier[0] ? cache_find(identifier) : NULL;
}

static BOOL model_load(id self, SEL cmd, unsigned int qos, id options, id *error) {
    (void)cmd, (void)qos, (void)options;
    model_object *m = (model_object *)self;
    if (m->instance) return fail(error, 0xb, "the model is already loaded (load one model object once)", NULL), NO;
    if (loaded_count >= mode.load_limit) return fail(error, 0xe, "too many programs loaded in this process", NULL), NO;
    if (mode.load_transient && !transient_failed) {
        transient_failed = 1;
        return fail(error, 0x11, "the ANE service is busy (emulated transient failure)", NULL), NO;
    }
    char why[ANE_ERROR_MESSAGE_MAX] = "";
    compiled_entry *entry = cache_find(m->identifier);
    program_files files;
    if (entry && mode.reload_effect && read_program_files(m, 0, &files, why, sizeof why)) {
        /* the weight files on disk count: recompiled quietly if they changed */
        if (files.concatenated_size != entry->weights_size || memcmp(files.concatenated, entry->weights, entry->weights_size))
            entry = compile_entry(m, &files, why, sizeof why);
        free_program_files(&files);
    } else if (entry && mode.reload_effect) {
        free_program_files(&files);
    }
    if (!entry) {
        /* no compiled program for this identifier: a load from copied compiled files */
        int compiled_files = 0;
        compiled_entry *donor = donor_of(m, &compiled_files);
        if (!compiled_files)
            return fail(error, 0x16, "no compiled program for this model: compile it first", why[0] ? why : NULL), NO;
        if (mode.donor_fails || (mode.donor_stale && !donor))
            return fail(error, 0x16, "the compiled program does not match the model", NULL), NO;
        if (mode.donor_stale) {
            entry = donor;
        } else { /* the compiled files on disk count, whatever aned remembers */
            if (!read_program_files(m, 1, &files, why, sizeof why)) {
                free_program_files(&files);
                return fail(error, 0x16, "cannot read the compiled program", why), NO;
            }
            entry = compile_entry(m, &files, why, sizeof why);
            free_program_files(&files);
            if (!entry) return fail(error, 0x16, "cannot load the compiled program", why), NO;
        }
    }
    ane_error err;
    if (ane_sim_backend.load(entry->program, &m->instance, &err)) return fail(error, 0x16, "load failed", err.message), NO;
    m->entry = entry;
    entry->users++;
    loaded_count++;
    return YES;
}

static BOOL model_unload(id self, SEL cmd, unsigned int qos, id *error) {
    (void)cmd, (void)qos;
    model_object *m = (model_object *)self;
    if (!m->instance) return fail(error, 0xc, "the model is not loaded", NULL), NO;
    unload_instance(m);
    return YES;
}

static size_t row_stride_of(const ane_port *port) {
    size_t bytes = (size_t)port->shape[3] * ane_dtype_size(port->dtype);
    if (mode.rows_packed) return bytes;
    if (mode.rows_32_elements) return ((size_t)port->shape[3] + 31) / 32 * 32 * ane_dtype_size(port->dtype);
    return (bytes + (size_t)mode.row_align - 1) / (size_t)mode.row_align * (size_t)mode.row_align;
}

static id port_entry(const ane_port *port, int output) {
    id entry = double_make_dictionary();
    char name[ANE_NAME_MAX + 16];
    snprintf(name, sizeof name, output ? "%s@output" : "%s", port->name);
    id value = double_make_string(name);
    double_dictionary_set(entry, "Name", value);
    double_release(value);
    value = double_make_string(port->dtype == ANE_FP16 ? "Float16" : ane_dtype_name(port->dtype));
    double_dictionary_set(entry, "Type", value);
    double_release(value);
    int64_t nchw[4] = {1, 1, 1, 1};
    for (int k = 0; k < port->rank && k < 4; k++) nchw[4 - port->rank + k] = port->shape[k];
    const char *keys[] = {"Batches", "Channels", "Height", "Width", "Depth", "RowStride"};
    int64_t values[] = {nchw[0], nchw[1], nchw[2], nchw[3], 1, ane_port_is_surface(port) ? (int64_t)row_stride_of(port) : 0};
    for (int k = 0; k < 6; k++) {
        if (k == 5 && (!values[k] || !mode.reports_row_stride)) continue;
        value = double_make_number(values[k]);
        double_dictionary_set(entry, keys[k], value);
        double_release(value);
    }
    return entry;
}

/* The order modelAttributes lists one side's ports in: order[k] is the sim port (alphabetical)
 * listed k-th. A request's index k names that port. */
static void listing_order(const compiled_entry *entry, const ane_port *ports, int count, int side, int *order) {
    for (int i = 0; i < count; i++) order[i] = mode.ports_rotated ? (i + 1) % count : i;
    if (!mode.ports_declared) return;
    int used = 0; /* the MIL's order: inputs as declared, outputs as returned */
    const ane_graph *g = entry->graph;
    for (int n = 0; n < (side ? g->noutputs : g->count); n++) {
        const char *name = side ? g->outputs[n].name : g->nodes[n]->op == ANE_OP_INPUT ? g->nodes[n]->name : NULL;
        for (int i = 0; name && i < count; i++)
            if (!strcmp(ports[i].name, name)) order[used++] = i;
    }
}

static id model_attributes(id self, SEL cmd) {
    (void)cmd;
    model_object *m = (model_object *)self;
    if (!m->entry) return NULL;
    const ane_port *inputs, *outputs;
    int ninputs, noutputs;
    ane_sim_backend.ports(m->entry->program, &inputs, &ninputs, &outputs, &noutputs);
    id lists[2] = {double_make_array(), double_make_array()};
    for (int side = 0; side < 2; side++) {
        const ane_port *ports = side ? outputs : inputs;
        int count = side ? noutputs : ninputs;
        int order[128];
        listing_order(m->entry, ports, count, side, order);
        for (int i = 0; i < count; i++) {
            id entry = port_entry(&ports[order[i]], side);
            double_array_append(lists[side], entry);
            double_release(entry);
        }
    }
    id network = double_make_dictionary();
    double_dictionary_set(network, "LiveInputList", lists[0]);
    double_dictionary_set(network, "LiveOutputList", lists[1]);
    id status_list = double_make_array();
    double_array_append(status_list, network);
    id attributes = double_make_dictionary();
    double_dictionary_set(attributes, "NetworkStatusList", status_list);
    double_release(lists[0]), double_release(lists[1]), double_release(network), double_release(status_list);
    return double_autorelease(attributes);
}

/* Binds the request's surfaces to the program's ports (index arrays: positions in the order
 * modelAttributes lists them) as views laid out like the device's memory. */
static int bind_side(const compiled_entry *entry, int side, id surfaces, id indices, const ane_port *ports, int count,
                     ane_binding *bindings, const char *role, char *why, size_t why_size) {
    int order[128];
    listing_order(entry, ports, count, side, order);
    CFIndex given = double_array_count(surfaces);
    if (given != count) {
        snprintf(why, why_size, "the request has %ld %s surfaces, the program %d", (long)given, role, count);
        return 0;
    }
    for (CFIndex k = 0; k < given; k++) {
        const surface_wrapper *wrapper = (const surface_wrapper *)double_array_at(surfaces, k);
        int64_t position = -1;
        double_number(double_array_at(indices, k), &position);
        if (!double_is_kind(wrapper, SurfaceObject) || !double_is_live(wrapper->surface)) {
            double_violation("evaluate: %s %ld of the request is no live _ANEIOSurfaceObject (released too early?)", role, (long)k);
            return 0;
        }
        if (position < 0 || position >= count || bindings[order[position]].name) {
            snprintf(why, why_size, "%s index %lld is out of range or repeated", role, (long long)position);
            return 0;
        }
        position = order[position];
        const ane_port *port = &ports[position];
        size_t alloc_size;
        void *bytes = double_surface_bytes(wrapper->surface, &alloc_size);
        ane_storage *storage;
        ane_error err;
        if (ane_storage_wrap(bytes, alloc_size, 0, NULL, NULL, &storage, &err)) {
            snprintf(why, why_size, "%s", err.message);
            return 0;
        }
        int64_t strides[ANE_IR_MAX_RANK], stride = 1;
        for (int i = port->rank - 1; i >= 0; i--) strides[i] = stride, stride *= port->shape[i];
        if (ane_port_is_surface(port)) {
            int64_t row = (int64_t)(row_stride_of(port) / ane_dtype_size(port->dtype));
            strides[3] = 1, strides[2] = strides[1] = row, strides[0] = row * port->shape[1];
        }
        ane_status status =
            ane_tensor_on_storage(&bindings[position].view, storage, 0, port->rank, port->shape, strides, port->dtype, &err);
        ane_storage_release(storage);
        if (status) {
            snprintf(why, why_size, "%s '%s' does not fit its %zu-byte surface: %s", role, port->name, alloc_size, err.message);
            return 0;
        }
        bindings[position].name = port->name;
        bindings[position].alloc_size = alloc_size;
    }
    return 1;
}

/* The allocation rules of this mode's device (ANE-04 minimum, ANE-02/18 one size per side);
 * what it allows is handed to sim at sizes sim's catalogue accepts. */
static int allocations_allowed(ane_binding *bindings, int count, char *why, size_t why_size) {
    size_t largest = 0;
    for (int i = 0; i < count; i++) {
        if (bindings[i].alloc_size < (size_t)mode.min_surface) {
            snprintf(why, why_size, "'%s' is a %zu-byte surface, below this device's minimum of %ld bytes (ANE-04)",
                     bindings[i].name, bindings[i].alloc_size, mode.min_surface);
            return 0;
        }
        if (bindings[i].alloc_size > largest) largest = bindings[i].alloc_size;
    }
    for (int i = 0; i < count; i++) {
        if (mode.uneven_allocs) bindings[i].alloc_size = largest;
        if (bindings[i].alloc_size < ANE_SURFACE_MIN_ALLOC) bindings[i].alloc_size = ANE_SURFACE_MIN_ALLOC;
    }
    return 1;
}

static BOOL model_evaluate(id self, SEL cmd, unsigned int qos, id options, id request, id *error) {
    (void)cmd, (void)qos, (void)options;
    model_object *m = (model_object *)self;
    if (!m->instance) {
        double_violation("evaluateWithQoS: on a model that is not loaded");
        return fail(error, 0xc, "the model is not loaded", NULL), NO;
    }
    if (!double_is_kind(request, Request)) {
        double_violation("evaluateWithQoS: was given no live _ANERequest");
        return NO;
    }
    if (m->entry->hollow) return YES; /* the silent form of the spent budget */
    const request_object *r = (const request_object *)request;
    const ane_port *inputs, *outputs;
    int ninputs, noutputs;
    ane_sim_backend.ports(m->entry->program, &inputs, &ninputs, &outputs, &noutputs);
    if (mode.multi_input_refused && ninputs > 1) return fail_evaluation(error, 0x1d, "several inputs"), NO;
    ane_binding in[128], out[128];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    for (int i = 0; i < 128; i++) out[i].append_to = -1; /* (backend.h: none; a device writes no appends) */
    char why[ANE_ERROR_MESSAGE_MAX] = "";
    int ok = ninputs <= 128 && noutputs <= 128 &&
             bind_side(m->entry, 0, r->inputs, r->input_indices, inputs, ninputs, in, "input", why, sizeof why) &&
             bind_side(m->entry, 1, r->outputs, r->output_indices, outputs, noutputs, out, "output", why, sizeof why);
    if (ok) ok = allocations_allowed(in, ninputs, why, sizeof why) && allocations_allowed(out, noutputs, why, sizeof why);
    ane_error err = {0};
    if (ok && ane_sim_backend.eval(m->instance, in, ninputs, out, noutputs, &err)) {
        ok = 0;
        snprintf(why, sizeof why, "%s", err.message);
    }
    for (int i = 0; i < ninputs; i++) ane_tensor_release(&in[i].view);
    for (int i = 0; i < noutputs; i++) ane_tensor_release(&out[i].view);
    if (ok) return YES;
    int surface_rule = strstr(why, "ANE-02") || strstr(why, "ANE-04") || strstr(why, "ANE-18");
    return fail_evaluation(error, surface_rule ? 0x1d : 0x16, why), NO;
}

/* ---------------------------------------------------------------- the other classes */

static id surface_object_create(id cls, SEL cmd, IOSurfaceRef surface) {
    (void)cls, (void)cmd;
    if (!double_is_kind(surface, double_IOSurface)) {
        double_violation("objectWithIOSurface: was given no live IOSurface");
        return NULL;
    }
    surface_wrapper *w = (surface_wrapper *)double_new(SurfaceObject);
    w->surface = (IOSurfaceRef)double_retain((id)surface);
    return double_autorelease((id)w);
}

static int check_list(id list, Class element, const char *what) {
    CFIndex count = double_array_count(list);
    if (count < 0) {
        double_violation("requestWithInputs:...: %s is not an NSArray", what);
        return 0;
    }
    for (CFIndex i = 0; i < count; i++)
        if (!double_is_kind(double_array_at(list, i), element)) {
            double_violation("requestWithInputs:...: element %ld of %s is not an %s (surfaces where index arrays belong?)",
                             (long)i, what, element->name);
            return 0;
        }
    return 1;
}

static id request_create(id cls, SEL cmd, id inputs, id input_indices, id outputs, id output_indices, id weights_buffer,
                         id perf_stats, id procedure_index) {
    (void)cls, (void)cmd, (void)weights_buffer, (void)perf_stats;
    int ok = check_list(inputs, SurfaceObject, "inputs") && check_list(input_indices, double_NSNumber, "inputIndices") &&
             check_list(outputs, SurfaceObject, "outputs") && check_list(output_indices, double_NSNumber, "outputIndices");
    if (ok && (double_array_count(inputs) != double_array_count(input_indices) ||
               double_array_count(outputs) != double_array_count(output_indices)))
        double_violation("requestWithInputs:...: an index array is not as long as its surface array"), ok = 0;
    if (!double_is_kind(procedure_index, double_NSNumber)) double_violation("procedureIndex: is not an NSNumber"), ok = 0;
    if (!ok) return NULL;
    request_object *r = (request_object *)double_new(Request);
    r->inputs = double_retain(inputs);
    r->input_indices = double_retain(input_indices);
    r->outputs = double_retain(outputs);
    r->output_indices = double_retain(output_indices);
    return double_autorelease((id)r);
}

static id client_shared(id cls, SEL cmd) {
    (void)cmd;
    static id shared;
    if (!shared) double_make_immortal((double_object *)(shared = double_new((Class)cls)), (Class)cls);
    return shared;
}

static Class class_for(const char *name) {
    Class cls = objc_getClass(name);
    if (!cls) abort();
    return cls;
}

/* Registers message `index` with the encoding a Mac reports (mac_methods.c, the double's own
 * facts); `imp` has the boundary table's C prototype, so a prototype the backend would call
 * differently from the double's implementation does not compile. */
static void register_message(int index, IMP imp) {
    const char *selector, *encoding, *class_name;
    int class_method;
    ane_objc_message_info(index, &selector, &encoding, &class_name, &class_method);
    const char *live = double_mac_encoding(class_name, class_method, selector, mode.encoding_mismatch);
    if (!live) {
        fprintf(stderr, "ane-double: no fact in mac_methods.c for %c[%s %s]\n", class_method ? '+' : '-', class_name,
                selector);
        abort();
    }
    double_method(class_for(class_name), class_method, selector, imp, live);
}

#define REGISTER(name, implementation)                     \
    do {                                                   \
        ane_msg_##name##_fn typed = implementation;        \
        register_message(ANE_MSG_##name, (IMP)typed);      \
    } while (0)

__attribute__((constructor)) static void framework_init(void) {
    read_modes();
    double_foundation_init();
    Descriptor = double_class("_ANEInMemoryModelDescriptor", "NSObject", sizeof(descriptor_object), descriptor_destroy, 50);
    Model = double_class("_ANEInMemoryModel", "NSObject", sizeof(model_object), model_destroy, 51);
    Request = double_class("_ANERequest", "NSObject", sizeof(request_object), request_destroy, 52);
    SurfaceObject = double_class("_ANEIOSurfaceObject", "NSObject", sizeof(surface_wrapper), wrapper_destroy, 53);
    Client = double_class("_ANEClient", "NSObject", sizeof(double_object), NULL, 54);
    double_method(Client, 1, "sharedConnection", (IMP)client_shared, double_mac_encoding("_ANEClient", 1, "sharedConnection", 0));
    REGISTER(descriptor_create, descriptor_create);
    REGISTER(model_create, model_create);
    REGISTER(model_identifier, model_identifier);
    REGISTER(model_compiled_exists, model_compiled_exists);
    REGISTER(model_compile, model_compile);
    REGISTER(model_load, model_load);
    REGISTER(model_evaluate, model_evaluate);
    REGISTER(model_unload, model_unload);
    REGISTER(model_attributes, model_attributes);
    REGISTER(surface_object_create, surface_object_create);
    REGISTER(request_create, request_create);
}
