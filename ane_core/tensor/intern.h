/* Const tensors shared by content. A model compiles the same weights into many programs (a
 * prefill program per bucket, a decode program per cache size, forward and backward ones);
 * graph consts are interned here, so every program holding the same bytes holds one copy.
 * Consts are never written in place (programs copy a weight before patching it), which is
 * what makes sharing them safe. Thread-safe. */
#ifndef ANE_TENSOR_INTERN_H
#define ANE_TENSOR_INTERN_H

#include <stddef.h>
#include <stdint.h>

#include "tensor.h"

/* Consts smaller than this are not worth a lookup. */
#define ANE_INTERN_MIN_BYTES 4096

/* If `value` (contiguous) has the bytes of an interned tensor, makes *out a tensor of value's
 * dtype and shape over those interned bytes and returns 1; otherwise returns 0 (out untouched). */
int ane_intern_find(const ane_tensor *value, ane_tensor *out);

/* Registers t's bytes (a contiguous tensor of at least ANE_INTERN_MIN_BYTES; others are
 * left alone) so later finds share them, and makes its storage read-only: writes through
 * any tensor on it are refused from now on. */
void ane_intern_add(const ane_tensor *t);

/* If [data, data + nbytes) are exactly an interned tensor's bytes (not a copy: the same
 * address), sets *serial to that entry's number and returns 1. Numbers are never reused, and
 * interned bytes never change, so one number always stands for the same bytes: a key for
 * them that costs no reading (the program cache's). */
int ane_intern_serial(const void *data, size_t nbytes, uint64_t *serial);

/* Releases the interned storages that nothing else holds any more. */
void ane_intern_sweep(void);

/* Interned storages and their bytes, for tests and statistics. */
void ane_intern_stats(size_t *count, size_t *bytes);

#endif
