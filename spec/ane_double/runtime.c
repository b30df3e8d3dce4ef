/* The double's Objective-C runtime: classes with metaclasses, interned selectors, method
 * lookup through superclasses, retain/release, per-thread autorelease pools, and a registry
 * of live objects and of the last 65,536 freed ones (their headers are not reused while
 * quarantined), so a message to a freed object, an
 * over-release, an autorelease with no pool or an unknown selector is a violation naming
 * the selector. objc_msgSend itself is msgsend_<isa>.S, which calls double_lookup. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "double.h"

static pthread_mutex_t runtime_mutex = PTHREAD_MUTEX_INITIALIZER;
void double_lock(void) { pthread_mutex_lock(&runtime_mutex); }
void double_unlock(void) { pthread_mutex_unlock(&runtime_mutex); }

/* ---------------------------------------------------------------- violations */

static int violations;
static char last_violation[512];

void double_violation(const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(last_violation, sizeof last_violation, format, args);
    va_end(args);
    violations++;
    fprintf(stderr, "ane-double: API violation: %s\n", last_violation);
    const char *mode = getenv("ANE_DOUBLE_ON_VIOLATION");
    if (!mode || strcmp(mode, "record") != 0) abort(); /* what a Mac does: crash */
}

/* For the double's own tests: how many violations so far, and the last one's text. */
EXPORT int anelua_ane_double_violations(char *last, size_t size) {
    if (last && size) snprintf(last, size, "%s", last_violation);
    return violations;
}

/* The backend checks for this symbol to know it runs against the double. */
EXPORT const char anelua_ane_double[] = "anelua AppleNeuralEngine test double";

/* ---------------------------------------------------------------- the registry */

#define TOMBSTONE ((const void *)1) /* a removed entry: probing continues past it */

static const void **registry;
static size_t registry_capacity, registry_count;

static size_t slot_of(const void *p, size_t capacity) {
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= 0xed5ad4bbu;
    h ^= h >> 11;
    return (size_t)h & (capacity - 1);
}

static void registry_add(const void *p) {
    if (2 * (registry_count + 1) > registry_capacity) {
        /* rebuilt at 4x the live entries (tombstones dropped), so churn does not grow it */
        size_t live = 1;
        for (size_t i = 0; i < registry_capacity; i++) live += registry[i] && registry[i] != TOMBSTONE;
        size_t capacity = 1024;
        while (capacity < 4 * live) capacity *= 2;
        const void **grown = calloc(capacity, sizeof *grown);
        if (!grown) abort();
        for (size_t i = 0; i < registry_capacity; i++) {
            if (!registry[i] || registry[i] == TOMBSTONE) continue;
            size_t s = slot_of(registry[i], capacity);
            while (grown[s]) s = (s + 1) & (capacity - 1);
            grown[s] = registry[i];
        }
        free(registry);
        registry = grown;
        registry_capacity = capacity;
        registry_count = live - 1;
    }
    size_t s = slot_of(p, registry_capacity);
    while (registry[s] && registry[s] != p) s = (s + 1) & (registry_capacity - 1);
    if (!registry[s]) registry_count++; /* (tombstones count as used until the next growth) */
    registry[s] = p;
}

static void registry_remove(const void *p) {
    size_t s = slot_of(p, registry_capacity);
    while (registry[s]) {
        if (registry[s] == p) {
            registry[s] = TOMBSTONE;
            return;
        }
        s = (s + 1) & (registry_capacity - 1);
    }
}

static int registry_has(const void *p) {
    if (!registry_capacity) return 0;
    size_t s = slot_of(p, registry_capacity);
    while (registry[s]) {
        if (registry[s] == p) return 1;
        s = (s + 1) & (registry_capacity - 1);
    }
    return 0;
}

int double_is_live(const void *object) {
    double_lock();
    int live = object && registry_has(object) && ((const double_object *)object)->state == OBJECT_LIVE;
    double_unlock();
    return live;
}

int double_is_kind(const void *object, Class cls) {
    if (!double_is_live(object)) return 0;
    for (Class c = ((const double_object *)object)->isa; c; c = c->superclass)
        if (c == cls) return 1;
    return 0;
}

/* ---------------------------------------------------------------- classes and selectors */

static Class *classes;
static int nclasses, classes_capacity;
static SEL *selectors;
static int nselectors, selectors_capacity;

static void *grow(void *array, int *capacity, size_t element) {
    int next = *capacity ? *capacity * 2 : 64;
    void *grown = realloc(array, (size_t)next * element);
    if (!grown) abort();
    *capacity = next;
    return grown;
}

SEL sel_registerName(const char *name) {
    double_lock();
    for (int i = 0; i < nselectors; i++)
        if (strcmp(selectors[i]->name, name) == 0) {
            double_unlock();
            return selectors[i];
        }
    if (nselectors == selectors_capacity) selectors = grow(selectors, &selectors_capacity, sizeof *selectors);
    SEL sel = calloc(1, sizeof *sel);
    sel->name = strdup(name);
    selectors[nselectors++] = sel;
    double_unlock();
    return sel;
}

