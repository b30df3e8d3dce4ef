/* An open-addressing hash map from byte strings to 64-bit values, for tokenizer vocabularies,
 * merge tables and caches. Keys are copied into the map's own storage. */
#ifndef ANE_BASE_HASHMAP_H
#define ANE_BASE_HASHMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct ane_hashmap_slot {
    const char *key;   /* NULL when empty */
    size_t length;
    uint64_t hash;
    int64_t value;
} ane_hashmap_slot;

typedef struct ane_hashmap {
    ane_hashmap_slot *slots;   /* [capacity], a power of two */
    size_t capacity, count;
    char **blocks;             /* key storage */
    size_t nblocks, block_used, block_capacity;
} ane_hashmap;

/* Returns 0 when out of memory. Replaces the value of an existing key. */
int ane_hashmap_put(ane_hashmap *map, const void *key, size_t length, int64_t value);
/* The same, returning the map's own copy of the key (valid until the map is freed), or NULL
 * when out of memory. */
const char *ane_hashmap_put_key(ane_hashmap *map, const void *key, size_t length, int64_t value);
/* Makes room for `count` keys in all without growing again. Returns 0 when out of memory. */
int ane_hashmap_reserve(ane_hashmap *map, size_t count);
/* Returns 1 and sets *value when found. */
int ane_hashmap_get(const ane_hashmap *map, const void *key, size_t length, int64_t *value);
void ane_hashmap_free(ane_hashmap *map);

uint64_t ane_hash_bytes(const void *data, size_t length);

#endif
