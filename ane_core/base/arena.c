/* The bump allocator (see arena.h): blocks of 64 KiB or more, chained. */
#include "arena.h"

#include <stdlib.h>
#include <string.h>

struct ane_arena_block {
    ane_arena_block *next;
    size_t used, capacity;
    _Alignas(16) unsigned char data[];
};

enum { ARENA_BLOCK_SIZE = 64 * 1024 };

void *ane_arena_alloc(ane_arena *arena, size_t size) {
    size = (size + 15) & ~(size_t)15;
    ane_arena_block *block = arena->head;
    if (!block || block->capacity - block->used < size) {
        size_t capacity = size > ARENA_BLOCK_SIZE ? size : ARENA_BLOCK_SIZE;
        block = malloc(sizeof *block + capacity);
        if (!block) return NULL;
        block->next = arena->head;
        block->used = 0;
        block->capacity = capacity;
        arena->head = block;
    }
    void *memory = block->data + block->used;
    block->used += size;
    memset(memory, 0, size);
    return memory;
}

void ane_arena_free(ane_arena *arena) {
    ane_arena_block *block = arena->head;
    while (block) {
        ane_arena_block *next = block->next;
        free(block);
        block = next;
    }
    arena->head = NULL;
}
