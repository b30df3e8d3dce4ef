/* The IOSurface C API subset the `ane` backend and the runtime's surfaces use, with
 * Apple's names and signatures, for building them on Linux against the test double. */
#ifndef ANE_DOUBLE_IOSURFACE_H
#define ANE_DOUBLE_IOSURFACE_H

#include <stddef.h>
#include <stdint.h>

#include "../CoreFoundation/CoreFoundation.h"

typedef struct __IOSurface *IOSurfaceRef;
typedef int kern_return_t;
typedef uint32_t IOSurfaceLockOptions;
enum { kIOSurfaceLockReadOnly = 0x00000001, kIOSurfaceLockAvoidSync = 0x00000002 };

extern const CFStringRef kIOSurfaceWidth;
extern const CFStringRef kIOSurfaceHeight;
extern const CFStringRef kIOSurfaceBytesPerElement;
extern const CFStringRef kIOSurfaceBytesPerRow;
extern const CFStringRef kIOSurfaceAllocSize;
extern const CFStringRef kIOSurfacePixelFormat;

IOSurfaceRef IOSurfaceCreate(CFDictionaryRef properties);
size_t IOSurfaceGetAllocSize(IOSurfaceRef surface);
size_t IOSurfaceGetBytesPerRow(IOSurfaceRef surface);
void *IOSurfaceGetBaseAddress(IOSurfaceRef surface);
kern_return_t IOSurfaceLock(IOSurfaceRef surface, IOSurfaceLockOptions options, uint32_t *seed);
kern_return_t IOSurfaceUnlock(IOSurfaceRef surface, IOSurfaceLockOptions options, uint32_t *seed);

#endif
