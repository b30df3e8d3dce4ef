/* fp32 <-> fp16 <-> bf16 conversions against a reference written here independently:
 * values are decoded with ldexp and rounded with rint() in fp64 (exact for these
 * magnitudes), instead of the bit manipulation the core uses. Covers all 65,536 fp16 and
 * bf16 bit patterns, 10^7 random fp32 values (uniform bits, and bits concentrated in
 * fp16's range), exact ties, rounding in place, and both the vector and the scalar path. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/fp16.h"
#include "check.h"

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Reference decoding of a binary16 value. */
static double reference_fp16_value(uint16_t h) {
    int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
    double magnitude;
    if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
    else if (exponent == 0) magnitude = ldexp(mantissa, -24);
    else magnitude = ldexp(1024 + mantissa, exponent - 25);
    return sign ? -magnitude : magnitude;
}

/* Reference rounding of a finite value to a format with `mantissa_bits` stored bits and
 * minimum normal exponent `min_exponent`: round |x| / quantum to an integer, ties to even. */
static double reference_round(double x, int mantissa_bits, int min_exponent, double max_finite) {
    if (x == 0) return x;
    int exponent;
    frexp(fabs(x), &exponent); /* |x| = f * 2^exponent, f in [0.5, 1) */
    int unbiased = exponent - 1;
    if (unbiased < min_exponent) unbiased = min_exponent; /* subnormal range: fixed quantum */
    double quantum = ldexp(1.0, unbiased - mantissa_bits);
    double rounded = rint(fabs(x) / quantum) * quantum; /* rint rounds ties to even */
    if (rounded > max_finite) rounded = INFINITY;
    return x < 0 ? -rounded : rounded;
}

static int same_value(double expected, double got) {
    if (isnan(expected)) return isnan(got);
    return expected == got && signbit(expected) == signbit(got);
}

static void check_fp16_to_fp32_exhaustive(const char *path) {
    uint16_t *halves = malloc(65536 * sizeof *halves);
    float *floats = malloc(65536 * sizeof *floats);
    for (uint32_t i = 0; i < 65536; i++) halves[i] = (uint16_t)i;
    ane_fp16_to_fp32_n(floats, halves, 65536);
    int wrong = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        double expected = reference_fp16_value((uint16_t)i);
        float scalar = ane_fp16_to_fp32((uint16_t)i);
        if (!same_value(expected, floats[i]) || !same_value(expected, scalar)) wrong++;
        if (isnan(expected)) { /* NaN keeps its sign and payload, quiet bit set */
            uint32_t want = ((i & 0x8000u) << 16) | 0x7FC00000u | ((i & 0x3FFu) << 13);
            if (bits_of(floats[i]) != want || bits_of(scalar) != want) wrong++;
        }
        /* Round trip back to fp16 is the identity (NaNs: quieted). */
        uint16_t back = ane_fp32_to_fp16(floats[i]);
        uint16_t want_back = isnan(expected) ? (uint16_t)(i | 0x200u) : (uint16_t)i;
        if (back != want_back) wrong++;
    }
    CHECK(wrong == 0, "[%s] %d of 65536 fp16 patterns decode or round-trip wrongly", path, wrong);
    free(halves);
    free(floats);
}

/* Random fp32 bit patterns; half of them with exponents near fp16's range. */
static uint32_t random_fp32_bits(uint64_t *state, int near_fp16_range) {
    *state = *state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t bits = (uint32_t)(*state >> 32);
    if (near_fp16_range) {
        uint32_t exponent = 127 - 27 + ((bits >> 23) % 46); /* 2^-27 .. 2^18 */
        bits = (bits & 0x807FFFFFu) | (exponent << 23);
    }
    return bits;
}

static void check_fp32_to_fp16_random(const char *path, size_t count) {
    enum { block = 1 << 16 };
    float *input = malloc(block * sizeof *input);
    uint16_t *output = malloc(block * sizeof *output);
    uint64_t state = 12345;
    size_t wrong = 0, checked = 0;
    for (size_t done = 0; done < count; done += block) {
        for (size_t i = 0; i < block; i++) input[i] = float_of(random_fp32_bits(&state, i & 1));
        ane_fp32_to_fp16_n(output, input, block);
        for (size_t i = 0; i < block; i++, checked++) {
            double expected = isnan(input[i]) ? NAN : reference_round(input[i], 10, -14, 65504.0);
            double got = reference_fp16_value(output[i]);
            if (!same_value(expected, got) || ane_fp32_to_fp16(input[i]) != output[i]) {
                if (wrong < 5)
                    fprintf(stderr, "  0x%08x (%.9g): got 0x%04x (%.9g), want %.9g\n", bits_of(input[i]), input[i],
                            output[i], got, expected);
                wrong++;
            }
        }
    }
    CHECK(wrong == 0, "[%s] %zu of %zu random fp32 values round to the wrong fp16", path, wrong, checked);
    free(input);
    free(output);
}

/* ane_round_fp32_through_fp16_n rounds in place: every value as the reference rounds it to
 * fp16 (NaN stays NaN, quieted as ane_fp32_to_fp16 quiets it), over lengths that end inside
 * and outside the vector loops' steps. */
