/* The sim backend's memory places: where each value of a program lives in an instance's slab
 * (sim_places.c says how places are chosen). */
#ifndef ANE_SIM_PLACES_H
#define ANE_SIM_PLACES_H

#include <stddef.h>

#include "../base/status.h"
#include "../ir/graph.h"

/* How a node's value is held. */
typedef enum {
    SIM_SLOT_NONE = 0, /* no slab buffer: a weight read where the graph keeps it */
    SIM_SLOT_VIEW,     /* its operand's buffer, read in another shape (a reshape) */
    SIM_SLOT_KEPT,     /* a buffer of its own for the instance's life: inputs (write_input keeps
                          them between evaluations), consts converted at load, the outputs */
    SIM_SLOT_TEMP,     /* needed from the node that computes it to the last node reading it */
} sim_slot_kind;

/* The node whose buffer node `id` reads: itself, or for a VIEW the holder of its operand's. */
int ane_sim_slot_holder(const ane_graph *g, const unsigned char *kinds, int id);

/* Offsets (in floats, 16-float aligned) for every node of kind KEPT or TEMP (offsets[i] = 0
 * for the others): KEPT values in [0, *kept_floats), TEMP values in the region
 * [*kept_floats, *total_floats) after them, at offsets from the slab's start. kinds[count]
 * comes from the caller; a VIEW node's operand 0 must hold its buffer (directly or through
 * other views). read_until[id] (or NULL): a position up to which value id is read besides its
 * readers' own (a fused step reading it later). Values computed in node order never overlap a
 * value still to be read. */
ane_status ane_sim_places(const ane_graph *g, const unsigned char *kinds, const int *read_until, size_t *offsets,
                        size_t *kept_floats, size_t *total_floats, ane_error *err);

#endif
