/* tensor/vector_math.c against libm in double precision, over a fine sweep of each
 * function's whole range, the subnormal results of e^x, and the special values. Run once per
 * instruction set (ctest's cpu-avx2 / cpu-scalar rows cap it with ANELUA_CPU); uncapped, it
 * also runs itself capped to scalar and checks both paths give the same bits. Sums and maxima
 * (ane_sum_n, ane_max_n) against their specified order and the exact values.
 *
 * Bounds, in ulp of the exact result, from each path's error budget. A relative error of
 * k 2^-24 is at most k ulp (a float's ulp is 2^-24 to 2^-23 of it), so roundings add up:
 * - e^x, 1.5: the final fused 2^n (1 + m) rounding 0.5; r = x - n ln 2 (the first step exact
 *   by Sterbenz, the second rounded) 0.25; m = e^r - 1 rounded (0.5 ulp of |m| < 0.5, over
 *   1 + m >= 0.7) 0.35; the Horner roundings inside m and the Taylor tail under 0.2.
 * - tanh, 4: m = 2^n e^r - 1 for 2|x| carries e^r's absolute error times 2^n over m >= 0.41
 *   (n = 1: up to 2.7), reaching m / (m + 2) scaled by 2 / (m + 2) <= 0.83 (2.2); the
 *   rounding of m + 2 (1) and of the quotient (0.5).
 * - sigmoid, 3.5: e = e^-|x| (1.5) in the numerator (x < 0) and half of it in 1 + e (0.75),
 *   the roundings of 1 + e (1) and of the quotient (0.5).
 * - SiLU, 4.5: sigmoid's budget and the rounding of x e (1).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/tensor/vector_math.h"
#include "check.h"

/* |got - want| in units of the last place of want rounded to float (2^-149 below 2^-126). */
static double ulps(float got, double want) {
    float rounded = (float)want;
    int exponent;
    frexpf(rounded == 0.0f ? 0x1p-126f : rounded, &exponent);
    double ulp = ldexp(1.0, (exponent - 24) < -149 ? -149 : exponent - 24);
    return fabs((double)got - want) / ulp;
}

static double exp_ref(double x) { return exp(x); }
static double tanh_ref(double x) { return tanh(x); }
static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }
static double silu_ref(double x) { return x / (1.0 + exp(-x)); }

typedef struct function {
    const char *name;
    void (*vector)(float *, const float *, int64_t);
    double (*reference)(double);
    float low, high; /* the sweep */
    double bound;    /* ulp */
} function;

/* The largest error over n evenly spaced points of [low, high] and their negated
 * neighbours one float apart (odd lengths leave a tail group). */
static double worst_over(const function *f, int64_t n, float *where) {
    float *x = malloc(sizeof(float) * n), *y = malloc(sizeof(float) * n);
    for (int64_t i = 0; i < n; i++) x[i] = f->low + (f->high - f->low) * (float)((double)i / (double)(n - 1));
    f->vector(y, x, n);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double error = ulps(y[i], f->reference(x[i]));
        if (error > worst || error != error) {
            worst = error != error ? INFINITY : error;
            *where = x[i];
        }
    }
    free(x);
    free(y);
    return worst;
}

/* FNV-1a over every function's outputs on a sweep with tails (the paths' bits compared) */
static uint64_t outputs_hash(void) {
    enum { N = 100003 };
    float *x = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    void (*const all[4])(float *, const float *, int64_t) = { ane_exp_n, ane_tanh_n, ane_sigmoid_n, ane_silu_n };
    uint64_t hash = 1469598103934665603u;
    for (int i = 0; i < N; i++) x[i] = -110.0f + 220.0f * (float)i / N;
    for (int f = 0; f < 4; f++) {
        all[f](y, x, N);
        const unsigned char *bytes = (const unsigned char *)y;
        for (size_t b = 0; b < sizeof(float) * N; b++) hash = (hash ^ bytes[b]) * 1099511628211u;
    }
    float sums[3 * 40] = { 0 }; /* (sums[1] and sums[2] are never written: zero, not stack garbage) */
    sums[0] = ane_exp_shifted_sum_n(y, x, 3.0f, 999);
    for (int n = 1; n < 40; n++) { /* sums and maxima of lengths around the eights, and long ones */
        int64_t length = n < 30 ? n : 1000 * n + n;
        sums[3 * n] = ane_sum_n(x + n, length);
        sums[3 * n + 1] = ane_max_n(x + n, length);
        sums[3 * n + 2] = ane_max_n(y + n, length); /* silu's outputs: not in order */
    }
    const unsigned char *bytes = (const unsigned char *)sums;
    for (size_t b = 0; b < sizeof sums; b++) hash = (hash ^ bytes[b]) * 1099511628211u;
    free(x);
    free(y);
    return hash;
}

