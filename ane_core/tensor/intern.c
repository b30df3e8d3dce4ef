/* The store of interned consts (intern.h): a list of storages keyed by a hash of their
 * bytes, each held by one reference of the store's own. The hash reads a 64-byte sample
 * of every 4 KB and the length (cheap for weights of hundreds of MB); equal hashes are
 * confirmed by comparing every byte. Bytes that are an entry's own (a view of interned
 * weights, a compile's weight file pointing at them) are found by their address first. An
 * entry mapped from a file that has since been cut short is not compared (its pages past the
 * file's end would fault): a model loaded in place whose file is rewritten must not take down
 * the next load of the same weights. */
#include "intern.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../base/hash.h"

typedef struct entry {
    uint64_t hash;
    uint64_t serial; /* the entry's number, never reused (ane_intern_serial) */
    size_t offset, nbytes; /* the bytes: [offset, offset + nbytes) of storage */
    ane_storage *storage;  /* the store's reference */
} entry;

static struct {
    pthread_mutex_t lock;
    entry *entries;
    size_t count, capacity;
    uint64_t serials; /* numbers handed out */
} store = {.lock = PTHREAD_MUTEX_INITIALIZER};

enum { SAMPLE_BYTES = 64, SAMPLE_STRIDE = 4096 };

static uint64_t sampled_hash(const unsigned char *data, size_t nbytes) {
    uint64_t h = ane_hash64(ANE_HASH_SEED, &nbytes, sizeof nbytes);
    for (size_t at = 0; at < nbytes; at += SAMPLE_STRIDE)
        h = ane_hash64(h, data + at, nbytes - at < SAMPLE_BYTES ? nbytes - at : SAMPLE_BYTES);
    return ane_hash64(h, data + nbytes - SAMPLE_BYTES, SAMPLE_BYTES); /* the last bytes too */
}

/* The tensor's bytes, or NULL when it is not one contiguous run worth interning. */
static const unsigned char *bytes_of(const ane_tensor *t, size_t *nbytes) {
    if (!t->storage || !ane_tensor_is_contiguous(t)) return NULL;
    *nbytes = (size_t)ane_tensor_numel(t) * ane_dtype_size(t->dtype);
    if (*nbytes < ANE_INTERN_MIN_BYTES || t->offset + *nbytes > t->storage->nbytes) return NULL;
    return (const unsigned char *)t->storage->data + t->offset;
}

static const unsigned char *entry_bytes(const entry *e) { return (const unsigned char *)e->storage->data + e->offset; }

static entry *lookup(const unsigned char *data, size_t nbytes, uint64_t hash) {
    for (size_t i = 0; i < store.count; i++) {
        entry *e = &store.entries[i];
        if (e->hash == hash && e->nbytes == nbytes &&
            (entry_bytes(e) == data ||
             (ane_storage_readable(e->storage, e->offset, nbytes) && !memcmp(entry_bytes(e), data, nbytes))))
            return e;
    }
    return NULL;
}

/* The entry whose bytes are these very bytes (a view of interned weights, or a compile's
 * weight file pointing at them), found by address (the lock held). */
static entry *lookup_same(const unsigned char *data, size_t nbytes) {
    for (size_t i = 0; i < store.count; i++)
        if (entry_bytes(&store.entries[i]) == data && store.entries[i].nbytes == nbytes) return &store.entries[i];
    return NULL;
}

int ane_intern_find(const ane_tensor *value, ane_tensor *out) {
    size_t nbytes;
    const unsigned char *data = bytes_of(value, &nbytes);
    if (!data) return 0;
    pthread_mutex_lock(&store.lock);
    entry *e = lookup_same(data, nbytes);
    if (!e) {
        pthread_mutex_unlock(&store.lock);
        uint64_t hash = sampled_hash(data, nbytes); /* (the bytes read outside the lock) */
        pthread_mutex_lock(&store.lock);
        e = lookup(data, nbytes, hash);
    }
    if (e) {
        *out = *value; /* the same header over the interned bytes */
        out->storage = e->storage;
        out->offset = e->offset;
        ane_storage_retain(e->storage);
    }
    pthread_mutex_unlock(&store.lock);
    return e != NULL;
}

void ane_intern_add(const ane_tensor *t) {
    size_t nbytes;
    const unsigned char *data = bytes_of(t, &nbytes);
    if (!data) return;
    pthread_mutex_lock(&store.lock);
    int known = lookup_same(data, nbytes) != NULL;
    pthread_mutex_unlock(&store.lock);
    if (known) return;
    uint64_t hash = sampled_hash(data, nbytes);
    pthread_mutex_lock(&store.lock);
    if (!lookup(data, nbytes, hash)) {
        if (store.count == store.capacity) {
            size_t capacity = store.capacity ? 2 * store.capacity : 64;
            entry *grown = realloc(store.entries, capacity * sizeof *grown);
            if (grown) store.entries = grown, store.capacity = capacity;
        }
        if (store.count < store.capacity) { /* out of memory: simply not shared */
            store.entries[store.count++] = (entry){hash, ++store.serials, t->offset, nbytes, t->storage};
            ane_storage_retain(t->storage);
            t->storage->readonly = 1; /* shared with programs: never written again */
        }
    }
    pthread_mutex_unlock(&store.lock);
}

int ane_intern_serial(const void *data, size_t nbytes, uint64_t *serial) {
    pthread_mutex_lock(&store.lock);
    const entry *e = lookup_same(data, nbytes);
    if (e) *serial = e->serial;
    pthread_mutex_unlock(&store.lock);
    return e != NULL;
}

void ane_intern_sweep(void) {
    pthread_mutex_lock(&store.lock);
    size_t kept = 0;
    for (size_t i = 0; i < store.count; i++) {
        entry e = store.entries[i];
        if (__atomic_load_n(&e.storage->refcount, __ATOMIC_ACQUIRE) == 1) ane_storage_release(e.storage);
        else store.entries[kept++] = e;
    }
    store.count = kept;
    pthread_mutex_unlock(&store.lock);
}

void ane_intern_stats(size_t *count, size_t *bytes) {
    pthread_mutex_lock(&store.lock);
    *count = store.count;
    *bytes = 0;
    for (size_t i = 0; i < store.count; i++) *bytes += store.entries[i].nbytes;
    pthread_mutex_unlock(&store.lock);
}
