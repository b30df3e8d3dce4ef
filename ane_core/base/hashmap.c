/* The byte-string hash map (see hashmap.h): FNV-1a hashes, linear probing, 50% load. */
#include "hashmap.h"

#include <stdlib.h>
#include <string.h>

uint64_t ane_hash_bytes(const void *data, size_t length) {
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < length; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static const char *store_key(ane_hashmap *map, const void *key, size_t length) {
    if (map->nblocks == 0 || map->block_used + length > map->block_capacity) {
        size_t capacity = length > (1 << 16) ? length : (1 << 16);
        char **blocks = realloc(map->blocks, (map->nblocks + 1) * sizeof *blocks);
        if (!blocks) return NULL;
        map->blocks = blocks;
        blocks[map->nblocks] = malloc(capacity);
        if (!blocks[map->nblocks]) return NULL;
        map->nblocks++;
        map->block_used = 0;
        map->block_capacity = capacity;
    }
    char *copy = map->blocks[map->nblocks - 1] + map->block_used;
    memcpy(copy, key, length);
    map->block_used += length;
    return copy;
}

static int resize(ane_hashmap *map, size_t capacity) {
    ane_hashmap_slot *slots = calloc(capacity, sizeof *slots);
    if (!slots) return 0;
    for (size_t i = 0; i < map->capacity; i++) {
        ane_hashmap_slot *old = &map->slots[i];
        if (!old->key) continue;
        size_t j = old->hash & (capacity - 1);
        while (slots[j].key) j = (j + 1) & (capacity - 1);
        slots[j] = *old;
    }
    free(map->slots);
    map->slots = slots;
    map->capacity = capacity;
    return 1;
}

static int grow(ane_hashmap *map) { return resize(map, map->capacity ? map->capacity * 2 : 1024); }

int ane_hashmap_reserve(ane_hashmap *map, size_t count) {
    size_t capacity = map->capacity ? map->capacity : 1024;
    while (capacity < count * 2) capacity *= 2;
    return capacity == map->capacity || resize(map, capacity);
}

int ane_hashmap_put(ane_hashmap *map, const void *key, size_t length, int64_t value) {
    return ane_hashmap_put_key(map, key, length, value) != NULL;
}

const char *ane_hashmap_put_key(ane_hashmap *map, const void *key, size_t length, int64_t value) {
    if ((map->count + 1) * 2 > map->capacity && !grow(map)) return NULL;
    uint64_t hash = ane_hash_bytes(key, length);
    size_t j = hash & (map->capacity - 1);
    while (map->slots[j].key) {
        ane_hashmap_slot *slot = &map->slots[j];
        if (slot->hash == hash && slot->length == length && memcmp(slot->key, key, length) == 0) {
            slot->value = value;
            return slot->key;
        }
        j = (j + 1) & (map->capacity - 1);
    }
    const char *copy = store_key(map, key, length ? length : 1);
    if (!copy) return NULL;
    map->slots[j] = (ane_hashmap_slot){copy, length, hash, value};
    map->count++;
    return copy;
}

int ane_hashmap_get(const ane_hashmap *map, const void *key, size_t length, int64_t *value) {
    if (!map->capacity) return 0;
    uint64_t hash = ane_hash_bytes(key, length);
    for (size_t j = hash & (map->capacity - 1);; j = (j + 1) & (map->capacity - 1)) {
        const ane_hashmap_slot *slot = &map->slots[j];
        if (!slot->key) return 0;
        if (slot->hash == hash && slot->length == length && memcmp(slot->key, key, length) == 0) {
            *value = slot->value;
            return 1;
        }
    }
}

void ane_hashmap_free(ane_hashmap *map) {
    for (size_t i = 0; i < map->nblocks; i++) free(map->blocks[i]);
    free(map->blocks);
    free(map->slots);
    memset(map, 0, sizeof *map);
}
