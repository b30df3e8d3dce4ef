/* Random fills of host tensors (randn, rand): a portable generator, so a seed gives the
 * same values on every machine (see tensor.h). */
#include <math.h>

#include "../base/interrupt.h"
#include "tensor.h"

/* xoshiro256** seeded through splitmix64: the same stream on every machine. */
typedef struct rng_state { uint64_t s[4]; } rng_state;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng_state *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng_state *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_uniform(rng_state *rng) { return (double)(rng_next(rng) >> 11) * 0x1.0p-53; }

typedef enum { DRAW_NORMAL, DRAW_UNIFORM } draw_kind;

/* Fills a new tensor block by block: values drawn in fp64, rounded to fp32, converted to
 * the dtype. Normals use Marsaglia's polar method (only sqrt and log, both accurate to
 * the last bit of fp64 on common libms, so fp32 results agree across machines). */
static ane_status random_tensor(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                                uint64_t seed, draw_kind kind, double p0, double p1, ane_error *err) {
    ane_tensor result;
    ane_status status = ane_tensor_empty(&result, ndim, shape, dtype, err);
    if (status) return status;
    rng_state rng;
    rng_seed(&rng, seed);
    enum { block = 4096 };
    float values[block]; /* [block] fp32 staging before conversion */
    int64_t numel = ane_tensor_numel(&result);
    size_t element_size = ane_dtype_size(dtype);
    int have_spare = 0;
    double spare = 0;
    for (int64_t start = 0; start < numel; start += block) {
        int64_t count = numel - start < block ? numel - start : block;
        for (int64_t i = 0; i < count; i++) {
            if (kind == DRAW_UNIFORM) {
                values[i] = (float)(p0 + (p1 - p0) * rng_uniform(&rng));
                continue;
            }
            if (have_spare) {
                have_spare = 0;
                values[i] = (float)(p0 + p1 * spare);
                continue;
            }
            double u, v, s;
            do {
                u = 2.0 * rng_uniform(&rng) - 1.0;
                v = 2.0 * rng_uniform(&rng) - 1.0;
                s = u * u + v * v;
            } while (s >= 1.0 || s == 0.0);
            double factor = sqrt(-2.0 * log(s) / s);
            spare = v * factor;
            have_spare = 1;
            values[i] = (float)(p0 + p1 * u * factor);
        }
        ane_dtype_convert_row(ane_tensor_data(&result) + (size_t)start * element_size, dtype, values,
                              ANE_FP32, (size_t)count);
        if ((start / block) % 256 == 255 && (status = ane_interrupt_check(err, "a random fill"))) {
            ane_tensor_release(&result);
            return status;
        }
    }
    *out = result;
    return ANE_OK;
}

ane_status ane_tensor_randn(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                            uint64_t seed, double mean, double std, ane_error *err) {
    return random_tensor(out, ndim, shape, dtype, seed, DRAW_NORMAL, mean, std, err);
}

ane_status ane_tensor_rand(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                           uint64_t seed, double low, double high, ane_error *err) {
    return random_tensor(out, ndim, shape, dtype, seed, DRAW_UNIFORM, low, high, err);
}
