/* The test double of Apple's AppleNeuralEngine framework (Linux CI): the parts shared by its
 * Objective-C runtime (runtime.c), its CoreFoundation/IOSurface subset (foundation.c) and
 * its five private classes (framework.c). Everything a Mac would crash on, or silently
 * accept where the backend relies on it, is a violation: printed with the selector or rule
 * and, unless ANE_DOUBLE_ON_VIOLATION=record, an abort. */
#ifndef ANE_DOUBLE_H
#define ANE_DOUBLE_H

#include <stddef.h>
#include <stdint.h>

/* The Apple APIs it defines are exported; everything else stays inside the double. */
#pragma GCC visibility push(default)
#include <CoreFoundation/CoreFoundation.h>
#include <IOSurface/IOSurface.h>
#include <objc/message.h>
#include <objc/runtime.h>
#pragma GCC visibility pop

#define EXPORT __attribute__((visibility("default")))

struct objc_selector {
    const char *name;
};

struct objc_method {
    SEL name;
    IMP imp;
    const char *types;
};

/* Every object starts like this; CF objects are objects (toll-free bridging). */
typedef struct double_object {
    Class isa;
    int32_t refcount;   /* immortal objects: INT32_MAX */
    int32_t state;      /* OBJECT_LIVE or OBJECT_FREED (the header is never reused) */
} double_object;

enum { OBJECT_LIVE = 0x11AE, OBJECT_FREED = 0xDEAD };

struct objc_class {
    Class isa;          /* the metaclass (class objects are objects) */
    int32_t refcount, state;
    Class superclass;
    const char *name;
    int is_meta;
    struct objc_method *methods;
    int nmethods, capacity;
    size_t instance_size;
    void (*destroy)(id self); /* frees what the object owns; the header stays */
    CFTypeID type_id;
};

/* The runtime */
void double_violation(const char *format, ...) __attribute__((format(printf, 1, 2)));
Class double_class(const char *name, const char *super, size_t instance_size, void (*destroy)(id), CFTypeID type_id);
void double_method(Class cls, int class_method, const char *selector, IMP imp, const char *types);
id double_new(Class cls);            /* refcount 1 */
id double_autorelease(id object);
id double_retain(id object);
void double_release(id object);
int double_is_live(const void *object); /* a live object this runtime made */
int double_is_kind(const void *object, Class cls);
void double_make_immortal(double_object *object, Class cls);
void double_lock(void);
void double_unlock(void);

/* CoreFoundation / Foundation subset */
extern Class double_NSObject, double_NSData, double_NSString, double_NSNumber, double_NSDictionary, double_NSArray,
    double_NSError, double_IOSurface;
void double_foundation_init(void);
const char *double_string(const void *object);           /* NULL unless an NSString */
const uint8_t *double_data(const void *object, size_t *size);
int double_number(const void *object, int64_t *value);
id double_make_string(const char *text);                  /* +1 */
id double_make_number(int64_t value);                     /* +1 */
id double_make_error(long code, const char *description, id underlying); /* +1 */
id double_make_dictionary(void);                          /* +1 */
id double_make_array(void);                               /* +1 */
void double_dictionary_set(id dict, const char *key, id value); /* retains value */
id double_dictionary_get(const void *dict, const char *key);
CFIndex double_dictionary_count(const void *dict);        /* 0 unless a dictionary */
id double_dictionary_key_at(const void *dict, CFIndex index);
id double_dictionary_value_at(const void *dict, CFIndex index);
void double_array_append(id array, id value);             /* retains value */
CFIndex double_array_count(const void *array);
id double_array_at(const void *array, CFIndex index);
void *double_surface_bytes(const void *surface, size_t *alloc_size);

/* The encoding a Mac reports for a method (mac_methods.c); NULL when the double has no fact
 * for it. `wrong` gives the deliberately wrong row where there is one. */
const char *double_mac_encoding(const char *class_name, int class_method, const char *selector, int wrong);

/* The framework */
void double_framework_init(void);

#endif
