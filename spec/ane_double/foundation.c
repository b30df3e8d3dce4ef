/* The double's CoreFoundation and IOSurface subset. Every CF object is an object of the
 * double's runtime (toll-free bridging, one refcount): NSData, NSString, NSNumber, mutable
 * NSDictionary and NSArray (retaining their contents), NSError (code, description, user
 * info) and IOSurface (bytes rounded up to 16 KiB pages, as on Apple silicon, with lock
 * balance checked). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "double.h"

enum { TYPE_DATA = 20, TYPE_STRING = 7, TYPE_NUMBER = 22, TYPE_DICTIONARY = 18, TYPE_ARRAY = 19, TYPE_ERROR = 30,
       TYPE_SURFACE = 40 };

#define SURFACE_PAGE 16384

typedef struct data_object { double_object base; uint8_t *bytes; size_t size; } data_object;
typedef struct string_object { double_object base; char *text; } string_object;
typedef struct number_object { double_object base; int64_t value; } number_object;
typedef struct dictionary_object { double_object base; id *keys, *values; CFIndex count, capacity; } dictionary_object;
typedef struct array_object { double_object base; id *values; CFIndex count, capacity; } array_object;
typedef struct error_object { double_object base; long code; id description, domain, user_info; } error_object;
typedef struct surface_object { double_object base; uint8_t *bytes; size_t alloc_size, bytes_per_row; int locks; } surface_object;

Class double_NSData, double_NSString, double_NSNumber, double_NSDictionary, double_NSArray, double_NSError, double_IOSurface;

static void data_destroy(id self) { free(((data_object *)self)->bytes); }
static void string_destroy(id self) { free(((string_object *)self)->text); }
static void dictionary_destroy(id self) {
    dictionary_object *d = (dictionary_object *)self;
    for (CFIndex i = 0; i < d->count; i++) double_release(d->keys[i]), double_release(d->values[i]);
    free(d->keys), free(d->values);
}
static void array_destroy(id self) {
    array_object *a = (array_object *)self;
    for (CFIndex i = 0; i < a->count; i++) double_release(a->values[i]);
    free(a->values);
}
static void error_destroy(id self) {
    error_object *e = (error_object *)self;
    double_release(e->description), double_release(e->domain), double_release(e->user_info);
}
static void surface_destroy(id self) {
    surface_object *s = (surface_object *)self;
    if (s->locks) double_violation("an IOSurface was freed while locked (%d lock(s) not unlocked)", s->locks);
    free(s->bytes);
}

/* ---------------------------------------------------------------- constants */

static string_object constant_strings[8];
static const char *const constant_texts[8] = {"NSUnderlyingError", "IOSurfaceWidth", "IOSurfaceHeight",
                                              "IOSurfaceBytesPerElement", "IOSurfaceBytesPerRow", "IOSurfaceAllocSize",
                                              "IOSurfacePixelFormat", ""};

EXPORT const CFStringRef kCFErrorUnderlyingErrorKey = (CFStringRef)&constant_strings[0];
EXPORT const CFStringRef kIOSurfaceWidth = (CFStringRef)&constant_strings[1];
EXPORT const CFStringRef kIOSurfaceHeight = (CFStringRef)&constant_strings[2];
EXPORT const CFStringRef kIOSurfaceBytesPerElement = (CFStringRef)&constant_strings[3];
EXPORT const CFStringRef kIOSurfaceBytesPerRow = (CFStringRef)&constant_strings[4];
EXPORT const CFStringRef kIOSurfaceAllocSize = (CFStringRef)&constant_strings[5];
EXPORT const CFStringRef kIOSurfacePixelFormat = (CFStringRef)&constant_strings[6];
EXPORT const CFDictionaryKeyCallBacks kCFTypeDictionaryKeyCallBacks = {0};
EXPORT const CFDictionaryValueCallBacks kCFTypeDictionaryValueCallBacks = {0};
EXPORT const CFArrayCallBacks kCFTypeArrayCallBacks = {0};

void double_runtime_init(void);

