/* The sim backend's CPU kernels: one function per op family, all on contiguous fp32
 * buffers shaped like the IR nodes. conv and matmul go through BLAS sgemm (fp32
 * accumulation); reductions accumulate in fp32 (softmax sums in fp64 are avoided to stay
 * close to the device's model). Rounding to fp16 is the caller's job (sim.c), once per
 * op output, so each kernel is the exact fp32 reference. */
#ifndef ANE_BACKEND_SIM_KERNELS_H
#define ANE_BACKEND_SIM_KERNELS_H

#include <stdint.h>

#include "../base/status.h"
#include "../ir/graph.h"
#include "../tensor/gemv.h"
#include "../tensor/quantize.h"

/* A matmul whose second operand is a constant with at most one nonzero entry per column of
 * the [k, n] matrix it multiplies by (after its transpose, if any), as RoPE's rotation, a
 * signed permutation, has (nn.rope: the device has no concat, ANE-01). Column j of x R is
 * then one product, factor[j] x x[source[j]], which sim computes instead of the whole sum
 * (sim.c finds them). */
typedef struct sim_column_copies {
    int64_t k, n;
    int32_t *source; /* [n] the element of x's row each column multiplies */
    float *factor;   /* [n] that column's nonzero entry (0 for a column of zeros) */
    int order;       /* SIM_COPIES_*: how source runs, for loops that need no gather */
} sim_column_copies;

/* The orders RoPE's rotations have (nn.rope_rotation), besides any: interleaved pairs
 * (source[j] = j ^ 1) and halves (source[j] = (j + n / 2) % n), both with k = n. */
enum { SIM_COPIES_ANY = 0, SIM_COPIES_PAIRS, SIM_COPIES_HALVES };

/* Whether values [rows, columns] (read transposed when `transposed`) have at most one nonzero
 * per column as above; fills out (its arrays malloc'ed, sim_column_copies_free) when so. */
int sim_find_column_copies(const float *values, int64_t rows, int64_t columns, int transposed, sim_column_copies *out);
void sim_column_copies_free(sim_column_copies *copies);

/* Each value of a program as an instance holds it, by node id (sim.c fills them; the kernels
 * read operands and write outputs through them). */
typedef struct sim_value {
    float *data;    /* [numel] fp32 values in the node's row-major shape; NULL for a weight kept
                       as stored (fp16 bits below, or encoded in the graph node) */
    uint16_t *half; /* [numel] fp16 bits instead: fp16 conv weights, fp16 inputs only matmuls read
                       (a KV cache) and reshapes of them; NULL elsewhere */
    int64_t filled; /* positions of the last axis that may be non-zero, the rest zeros (a resident
                       cache's written ones; the whole axis elsewhere) */
    sim_column_copies *column_copies; /* a matmul by a one-nonzero-per-column const, or NULL */
    struct sim_weight *patched;       /* a patched const's bytes (sim_patch.c); kernels do not read it */
} sim_value;

/* What every step of an evaluation shares. */
typedef struct sim_context {
    int apply_sdpa_mask;     /* the device ignores attn_mask (ANE-06); the cpu profile applies it */
    int sdpa_mask_one_plane; /* a per-head mask applies its first plane to every head (newer facts) */
    float *scratch;          /* [scratch_floats] for im2col and fp16 weight blocks */
    size_t scratch_floats;
    ane_activations activations; /* quantized conv weights: float activations, or int8 / int16 (tensor/gemv.h) */
} sim_context;

/* Products of up to ANE_FEW_COLUMNS positions (a decode step, a batched step's sessions, a
 * short prefill) that read the same x (q, k and v; gate and up) run as one loop over their rows
 * (tensor/gemv.h's ane_gemm_parts), each output bit for bit what the conv kernel computes alone
 * (x quantized once for them under int8 / int16 activations). sim_part_kind: the kind of
 * product a conv is for that (its weight kept fp16, or encoded: SIM_PART_ENCODED + its
 * encoding; up to ANE_FEW_COLUMNS positions, 1x1, one group), 0 when none; weight_form: its
 * weight's SIM_WEIGHT_*. */
enum { SIM_PART_HALF = 1, SIM_PART_ENCODED };
#define SIM_MAX_PARTS ANE_GEMV_MAX_PARTS

struct sim_step;
typedef ane_status (*sim_kernel)(const sim_context *context, const struct sim_step *step, const sim_value *values,
                                 ane_error *err);

/* One step of a program's evaluation (sim_plan.c builds them): a kernel call that computes one
 * node, or a group of convs of one x in one loop. */
typedef struct sim_step {
    sim_kernel kernel;
    const ane_node *node;                      /* the node computed: a group's first conv */
    int nparts;                                /* nodes the step writes: 1, or a group's convs */
    const ane_node *parts[SIM_MAX_PARTS];      /* [nparts], parts[0] = node */
    const void *palette_codes[SIM_MAX_PARTS];  /* each part's 4-bit weight palettes as the products read them
                                                  (tensor/gemv.h: integer codes, or bf16 words under float
                                                  activations), computed at compile; NULL: the fp32 palettes */
    ane_tensor half_tables[SIM_MAX_PARTS];     /* each part's block weight's table as fp16 under int8
                                                  activations (tensor/gemv.h: ane_table_as_fp16), computed at
                                                  compile and interned (the programs of one weight share it);
                                                  no storage: the fp32 table */
    unsigned char rounds[SIM_MAX_PARTS];       /* each output rounded to fp16 (fp16 precision, arithmetic) */
    unsigned char cliffs;                      /* the target's numeric cliffs apply (profile `ane`) */
    const void *chain;                         /* a fused step's chain (sim_program.h: sim_fused_step), or NULL */
} sim_step;

/* Rows of an fp16 conv weight converted per block (scratch of about 1 MB). */
#define SIM_WEIGHT_BLOCK_FLOATS (1 << 18)

/* How sim keeps a const: fp32 values, fp16 bits (conv weights), or as encoded (quantized
 * conv weights, read from the graph node). */
enum { SIM_WEIGHT_FP32 = 0, SIM_WEIGHT_HALF, SIM_WEIGHT_ENCODED };

int sim_part_kind(const ane_node *conv, int weight_form);

/* The kernel of node's op, or of a group of parts (as_parts: one or more convs of one x, one
 * position each, whose weights are read as stored: sim_part_kind), or an error naming the node
 * where sim has none. Inputs and consts have no step (eval and load fill them). */
ane_status sim_kernel_for(const ane_node *node, int as_parts, sim_kernel *out, ane_error *err);

/* Reduces one axis of a buffer shaped `shape` (rank) into out, a sum or (take_max) a maximum as
 * reduce_sum and reduce_max compute it; shape[axis] becomes 1. */
void sim_reduce_axis(const float *in, float *out, int rank, int64_t *shape, int64_t axis, int take_max);

/* Whether n values are all finite (no inf, no NaN). */
int sim_all_finite(const float *x, int64_t n);

/* Scratch a node needs; stored_weight: its conv weight is kept fp16 (converted per block where
 * tensor/gemm.h has no kernel), or its matmul's second operand is an fp16 input. */
size_t sim_scratch_floats(const ane_node *node, int stored_weight);

#endif