/* ane_sum_n as vector_math.h specifies it, written here: elements 0 .. 7 start partials 0 .. 7,
 * later ones of the whole eights add into partial i % 8, the rest into partial 0, and the
 * partials are combined in order. */
static float spec_sum(const float *x, int64_t n) {
    float partial[8] = { 0 };
    int64_t whole = n / 8 * 8;
    for (int64_t i = 0; i < n; i++) {
        int l = i < 8 ? (int)i : i < whole ? (int)(i % 8) : 0;
        partial[l] = i < 8 ? x[i] : partial[l] + x[i]; /* the first eight start the partials (-0 stays -0) */
    }
    float total = partial[0];
    for (int l = 1; l < 8 && l < n; l++) total += partial[l];
    return total;
}

/* Sums against the order specified and within n rounding errors of the exact sum; maxima
 * exact, NaN anywhere giving NaN, nothing giving -inf. */
static void check_sums_and_maxima(void) {
    enum { LONGEST = 5003 };
    float *x = malloc(sizeof(float) * LONGEST);
    uint64_t state = 42;
    int wrong_sum = 0, wrong_bound = 0, wrong_max = 0;
    for (int64_t n = 0; n <= LONGEST; n = n < 40 ? n + 1 : n * 2 + 1) {
        double exact = 0.0, magnitude = 0.0;
        float max = -INFINITY;
        for (int64_t i = 0; i < n; i++) {
            state = state * 6364136223846793005u + 1442695040888963407u;
            x[i] = (float)((double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0) * (i % 7 == 3 ? 1000.0f : 1.0f);
            exact += x[i], magnitude += fabs(x[i]);
            if (x[i] > max) max = x[i];
        }
        float sum = ane_sum_n(x, n);
        if (memcmp(&sum, &(float){ spec_sum(x, n) }, sizeof sum) != 0) wrong_sum++;
        if (fabs(sum - exact) > (double)n * 0x1p-24 * magnitude) wrong_bound++;
        if (ane_max_n(x, n) != max) wrong_max++;
        if (n > 0) {
            x[(n * 5) / 7] = NAN;
            if (!isnan(ane_sum_n(x, n)) || !isnan(ane_max_n(x, n))) wrong_max++;
        }
    }
    CHECK(wrong_sum == 0, "%d sums differ from the specified order's", wrong_sum);
    CHECK(wrong_bound == 0, "%d sums are further from the exact sum than n roundings", wrong_bound);
    CHECK(wrong_max == 0, "%d maxima are wrong or miss a NaN", wrong_max);
    CHECK(ane_max_n(x, 0) == -INFINITY && ane_sum_n(x, 0) == 0.0f, "the empty maximum is -inf and sum 0");
    float zeros[3] = { -0.0f, -0.0f, -0.0f };
    CHECK(signbit(ane_sum_n(zeros, 3)) && signbit(spec_sum(zeros, 3)), "a sum of -0s is -0");
    free(x);
}

static float one(void (*vector)(float *, const float *, int64_t), float x) {
    float y;
    vector(&y, &x, 1);
    return y;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "--hash") == 0) {
        printf("%016llx\n", (unsigned long long)outputs_hash());
        return 0;
    }
    if (!getenv("ANELUA_CPU")) {
        char command[4096], line[64] = "";
        /* through the emulator that runs this test, if any (qemu-user in the aarch64 row) */
        const char *emulator = getenv("ANELUA_TEST_EMULATOR");
        snprintf(command, sizeof command, "ANELUA_CPU=scalar %s '%s' --hash", emulator ? emulator : "", argv[0]);
        FILE *scalar = popen(command, "r");
        CHECK(scalar && fgets(line, sizeof line, scalar), "running %s", command);
        if (scalar) pclose(scalar);
        char own[64];
        snprintf(own, sizeof own, "%016llx\n", (unsigned long long)outputs_hash());
        CHECK(strcmp(own, line) == 0, "this CPU's path and the scalar one differ: %s vs %s", own, line);
    }
    const function functions[] = {
        { "exp", ane_exp_n, exp_ref, -103.9f, 88.7f, 1.5 },
        { "exp (near 0)", ane_exp_n, exp_ref, -0.5f, 0.5f, 1.5 },
        { "tanh", ane_tanh_n, tanh_ref, -10.0f, 10.0f, 4.0 },
        { "tanh (near 0)", ane_tanh_n, tanh_ref, -0.01f, 0.01f, 4.0 },
        { "sigmoid", ane_sigmoid_n, sigmoid_ref, -90.0f, 30.0f, 3.5 },
        { "silu", ane_silu_n, silu_ref, -80.0f, 80.0f, 4.5 },
    };
    for (size_t i = 0; i < sizeof functions / sizeof *functions; i++) {
        float where = 0.0f;
        double worst = worst_over(&functions[i], 2000003, &where);
        printf("%-14s worst %.3f ulp at %.9g\n", functions[i].name, worst, where);
        CHECK(worst <= functions[i].bound, "%s: %.3f ulp at %.9g", functions[i].name, worst, where);
    }

    /* tiny arguments: tanh x = x to the last bit below 2^-12, including subnormals */
    const float tiny[] = { 0x1p-149f, -0x1p-140f, 0x1p-126f, 3e-20f, -1e-8f, 0x1p-13f };
    for (size_t i = 0; i < sizeof tiny / sizeof *tiny; i++)
        CHECK(ulps(one(ane_tanh_n, tiny[i]), tanh((double)tiny[i])) <= 1.0, "tanh(%g) = %g", tiny[i],
              one(ane_tanh_n, tiny[i]));
    /* e^x's subnormal results round once */
    for (float x = -103.9f; x < -87.4f; x += 0.37f)
        CHECK(ulps(one(ane_exp_n, x), exp((double)x)) <= 1.0, "exp(%g) = %g, want %g", x, one(ane_exp_n, x), exp(x));

    /* special values */
    CHECK(isnan(one(ane_exp_n, NAN)) && isnan(one(ane_tanh_n, NAN)) && isnan(one(ane_sigmoid_n, NAN)) &&
              isnan(one(ane_silu_n, NAN)),
          "NaN in, NaN out");
    CHECK(one(ane_exp_n, INFINITY) == INFINITY && one(ane_exp_n, 88.8f) == INFINITY, "e^x overflows to infinity");
    CHECK(one(ane_exp_n, -INFINITY) == 0.0f && one(ane_exp_n, -104.5f) == 0.0f, "e^x underflows to 0");
    CHECK(one(ane_exp_n, 0.0f) == 1.0f && one(ane_exp_n, -0.0f) == 1.0f, "e^0 = 1");
    CHECK(one(ane_tanh_n, INFINITY) == 1.0f && one(ane_tanh_n, -INFINITY) == -1.0f && one(ane_tanh_n, 9.5f) == 1.0f,
          "tanh saturates at +-1");
    float negative_zero = one(ane_tanh_n, -0.0f);
    CHECK(negative_zero == 0.0f && signbit(negative_zero), "tanh(-0) = -0");
    CHECK(one(ane_sigmoid_n, -INFINITY) == 0.0f && one(ane_sigmoid_n, INFINITY) == 1.0f, "sigmoid at +-infinity");
    CHECK(one(ane_silu_n, INFINITY) == INFINITY, "silu(infinity)");

    /* every length up to 3 groups and a tail: each element the same bits as alone, in place too */
    float x[27], y[27], z[27];
    for (int i = 0; i < 27; i++) x[i] = (float)(i * 7 % 27) * 0.37f - 5.0f;
    for (int n = 1; n <= 27; n++) {
        void (*const all[4])(float *, const float *, int64_t) = { ane_exp_n, ane_tanh_n, ane_sigmoid_n, ane_silu_n };
        for (int f = 0; f < 4; f++) {
            all[f](y, x, n);
            memcpy(z, x, sizeof z);
            all[f](z, z, n);
            int same = 1;
            for (int i = 0; i < n; i++) same &= memcmp(&y[i], &(float){ one(all[f], x[i]) }, 4) == 0 && y[i] == z[i];
            CHECK(same, "function %d, length %d: elements differ from single calls or in place", f, n);
        }
        /* the shifted sum: its numerators as e^(x - shift); the sum within (n + 2) u of the exact
         * one (each numerator under 1 ulp <= 2u relative, the fp32 sum of n terms (n - 1) u) */
        float shift = 2.5f, numerators[27];
        float sum = ane_exp_shifted_sum_n(numerators, x, shift, n);
        double exact = 0.0;
        int same = 1;
        for (int i = 0; i < n; i++) {
            exact += exp((double)(x[i] - shift)); /* the float difference the function takes */
            same &= numerators[i] == one(ane_exp_n, x[i] - shift);
        }
        CHECK(same, "length %d: shifted numerators differ from e^(x - shift)", n);
        CHECK(fabs(sum - exact) <= (n + 2) * ldexp(1.0, -24) * exact, "length %d: sum %.9g, exact %.9g", n, sum, exact);
    }
    check_sums_and_maxima();
    return check_summary("test_vector_math");
}