const char *sel_getName(SEL sel) { return sel ? sel->name : "<null selector>"; }

Class objc_getClass(const char *name) {
    double_lock();
    Class found = NULL;
    for (int i = 0; i < nclasses && !found; i++)
        if (!classes[i]->is_meta && strcmp(classes[i]->name, name) == 0) found = classes[i];
    double_unlock();
    return found;
}

const char *class_getName(Class cls) { return cls ? cls->name : "nil"; }
Class object_getClass(id object) { return object ? object->isa : NULL; }

static Class new_class_object(const char *name, Class super, int is_meta) {
    Class cls = calloc(1, sizeof *cls);
    if (!cls) abort();
    cls->name = strdup(name);
    cls->superclass = super;
    cls->is_meta = is_meta;
    cls->refcount = INT32_MAX;
    cls->state = OBJECT_LIVE;
    double_lock();
    if (nclasses == classes_capacity) classes = grow(classes, &classes_capacity, sizeof *classes);
    classes[nclasses++] = cls;
    registry_add(cls);
    double_unlock();
    return cls;
}

Class objc_allocateClassPair(Class superclass, const char *name, unsigned long extra_bytes) {
    (void)extra_bytes;
    Class meta = new_class_object(name, superclass ? superclass->isa : NULL, 1);
    Class cls = new_class_object(name, superclass, 0);
    cls->isa = meta;
    meta->isa = meta;
    if (superclass) {
        cls->instance_size = superclass->instance_size;
        cls->type_id = superclass->type_id;
    }
    return cls;
}

void objc_registerClassPair(Class cls) { (void)cls; }

Class double_class(const char *name, const char *super, size_t instance_size, void (*destroy)(id), CFTypeID type_id) {
    Class cls = objc_allocateClassPair(super ? objc_getClass(super) : NULL, name, 0);
    if (instance_size) cls->instance_size = instance_size;
    cls->destroy = destroy;
    if (type_id) cls->type_id = type_id;
    return cls;
}

static struct objc_method *find_method(Class cls, SEL sel) {
    for (Class c = cls; c; c = c->superclass)
        for (int i = 0; i < c->nmethods; i++)
            if (c->methods[i].name == sel) return &c->methods[i];
    return NULL;
}

BOOL class_addMethod(Class cls, SEL name, IMP imp, const char *types) {
    double_lock();
    for (int i = 0; i < cls->nmethods; i++)
        if (cls->methods[i].name == name) {
            double_unlock();
            return NO;
        }
    if (cls->nmethods == cls->capacity) cls->methods = grow(cls->methods, &cls->capacity, sizeof *cls->methods);
    cls->methods[cls->nmethods++] = (struct objc_method){name, imp, strdup(types)};
    double_unlock();
    return YES;
}

void double_method(Class cls, int class_method, const char *selector, IMP imp, const char *types) {
    class_addMethod(class_method ? cls->isa : cls, sel_registerName(selector), imp, types);
}

Method class_getInstanceMethod(Class cls, SEL name) { return cls ? find_method(cls, name) : NULL; }
Method class_getClassMethod(Class cls, SEL name) { return cls ? find_method(cls->isa, name) : NULL; }
const char *method_getTypeEncoding(Method method) { return method ? method->types : NULL; }
IMP method_getImplementation(Method method) { return method ? method->imp : NULL; }

/* ---------------------------------------------------------------- objects */

id class_createInstance(Class cls, unsigned long extra_bytes) {
    size_t size = (cls->instance_size > sizeof(double_object) ? cls->instance_size : sizeof(double_object)) + extra_bytes;
    double_object *object = calloc(1, size);
    if (!object) abort();
    object->isa = cls;
    object->refcount = 1;
    object->state = OBJECT_LIVE;
    double_lock();
    registry_add(object);
    double_unlock();
    return (id)object;
}

id double_new(Class cls) { return class_createInstance(cls, 0); }

void *object_getIndexedIvars(id object) { return (char *)object + object->isa->instance_size; }

void double_make_immortal(double_object *object, Class cls) {
    object->isa = cls;
    object->refcount = INT32_MAX;
    object->state = OBJECT_LIVE;
    double_lock();
    registry_add(object);
    double_unlock();
}

static int check_object(const void *object, const char *action) {
    double_lock();
    int known = registry_has(object);
    int state = known ? ((const double_object *)object)->state : 0;
    double_unlock();
    if (!known) {
        double_violation("%s an address that is no object (%p)", action, object);
        return 0;
    }
    if (state != OBJECT_LIVE) {
        double_violation("%s a freed %s object (%p)", action, ((const double_object *)object)->isa->name, object);
        return 0;
    }
    return 1;
}

/* Freed headers stay registered (a message to them is caught) for the last QUARANTINE frees;
 * older ones are really freed, so a long run's memory stays bounded. */