static void check_round_in_place(const char *path) {
    enum { longest = 4099 };
    float *values = malloc(longest * sizeof *values), *input = malloc(longest * sizeof *input);
    uint64_t state = 777;
    size_t wrong = 0, checked = 0;
    static const size_t lengths[] = {0, 1, 7, 8, 9, 15, 16, 17, 255, 256, 1000, longest};
    for (size_t l = 0; l < sizeof lengths / sizeof *lengths; l++) {
        size_t n = lengths[l];
        for (size_t i = 0; i < longest; i++) input[i] = values[i] = float_of(random_fp32_bits(&state, i % 3 != 0));
        ane_round_fp32_through_fp16_n(values, n);
        for (size_t i = 0; i < longest; i++, checked++) {
            int ok;
            if (i >= n) ok = bits_of(values[i]) == bits_of(input[i]); /* past the end: untouched */
            else if (isnan(input[i])) ok = bits_of(values[i]) == bits_of(ane_fp16_to_fp32(ane_fp32_to_fp16(input[i])));
            else ok = same_value(reference_round(input[i], 10, -14, 65504.0), values[i]);
            if (!ok) {
                if (wrong < 5)
                    fprintf(stderr, "  [%zu of %zu] 0x%08x (%.9g) became %.9g\n", i, n, bits_of(input[i]), input[i], values[i]);
                wrong++;
            }
        }
    }
    CHECK(wrong == 0, "[%s] %zu of %zu values rounded in place wrongly", path, wrong, checked);
    free(values);
    free(input);
}

/* Values exactly halfway between two fp16 neighbours, the smallest subnormals, overflow. */
static void check_fp16_edge_cases(void) {
    int wrong = 0;
    for (uint32_t h = 0; h < 0x7C00; h++) { /* every positive finite fp16 and its successor */
        double low = reference_fp16_value((uint16_t)h), high = reference_fp16_value((uint16_t)(h + 1));
        float middle = (float)((low + high) / 2); /* exact in fp32 */
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h; /* ties to even */
        if (h + 1 == 0x7C00) want = 0x7C00; /* halfway to "65536" overflows */
        if (ane_fp32_to_fp16(middle) != want) wrong++;
        uint16_t vector_result;
        ane_fp32_to_fp16_n(&vector_result, &middle, 1);
        if (vector_result != want) wrong++;
    }
    CHECK(wrong == 0, "%d ties between fp16 neighbours round wrongly", wrong);
    CHECK(ane_fp32_to_fp16(65504.0f) == 0x7BFF, "65504 is the largest finite fp16");
    CHECK(ane_fp32_to_fp16(65519.99f) == 0x7BFF, "65519.99 rounds down to 65504");
    CHECK(ane_fp32_to_fp16(65520.0f) == 0x7C00, "65520 overflows to inf");
    CHECK(ane_fp32_to_fp16(-1e10f) == 0xFC00, "-1e10 overflows to -inf");
    CHECK(ane_fp32_to_fp16(5.960464477539063e-08f) == 0x0001, "2^-24 is the smallest subnormal");
    CHECK(ane_fp32_to_fp16(2.98023223876953125e-08f) == 0x0000, "2^-25 ties to even zero");
    CHECK(ane_fp32_to_fp16(2.9802326e-08f) == 0x0001, "just above 2^-25 rounds up");
    CHECK(ane_fp32_to_fp16(-0.0f) == 0x8000, "-0 keeps its sign");
    CHECK(ane_fp32_to_fp16(float_of(0x7F800001u)) == 0x7E00, "a signalling NaN becomes a quiet NaN");
}

static void check_bf16(void) {
    int wrong = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        float value = ane_bf16_to_fp32((uint16_t)i);
        if (bits_of(value) != i << 16) wrong++;
    }
    CHECK(wrong == 0, "%d bf16 patterns decode wrongly", wrong);
    uint64_t state = 99;
    size_t bad = 0, count = 2000000;
    float input[256];
    uint16_t output[256];
    for (size_t done = 0; done < count; done += 256) {
        for (int i = 0; i < 256; i++) input[i] = float_of(random_fp32_bits(&state, 0));
        ane_fp32_to_bf16_n(output, input, 256);
        for (int i = 0; i < 256; i++) {
            double expected = isnan(input[i]) ? NAN : reference_round(input[i], 7, -126, 0x1.FEp127);
            double got = ane_bf16_to_fp32(output[i]);
            if (!same_value(expected, got)) bad++;
        }
    }
    CHECK(bad == 0, "%zu of %zu random fp32 values round to the wrong bf16", bad, count);
}

int main(void) {
    const char *vector_path = ane_fp16_simd_name();
    check_fp16_to_fp32_exhaustive(vector_path);
    check_fp32_to_fp16_random(vector_path, 10 * 1000 * 1000);
    check_fp16_edge_cases();
    check_round_in_place(vector_path);
    ane_fp16_set_simd(0);
    check_fp16_to_fp32_exhaustive("scalar");
    check_fp32_to_fp16_random("scalar", 2 * 1000 * 1000);
    check_fp16_edge_cases();
    check_round_in_place("scalar");
    ane_fp16_set_simd(1);
    check_bf16();
    printf("vector path: %s\n", vector_path);
    return check_summary("test_fp16");
}
