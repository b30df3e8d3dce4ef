/* Patching the sim backend's loaded instances: a weight's new values written into the
 * instance's bytes for it, no parsing or compiling (sim.c's header says what patching is).
 * A const's bytes stay the compiled graph's, which the programs holding the same weights share
 * (intern.h), until its first patch gives it bytes of its own (sim_weight); patch_together
 * writes one value once, into bytes every instance patched with it reads (a training step's
 * forward and backward programs of a layer). */
#include <stdlib.h>
#include <string.h>

#include "../base/fp16.h"
#include "../base/parallel.h"
#include "../passes/passes.h"
#include "../tensor/storage.h"
#include "sim_program.h"

void sim_release_weight(sim_weight *weight) {
    if (--weight->sharers > 0) return;
    free(weight->data);
    free(weight);
}

/* Copies fp16 bits, replacing NaN -> 0 and +-inf -> +-65504; returns how many were
 * replaced. The copy loop only notes whether any special value passed (it vectorizes);
 * the rare fix-up pass runs only then. */
static int64_t copy_sanitized_half(uint16_t *dst, const uint16_t *src, int64_t n) {
    unsigned special = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = src[i];
        dst[i] = b;
        special |= (b & 0x7C00u) == 0x7C00u;
    }
    if (!special) return 0;
    int64_t replaced = 0;
    for (int64_t i = 0; i < n; i++) {
        uint16_t b = dst[i];
        if ((b & 0x7C00u) != 0x7C00u) continue;
        dst[i] = (b & 0x03FFu) ? 0 : (uint16_t)((b & 0x8000u) | 0x7BFFu);
        replaced++;
    }
    return replaced;
}

/* Blocks of a patch written into a weight's buffer (below), a share of them per thread. */
enum { PATCH_BLOCK = 4096 };

typedef struct patch_job {
    const char *source; /* numel elements of source_dtype, element bytes each */
    size_t element;
    ane_dtype source_dtype, weight_dtype;
    float *values;   /* fp32 values [numel], or NULL when the weight keeps fp16 bits */
    uint16_t *half;  /* fp16 bits [numel], or NULL */
    int64_t numel;
    int64_t replaced; /* out of range or NaN, summed over the shares (atomically) */
} patch_job;

static void patch_blocks(void *context, int64_t first, int64_t last) {
    patch_job *job = context;
    int to_half = job->weight_dtype == ANE_FP16;
    float staging[PATCH_BLOCK]; /* fp32 values of one block */
    int64_t replaced = 0;
    for (int64_t block = first; block < last; block++) {
        int64_t start = block * PATCH_BLOCK, count = job->numel - start < PATCH_BLOCK ? job->numel - start : PATCH_BLOCK;
        float *out = job->half ? staging : job->values + start;
        ane_dtype_convert_row(out, ANE_FP32, job->source + (size_t)start * job->element, job->source_dtype, (size_t)count);
        replaced += ane_sanitize_weight_values(out, (size_t)count, job->weight_dtype);
        if (job->half) ane_fp32_to_fp16_n(job->half + start, staging, (size_t)count);
        else if (to_half && job->source_dtype != ANE_FP16) ane_round_fp32_through_fp16_n(out, (size_t)count);
    }
    if (replaced) __atomic_add_fetch(&job->replaced, replaced, __ATOMIC_RELAXED);
}

/* The const `name` of an instance's program, checked against a patch of `value`. */
static ane_status patchable_node(const sim_loaded *instance, const char *name, const ane_tensor *value, ane_node **out,
                                 ane_error *err) {
    ane_node *node = ane_graph_find(instance->program->graph, name);
    if (!node || node->op != ANE_OP_CONST)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' has no weight '%s'", instance->program->graph->name, name);
    if (node->encoding) return ane_refuse_encoded_patch(instance->program->graph->name, node, err);
    int64_t numel = ane_node_numel(node);
    if (ane_tensor_numel(value) != numel)
        return ane_fail(err, ANE_ERR_SHAPE, "weight '%s' has %lld elements, the patch %lld", name, (long long)numel,
                        (long long)ane_tensor_numel(value));
    *out = node;
    return ANE_OK;
}

/* Points the const's halves (fp16 bits) or values (and the reshapes reading them) at `data`. */
static void point_weight_at(sim_loaded *instance, const ane_node *node, void *data) {
    if (instance->values[node->id].half) {
        instance->values[node->id].half = data;
        return;
    }
    float *before = instance->values[node->id].data;
    const ane_graph *g = instance->program->graph;
    for (int i = 0; i < g->count; i++)
        if (instance->values[i].data == before && sim_is_view(g->nodes[i])) instance->values[i].data = data;
    instance->values[node->id].data = data;
}