void double_foundation_init(void) {
    double_runtime_init();
    double_NSData = double_class("NSData", "NSObject", sizeof(data_object), data_destroy, TYPE_DATA);
    double_NSString = double_class("NSString", "NSObject", sizeof(string_object), string_destroy, TYPE_STRING);
    double_NSNumber = double_class("NSNumber", "NSObject", sizeof(number_object), NULL, TYPE_NUMBER);
    double_NSDictionary = double_class("NSDictionary", "NSObject", sizeof(dictionary_object), dictionary_destroy, TYPE_DICTIONARY);
    double_NSArray = double_class("NSArray", "NSObject", sizeof(array_object), array_destroy, TYPE_ARRAY);
    double_NSError = double_class("NSError", "NSObject", sizeof(error_object), error_destroy, TYPE_ERROR);
    double_IOSurface = double_class("IOSurface", "NSObject", sizeof(surface_object), surface_destroy, TYPE_SURFACE);
    for (int i = 0; i < 7; i++) {
        double_make_immortal(&constant_strings[i].base, double_NSString);
        constant_strings[i].text = (char *)constant_texts[i];
    }
}

/* ---------------------------------------------------------------- accessors for the double */

static int is_type(const void *object, Class cls, const char *function) {
    if (double_is_kind(object, cls)) return 1;
    if (function) double_violation("%s was given %s, not a live %s", function, object ? "another object" : "NULL", cls->name);
    return 0;
}

const char *double_string(const void *object) {
    return double_is_kind(object, double_NSString) ? ((const string_object *)object)->text : NULL;
}

const uint8_t *double_data(const void *object, size_t *size) {
    if (!double_is_kind(object, double_NSData)) return NULL;
    *size = ((const data_object *)object)->size;
    return ((const data_object *)object)->bytes;
}

int double_number(const void *object, int64_t *value) {
    if (!double_is_kind(object, double_NSNumber)) return 0;
    *value = ((const number_object *)object)->value;
    return 1;
}

id double_make_string(const char *text) {
    string_object *s = (string_object *)double_new(double_NSString);
    s->text = strdup(text);
    return (id)s;
}

id double_make_number(int64_t value) {
    number_object *n = (number_object *)double_new(double_NSNumber);
    n->value = value;
    return (id)n;
}

id double_make_dictionary(void) { return double_new(double_NSDictionary); }
id double_make_array(void) { return double_new(double_NSArray); }

static int same_key(id a, const void *b) {
    const char *x = double_string(a), *y = double_string(b);
    return x && y ? strcmp(x, y) == 0 : (const void *)a == b;
}

static void dictionary_put(dictionary_object *d, id key, id value) {
    double_retain(value);
    for (CFIndex i = 0; i < d->count; i++)
        if (same_key(d->keys[i], key)) {
            double_release(d->values[i]);
            d->values[i] = value;
            return;
        }
    if (d->count == d->capacity) {
        d->capacity = d->capacity ? d->capacity * 2 : 8;
        d->keys = realloc(d->keys, (size_t)d->capacity * sizeof *d->keys);
        d->values = realloc(d->values, (size_t)d->capacity * sizeof *d->values);
        if (!d->keys || !d->values) abort();
    }
    d->keys[d->count] = double_retain(key);
    d->values[d->count++] = value;
}

void double_dictionary_set(id dict, const char *key, id value) {
    id name = double_make_string(key);
    dictionary_put((dictionary_object *)dict, name, value);
    double_release(name);
}

id double_dictionary_get(const void *dict, const char *key) {
    if (!double_is_kind(dict, double_NSDictionary)) return NULL;
    const dictionary_object *d = dict;
    for (CFIndex i = 0; i < d->count; i++) {
        const char *k = double_string(d->keys[i]);
        if (k && strcmp(k, key) == 0) return d->values[i];
    }
    return NULL;
}

CFIndex double_dictionary_count(const void *dict) {
    return double_is_kind(dict, double_NSDictionary) ? ((const dictionary_object *)dict)->count : 0;
}

id double_dictionary_key_at(const void *dict, CFIndex index) { return ((const dictionary_object *)dict)->keys[index]; }
id double_dictionary_value_at(const void *dict, CFIndex index) { return ((const dictionary_object *)dict)->values[index]; }

