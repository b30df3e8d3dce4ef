/* A bump allocator: many small allocations, one free. Graphs keep their nodes here. */
#ifndef ANE_BASE_ARENA_H
#define ANE_BASE_ARENA_H

#include <stddef.h>

typedef struct ane_arena_block ane_arena_block;

typedef struct ane_arena {
    ane_arena_block *head; /* the block being filled; older blocks follow its `next` */
} ane_arena;

/* Zeroed, 16-byte aligned memory that lives until ane_arena_free; NULL when out of memory. */
void *ane_arena_alloc(ane_arena *arena, size_t size);
void ane_arena_free(ane_arena *arena);

#endif