/* Whether a patch gives the const bytes of its own (sim_weight): fp16 bits and fp32 values
 * read where the graph keeps them. Other consts live in the instance's slab already. */
static int patches_into_weight(const sim_loaded *instance, const ane_node *node) {
    return instance->values[node->id].half || sim_reads_graph_values(node);
}

/* Makes the const's bytes this instance's alone, to be overwritten whole (nothing is copied
 * into them): new bytes unless it reads its own unshared ones or its slab's already. */
static ane_status own_weight(sim_loaded *instance, const ane_node *node, ane_error *err) {
    sim_weight *current = instance->values[node->id].patched;
    if (current && current->sharers == 1) return ANE_OK;
    if (!current && !patches_into_weight(instance, node)) return ANE_OK;
    size_t bytes = (size_t)ane_node_numel(node) * (instance->values[node->id].half ? sizeof(uint16_t) : sizeof(float));
    sim_weight *fresh = malloc(sizeof *fresh);
    void *data = malloc(bytes ? bytes : 4);
    if (!fresh || !data) {
        free(fresh);
        free(data);
        return ane_fail(err, ANE_ERR_NOMEM, "out of memory patching weight '%s'", node->name);
    }
    fresh->sharers = 1;
    fresh->data = data;
    if (current) sim_release_weight(current);
    instance->values[node->id].patched = fresh;
    point_weight_at(instance, node, data);
    return ANE_OK;
}

static void sanitize_blocks(void *context, int64_t first, int64_t last) {
    patch_job *job = context;
    int64_t replaced = 0;
    for (int64_t block = first; block < last; block++) {
        int64_t start = block * PATCH_BLOCK, count = job->numel - start < PATCH_BLOCK ? job->numel - start : PATCH_BLOCK;
        replaced += ane_sanitize_weight_values(job->values + start, (size_t)count, ANE_FP32);
    }
    if (replaced) __atomic_add_fetch(&job->replaced, replaced, __ATOMIC_RELAXED);
}

/* An fp32 weight from a strided fp32 view (a transposed parameter, GPT-2's [in, out]
 * matrices): copied straight into the weight's values in its row-major order (the blocked,
 * threaded strided copy), then sanitized in place; no packed copy in between. */
static ane_status write_strided_fp32(float *values, const ane_tensor *value, int64_t *sanitized, ane_error *err) {
    int64_t numel = ane_tensor_numel(value);
    ane_storage pin;
    ane_tensor destination = sim_view_shaped(values, ANE_FP32, value->ndim, value->shape, &pin);
    ane_status status = ane_tensor_copy_into(&destination, value, err);
    if (status) return status;
    patch_job job = {.values = values, .numel = numel};
    ane_parallel_for((numel + PATCH_BLOCK - 1) / PATCH_BLOCK, 64, sanitize_blocks, &job);
    *sanitized += job.replaced;
    return ANE_OK;
}

/* One pass, block by block, into the const's buffer: fp16 weights get the new bits
 * (converted from fp32 with the same rounding as a fresh compile), other weights fp32
 * values; NaN -> 0 and values beyond the dtype's range -> its largest finite value. */
static ane_status write_weight(sim_loaded *instance, const ane_node *node, const ane_tensor *value, int64_t *sanitized,
                               ane_error *err) {
    if (!instance->values[node->id].half && node->dtype == ANE_FP32 && value->dtype == ANE_FP32 &&
        !ane_tensor_is_contiguous(value))
        return write_strided_fp32(instance->values[node->id].data, value, sanitized, err);
    ane_tensor packed;
    ane_status status = ane_tensor_is_contiguous(value) ? (ane_tensor_share(&packed, value), ANE_OK)
                                                        : ane_tensor_to(&packed, value, value->dtype, err);
    if (status) return status;
    int64_t numel = ane_node_numel(node);
    uint16_t *half = instance->values[node->id].half;
    int64_t replaced = 0;
    if (half && packed.dtype == ANE_FP16) {
        replaced = copy_sanitized_half(half, (const uint16_t *)ane_tensor_data(&packed), numel);
    } else {
        patch_job job = {.source = ane_tensor_data(&packed), .element = ane_dtype_size(packed.dtype),
                         .source_dtype = packed.dtype, .weight_dtype = node->dtype,
                         .values = half ? NULL : instance->values[node->id].data, .half = half, .numel = numel};
        /* a weight of a training step is megabytes: both cores' share of the bandwidth */
        ane_parallel_for((numel + PATCH_BLOCK - 1) / PATCH_BLOCK, 64, patch_blocks, &job);
        replaced = job.replaced;
    }
    ane_tensor_release(&packed);
    *sanitized += replaced;
    return ANE_OK;
}