void double_array_append(id array, id value) {
    array_object *a = (array_object *)array;
    if (a->count == a->capacity) {
        a->capacity = a->capacity ? a->capacity * 2 : 8;
        a->values = realloc(a->values, (size_t)a->capacity * sizeof *a->values);
        if (!a->values) abort();
    }
    a->values[a->count++] = double_retain(value);
}

CFIndex double_array_count(const void *array) {
    return double_is_kind(array, double_NSArray) ? ((const array_object *)array)->count : -1;
}

id double_array_at(const void *array, CFIndex index) {
    const array_object *a = array;
    return index >= 0 && index < a->count ? a->values[index] : NULL;
}

id double_make_error(long code, const char *description, id underlying) {
    error_object *e = (error_object *)double_new(double_NSError);
    e->code = code;
    e->domain = double_make_string("com.apple.appleneuralengine");
    char text[1024];
    snprintf(text, sizeof text, "Error Domain=com.apple.appleneuralengine Code=%ld \"%s\"", code, description);
    e->description = double_make_string(text);
    e->user_info = double_make_dictionary();
    if (underlying) dictionary_put((dictionary_object *)e->user_info, (id)kCFErrorUnderlyingErrorKey, underlying);
    return (id)e;
}

void *double_surface_bytes(const void *surface, size_t *alloc_size) {
    if (!double_is_kind(surface, double_IOSurface)) return NULL;
    *alloc_size = ((const surface_object *)surface)->alloc_size;
    return ((const surface_object *)surface)->bytes;
}

/* ---------------------------------------------------------------- CoreFoundation */

EXPORT CFTypeRef CFRetain(CFTypeRef object) {
    if (!object) double_violation("CFRetain(NULL)");
    return double_retain((id)object);
}

EXPORT void CFRelease(CFTypeRef object) {
    if (!object) {
        double_violation("CFRelease(NULL)");
        return;
    }
    double_release((id)object);
}

EXPORT CFTypeID CFGetTypeID(CFTypeRef object) {
    if (!double_is_live(object)) {
        double_violation("CFGetTypeID of %p, which is no live object", object);
        return 0;
    }
    return ((const double_object *)object)->isa->type_id;
}

EXPORT CFTypeID CFStringGetTypeID(void) { return TYPE_STRING; }
EXPORT CFTypeID CFNumberGetTypeID(void) { return TYPE_NUMBER; }
EXPORT CFTypeID CFDictionaryGetTypeID(void) { return TYPE_DICTIONARY; }
EXPORT CFTypeID CFArrayGetTypeID(void) { return TYPE_ARRAY; }

EXPORT CFDataRef CFDataCreate(CFAllocatorRef allocator, const uint8_t *bytes, CFIndex length) {
    (void)allocator;
    data_object *d = (data_object *)double_new(double_NSData);
    d->size = (size_t)length;
    d->bytes = malloc(d->size ? d->size : 1);
    if (!d->bytes) abort();
    if (length) memcpy(d->bytes, bytes, d->size);
    return (CFDataRef)d;
}

EXPORT const uint8_t *CFDataGetBytePtr(CFDataRef data) {
    return is_type(data, double_NSData, "CFDataGetBytePtr") ? ((const data_object *)data)->bytes : NULL;
}

EXPORT CFIndex CFDataGetLength(CFDataRef data) {
    return is_type(data, double_NSData, "CFDataGetLength") ? (CFIndex)((const data_object *)data)->size : 0;
}

EXPORT CFStringRef CFStringCreateWithCString(CFAllocatorRef allocator, const char *text, CFStringEncoding encoding) {
    (void)allocator;
    if (encoding != kCFStringEncodingUTF8) double_violation("CFStringCreateWithCString with encoding 0x%x", encoding);
    return (CFStringRef)double_make_string(text);
}

EXPORT Boolean CFStringGetCString(CFStringRef string, char *buffer, CFIndex size, CFStringEncoding encoding) {
    (void)encoding;
    if (!is_type(string, double_NSString, "CFStringGetCString")) return 0;
    const char *text = ((const string_object *)string)->text;
    if ((CFIndex)strlen(text) + 1 > size) return 0;
    memcpy(buffer, text, strlen(text) + 1);
    return 1;
}

