/* Reverse-mode automatic differentiation on the graph IR.
 *
 * ane_autodiff(forward, wrt) builds a backward graph that
 *   takes every forward input (same names) and one cotangent per forward output, named
 *     "grad_<output>" (MIL names cannot contain '.'),
 *   replays the forward computation, except the nodes named in `saved` (activations the
 *     forward program also outputs): those become inputs of the same name and shape,
 *   outputs "grad_<name>" for every name in wrt (forward inputs or consts), in the shape of
 *     <name>, or with device_layout the device's I/O layout for [a, b, 1, 1] weights.
 * Rules exist for add, sub, mul, real_div, pow, neg, exp, log, sqrt, rsqrt, inverse, tanh,
 * sigmoid, identity, cast, reshape, transpose, slices, reduce_sum, reduce_mean, softmax,
 * matmul and 1x1 conv; other ops on a path to a requested node are errors naming the node.
 * The backward graph is an ordinary graph: it is optimized, validated and compiled like
 * any other. */
#ifndef ANE_IR_AUTODIFF_H
#define ANE_IR_AUTODIFF_H

#include "graph.h"

typedef struct ane_autodiff_options {
    const char *const *wrt; /* [nwrt] inputs or consts to differentiate with respect to */
    int nwrt;
    const char *const *saved; /* [nsaved] computed nodes the backward takes as inputs */
    int nsaved;
    int device_layout; /* weight gradients [a, b, 1, 1] output as [1, a, 1, b] (ANE-20/21) */
} ane_autodiff_options;

/* Whether the op has a vector-Jacobian rule (exactly the ops flagged ANE_OP_DIFFERENTIABLE). */
int ane_autodiff_has_rule(ane_op op);

ane_status ane_autodiff(const ane_graph *forward, const ane_autodiff_options *options, ane_graph **out, ane_error *err);

#endif
