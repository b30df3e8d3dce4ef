/* passes/verify.c: a well-formed graph passes, and each kind of damage a buggy pass could
 * leave is caught with a message naming the node: a duplicate name, an operand defined
 * after its user, a dead node left in the list, a stale shape, an output on a removed node. */
#include <string.h>

#include "ane_core/ir/graph.h"
#include "ane_core/passes/passes.h"
#include "check.h"

typedef struct {
    ane_graph *g;
    ane_node *x, *a, *b;
} small_graph;

/* x -> a = relu(x) -> b = sigmoid(a); output "b" */
static small_graph build(void) {
    small_graph s;
    ane_error err;
    const int64_t shape[4] = { 1, 16, 1, 32 };
    ane_graph_new("verified", &s.g, &err);
    ane_graph_input(s.g, "x", ANE_FP16, 4, shape, &s.x, &err);
    ane_graph_op(s.g, ANE_OP_RELU, "a", &s.x, 1, NULL, &s.a, &err);
    ane_graph_op(s.g, ANE_OP_SIGMOID, "b", &s.a, 1, NULL, &s.b, &err);
    ane_graph_output_node(s.g, "b", s.b, &err);
    return s;
}

static void expect_failure(small_graph s, const char *what, const char *needle) {
    ane_error err;
    ane_error_clear(&err);
    CHECK(ane_verify_graph(s.g, &err) != ANE_OK, "%s is caught", what);
    CHECK(strstr(err.message, "verifier") && strstr(err.message, needle), "%s: the message names '%s': %s", what,
          needle, err.message);
    ane_graph_free(s.g);
}

int main(void) {
    ane_error err;
    small_graph s = build();
    CHECK(ane_verify_graph(s.g, &err) == ANE_OK, "a well-formed graph passes: %s", err.message);
    ane_graph_free(s.g);

    s = build();
    strcpy(s.b->name, "a");
    expect_failure(s, "a duplicate name", "'a' is used twice");

    s = build();
    s.a->operands[0] = s.b; /* a uses b, which comes after it */
    expect_failure(s, "an operand defined after its user", "node 'a' uses 'b'");

    s = build();
    s.a->dead = 1;
    expect_failure(s, "a dead node left in the list", "dead node 'a'");

    s = build();
    s.b->shape[1] = 17;
    expect_failure(s, "a stale shape", "node 'b' has a stale shape");

    s = build();
    s.g->outputs[0].node = s.a; /* the output "b" now points at node "a" */
    expect_failure(s, "an output whose node has another name", "output 'b' is node 'a'");
    return check_summary("verify");
}
