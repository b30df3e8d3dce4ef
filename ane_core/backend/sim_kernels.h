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
} sim_column_copies;

/* Whether values [rows, columns] (read transposed when `transposed`) have at most one nonzero
 * per column as above; fills out (its arrays malloc'ed, sim_column_copies_free) when so. */
int sim_find_column_copies(const float *values, int64_t rows, int64_t columns, int transposed, sim_column_copies *out);
void sim_column_copies_free(sim_column_copies *copies);

typedef struct sim_context {
    int apply_sdpa_mask;     /* the device ignores attn_mask (ANE-06); the cpu profile applies it */
    int sdpa_mask_one_plane; /* a per-head mask applies its first plane to every head (newer facts) */
    float *scratch;          /* [scratch_floats] for im2col and fp16 weight blocks */
    size_t scratch_floats;
    const uint16_t *const *halves; /* [node count]: fp16 conv weights kept as fp16, half inputs (sim.c); NULL elsewhere */
    ane_activations activations;   /* quantized conv weights: float activations, or int8 / int16 (tensor/gemv.h) */
    const void *const *palette_codes; /* [node count]: 4-bit weights' palettes as the products read them (sim.c); NULL */
    sim_column_copies *const *column_copies; /* [node count]: matmuls by one-nonzero-per-column consts (sim.c); NULL */
    const int64_t *filled; /* [node count]: positions of the last axis that may be non-zero, the rest zeros (sim.c:
                              a resident cache's written ones); NULL: all */
} sim_context;

/* Rows of an fp16 conv weight converted per block (scratch of about 1 MB). */
#define SIM_WEIGHT_BLOCK_FLOATS (1 << 18)

/* Computes node's output into out [numel(node)] from values[operand->id]. */
ane_status sim_run_node(const sim_context *context, const ane_node *node, float *const *values, float *out,
                        ane_error *err);

/* Scratch floats node needs (im2col for k x k convs, fp16 weight blocks), 0 for most. */
/* How sim keeps a const: fp32 values, fp16 bits (conv weights), or as encoded (quantized
 * conv weights, read from the graph node). */
enum { SIM_WEIGHT_FP32 = 0, SIM_WEIGHT_HALF, SIM_WEIGHT_ENCODED };

/* Products of one decoded position that read the same x (q, k and v; gate and up) run as one
 * loop over their rows (tensor/gemv.h's ane_gemv_parts), each output bit for bit what
 * sim_run_node computes. sim_part_kind: the kind of product a conv is for that (its weight
 * kept fp16, int8 or 4-bit codes under float activations; one position, 1x1, one group), 0
 * when none; weight_form: its weight's SIM_WEIGHT_*. */
enum { SIM_PART_HALF = 1, SIM_PART_INT8, SIM_PART_LUT4 };
#define SIM_MAX_PARTS ANE_GEMV_MAX_PARTS
int sim_part_kind(const ane_node *conv, int weight_form, ane_activations activations);

/* Runs count (at most SIM_MAX_PARTS) convs of one part kind, x and k into values[conv->id];
 * 0 (nothing run) when a weight is held neither as fp16 bits nor encoded. */
int sim_run_parts(const sim_context *context, const ane_node *const *convs, int count, float *const *values);

/* Scratch a node needs; stored_weight: its conv weight is kept fp16 (converted per block where
 * tensor/gemm.h has no kernel), or its matmul's second operand is an fp16 input. */
size_t sim_scratch_floats(const ane_node *node, int stored_weight);

#endif
