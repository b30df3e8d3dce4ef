/* base/arena.c: every allocation zeroed, 16-byte aligned and disjoint from the others, for
 * sizes below, at and above the block size, checked by filling each with its own pattern
 * and reading all of them back afterwards. */
#include <stdint.h>
#include <string.h>

#include "ane_core/base/arena.h"
#include "check.h"

enum { ALLOCATIONS = 3000 };

int main(void) {
    ane_arena arena = { 0 };
    static unsigned char *memory[ALLOCATIONS];
    static size_t sizes[ALLOCATIONS];
    uint32_t state = 12345;
    for (int i = 0; i < ALLOCATIONS; i++) {
        state = state * 1664525u + 1013904223u;
        /* mostly small; every 500th beyond the 64 KB block; a few empty ones */
        sizes[i] = i % 500 == 499 ? 200000 + (state % 1000) : i % 97 == 0 ? 0 : 1 + state % 700;
        memory[i] = ane_arena_alloc(&arena, sizes[i]);
        CHECK(memory[i] != NULL, "allocation %d of %zu bytes failed", i, sizes[i]);
        if (!memory[i]) continue;
        CHECK(((uintptr_t)memory[i] & 15) == 0, "allocation %d is not 16-byte aligned", i);
        size_t nonzero = 0;
        for (size_t b = 0; b < sizes[i]; b++) nonzero += memory[i][b] != 0;
        CHECK(nonzero == 0, "allocation %d has %zu nonzero bytes", i, nonzero);
        memset(memory[i], (unsigned char)(i * 7 + 1), sizes[i]);
    }
    /* an overlap would have overwritten an earlier allocation's pattern */
    int intact = 0;
    for (int i = 0; i < ALLOCATIONS; i++) {
        int ok = 1;
        for (size_t b = 0; b < sizes[i] && ok; b++) ok = memory[i][b] == (unsigned char)(i * 7 + 1);
        intact += ok;
    }
    CHECK(intact == ALLOCATIONS, "%d of %d allocations kept their contents", intact, ALLOCATIONS);
    ane_arena_free(&arena);
    CHECK(arena.head == NULL, "a freed arena has no blocks");
    CHECK(ane_arena_alloc(&arena, 32) != NULL, "a freed arena allocates again");
    ane_arena_free(&arena);
    return check_summary("arena");
}
