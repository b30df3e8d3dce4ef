/* Which weights the helper threads read ahead of sim's products (base/parallel.h's
 * ane_parallel_warm). Between two products the caller works alone (norms, RoPE, the
 * attention over the cache, and between programs the runtime and Lua) and the memory is idle;
 * the helper, waiting for the next loop, reads the next product's weights into the caches
 * meanwhile, and that product starts on them rather than on memory.
 *
 * The next product: after each product, the program's next one; after its last, the first
 * product of the program evaluated after this one the last time (decoding runs the same
 * programs in the same order every token: a layer's attention, its FFN, the next layer's
 * attention, ...). Only an instance still loaded is warmed: an instance remembers its
 * successor with the count of unloads at the time, and any unload since makes it unknown
 * until the next evaluations teach it again. Unloads and patches stop the warming first, so
 * no helper reads weights that are going. */
#include <pthread.h>
#include <stdlib.h>

#include "../base/parallel.h"
#include "../tensor/quantize.h"
#include "sim_program.h"

static struct {
    pthread_mutex_t lock;         /* guards the fields below and every instance's successor */
    const sim_loaded *last_started; /* the instance whose evaluation started last */
    uint64_t unloads;
} warming = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Whether a step is a product of const weights: each part a conv of a const. */
static int is_product(const sim_step *step) {
    for (int p = 0; p < step->nparts; p++) {
        const ane_node *conv = step->parts[p];
        if (conv->op != ANE_OP_CONV || conv->noperands < 2 || conv->operands[1]->op != ANE_OP_CONST) return 0;
    }
    return step->nparts > 0;
}

ane_status sim_plan_products(sim_compiled *p, ane_error *err) {
    p->next_product = malloc(((size_t)p->nsteps + 1) * sizeof *p->next_product);
    if (!p->next_product) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling program '%s'", p->graph->name);
    p->next_product[p->nsteps] = -1;
    for (int s = p->nsteps - 1; s >= 0; s--) {
        const sim_step *step = &p->steps[s];
        int in_group = p->branch_of[step->node->id] >= 0; /* (run by run_branches: not followed here) */
        p->next_product[s] = !in_group && is_product(step) ? s : p->next_product[s + 1];
    }
    return ANE_OK;
}

/* The spans of the weights a product step reads as stored (each part's bytes, and its
 * table), their count. */
static int weight_spans(const sim_loaded *instance, const sim_step *step, ane_span *spans) {
    int count = 0;
    for (int p = 0; p < step->nparts; p++) {
        const ane_node *w = step->parts[p]->operands[1];
        const sim_value *value = &instance->values[w->id];
        int64_t numel = ane_node_numel(w), rows = w->shape[0];
        if (value->half) {
            spans[count++] = (ane_span){value->half, (size_t)numel * 2};
        } else if (w->encoding) {
            int64_t data_bytes = ane_encoded_data_bytes(w->encoding, rows, numel / rows);
            const ane_tensor *table = step->half_tables[p].storage ? &step->half_tables[p] : &w->table;
            size_t table_bytes = (size_t)ane_tensor_numel(table) * ane_dtype_size(table->dtype);
            spans[count++] = (ane_span){ane_tensor_data(&w->value), (size_t)data_bytes};
            spans[count++] = (ane_span){ane_tensor_data(table), table_bytes};
        } else if (value->data) {
            spans[count++] = (ane_span){value->data, (size_t)numel * sizeof(float)};
        }
    }
    return count;
}

/* The first product step from `from` on (its spans into spans, *count), or -1. */
static int product_from(const sim_loaded *instance, int from, ane_span *spans, int *count) {
    int step = instance->program->next_product[from];
    *count = step >= 0 ? weight_spans(instance, &instance->program->steps[step], spans) : 0;
    return step;
}

/* Posts the first product's weights of the instance's successor, or nothing. */
static void warm_successor(const sim_loaded *instance) {
    ane_span spans[2 * SIM_MAX_PARTS];
    int count = 0;
    pthread_mutex_lock(&warming.lock); /* (no unload meanwhile: the successor stays loaded) */
    const sim_loaded *successor = instance->successor_unloads == warming.unloads ? instance->successor : NULL;
    if (successor) product_from(successor, 0, spans, &count);
    ane_parallel_warm(spans, count);
    pthread_mutex_unlock(&warming.lock);
}

int sim_warm_first_product(sim_loaded *instance) {
    ane_span spans[2 * SIM_MAX_PARTS];
    int count;
    pthread_mutex_lock(&warming.lock);
    if (warming.last_started && warming.last_started != instance) {
        sim_loaded *before = (sim_loaded *)warming.last_started;
        before->successor = instance;
        before->successor_unloads = warming.unloads;
    }
    warming.last_started = instance;
    pthread_mutex_unlock(&warming.lock);
    int first = product_from(instance, 0, spans, &count);
    if (first < 0) warm_successor(instance); /* (a program of no products: a final norm) */
    return first;
}

int sim_warm_after_product(sim_loaded *instance, int step) {
    ane_span spans[2 * SIM_MAX_PARTS];
    int count, next = product_from(instance, step + 1, spans, &count);
    if (next >= 0) ane_parallel_warm(spans, count);
    else warm_successor(instance);
    return next;
}

void sim_warm_forget(const sim_loaded *instance) {
    pthread_mutex_lock(&warming.lock);
    warming.unloads++;
    if (warming.last_started == instance) warming.last_started = NULL;
    ane_parallel_warm(NULL, 0);
    pthread_mutex_unlock(&warming.lock);
}

void sim_warm_stop(void) { ane_parallel_warm(NULL, 0); }
