/* The CoreFoundation subset the `ane` backend uses, declared with Apple's names and
 * signatures, for building it on Linux against the test double (spec/ane_double), whose
 * CF objects are toll-free bridged to its Objective-C objects as on macOS. */
#ifndef ANE_DOUBLE_COREFOUNDATION_H
#define ANE_DOUBLE_COREFOUNDATION_H

#include <stdbool.h>
#include <stdint.h>

typedef long CFIndex;
typedef unsigned long CFTypeID;
typedef unsigned char Boolean;
typedef uint32_t CFStringEncoding;
typedef const void *CFTypeRef;
typedef const struct __CFAllocator *CFAllocatorRef;
typedef const struct __CFData *CFDataRef;
typedef const struct __CFString *CFStringRef;
typedef const struct __CFNumber *CFNumberRef;
typedef const struct __CFDictionary *CFDictionaryRef;
typedef struct __CFDictionary *CFMutableDictionaryRef;
typedef const struct __CFArray *CFArrayRef;
typedef struct __CFArray *CFMutableArrayRef;
typedef struct __CFError *CFErrorRef;

#define kCFStringEncodingUTF8 0x08000100u

typedef enum {
    kCFNumberSInt32Type = 3,
    kCFNumberSInt64Type = 4,
    kCFNumberDoubleType = 13,
    kCFNumberLongLongType = 11,
} CFNumberType;

/* Only the address of these matters: the double treats them as "CF types, retained". */
typedef struct { CFIndex version; const void *retain, *release, *copyDescription, *equal, *hash; } CFDictionaryKeyCallBacks;
typedef struct { CFIndex version; const void *retain, *release, *copyDescription, *equal; } CFDictionaryValueCallBacks;
typedef struct { CFIndex version; const void *retain, *release, *copyDescription, *equal; } CFArrayCallBacks;

extern const CFDictionaryKeyCallBacks kCFTypeDictionaryKeyCallBacks;
extern const CFDictionaryValueCallBacks kCFTypeDictionaryValueCallBacks;
extern const CFArrayCallBacks kCFTypeArrayCallBacks;
extern const CFStringRef kCFErrorUnderlyingErrorKey;

CFTypeRef CFRetain(CFTypeRef object);
void CFRelease(CFTypeRef object);
CFTypeID CFGetTypeID(CFTypeRef object);
CFTypeID CFStringGetTypeID(void);
CFTypeID CFNumberGetTypeID(void);
CFTypeID CFDictionaryGetTypeID(void);
CFTypeID CFArrayGetTypeID(void);

CFDataRef CFDataCreate(CFAllocatorRef allocator, const uint8_t *bytes, CFIndex length);
const uint8_t *CFDataGetBytePtr(CFDataRef data);
CFIndex CFDataGetLength(CFDataRef data);

CFStringRef CFStringCreateWithCString(CFAllocatorRef allocator, const char *text, CFStringEncoding encoding);
Boolean CFStringGetCString(CFStringRef string, char *buffer, CFIndex size, CFStringEncoding encoding);

CFNumberRef CFNumberCreate(CFAllocatorRef allocator, CFNumberType type, const void *value);
Boolean CFNumberGetValue(CFNumberRef number, CFNumberType type, void *value);

CFMutableDictionaryRef CFDictionaryCreateMutable(CFAllocatorRef allocator, CFIndex capacity,
                                                 const CFDictionaryKeyCallBacks *keys,
                                                 const CFDictionaryValueCallBacks *values);
void CFDictionarySetValue(CFMutableDictionaryRef dict, const void *key, const void *value);
const void *CFDictionaryGetValue(CFDictionaryRef dict, const void *key);
CFIndex CFDictionaryGetCount(CFDictionaryRef dict);

CFMutableArrayRef CFArrayCreateMutable(CFAllocatorRef allocator, CFIndex capacity, const CFArrayCallBacks *callbacks);
void CFArrayAppendValue(CFMutableArrayRef array, const void *value);
CFIndex CFArrayGetCount(CFArrayRef array);
const void *CFArrayGetValueAtIndex(CFArrayRef array, CFIndex index);

CFIndex CFErrorGetCode(CFErrorRef error);
CFStringRef CFErrorGetDomain(CFErrorRef error);
CFStringRef CFErrorCopyDescription(CFErrorRef error);
CFDictionaryRef CFErrorCopyUserInfo(CFErrorRef error);

#endif
