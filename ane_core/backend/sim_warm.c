/* Which weights the helper threads read ahead of sim's products (base/parallel.h's
 * ane_parallel_warm). Between two products of a program the caller works alone (norms, RoPE,
 * the attention over the cache) and the memory is idle; the helper, waiting for the next loop,
 * reads the next product's weights into the caches meanwhile, and that product starts on them
 * rather than on memory.
 *
 * Only inside an evaluation, and only the program's own weights: the evaluation reads them
 * itself moments later, so they are there to read. Reading ahead across programs (the next
 * layer's weights while the runtime and Lua run between two evaluations) would read memory
 * nobody vouches for then: a weight read where a file is mapped (a checkpoint loaded in place)
 * faults the process if the file is cut short meanwhile, which one spec does to a model's own
 * file (llama_formats_spec's v1 export). An evaluation ends with the warming stopped, and so do
 * an unload and a patch. */
#include <stdlib.h>

#include "../base/parallel.h"
#include "../tensor/quantize.h"
#include "sim_program.h"

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

int sim_warm_after_product(const sim_loaded *instance, int step) {
    ane_span spans[2 * SIM_MAX_PARTS];
    int count, next = product_from(instance, step + 1, spans, &count);
    ane_parallel_warm(spans, count); /* (count 0 after the last: nothing) */
    return next;
}

void sim_warm_stop(void) { ane_parallel_warm(NULL, 0); }
