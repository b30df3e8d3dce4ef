/* Ranking a row of values: the k largest (topk) and one index drawn from a softmax over them
 * (sample), for a sampler's top-k / top-p over a row of logits without sorting the row. */
#include <math.h>
#include <stdlib.h>

#include "tensor.h"

/* A value and its flat index; NaN ranks as -inf. */
typedef struct ranked {
    double value;
    int64_t index;
} ranked;

/* The order of topk: larger values first, equal ones by the lower index (a total order). */
static int by_value_descending(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->value != y->value) return x->value > y->value ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Moves the k best of all[0 .. n) (by_value_descending's order) into all[0 .. k), unordered:
 * a heap of the best so far whose root is the worst of them, which each later element has to
 * beat to get in. One pass over n; nearly every element fails that test. */
static void sift_down(ranked *heap, int64_t k, int64_t i) {
    for (;;) {
        int64_t worst = i, left = 2 * i + 1, right = left + 1;
        if (left < k && by_value_descending(&heap[worst], &heap[left]) < 0) worst = left;
        if (right < k && by_value_descending(&heap[worst], &heap[right]) < 0) worst = right;
        if (worst == i) return;
        ranked swap = heap[i];
        heap[i] = heap[worst], heap[worst] = swap;
        i = worst;
    }
}

static void keep_best(ranked *all, int64_t k, int64_t n) {
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(all, k, i);
    for (int64_t i = k; i < n; i++)
        if (by_value_descending(&all[i], &all[0]) < 0) {
            all[0] = all[i];
            sift_down(all, k, 0);
        }
}

/* The k best of a row in order, into ranked (a sampler's top 40 of 50,257 logits through the
 * heap, k of more than n / 8 by sorting all). */
static void rank_best(ranked *all, int64_t k, int64_t n) {
    if (k * 8 < n) {
        keep_best(all, k, n);
        qsort(all, (size_t)k, sizeof *all, by_value_descending);
    } else {
        qsort(all, (size_t)n, sizeof *all, by_value_descending);
    }
}

/* The row as ranked values (malloc'd) from its contiguous fp32 form. */
static ane_status ranked_row(const ane_tensor *t, ranked **out, ane_error *err) {
    ane_tensor flat;
    ane_status status = ane_tensor_contiguous_fp32(&flat, t, err);
    if (status) return status;
    int64_t n = ane_tensor_numel(t);
    const float *data = (const float *)ane_tensor_data(&flat);
    ranked *all = malloc((size_t)(n > 0 ? n : 1) * sizeof *all);
    if (all)
        for (int64_t i = 0; i < n; i++) all[i] = (ranked){data[i] == data[i] ? data[i] : -INFINITY, i};
    ane_tensor_release(&flat);
    if (!all) return ane_fail(err, ANE_ERR_NOMEM, "out of memory ranking %lld values", (long long)n);
    *out = all;
    return ANE_OK;
}

ane_status ane_tensor_topk(const ane_tensor *t, int64_t k, int64_t *indices, double *values, ane_error *err) {
    int64_t n = ane_tensor_numel(t);
    if (k < 1 || k > n) return ane_fail(err, ANE_ERR_ARGUMENT, "k = %lld is outside 1..%lld", (long long)k, (long long)n);
    if (k == 1) { /* argmax: one pass; the value as it is (NaN when every value is) */
        ane_tensor flat;
        ane_status status = ane_tensor_contiguous_fp32(&flat, t, err);
        if (status) return status;
        const float *data = (const float *)ane_tensor_data(&flat);
        int64_t best = 0;
        for (int64_t i = 1; i < n; i++)
            if (data[i] > data[best] || (data[best] != data[best] && data[i] == data[i])) best = i;
        indices[0] = best;
        values[0] = data[best];
        ane_tensor_release(&flat);
        return ANE_OK;
    }
    ranked *all;
    ane_status status = ranked_row(t, &all, err);
    if (status) return status;
    rank_best(all, k, n);
    for (int64_t i = 0; i < k; i++) indices[i] = all[i].index, values[i] = all[i].value;
    free(all);
    return ANE_OK;
}

/* Draws from candidates[0 .. m), best first, with weights exp((value - best) / temperature):
 * the shortest prefix whose share of `total` reaches top_p, then u of its own total; never
 * one of no weight. */
static int64_t draw(const ranked *candidates, int64_t m, double total, double temperature, double top_p, double u) {
    int64_t keep = m;
    double best = candidates[0].value;
    if (top_p < 1) {
        double mass = 0, kept = 0;
        for (int64_t i = 0; i < m; i++) {
            double weight = exp((candidates[i].value - best) / temperature);
            mass += weight / total;
            kept += weight;
            if (mass >= top_p) {
                keep = i + 1;
                break;
            }
        }
        total = kept;
    }
    double left = u * total;
    int64_t chosen = candidates[0].index;
    for (int64_t i = 0; i < keep; i++) {
        double weight = exp((candidates[i].value - best) / temperature);
        if (weight == 0) break; /* the rest weigh nothing either (NaN, -inf, underflow) */
        chosen = candidates[i].index; /* the last of any weight, should rounding leave some of u */
        left -= weight;
        if (left <= 0) break;
    }
    return chosen;
}

ane_status ane_tensor_sample(const ane_tensor *t, double temperature, int64_t top_k, double top_p, double min_p, double u,
                             int64_t *index, ane_error *err) {
    int64_t n = ane_tensor_numel(t);
    if (n < 1) return ane_fail(err, ANE_ERR_ARGUMENT, "sample: the row is empty");
    if (!(temperature > 0) || !(u >= 0 && u < 1) || !(top_p > 0) || !(min_p >= 0 && min_p <= 1))
        return ane_fail(err, ANE_ERR_ARGUMENT,
                        "sample: temperature %g must be > 0, u %g in [0, 1), top_p %g > 0, min_p %g in [0, 1]", temperature,
                        u, top_p, min_p);
    int64_t k = top_k > 0 && top_k < n ? top_k : n;
    ranked *all;
    ane_status status = ranked_row(t, &all, err);
    if (status) return status;
    double best = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (all[i].value > best) best = all[i].value;
    if (min_p > 0 && best > -INFINITY) { /* below min_p of the best's probability: out, as -inf */
        double floor = best + log(min_p);
        for (int64_t i = 0; i < n; i++)
            if (all[i].value < floor) all[i].value = -INFINITY;
    }
    if (best == -INFINITY) { /* nothing but NaN and -inf: the first */
        *index = 0;
    } else if (k < n) { /* top-k: the k best in order */
        rank_best(all, k, n);
        double total = 0;
        for (int64_t i = 0; i < k; i++) total += exp((all[i].value - best) / temperature);
        *index = draw(all, k, total, temperature, top_p, u);
    } else {
        double total = 0;
        for (int64_t i = 0; i < n; i++) total += exp((all[i].value - best) / temperature);
        if (top_p < 1) {
            /* Only values of weight at least (1 - top_p) / (n - 1) of the total can be in the
             * nucleus (all the others together weigh less than 1 - top_p): rank those alone,
             * found by the value that weight stands for (no second exp over the row). Where
             * that is above the best (short or nearly flat rows), the best alone is the nucleus. */
            double least = n > 1 ? best + temperature * log((1 - top_p) / (double)(n - 1) * total) : -INFINITY;
            if (least > best) least = best;
            int64_t m = 0;
            for (int64_t i = 0; i < n; i++)
                if (all[i].value >= least) all[m++] = all[i];
            qsort(all, (size_t)m, sizeof *all, by_value_descending);
            *index = draw(all, m, total, temperature, top_p, u);
        } else { /* the whole softmax: walk it in index order, past values of no weight */
            double left = u * total;
            for (int64_t i = 0; i < n; i++) {
                double weight = exp((all[i].value - best) / temperature);
                if (weight == 0) continue;
                *index = all[i].index; /* the last of any weight, should rounding leave some of u */
                left -= weight;
                if (left <= 0) break;
            }
        }
    }
    free(all);
    return ANE_OK;
}