EXPORT CFNumberRef CFNumberCreate(CFAllocatorRef allocator, CFNumberType type, const void *value) {
    (void)allocator;
    int64_t v;
    if (type == kCFNumberSInt32Type) v = *(const int32_t *)value;
    else if (type == kCFNumberSInt64Type || type == kCFNumberLongLongType) v = *(const int64_t *)value;
    else if (type == kCFNumberDoubleType) v = (int64_t)*(const double *)value;
    else {
        double_violation("CFNumberCreate with number type %d, which the double does not know", (int)type);
        v = 0;
    }
    return (CFNumberRef)double_make_number(v);
}

EXPORT Boolean CFNumberGetValue(CFNumberRef number, CFNumberType type, void *value) {
    if (!is_type(number, double_NSNumber, "CFNumberGetValue")) return 0;
    int64_t v = ((const number_object *)number)->value;
    if (type == kCFNumberSInt32Type) *(int32_t *)value = (int32_t)v;
    else if (type == kCFNumberSInt64Type || type == kCFNumberLongLongType) *(int64_t *)value = v;
    else if (type == kCFNumberDoubleType) *(double *)value = (double)v;
    else return 0;
    return 1;
}

EXPORT CFMutableDictionaryRef CFDictionaryCreateMutable(CFAllocatorRef allocator, CFIndex capacity,
                                                        const CFDictionaryKeyCallBacks *keys,
                                                        const CFDictionaryValueCallBacks *values) {
    (void)allocator, (void)capacity;
    if (keys != &kCFTypeDictionaryKeyCallBacks || values != &kCFTypeDictionaryValueCallBacks)
        double_violation("CFDictionaryCreateMutable without the kCFType callbacks: NSDictionary needs retained objects");
    return (CFMutableDictionaryRef)double_make_dictionary();
}

EXPORT void CFDictionarySetValue(CFMutableDictionaryRef dict, const void *key, const void *value) {
    if (!is_type(dict, double_NSDictionary, "CFDictionarySetValue")) return;
    if (!double_is_live(key) || !double_is_live(value)) {
        double_violation("CFDictionarySetValue with a key or value that is no live object");
        return;
    }
    dictionary_put((dictionary_object *)dict, (id)key, (id)value);
}

EXPORT const void *CFDictionaryGetValue(CFDictionaryRef dict, const void *key) {
    if (!is_type(dict, double_NSDictionary, "CFDictionaryGetValue")) return NULL;
    const dictionary_object *d = (const dictionary_object *)dict;
    for (CFIndex i = 0; i < d->count; i++)
        if (same_key(d->keys[i], key)) return d->values[i];
    return NULL;
}

EXPORT CFIndex CFDictionaryGetCount(CFDictionaryRef dict) {
    return is_type(dict, double_NSDictionary, "CFDictionaryGetCount") ? ((const dictionary_object *)dict)->count : 0;
}

EXPORT CFMutableArrayRef CFArrayCreateMutable(CFAllocatorRef allocator, CFIndex capacity, const CFArrayCallBacks *callbacks) {
    (void)allocator, (void)capacity;
    if (callbacks != &kCFTypeArrayCallBacks) double_violation("CFArrayCreateMutable without kCFTypeArrayCallBacks");
    return (CFMutableArrayRef)double_make_array();
}

EXPORT void CFArrayAppendValue(CFMutableArrayRef array, const void *value) {
    if (!is_type(array, double_NSArray, "CFArrayAppendValue")) return;
    if (!double_is_live(value)) {
        double_violation("CFArrayAppendValue of %p, which is no live object", value);
        return;
    }
    double_array_append((id)array, (id)value);
}

EXPORT CFIndex CFArrayGetCount(CFArrayRef array) {
    return is_type(array, double_NSArray, "CFArrayGetCount") ? ((const array_object *)array)->count : 0;
}

EXPORT const void *CFArrayGetValueAtIndex(CFArrayRef array, CFIndex index) {
    if (!is_type(array, double_NSArray, "CFArrayGetValueAtIndex")) return NULL;
    const array_object *a = (const array_object *)array;
    if (index < 0 || index >= a->count) {
        double_violation("CFArrayGetValueAtIndex(%ld) of an array of %ld (NSRangeException)", (long)index, (long)a->count);
        return NULL;
    }
    return a->values[index];
}

