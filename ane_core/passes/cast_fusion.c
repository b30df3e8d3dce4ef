/* Cast fusion: cast(cast(x, B), C) becomes cast(x, C) when the inner cast loses nothing
 * (every value of x's dtype A is exact in B), since converting A->B->C then equals A->C.
 * With C == A the outer cast is then a same-dtype cast, which the identity pass removes:
 * fp16->fp32->fp16 disappears. fp32->fp16->fp32 is left alone: it rounds every value. */
#include "passes.h"

/* Can every value of `from` be represented exactly in `to`? */
static int lossless(ane_dtype from, ane_dtype to) {
    if (from == to) return 1;
    switch (from) {
    case ANE_BOOL: return 1;
    case ANE_FP16: return to == ANE_FP32;
    case ANE_BF16: return to == ANE_FP32;
    case ANE_INT8: return to == ANE_FP16 || to == ANE_FP32 || to == ANE_INT32 || to == ANE_INT16 || to == ANE_INT64;
    case ANE_UINT8: return to == ANE_FP16 || to == ANE_FP32 || to == ANE_INT32 || to == ANE_INT16 || to == ANE_UINT16 || to == ANE_INT64;
    case ANE_INT16:
    case ANE_UINT16: return to == ANE_FP32 || to == ANE_INT32 || to == ANE_INT64;
    case ANE_INT32: return to == ANE_INT64;
    default: return 0;
    }
}

int ane_pass_cast_fusion(ane_graph *g) {
    int fused = 0;
    for (int i = 0; i < g->count; i++) {
        ane_node *outer = g->nodes[i];
        if (outer->dead || outer->op != ANE_OP_CAST) continue;
        ane_node *inner = outer->operands[0];
        if (inner->op != ANE_OP_CAST) continue;
        ane_node *source = inner->operands[0];
        if (!lossless(source->dtype, inner->dtype)) continue;
        outer->operands[0] = source; /* the inner cast may now be dead; DCE removes it */
        fused++;
    }
    return fused;
}
