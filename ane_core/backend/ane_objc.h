/* The boundary of the `ane` backend: every Objective-C class and message, and every C
 * function of the Objective-C runtime, CoreFoundation and IOSurface it uses, listed once.
 *
 * ANE_OBJC_MESSAGES expands into one typedef per message (the exact C prototype, never
 * variadic: a variadic cast works on x86-64 and breaks on arm64), a selector table, and the
 * send macros below, which cast objc_msgSend to that typedef. Nothing else in the backend
 * calls objc_msgSend. The bind step (ane_objc_bind) resolves the C functions with dlsym
 * after the framework is dlopen'ed, looks up every class and method, and compares each
 * method's live type encoding with the one listed here, modulo what carries no ABI meaning
 * (frame offsets and the type qualifiers r n N o O R V: a Mac reports -[NSObject release],
 * declared oneway void, as "Vv16@0:8"). A real mismatch (NSUInteger for unsigned int, an
 * id where a BOOL returns) stops the backend and prints both, so a first run on a Mac
 * names any wrong guess.
 *
 * On Apple the real SDK headers are used; elsewhere the test double's headers
 * (spec/ane_double/include) declare the same names and signatures. */
#ifndef ANE_BACKEND_ANE_OBJC_H
#define ANE_BACKEND_ANE_OBJC_H

#include <stddef.h>

#include <CoreFoundation/CoreFoundation.h>
#include <IOSurface/IOSurface.h>
#include <objc/message.h>
#include <objc/runtime.h>

#include "../base/status.h"

#if defined(__APPLE__)
/* Exported by libobjc (ARC calls them) but declared only in its private headers. */
void *objc_autoreleasePoolPush(void);
void objc_autoreleasePoolPop(void *pool);
#endif

/* BOOL's type code: 'c' (signed char) on x86-64, 'B' (bool) on arm64 (objc4's <objc/objc.h>:
 * OBJC_BOOL_IS_BOOL); the double stands for the Mac of the architecture it is built for. */
#if defined(__x86_64__)
#define ANE_ENC_BOOL "c"
#else
#define ANE_ENC_BOOL "B"
#endif

/* The classes: X(name, Objective-C class, required). */
#define ANE_OBJC_CLASSES(X)                                      \
    X(Object, "NSObject", 1)                                     \
    X(Descriptor, "_ANEInMemoryModelDescriptor", 1)              \
    X(Model, "_ANEInMemoryModel", 1)                             \
    X(Request, "_ANERequest", 1)                                 \
    X(SurfaceObject, "_ANEIOSurfaceObject", 1)                   \
    X(Client, "_ANEClient", 0)

/* The messages: X(name, class, class method?, selector, return type, (prototype), type
 * encoding without offsets). QoS is a 32-bit unsigned int in every known caller. */
#define ANE_OBJC_MESSAGES(X)                                                                                   \
    X(retain, Object, 0, "retain", id, (id self, SEL cmd), "@@:")                                                \
    X(release, Object, 0, "release", void, (id self, SEL cmd), "v@:")                                            \
    X(descriptor_create, Descriptor, 1, "modelWithMILText:weights:optionsPlist:", id,                            \
      (id cls, SEL cmd, id mil_bytes, id weights, id options), "@@:@@@")                                         \
    X(model_create, Model, 1, "inMemoryModelWithDescriptor:", id, (id cls, SEL cmd, id descriptor), "@@:@")      \
    X(model_identifier, Model, 0, "hexStringIdentifier", id, (id self, SEL cmd), "@@:")                          \
    X(model_compiled_exists, Model, 0, "compiledModelExists", BOOL, (id self, SEL cmd), ANE_ENC_BOOL "@:")       \
    X(model_compile, Model, 0, "compileWithQoS:options:error:", BOOL,                                           \
      (id self, SEL cmd, unsigned int qos, id options, id *error), ANE_ENC_BOOL "@:I@^@")                        \
    X(model_load, Model, 0, "loadWithQoS:options:error:", BOOL,                                                 \
      (id self, SEL cmd, unsigned int qos, id options, id *error), ANE_ENC_BOOL "@:I@^@")                        \
    X(model_evaluate, Model, 0, "evaluateWithQoS:options:request:error:", BOOL,                                 \
      (id self, SEL cmd, unsigned int qos, id options, id request, id *error), ANE_ENC_BOOL "@:I@@^@")           \
    X(model_unload, Model, 0, "unloadWithQoS:error:", BOOL, (id self, SEL cmd, unsigned int qos, id *error),     \
      ANE_ENC_BOOL "@:I^@")                                                                                      \
    X(model_attributes, Model, 0, "modelAttributes", id, (id self, SEL cmd), "@@:")                              \
    X(surface_object_create, SurfaceObject, 1, "objectWithIOSurface:", id, (id cls, SEL cmd, IOSurfaceRef surface),\
      "@@:^{__IOSurface=}")                                                                                      \
    X(request_create, Request, 1,                                                                               \
      "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:", id,        \
      (id cls, SEL cmd, id inputs, id input_indices, id outputs, id output_indices, id weights_buffer,          \
       id perf_stats, id procedure_index),                                                                       \
      "@@:@@@@@@@")