EXPORT CFIndex CFErrorGetCode(CFErrorRef error) {
    return is_type(error, double_NSError, "CFErrorGetCode") ? ((const error_object *)error)->code : 0;
}

EXPORT CFStringRef CFErrorGetDomain(CFErrorRef error) {
    return is_type(error, double_NSError, "CFErrorGetDomain") ? (CFStringRef)((const error_object *)error)->domain : NULL;
}

EXPORT CFStringRef CFErrorCopyDescription(CFErrorRef error) {
    if (!is_type(error, double_NSError, "CFErrorCopyDescription")) return NULL;
    return (CFStringRef)double_retain(((const error_object *)error)->description);
}

EXPORT CFDictionaryRef CFErrorCopyUserInfo(CFErrorRef error) {
    if (!is_type(error, double_NSError, "CFErrorCopyUserInfo")) return NULL;
    return (CFDictionaryRef)double_retain(((const error_object *)error)->user_info);
}

/* ---------------------------------------------------------------- IOSurface */

EXPORT IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties) {
    if (!is_type(properties, double_NSDictionary, "IOSurfaceCreate")) return NULL;
    int64_t width = 0, height = 0, per_row = 0, alloc = 0, element = 0;
    double_number(CFDictionaryGetValue(properties, kIOSurfaceWidth), &width);
    double_number(CFDictionaryGetValue(properties, kIOSurfaceHeight), &height);
    double_number(CFDictionaryGetValue(properties, kIOSurfaceBytesPerRow), &per_row);
    double_number(CFDictionaryGetValue(properties, kIOSurfaceAllocSize), &alloc);
    double_number(CFDictionaryGetValue(properties, kIOSurfaceBytesPerElement), &element);
    if (width <= 0 || height <= 0 || element <= 0) return NULL; /* IOSurfaceCreate answers NULL */
    if (per_row < width * element) per_row = width * element;
    size_t size = (size_t)(alloc > per_row * height ? alloc : per_row * height);
    size = (size + SURFACE_PAGE - 1) / SURFACE_PAGE * SURFACE_PAGE;
    surface_object *s = (surface_object *)double_new(double_IOSurface);
    s->bytes = aligned_alloc(SURFACE_PAGE, size);
    if (!s->bytes) {
        double_release((id)s);
        return NULL;
    }
    memset(s->bytes, 0, size);
    s->alloc_size = size;
    s->bytes_per_row = (size_t)per_row;
    return (IOSurfaceRef)s;
}

EXPORT size_t IOSurfaceGetAllocSize(IOSurfaceRef surface) {
    return is_type(surface, double_IOSurface, "IOSurfaceGetAllocSize") ? ((surface_object *)surface)->alloc_size : 0;
}

EXPORT size_t IOSurfaceGetBytesPerRow(IOSurfaceRef surface) {
    return is_type(surface, double_IOSurface, "IOSurfaceGetBytesPerRow") ? ((surface_object *)surface)->bytes_per_row : 0;
}

EXPORT void *IOSurfaceGetBaseAddress(IOSurfaceRef surface) {
    return is_type(surface, double_IOSurface, "IOSurfaceGetBaseAddress") ? ((surface_object *)surface)->bytes : NULL;
}

EXPORT kern_return_t IOSurfaceLock(IOSurfaceRef surface, IOSurfaceLockOptions options, uint32_t *seed) {
    (void)options, (void)seed;
    if (!is_type(surface, double_IOSurface, "IOSurfaceLock")) return 1;
    double_lock();
    ((surface_object *)surface)->locks++;
    double_unlock();
    return 0;
}

EXPORT kern_return_t IOSurfaceUnlock(IOSurfaceRef surface, IOSurfaceLockOptions options, uint32_t *seed) {
    (void)options, (void)seed;
    if (!is_type(surface, double_IOSurface, "IOSurfaceUnlock")) return 1;
    double_lock();
    int balanced = ((surface_object *)surface)->locks > 0;
    if (balanced) ((surface_object *)surface)->locks--;
    double_unlock();
    if (!balanced) double_violation("IOSurfaceUnlock of a surface that is not locked");
    return balanced ? 0 : 1;
}