/* The patch of one instance's const: bytes of its own, then the values written. */
static ane_status patch_node(sim_loaded *instance, const ane_node *node, const ane_tensor *value, int64_t *sanitized,
                             ane_error *err) {
    ane_status status = own_weight(instance, node, err);
    if (!status) status = write_weight(instance, node, value, sanitized, err);
    return status;
}

ane_status sim_patch(ane_loaded *loaded, const char *name, const ane_tensor *value, int64_t *sanitized,
                            ane_error *err) {
    sim_loaded *instance = (sim_loaded *)loaded;
    instance->copies_current = 0; /* the patched const may be one a matmul reads */
    sim_warm_stop();              /* (no helper reads weights while they change) */
    ane_node *node = NULL;
    ane_status status = patchable_node(instance, name, value, &node, err);
    if (!status) status = patch_node(instance, node, value, sanitized, err);
    return status;
}

/* Whether instance b's const can read instance a's bytes: the same dtype, size and form. */
static int can_share_weight(const sim_loaded *a, const ane_node *node_a, const sim_loaded *b, const ane_node *node_b) {
    return patches_into_weight(a, node_a) && patches_into_weight(b, node_b) && node_a->dtype == node_b->dtype &&
           !a->values[node_a->id].half == !b->values[node_b->id].half && ane_node_numel(node_a) == ane_node_numel(node_b);
}

/* The same value into weight `name` of each instance (distinct ones): written once, into
 * bytes the instances that can share them read together. When exactly those instances
 * share the bytes already (the previous step's patch), they are overwritten in place;
 * otherwise the first instance gets bytes of its own and the others adopt them. */
ane_status sim_patch_together(ane_loaded *const *loaded, int count, const char *name, const ane_tensor *value,
                                     int64_t *sanitized, ane_error *err) {
    sim_loaded *const *instances = (sim_loaded *const *)loaded;
    ane_node **nodes = malloc((size_t)count * sizeof *nodes); /* [count]: each instance's const */
    if (!nodes) return ane_fail(err, ANE_ERR_NOMEM, "out of memory patching weight '%s'", name);
    ane_status status = ANE_OK;
    for (int i = 0; i < count; i++) instances[i]->copies_current = 0; /* (bytes shared change for all) */
    sim_warm_stop();
    for (int i = 0; i < count && !status; i++) status = patchable_node(instances[i], name, value, &nodes[i], err);
    sim_loaded *first = instances[0];
    sim_weight *shared = status ? NULL : first->values[nodes[0]->id].patched;
    int sharing = 0, readers = 0; /* instances that can share; of them, those reading `shared` */
    for (int i = 0; i < count && !status; i++) {
        if (!can_share_weight(first, nodes[0], instances[i], nodes[i])) continue;
        sharing++;
        readers += shared && instances[i]->values[nodes[i]->id].patched == shared;
    }
    if (!status && sharing < 2) { /* nothing to share: each on its own */
        for (int i = 0; i < count && !status; i++) status = patch_node(instances[i], nodes[i], value, sanitized, err);
    } else if (!status) {
        if (!(shared && readers == sharing && shared->sharers == sharing)) status = own_weight(first, nodes[0], err);
        if (!status) status = write_weight(first, nodes[0], value, sanitized, err);
        shared = first->values[nodes[0]->id].patched;
        for (int i = 1; i < count && !status; i++) {
            sim_loaded *instance = instances[i];
            const ane_node *node = nodes[i];
            if (!can_share_weight(first, nodes[0], instance, node)) { /* another form: on its own */
                status = patch_node(instance, node, value, sanitized, err);
                continue;
            }
            if (instance->values[node->id].patched == shared) continue;
            if (instance->values[node->id].patched) sim_release_weight(instance->values[node->id].patched);
            shared->sharers++;
            instance->values[node->id].patched = shared;
            point_weight_at(instance, node, shared->data);
        }
    }
    free(nodes);
    return status;
}
