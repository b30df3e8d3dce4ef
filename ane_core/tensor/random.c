/* Random fills of host tensors (randn, rand): a portable generator, so a seed gives the
 * same values on every machine (see tensor.h), filled in blocks over the helper threads. */
#include <math.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "../base/interrupt.h"
#include "../base/parallel.h"
#include "tensor.h"

/* xoshiro256** seeded through splitmix64: the same stream on every machine. */
typedef struct rng_state { uint64_t s[4]; } rng_state;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t ane_random_fresh_seed(void) {
    static uint64_t drawn; /* seeds handed out so far */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t mix = ((uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec) ^ ((uint64_t)getpid() << 32) ^
                   (uint64_t)(uintptr_t)&mix; /* the time, the process, and where its stack lies */
    mix += __atomic_add_fetch(&drawn, 1, __ATOMIC_RELAXED) * 0xD1B54A32D192ED03ull;
    return splitmix64(&mix);
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

/* A tensor is drawn in blocks of STREAM_ELEMENTS, each from its own stream (block b's seeded
 * with seed + b * STREAM_STEP), so the blocks fill on the helper threads and a seed still
 * gives the same values everywhere, whatever the number of threads. Block 0's stream is the
 * seed's own: a tensor of one block is the seed's plain sequence. */
enum { STREAM_ELEMENTS = 1 << 16, STAGING = 4096 };
#define STREAM_STEP 0xD1B54A32D192ED03ull

typedef struct fill_job {
    ane_tensor *result;
    uint64_t seed;
    draw_kind kind;
    double p0, p1;
    int64_t numel;
} fill_job;

/* Values drawn in fp64, rounded to fp32, converted to the dtype. Normals use Marsaglia's
 * polar method (only sqrt and log, both accurate to the last bit of fp64 on common libms, so
 * fp32 results agree across machines). */
static void fill_stream(const fill_job *job, int64_t stream) {
    rng_state rng;
    rng_seed(&rng, job->seed + (uint64_t)stream * STREAM_STEP);
    float values[STAGING]; /* [STAGING] fp32 staging before conversion */
    size_t element_size = ane_dtype_size(job->result->dtype);
    int64_t first = stream * STREAM_ELEMENTS;
    int64_t last = first + STREAM_ELEMENTS < job->numel ? first + STREAM_ELEMENTS : job->numel;
    int have_spare = 0;
    double spare = 0;
    for (int64_t start = first; start < last; start += STAGING) {
        int64_t count = last - start < STAGING ? last - start : STAGING;
        for (int64_t i = 0; i < count; i++) {
            if (job->kind == DRAW_UNIFORM) {
                values[i] = (float)(job->p0 + (job->p1 - job->p0) * rng_uniform(&rng));
                continue;
            }
            if (have_spare) {
                have_spare = 0;
                values[i] = (float)(job->p0 + job->p1 * spare);
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
            values[i] = (float)(job->p0 + job->p1 * u * factor);
        }
        ane_dtype_convert_row(ane_tensor_data(job->result) + (size_t)start * element_size, job->result->dtype, values,
                              ANE_FP32, (size_t)count);
    }
}

typedef struct fill_round {
    const fill_job *job;
    int64_t first_stream;
} fill_round;

static void fill_streams(void *context, int64_t first, int64_t last) {
    const fill_round *round = context;
    for (int64_t i = first; i < last; i++) fill_stream(round->job, round->first_stream + i);
}

/* Streams per round between interrupt checks (16 M elements). */
enum { STREAMS_PER_ROUND = 256 };

static ane_status random_tensor(ane_tensor *out, int ndim, const int64_t *shape, ane_dtype dtype,
                                uint64_t seed, draw_kind kind, double p0, double p1, ane_error *err) {
    ane_tensor result;
    ane_status status = ane_tensor_empty(&result, ndim, shape, dtype, err);
    if (status) return status;
    fill_job job = {&result, seed, kind, p0, p1, ane_tensor_numel(&result)};
    int64_t streams = (job.numel + STREAM_ELEMENTS - 1) / STREAM_ELEMENTS;
    for (int64_t round = 0; round < streams; round += STREAMS_PER_ROUND) {
        int64_t count = streams - round < STREAMS_PER_ROUND ? streams - round : STREAMS_PER_ROUND;
        fill_round this_round = {&job, round};
        ane_parallel_for(count, 1, fill_streams, &this_round);
        if ((status = ane_interrupt_check(err, "a random fill"))) {
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
