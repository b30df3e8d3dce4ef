/* tensor/optim.c against the formulas of optim.h evaluated here in double: three AdamW
 * steps with weight decay and a gradient scale, the sum of squares, and the activation
 * clamp on fp32 and fp16 (infinities to +-limit, NaN to 0, both counted). AdamW tolerance:
 * 1e-6 on parameters of magnitude ~1 whose updates are ~lr = 1e-2: fp32 storage of p, m, v
 * and fp32 arithmetic leave errors ~1e-7 per step, while a wrong bias correction, decay or
 * scale moves a parameter by more than 1e-4. */
#include <math.h>
#include <stdint.h>

#include "ane_core/base/cpu.h"
#include "ane_core/base/fp16.h"
#include "ane_core/tensor/optim.h"
#include "check.h"

enum { N = 1003 }; /* not a multiple of 8: the vector loop's tail runs too */

/* One fp32 operation, rounded on its own (a volatile store: no contraction into FMA). */
static float mul(float a, float b) { volatile float r = a * b; return r; }
static float add(float a, float b) { volatile float r = a + b; return r; }

static uint32_t state = 5;
static float uniform(void) {
    state = state * 1664525u + 1013904223u;
    return (float)((double)(state >> 8) / (1 << 23) - 1.0);
}

int main(void) {
    ane_error err;
    int64_t shape[1] = { N };
    ane_tensor p, g, m, v;
    CHECK(ane_tensor_zeros(&p, 1, shape, ANE_FP32, &err) == ANE_OK && ane_tensor_zeros(&g, 1, shape, ANE_FP32, &err) == ANE_OK
              && ane_tensor_zeros(&m, 1, shape, ANE_FP32, &err) == ANE_OK && ane_tensor_zeros(&v, 1, shape, ANE_FP32, &err) == ANE_OK,
          "tensors");
    float *pd = (float *)ane_tensor_data(&p), *gd = (float *)ane_tensor_data(&g);
    double rp[N], rm[N] = { 0 }, rv[N] = { 0 };
    float fp[N], fm[N] = { 0 }, fv[N] = { 0 }; /* the scalar loop's fp32 operations in its order */
    for (int i = 0; i < N; i++) fp[i] = (float)(rp[i] = pd[i] = uniform());
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, scale = 0.5;
    for (int step = 1; step <= 3; step++) {
        for (int i = 0; i < N; i++) gd[i] = uniform() * (i % 10 == 0 ? 1e-4f : 1.0f);
        ane_adamw_options options = { .lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd,
                                      .grad_scale = scale, .step = step };
        CHECK(ane_adamw_step(&p, &g, &m, &v, &options, &err) == ANE_OK, "step %d: %s", step, err.message);
        float b1f = (float)b1, b2f = (float)b2, inv_c1 = (float)(1.0 / (1.0 - pow(b1, step))),
              inv_c2 = (float)(1.0 / (1.0 - pow(b2, step)));
        for (int i = 0; i < N; i++) {
            float gi = mul(gd[i], (float)scale);
            fm[i] = add(mul(b1f, fm[i]), mul(1.0f - b1f, gi));
            fv[i] = add(mul(b2f, fv[i]), mul(mul(1.0f - b2f, gi), gi));
            volatile float root = sqrtf(mul(fv[i], inv_c2));
            volatile float ratio = mul(fm[i], inv_c1) / add(root, (float)eps);
            fp[i] = add(fp[i], -mul((float)lr, add(ratio, mul((float)wd, fp[i]))));
        }
        for (int i = 0; i < N; i++) {
            double gi = (double)gd[i] * scale;
            rm[i] = b1 * rm[i] + (1 - b1) * gi;
            rv[i] = b2 * rv[i] + (1 - b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, step)), vh = rv[i] / (1 - pow(b2, step));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
    }
    double worst = 0;
    for (int i = 0; i < N; i++) worst = worse_error(worst, fabs(pd[i] - rp[i]));
    CHECK(worst <= 1e-6, "AdamW after 3 steps: max |p - reference| = %.3g", worst);
#if defined(__x86_64__)
    /* The AVX path claims the scalar loop's bits: each operation rounded, none fused. */
    if (ane_cpu_has_f16c()) {
        int differ = 0;
        for (int i = 0; i < N; i++) differ += pd[i] != fp[i];
        CHECK(differ == 0, "AdamW's vector path: %d of %d parameters differ from the fp32 operations in order", differ, N);
    }
#endif

    double sum = 0, reference = 0;
    for (int i = 0; i < N; i++) reference += (double)pd[i] * pd[i];
    /* each square may round to fp32 (relative 2^-24) before the fp64 sum: 1e-7 of the total */
    CHECK(ane_sum_of_squares(&p, &sum, &err) == ANE_OK && fabs(sum - reference) <= 1e-7 * reference,
          "sum of squares %.17g, reference %.17g", sum, reference);

    /* clamp: fp32 and fp16 */
    const float specials[] = { 1.0f, -70000.0f, 70000.0f, INFINITY, -INFINITY, NAN, 65504.0f, -3.5f };
    const float expected[] = { 1.0f, -65504.0f, 65504.0f, 65504.0f, -65504.0f, 0.0f, 65504.0f, -3.5f };
    int64_t small[1] = { 8 };
    ane_tensor a, h;
    ane_tensor_zeros(&a, 1, small, ANE_FP32, &err);
    ane_tensor_zeros(&h, 1, small, ANE_FP16, &err);
    float *ad = (float *)ane_tensor_data(&a);
    uint16_t *hd = (uint16_t *)ane_tensor_data(&h);
    for (int i = 0; i < 8; i++) ad[i] = specials[i], hd[i] = ane_fp32_to_fp16(specials[i]);
    int64_t clamped = -1, nans = -1;
    CHECK(ane_clamp_activations(&a, 65504, &clamped, &nans, &err) == ANE_OK && clamped == 4 && nans == 1,
          "fp32 clamp counts: %lld clamped, %lld NaN", (long long)clamped, (long long)nans);
    int wrong = 0;
    for (int i = 0; i < 8; i++) wrong += ad[i] != expected[i];
    CHECK(wrong == 0, "fp32 clamp values");
    /* in fp16, +-70000 are already +-inf, 65504 is the limit itself */
    CHECK(ane_clamp_activations(&h, 65504, &clamped, &nans, &err) == ANE_OK && clamped == 4 && nans == 1,
          "fp16 clamp counts: %lld clamped, %lld NaN", (long long)clamped, (long long)nans);
    wrong = 0;
    for (int i = 0; i < 8; i++) wrong += ane_fp16_to_fp32(hd[i]) != expected[i];
    CHECK(wrong == 0, "fp16 clamp values");
    ane_tensor_release(&p), ane_tensor_release(&g), ane_tensor_release(&m), ane_tensor_release(&v);
    ane_tensor_release(&a), ane_tensor_release(&h);
    return check_summary("optim");
}
