/* The sim backend's independent branches: a plan pass that finds chains of nodes which share
 * nothing but what was computed before them, so an evaluation runs them at once, each on one
 * thread, instead of one after another with every small op split over the threads.
 *
 * A server's batched decode step is the case: after the shared projections, each session's
 * attention over its own cache is a chain of some forty small ops (slices, the scores, the
 * softmax, the product with the values, the heads merged back), and the chains meet only at the
 * concat that feeds the out projection. One op of one chain is too small to share between
 * threads (waking the helper costs about what the op does), so step by step the helper waits
 * while the caller runs them; as branches, each thread runs whole chains.
 *
 * Found from the concats: the operands' ancestries (through operands, not through inputs and
 * consts) give each operand its own nodes (an ancestor of it alone: its branch) and the shared
 * ones (of two or more). The group starts at the first branch node after the last shared node
 * (a branch's own nodes before that run with the trunk) and ends before the concat; every
 * computing node in between that is no concat operand's ancestor joins the one branch whose
 * nodes it reads (a session's own outputs, say; one that reads none, the first), and one that
 * reads two branches leaves the concat without a group. Every value computed in the group, and
 * every value its nodes read, keeps its place until the group's last node (read_until), so
 * branches that run at once never share a place. A branch computes what it computes alone, in
 * its nodes' order, with the same kernels: the same bits as step by step. */
#include <stdlib.h>
#include <string.h>

#include "sim_program.h"

/* Branches worth a thread: at least this many computing nodes in each of two or more. */
enum { MIN_BRANCH_NODES = 4 };

static int computing(const ane_node *node) { return node->op != ANE_OP_INPUT && node->op != ANE_OP_CONST; }

/* Marks the ancestry of `root` (itself included) for operand k: count[] how many operands'
 * ancestries hold a node, owner[] the first such operand. seen[] holds k + 1 for nodes marked. */
static void mark_ancestry(const ane_graph *g, int root, int k, int *seen, int *count, int *owner, int *stack) {
    int top = 0;
    stack[top++] = root;
    seen[root] = k + 1;
    while (top) {
        const ane_node *node = g->nodes[stack[--top]];
        if (count[node->id]++ == 0) owner[node->id] = k;
        for (int o = 0; o < node->noperands; o++) {
            const ane_node *operand = node->operands[o];
            if (!computing(operand) || seen[operand->id] == k + 1) continue;
            seen[operand->id] = k + 1;
            stack[top++] = operand->id;
        }
    }
}

/* The group of concat `join`'s operands from node `free_from` on, into branch_of[] (nodes
 * lo .. hi); 1 when found (branch_of untouched otherwise). work: [5 x nodes]. */
static int find_group(const ane_graph *g, const ane_node *join, int free_from, int *branch_of, int *lo_out, int *hi_out,
                      int *work) {
    int n = g->count;
    int *seen = work, *count = work + n, *owner = work + 2 * n, *stack = work + 3 * n, *tentative = work + 4 * n;
    memset(seen, 0, (size_t)n * sizeof *seen);
    memset(count, 0, (size_t)n * sizeof *count);
    int roots = 0;
    for (int k = 0; k < join->noperands; k++) {
        const ane_node *operand = join->operands[k];
        if (!computing(operand) || count[operand->id]) return 0; /* (an operand twice, or another's ancestor) */
        mark_ancestry(g, operand->id, roots++, seen, count, owner, stack);
    }
    if (roots < 2 || roots > SIM_MAX_BRANCHES) return 0;
    int lo = n, hi = -1, last_shared = -1;
    for (int i = 0; i < join->id; i++)
        if (count[i] > 1) last_shared = i;
    for (int i = last_shared + 1; i < join->id && lo == n; i++) /* (a branch's own nodes before that run with the trunk) */
        if (count[i] == 1) lo = i;
    for (int i = join->id - 1; i >= lo && hi < 0; i--) /* the last computing node before the concat */
        if (computing(g->nodes[i])) hi = i;
    if (hi < 0 || lo < free_from) return 0;
    int *sizes = stack; /* (the walks are done) [roots] computing nodes a branch holds */
    memset(sizes, 0, (size_t)roots * sizeof *sizes);
    for (int i = lo; i <= hi; i++) {
        const ane_node *node = g->nodes[i];
        tentative[i] = -1;
        if (!computing(node)) continue;
        int branch = count[i] == 1 ? owner[i] : -1;
        if (branch < 0) /* no ancestor of the concat: it joins the one branch it reads from */
            for (int o = 0; o < node->noperands; o++) {
                int from = node->operands[o]->id;
                int of = from >= lo && from < i && computing(node->operands[o]) ? tentative[from] : -1;
                if (of < 0) continue;
                if (branch >= 0 && branch != of) return 0; /* reads two branches: not independent */
                branch = of;
            }
        if (branch < 0) branch = 0; /* (reads only what came before the group: any branch may run it) */
        tentative[i] = branch;
        sizes[branch]++;
    }
    int worth = 0;
    for (int k = 0; k < roots; k++) worth += sizes[k] >= MIN_BRANCH_NODES;
    if (worth < 2) return 0;
    memcpy(branch_of + lo, tentative + lo, (size_t)(hi - lo + 1) * sizeof *branch_of);
    *lo_out = lo, *hi_out = hi;
    return 1;
}

/* Keeps every value a group computes or reads in its place until the group's last node. */
static void hold_until(sim_compiled *p, int lo, int hi) {
    const ane_graph *g = p->graph;
    for (int i = lo; i <= hi; i++) {
        if (p->branch_of[i] < 0) continue;
        const ane_node *node = g->nodes[i];
        if (p->read_until[i] < hi) p->read_until[i] = hi;
        for (int o = 0; o < node->noperands; o++)
            if (p->read_until[node->operands[o]->id] < hi) p->read_until[node->operands[o]->id] = hi;
    }
}

ane_status sim_find_branches(sim_compiled *p, ane_error *err) {
    const ane_graph *g = p->graph;
    int n = g->count;
    p->branch_of = malloc(((size_t)n + 1) * sizeof *p->branch_of);
    if (!p->branch_of) return ane_fail(err, ANE_ERR_NOMEM, "out of memory planning program '%s'", g->name);
    for (int i = 0; i < n; i++) p->branch_of[i] = -1;
    if (p->options.profile == ANE_PROFILE_ANE || p->options.step_by_step) return ANE_OK; /* (op by op, as the device) */
    int *work = malloc(((size_t)5 * n + 1) * sizeof *work);
    if (!work) return ane_fail(err, ANE_ERR_NOMEM, "out of memory planning program '%s'", g->name);
    int free_from = 0;
    for (int j = 0; j < n; j++) {
        const ane_node *join = g->nodes[j];
        int lo, hi;
        if (join->op != ANE_OP_CONCAT || !find_group(g, join, free_from, p->branch_of, &lo, &hi, work)) continue;
        sim_group *grown = realloc(p->groups, (size_t)(p->ngroups + 1) * sizeof *grown);
        if (!grown) {
            free(work);
            return ane_fail(err, ANE_ERR_NOMEM, "out of memory planning program '%s'", g->name);
        }
        p->groups = grown;
        int branches = 0;
        for (int i = lo; i <= hi; i++) branches = p->branch_of[i] + 1 > branches ? p->branch_of[i] + 1 : branches;
        p->groups[p->ngroups++] = (sim_group){.first_node = lo, .last_node = hi, .nbranches = branches};
        hold_until(p, lo, hi);
        free_from = j + 1;
    }
    free(work);
    return ANE_OK;
}
