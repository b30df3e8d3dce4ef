/* tensor/loss.c against log-softmax in double: the summed cross-entropy of a batch with
 * logits of a wide range (one row far from 0, one with ties), its gradient
 * scale * (softmax - onehot), and the error naming a target outside the vocabulary.
 * Tolerance: the kernel exponentiates in fp32 (relative error ~1e-7 per term) and sums in
 * double, so 1e-6 relative on the loss and 1e-6 * scale on each gradient entry. */
#include <math.h>
#include <string.h>

#include "ane_core/tensor/tensor.h"
#include "check.h"

enum { N = 4, V = 1000 };

int main(void) {
    ane_error err;
    int64_t shape[2] = { N, V };
    ane_tensor logits, grad;
    CHECK(ane_tensor_zeros(&logits, 2, shape, ANE_FP32, &err) == ANE_OK, "logits");
    float *z = (float *)ane_tensor_data(&logits);
    uint32_t state = 11;
    for (int i = 0; i < N * V; i++) {
        state = state * 1664525u + 1013904223u;
        z[i] = (float)((double)(state >> 8) / (1 << 23) * 8 - 8);
    }
    for (int j = 0; j < V; j++) z[1 * V + j] += 1000.0f; /* far from 0: needs the peak shift */
    for (int j = 0; j < V; j++) z[2 * V + j] = 3.0f;     /* all tied */
    const int64_t targets[N] = { 0, 999, 500, 17 };
    const double scale = 0.25;
    double loss = 0;
    CHECK(ane_cross_entropy(&logits, targets, scale, &loss, &grad, &err) == ANE_OK, "cross entropy: %s", err.message);
    double reference = 0, worst = 0;
    const float *g = (const float *)ane_tensor_data(&grad);
    for (int r = 0; r < N; r++) {
        double peak = z[r * V];
        /* a compare, not fmax: gcc 12's aarch64 vectorizer crashes on an fmax reduction here */
        for (int j = 1; j < V; j++)
            if (z[r * V + j] > peak) peak = z[r * V + j];
        double sum = 0;
        for (int j = 0; j < V; j++) sum += exp((double)z[r * V + j] - peak);
        reference += log(sum) + peak - z[r * V + targets[r]];
        for (int j = 0; j < V; j++) {
            double expected = scale * (exp((double)z[r * V + j] - peak) / sum - (j == targets[r]));
            worst = worse_error(worst, fabs(g[r * V + j] - expected));
        }
    }
    CHECK(fabs(loss - reference) <= 1e-6 * fabs(reference), "loss %.12g, reference %.12g", loss, reference);
    CHECK(worst <= 1e-6 * scale, "gradient: max |g - reference| = %.3g", worst);
    ane_tensor_release(&grad);

    const int64_t bad[N] = { 0, 1, 1000, 2 };
    CHECK(ane_cross_entropy(&logits, bad, 1, &loss, &grad, &err) == ANE_ERR_RANGE, "a target outside 0..V-1 fails");
    CHECK(strstr(err.message, "target 1000 at position 3") != NULL, "the message names the target and position: %s",
          err.message);
    ane_tensor_release(&logits);
    return check_summary("loss");
}