#define QUARANTINE 65536
static double_object *quarantined[QUARANTINE];
static size_t quarantine_next;

static void quarantine(double_object *o) {
    double_lock();
    double_object *oldest = quarantined[quarantine_next];
    quarantined[quarantine_next] = o;
    quarantine_next = (quarantine_next + 1) % QUARANTINE;
    if (oldest) registry_remove(oldest);
    double_unlock();
    free(oldest);
}

id double_retain(id object) {
    if (!object || !check_object(object, "retain of")) return object;
    double_object *o = (double_object *)object;
    double_lock();
    if (o->refcount != INT32_MAX) o->refcount++;
    double_unlock();
    return object;
}

void double_release(id object) {
    if (!object) return;
    if (!check_object(object, "release of")) return;
    double_object *o = (double_object *)object;
    double_lock();
    int dead = o->refcount != INT32_MAX && --o->refcount == 0;
    double_unlock();
    if (!dead) return;
    for (Class c = o->isa; c; c = c->superclass)
        if (c->destroy) c->destroy(object);
    o->state = OBJECT_FREED; /* the header stays registered: later messages are caught */
    quarantine(o);
}

/* ---------------------------------------------------------------- autorelease pools */

typedef struct pool_stack {
    id *objects;
    size_t count, capacity;
    size_t *marks;         /* where each open pool starts */
    size_t depth, marks_capacity;
} pool_stack;

static __thread pool_stack pools;

void *objc_autoreleasePoolPush(void) {
    if (pools.depth == pools.marks_capacity) {
        pools.marks_capacity = pools.marks_capacity ? pools.marks_capacity * 2 : 16;
        pools.marks = realloc(pools.marks, pools.marks_capacity * sizeof *pools.marks);
        if (!pools.marks) abort();
    }
    pools.marks[pools.depth++] = pools.count;
    return (void *)(uintptr_t)pools.depth; /* a token: the pool's depth */
}

void objc_autoreleasePoolPop(void *token) {
    size_t depth = (size_t)(uintptr_t)token;
    if (depth == 0 || depth > pools.depth) {
        double_violation("objc_autoreleasePoolPop(%p) of a pool that is not open (%zu open)", token, pools.depth);
        return;
    }
    size_t start = pools.marks[depth - 1];
    pools.depth = depth - 1;
    while (pools.count > start) double_release(pools.objects[--pools.count]);
    if (pools.depth == 0) { /* no pool left: give the thread's memory back */
        free(pools.objects);
        free(pools.marks);
        memset(&pools, 0, sizeof pools);
    }
}

id double_autorelease(id object) {
    if (!object) return object;
    if (pools.depth == 0) {
        double_violation("autorelease of a %s with no pool in place (OBJC_DEBUG_MISSING_POOLS: it leaks)", object->isa->name);
        return object;
    }
    if (pools.count == pools.capacity) {
        pools.capacity = pools.capacity ? pools.capacity * 2 : 64;
        pools.objects = realloc(pools.objects, pools.capacity * sizeof *pools.objects);
        if (!pools.objects) abort();
    }
    pools.objects[pools.count++] = object;
    return object;
}

/* ---------------------------------------------------------------- dispatch */

static id ignored_message(id self, SEL cmd) {
    (void)self, (void)cmd;
    return NULL;
}

/* objc_msgSend's lookup: the IMP for (self, _cmd); self is not nil (the trampoline answers
 * nil receivers itself). */
__attribute__((visibility("hidden"))) IMP double_lookup(id self, SEL cmd) {
    char action[300];
    snprintf(action, sizeof action, "message '%s' sent to", sel_getName(cmd));
    if (!check_object(self, action)) return (IMP)ignored_message;
    struct objc_method *method = find_method(self->isa, cmd);
    if (!method) {
        double_violation("unrecognized selector sent to instance: %c[%s %s]", self->isa->is_meta ? '+' : '-',
                         self->isa->name, sel_getName(cmd));
        return (IMP)ignored_message;
    }
    return method->imp;
}

/* ---------------------------------------------------------------- NSObject */

static id object_retain(id self, SEL cmd) {
    (void)cmd;
    return double_retain(self);
}
static void object_release(id self, SEL cmd) {
    (void)cmd;
    double_release(self);
}
static id object_autorelease(id self, SEL cmd) {
    (void)cmd;
    return double_autorelease(self);
}

Class double_NSObject;

void double_runtime_init(void) {
    double_NSObject = double_class("NSObject", NULL, sizeof(double_object), NULL, 1);
    double_method(double_NSObject, 0, "retain", (IMP)object_retain, double_mac_encoding("NSObject", 0, "retain", 0));
    double_method(double_NSObject, 0, "release", (IMP)object_release, double_mac_encoding("NSObject", 0, "release", 0));
    double_method(double_NSObject, 0, "autorelease", (IMP)object_autorelease, double_mac_encoding("NSObject", 0, "autorelease", 0));
}