/* The C functions, resolved by name at bind time; their types come from the headers. */
#define ANE_C_FUNCTIONS(X)                                                                                     \
    X(objc_getClass) X(sel_registerName) X(class_getInstanceMethod) X(class_getClassMethod)                    \
    X(method_getTypeEncoding) X(objc_msgSend) X(objc_autoreleasePoolPush) X(objc_autoreleasePoolPop)           \
    X(CFRetain) X(CFRelease) X(CFGetTypeID) X(CFStringGetTypeID) X(CFNumberGetTypeID) X(CFDictionaryGetTypeID)  \
    X(CFArrayGetTypeID) X(CFDataCreate) X(CFStringCreateWithCString) X(CFStringGetCString) X(CFNumberCreate)    \
    X(CFNumberGetValue) X(CFDictionaryCreateMutable) X(CFDictionarySetValue) X(CFDictionaryGetValue)            \
    X(CFArrayCreateMutable) X(CFArrayAppendValue) X(CFArrayGetCount) X(CFArrayGetValueAtIndex)                 \
    X(CFErrorGetCode) X(CFErrorCopyDescription) X(CFErrorCopyUserInfo) X(IOSurfaceCreate)                     \
    X(IOSurfaceGetAllocSize) X(IOSurfaceGetBaseAddress) X(IOSurfaceLock) X(IOSurfaceUnlock)

/* The data symbols (constant objects and callback tables), resolved the same way. */
#define ANE_C_DATA(X)                                                                                          \
    X(kCFTypeDictionaryKeyCallBacks) X(kCFTypeDictionaryValueCallBacks) X(kCFTypeArrayCallBacks)              \
    X(kCFErrorUnderlyingErrorKey) X(kIOSurfaceWidth) X(kIOSurfaceHeight) X(kIOSurfaceBytesPerElement)           \
    X(kIOSurfaceBytesPerRow) X(kIOSurfaceAllocSize) X(kIOSurfacePixelFormat)

/* One typedef per message: ane_msg_<name>_fn. */
#define ANE_OBJC_TYPEDEF(name, cls, class_method, selector, ret, params, encoding) typedef ret(*ane_msg_##name##_fn) params;
ANE_OBJC_MESSAGES(ANE_OBJC_TYPEDEF)
#undef ANE_OBJC_TYPEDEF

enum {
#define ANE_OBJC_CLASS_ENUM(name, objc_name, required) ANE_CLASS_##name,
    ANE_OBJC_CLASSES(ANE_OBJC_CLASS_ENUM)
#undef ANE_OBJC_CLASS_ENUM
    ANE_CLASS_COUNT
};

enum {
#define ANE_OBJC_MESSAGE_ENUM(name, cls, class_method, selector, ret, params, encoding) ANE_MSG_##name,
    ANE_OBJC_MESSAGES(ANE_OBJC_MESSAGE_ENUM)
#undef ANE_OBJC_MESSAGE_ENUM
    ANE_MSG_COUNT
};

/* What the bind step found: the C functions, the data symbols, the classes, selectors. */
typedef struct ane_objc_api {
#define ANE_C_FUNCTION_FIELD(fn) __typeof__(&fn) fn;
    ANE_C_FUNCTIONS(ANE_C_FUNCTION_FIELD)
#undef ANE_C_FUNCTION_FIELD
#define ANE_C_DATA_FIELD(symbol) __typeof__(&symbol) symbol;
    ANE_C_DATA(ANE_C_DATA_FIELD)
#undef ANE_C_DATA_FIELD
    Class classes[ANE_CLASS_COUNT];
    SEL selectors[ANE_MSG_COUNT];
    int is_double;            /* the framework is the test double (it exports anelua_ane_double) */
    char framework[1024];     /* the path opened */
} ane_objc_api;

extern ane_objc_api ane_objc;

/* Sends message `name` through its exact prototype: ANE_SEND(model_load, model, 21, opts, &e),
 * ANE_SEND0(model_identifier, model). Class messages take the class as receiver. */
#define ANE_SEND(name, receiver, ...) \
    (((ane_msg_##name##_fn)ane_objc.objc_msgSend)((receiver), ane_objc.selectors[ANE_MSG_##name], __VA_ARGS__))
#define ANE_SEND0(name, receiver) (((ane_msg_##name##_fn)ane_objc.objc_msgSend)((receiver), ane_objc.selectors[ANE_MSG_##name]))
#define ANE_CLASS(name) ((id)ane_objc.classes[ANE_CLASS_##name])

/* The framework's default path, and the environment variable that overrides it. */
#define ANE_FRAMEWORK_DEFAULT "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine"
#define ANE_FRAMEWORK_ENV "ANELUA_ANE_FRAMEWORK"

/* Opens the framework once and binds everything above; later calls return the first
 * result. On failure the message says what is missing or which encoding differs. */
ane_status ane_objc_bind(ane_error *err);

/* The table's row for message `index` (ANE_MSG_*): its selector, encoding, class. */
void ane_objc_message_info(int index, const char **selector, const char **encoding, const char **class_name,
                           int *class_method);

/* An encoding reduced to what the ABI depends on: frame offsets and type qualifiers
 * dropped, "Vv16@0:8" -> "v@:", "r^{__IOSurface=}" -> "^{__IOSurface=}". */
void ane_objc_abi_encoding(const char *encoding, char *out, size_t size);

/* One line per message: selector, expected encoding, live encoding (after a bind). */
void ane_objc_encoding_report(void (*line)(void *context, const char *text), void *context);

#endif
