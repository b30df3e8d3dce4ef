/* tensor/intern.c: equal bytes are found and shared (the same storage, the asker's dtype and
 * shape), bytes that differ anywhere are not (also where the sampled hash does not look),
 * small tensors and non-contiguous views are left alone, an interned storage turns
 * read-only, a view keeps its offset, a sweep frees exactly the storages nobody else
 * holds, and an entry's own bytes have a number no other entry ever gets. */
#include <stdint.h>
#include <string.h>

#include "ane_core/tensor/intern.h"
#include "ane_core/tensor/storage.h"
#include "ane_core/tensor/tensor.h"
#include "check.h"

static ane_tensor filled(int64_t n, uint32_t seed) { /* fp32 [n], a deterministic pattern */
    ane_tensor t;
    ane_error err;
    ane_tensor_zeros(&t, 1, &n, ANE_FP32, &err);
    float *data = (float *)ane_tensor_data(&t);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        data[i] = (float)(seed >> 8);
    }
    return t;
}

static size_t interned_count(void) {
    size_t count, bytes;
    ane_intern_stats(&count, &bytes);
    return count;
}

int main(void) {
    ane_error err;
    enum { N = 10000 }; /* 40,000 bytes: many 4 KB samples */
    ane_tensor a = filled(N, 7), same = filled(N, 7), found;
    ane_intern_add(&a);
    CHECK(interned_count() == 1, "one storage interned");
    CHECK(a.storage->readonly, "an interned storage is read-only");
    CHECK(!same.storage->readonly, "an equal tensor is not touched until found");

    /* equal bytes: shared, in the asker's shape */
    int64_t matrix[2] = {100, 100};
    ane_tensor as_matrix;
    CHECK(ane_tensor_reshape(&as_matrix, &same, 2, matrix, &err) == ANE_OK, "reshape");
    CHECK(ane_intern_find(&as_matrix, &found) == 1, "equal bytes are found");
    CHECK(found.storage == a.storage && found.ndim == 2 && found.shape[0] == 100 && found.shape[1] == 100,
          "found shares the interned storage with the asker's shape");
    ane_tensor_release(&found);

    /* one byte different, away from the sampled bytes (offset 100 of the second 4 KB) */
    ane_tensor other = filled(N, 7);
    ((unsigned char *)ane_tensor_data(&other))[4096 + 100] ^= 1;
    CHECK(ane_intern_find(&other, &found) == 0, "a one-byte difference is not equal");
    ane_tensor shorter = filled(N - 1, 7);
    CHECK(ane_intern_find(&shorter, &found) == 0, "a prefix is not equal");

    /* too small, or not contiguous: left alone */
    ane_tensor small = filled(100, 3);
    ane_intern_add(&small);
    CHECK(interned_count() == 1 && !small.storage->readonly, "400 bytes are not interned");
    int64_t square[2] = {100, 100};
    ane_tensor grid, transposed;
    ane_tensor_zeros(&grid, 2, square, ANE_FP32, &err);
    ane_tensor_transpose(&transposed, &grid, 0, 1, &err);
    ane_intern_add(&transposed);
    CHECK(interned_count() == 1, "a transposed view is not interned");

    /* a view keeps its offset */
    ane_tensor big = filled(3 * N, 11), tail, tail_copy, tail_found;
    ane_tensor_slice(&tail, &big, 0, N, 2 * N, &err);
    ane_intern_add(&tail);
    CHECK(interned_count() == 2, "a slice is interned");
    ane_tensor_zeros(&tail_copy, 1, (int64_t[]){N}, ANE_FP32, &err);
    memcpy(ane_tensor_data(&tail_copy), ane_tensor_data(&tail), N * sizeof(float));
    CHECK(ane_intern_find(&tail_copy, &tail_found) == 1 && tail_found.storage == big.storage &&
              tail_found.offset == (size_t)N * sizeof(float),
          "found at the slice's offset");
    ane_tensor_release(&tail_found);

    /* serial numbers: for an entry's own bytes only, one per entry */
    uint64_t serial_a = 0, serial_tail = 0, serial;
    CHECK(ane_intern_serial(ane_tensor_data(&a), (size_t)N * sizeof(float), &serial_a) == 1, "a's bytes have a number");
    CHECK(ane_intern_serial(ane_tensor_data(&tail), (size_t)N * sizeof(float), &serial_tail) == 1 && serial_tail != serial_a,
          "another entry, another number");
    CHECK(ane_intern_serial(ane_tensor_data(&same), (size_t)N * sizeof(float), &serial) == 0,
          "an equal copy elsewhere has none (the number is for the bytes at that address)");
    CHECK(ane_intern_serial(ane_tensor_data(&a), (size_t)N * sizeof(float) - 4, &serial) == 0, "nor a part of them");

    /* sweep: only storages the store alone holds go */
    ane_intern_sweep();
    CHECK(interned_count() == 2, "held storages stay");
    ane_tensor_release(&a);
    ane_intern_sweep();
    CHECK(interned_count() == 1, "a storage nobody holds is freed (%zu left)", interned_count());
    ane_tensor_release(&tail), ane_tensor_release(&big);
    ane_intern_sweep();
    CHECK(interned_count() == 0, "and the last one");
    CHECK(ane_intern_find(&same, &found) == 0, "a freed storage is not found");
    ane_intern_add(&same); /* the same bytes as a, interned again: a new number */
    CHECK(ane_intern_serial(ane_tensor_data(&same), (size_t)N * sizeof(float), &serial) == 1 && serial != serial_a &&
              serial != serial_tail,
          "numbers are never reused");

    ane_tensor_release(&same), ane_tensor_release(&as_matrix), ane_tensor_release(&other), ane_tensor_release(&shorter);
    ane_tensor_release(&small), ane_tensor_release(&grid), ane_tensor_release(&transposed), ane_tensor_release(&tail_copy);
    return check_summary("intern");
}
