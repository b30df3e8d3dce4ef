/* base/hashmap.c against a plain array of (key, value) pairs searched linearly: 20,000
 * random binary keys (NUL bytes inside, lengths 0..40, some repeated so values get
 * replaced), then every key looked up, and keys never inserted missed. Then a map reserved
 * for all the keys up front: it never grows, and put_key hands back the map's one copy of
 * each key. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/hashmap.h"
#include "check.h"

enum { KEYS = 20000, MAX_LENGTH = 40 };

typedef struct {
    unsigned char bytes[MAX_LENGTH];
    size_t length;
    int64_t value;
} entry;

static entry reference[KEYS];
static int reference_count;

static int reference_find(const unsigned char *key, size_t length) {
    for (int i = 0; i < reference_count; i++)
        if (reference[i].length == length && memcmp(reference[i].bytes, key, length) == 0) return i;
    return -1;
}

static uint32_t state = 7;
static uint32_t next_random(void) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    return state;
}

int main(void) {
    ane_hashmap map = { 0 };
    unsigned char key[MAX_LENGTH];
    for (int i = 0; i < KEYS; i++) {
        size_t length = next_random() % (MAX_LENGTH + 1);
        for (size_t b = 0; b < length; b++) key[b] = (unsigned char)(next_random() % 4); /* many zeros, many repeats */
        int64_t value = (int64_t)next_random() - (1 << 30);
        CHECK(ane_hashmap_put(&map, key, length, value), "put %d failed", i);
        int at = reference_find(key, length);
        if (at < 0) {
            at = reference_count++;
            memcpy(reference[at].bytes, key, length);
            reference[at].length = length;
        }
        reference[at].value = value;
    }
    CHECK(map.count == (size_t)reference_count, "the map holds %zu keys, the reference %d", map.count, reference_count);
    int found = 0;
    for (int i = 0; i < reference_count; i++) {
        int64_t value = 0;
        found += ane_hashmap_get(&map, reference[i].bytes, reference[i].length, &value) && value == reference[i].value;
    }
    CHECK(found == reference_count, "%d of %d keys found with their latest value", found, reference_count);
    int false_hits = 0;
    for (int i = 0; i < 2000; i++) {
        size_t length = MAX_LENGTH;
        for (size_t b = 0; b < length; b++) key[b] = (unsigned char)(4 + next_random() % 200); /* never inserted */
        int64_t value;
        false_hits += ane_hashmap_get(&map, key, length, &value);
    }
    CHECK(false_hits == 0, "%d lookups of absent keys found something", false_hits);
    CHECK((map.capacity & (map.capacity - 1)) == 0 && map.count < map.capacity, "capacity %zu is a power of two above %zu",
          map.capacity, map.count);
    ane_hashmap_free(&map);
    int64_t value;
    CHECK(!ane_hashmap_get(&map, "", 0, &value), "a freed map is empty");

    ane_hashmap reserved = { 0 };
    CHECK(ane_hashmap_reserve(&reserved, (size_t)reference_count), "reserve failed");
    size_t capacity = reserved.capacity;
    CHECK(capacity >= 2 * (size_t)reference_count, "reserved capacity %zu for %d keys", capacity, reference_count);
    int wrong_copies = 0, moved_copies = 0;
    const char *first_copy[KEYS];
    for (int i = 0; i < reference_count; i++) {
        const char *copy = ane_hashmap_put_key(&reserved, reference[i].bytes, reference[i].length, i);
        wrong_copies += !copy || copy == (const char *)reference[i].bytes || memcmp(copy, reference[i].bytes, reference[i].length);
        first_copy[i] = copy;
    }
    for (int i = 0; i < reference_count; i++) /* again: the same copy, the new value */
        moved_copies += ane_hashmap_put_key(&reserved, reference[i].bytes, reference[i].length, -i) != first_copy[i];
    CHECK(wrong_copies == 0 && moved_copies == 0, "%d keys copied wrongly, %d copies not reused", wrong_copies, moved_copies);
    CHECK(reserved.capacity == capacity && reserved.count == (size_t)reference_count,
          "capacity %zu -> %zu, %zu keys: a reserved map grew", capacity, reserved.capacity, reserved.count);
    found = 0;
    for (int i = 0; i < reference_count; i++)
        found += ane_hashmap_get(&reserved, reference[i].bytes, reference[i].length, &value) && value == -i;
    CHECK(found == reference_count, "%d of %d keys found in the reserved map", found, reference_count);
    CHECK(ane_hashmap_reserve(&reserved, 10) && reserved.capacity == capacity, "reserving less shrank the map");
    ane_hashmap_free(&reserved);
    return check_summary("hashmap");
}
