/* The double's own facts about the methods it registers: each row is the type encoding a Mac
 * reports for the method (method_getTypeEncoding, offsets and qualifiers included), written
 * out by hand from a source that saw a real framework, never derived from anelua's boundary
 * table (ane_core/backend/ane_objc.h). The backend's bind step is checked against these rows,
 * so a wrong guess in the backend's table shows here, on Linux, before a Mac sees it.
 *
 * How a row is read off its source: a class dump prints the runtime's encoding back as a
 * declaration; the encoding is the return type, the frame size, then each argument (self,
 * _cmd, ...) with its offset. On LP64 (arm64 and x86-64 alike) an id, SEL or pointer takes 8
 * bytes and an unsigned int 4. BOOL is 'B' on arm64 and 'c' on x86-64 (objc4's
 * <objc/objc.h>, OBJC_BOOL_IS_BOOL), so each row carries both.
 *
 * Sources:
 *  [objc4]  apple-oss-distributions/objc4, runtime/NSObject.h: "- (oneway void)release",
 *           "- (instancetype)retain"; oneway is the qualifier 'V' (runtime.h's type codes).
 *  [dump]   a class dump of AppleNeuralEngine.framework (akariicafe/Runtime-Headers,
 *           16.4.1/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/
 *           AppleNeuralEngine/_ANEInMemoryModel.h, _ANEInMemoryModelDescriptor.h,
 *           _ANERequest.h, _ANEIOSurfaceObject.h), e.g. "- (BOOL)compileWithQoS:(unsigned
 *           int)a0 options:(id)a1 error:(id *)a2;", "+ (id)objectWithIOSurface:(struct
 *           __IOSurface { } *)a0;".
 *  [orion]  mechramc/Orion core/ane_runtime.m: the prototypes it casts objc_msgSend to on a
 *           device (BOOL(*)(id,SEL,unsigned int,id,NSError**) for compile and load, ...).
 */
#include <string.h>

#include "double.h"

typedef struct mac_method {
    const char *class_name;
    int class_method;
    const char *selector;
    const char *arm64, *x86_64; /* the live encoding on each architecture */
    const char *source;
} mac_method;

static const mac_method mac_methods[] = {
    {"NSObject", 0, "retain", "@16@0:8", "@16@0:8", "objc4"},
    {"NSObject", 0, "release", "Vv16@0:8", "Vv16@0:8", "objc4"},
    {"NSObject", 0, "autorelease", "@16@0:8", "@16@0:8", "objc4"},
    {"_ANEInMemoryModelDescriptor", 1, "modelWithMILText:weights:optionsPlist:", "@40@0:8@16@24@32", "@40@0:8@16@24@32",
     "dump, orion"},
    {"_ANEInMemoryModel", 1, "inMemoryModelWithDescriptor:", "@24@0:8@16", "@24@0:8@16", "dump, orion"},
    {"_ANEInMemoryModel", 0, "hexStringIdentifier", "@16@0:8", "@16@0:8", "dump (a readonly copy property)"},
    {"_ANEInMemoryModel", 0, "compiledModelExists", "B16@0:8", "c16@0:8", "dump"},
    {"_ANEInMemoryModel", 0, "compileWithQoS:options:error:", "B36@0:8I16@20^@28", "c36@0:8I16@20^@28", "dump, orion"},
    {"_ANEInMemoryModel", 0, "loadWithQoS:options:error:", "B36@0:8I16@20^@28", "c36@0:8I16@20^@28", "dump, orion"},
    {"_ANEInMemoryModel", 0, "evaluateWithQoS:options:request:error:", "B44@0:8I16@20@28^@36", "c44@0:8I16@20@28^@36",
     "dump, orion"},
    {"_ANEInMemoryModel", 0, "unloadWithQoS:error:", "B28@0:8I16^@20", "c28@0:8I16^@20", "dump, orion"},
    {"_ANEInMemoryModel", 0, "modelAttributes", "@16@0:8", "@16@0:8", "dump (a retain property)"},
    {"_ANEIOSurfaceObject", 1, "objectWithIOSurface:", "@24@0:8^{__IOSurface=}16", "@24@0:8^{__IOSurface=}16",
     "dump, orion"},
    {"_ANERequest", 1, "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
     "@72@0:8@16@24@32@40@48@56@64", "@72@0:8@16@24@32@40@48@56@64", "dump, orion"},
    {"_ANEClient", 1, "sharedConnection", "@16@0:8", "@16@0:8", "dump (_ANEClient.h)"},
};

/* A deliberately wrong row (ANE_DOUBLE_MODE=encoding-mismatch): the QoS as an NSUInteger,
 * which the backend must refuse rather than send. */
static const mac_method wrong_compile = {"_ANEInMemoryModel", 0, "compileWithQoS:options:error:", "B40@0:8Q16@24^@32",
                                         "c40@0:8Q16@24^@32", "a wrong guess, on purpose"};

const char *double_mac_encoding(const char *class_name, int class_method, const char *selector, int wrong) {
    const mac_method *row = NULL;
    for (size_t i = 0; i < sizeof mac_methods / sizeof mac_methods[0] && !row; i++)
        if (!strcmp(mac_methods[i].class_name, class_name) && mac_methods[i].class_method == class_method &&
            !strcmp(mac_methods[i].selector, selector))
            row = &mac_methods[i];
    if (wrong && row && !strcmp(selector, wrong_compile.selector)) row = &wrong_compile;
    if (!row) return NULL;
#if defined(__x86_64__)
    return row->x86_64;
#else
    return row->arm64;
#endif
}
