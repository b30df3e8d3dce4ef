/* The double's own test: each misuse of the API that a Mac answers with a crash (or that the
 * backend must never rely on) is caught by the double as a violation naming the selector or
 * rule, so the double cannot silently accept what a Mac would not. Run with the double's
 * path as the only argument; violations are recorded (ANE_DOUBLE_ON_VIOLATION=record)
 * instead of aborting. Messages go through the backend's own boundary (ane_objc.h). */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "../../ane_core/backend/ane_objc.h"
#include "../c/check.h"

static int (*violations)(char *last, size_t size);
static int seen;

/* Whether exactly one new violation happened and its text contains `needle`. */
static int violated(const char *needle) {
    char last[512];
    int now = violations(last, sizeof last);
    int ok = now == seen + 1 && strstr(last, needle) != NULL;
    if (!ok) fprintf(stderr, "  expected one violation naming '%s'; %d new, last: %s\n", needle, now - seen, last);
    seen = now;
    return ok;
}

static int no_violation(void) {
    int now = violations(NULL, 0);
    int ok = now == seen;
    seen = now;
    return ok;
}

static CFMutableDictionaryRef empty_dictionary(void) {
    return ane_objc.CFDictionaryCreateMutable(NULL, 0, ane_objc.kCFTypeDictionaryKeyCallBacks,
                                              ane_objc.kCFTypeDictionaryValueCallBacks);
}

static const char mil[] = "program(1.3)\n[buildInfo = dict<string, string>({})]\n{\n"
                          "  func main<ios18>(tensor<fp16, [1, 64, 1, 32]> x) {\n"
                          "    tensor<fp16, [1, 64, 1, 32]> y = relu(x = x)[name = string(\"y\")];\n"
                          "  } -> (y);\n}\n";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: test_double PATH-TO-THE-DOUBLE\n");
        return 2;
    }
    setenv("ANE_DOUBLE_ON_VIOLATION", "record", 1);
    setenv(ANE_FRAMEWORK_ENV, argv[1], 1);
    ane_error err;
    CHECK(ane_objc_bind(&err) == ANE_OK, "bind: %s", err.message);
    if (checks_failed) return check_summary("test_double");
    violations = (int (*)(char *, size_t))dlsym(dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD), "anelua_ane_double_violations");
    CHECK(violations != NULL, "the double exports anelua_ane_double_violations");
    if (!violations) return check_summary("test_double");
    seen = violations(NULL, 0);

    /* autorelease with no pool in place (OBJC_DEBUG_MISSING_POOLS) */
    CFDataRef bytes = ane_objc.CFDataCreate(NULL, (const uint8_t *)mil, (CFIndex)strlen(mil));
    CFMutableDictionaryRef weights = empty_dictionary();
    ANE_SEND(descriptor_create, ANE_CLASS(Descriptor), (id)bytes, (id)weights, (id)NULL);
    CHECK(violated("no pool in place"), "an autorelease without a pool is a violation");

    void *pool = ane_objc.objc_autoreleasePoolPush();
    /* ANE-09: the MIL as a string object */
    CFStringRef text = ane_objc.CFStringCreateWithCString(NULL, mil, kCFStringEncodingUTF8);
    ANE_SEND(descriptor_create, ANE_CLASS(Descriptor), (id)text, (id)weights, (id)NULL);
    CHECK(violated("ANE-09"), "MIL as NSString is a violation naming ANE-09");
    /* ANE-11: a nil weights dictionary */
    ANE_SEND(descriptor_create, ANE_CLASS(Descriptor), (id)bytes, (id)NULL, (id)NULL);
    CHECK(violated("ANE-11"), "a nil weights dictionary is a violation naming ANE-11");
    /* the right call: no violation */
    id descriptor = ANE_SEND(descriptor_create, ANE_CLASS(Descriptor), (id)bytes, (id)weights, (id)NULL);
    id model = ANE_SEND(model_create, ANE_CLASS(Model), descriptor);
    CHECK(descriptor && model && no_violation(), "a proper descriptor and model raise nothing");

    /* evaluate before load */
    CFMutableArrayRef none = ane_objc.CFArrayCreateMutable(NULL, 0, ane_objc.kCFTypeArrayCallBacks);
    CFNumberRef zero = ane_objc.CFNumberCreate(NULL, kCFNumberSInt64Type, &(int64_t){0});
    id request = ANE_SEND(request_create, ANE_CLASS(Request), (id)none, (id)none, (id)none, (id)none, (id)NULL, (id)NULL,
                          (id)zero);
    CHECK(request && no_violation(), "an empty request is well formed");
    id error = NULL;
    ANE_SEND(model_evaluate, model, 21u, (id)weights, request, &error);
    CHECK(violated("not loaded"), "evaluate before load is a violation");

    /* surfaces passed where index arrays belong */
    CFMutableDictionaryRef properties = empty_dictionary();
    const CFStringRef keys[] = {*ane_objc.kIOSurfaceWidth, *ane_objc.kIOSurfaceHeight, *ane_objc.kIOSurfaceBytesPerElement};
    const int64_t values[] = {65536, 1, 1};
    for (int i = 0; i < 3; i++) {
        CFNumberRef n = ane_objc.CFNumberCreate(NULL, kCFNumberSInt64Type, &values[i]);
        ane_objc.CFDictionarySetValue(properties, keys[i], n);
        ane_objc.CFRelease(n);
    }
    IOSurfaceRef surface = ane_objc.IOSurfaceCreate(properties);
    CHECK(surface && ane_objc.IOSurfaceGetAllocSize(surface) == 65536, "a 64 KiB surface");
    id wrapped = ANE_SEND(surface_object_create, ANE_CLASS(SurfaceObject), surface);
    CFMutableArrayRef surfaces = ane_objc.CFArrayCreateMutable(NULL, 0, ane_objc.kCFTypeArrayCallBacks);
    ane_objc.CFArrayAppendValue(surfaces, wrapped);
    ANE_SEND(request_create, ANE_CLASS(Request), (id)surfaces, (id)surfaces, (id)none, (id)none, (id)NULL, (id)NULL, (id)zero);
    CHECK(violated("index arrays"), "surface objects as an index array are a violation");
    /* an IOSurface where an _ANEIOSurfaceObject belongs */
    CFMutableArrayRef raw = ane_objc.CFArrayCreateMutable(NULL, 0, ane_objc.kCFTypeArrayCallBacks);
    ane_objc.CFArrayAppendValue(raw, surface);
    CFMutableArrayRef index = ane_objc.CFArrayCreateMutable(NULL, 0, ane_objc.kCFTypeArrayCallBacks);
    ane_objc.CFArrayAppendValue(index, zero);
    ANE_SEND(request_create, ANE_CLASS(Request), (id)raw, (id)index, (id)none, (id)none, (id)NULL, (id)NULL, (id)zero);
    CHECK(violated("_ANEIOSurfaceObject"), "a bare IOSurface in the inputs is a violation");

    /* an unknown selector */
    ((void (*)(id, SEL))ane_objc.objc_msgSend)(model, ane_objc.sel_registerName("compileNow"));
    CHECK(violated("unrecognized selector sent to instance: -[_ANEInMemoryModel compileNow]"),
          "an unknown selector is a violation naming it");

    ane_objc.objc_autoreleasePoolPop(pool);

    /* a message to a freed object, and an over-release */
    CFDataRef doomed = ane_objc.CFDataCreate(NULL, (const uint8_t *)"x", 1);
    ane_objc.CFRelease(doomed);
    ANE_SEND0(retain, (id)doomed);
    CHECK(violated("message 'retain' sent to a freed NSData"), "a message to a freed object is a violation naming its class");
    ane_objc.CFRelease(doomed);
    CHECK(violated("release of a freed NSData"), "an over-release is a violation");
    /* popping a pool that is not open */
    ane_objc.objc_autoreleasePoolPop(pool);
    CHECK(violated("not open"), "popping a closed pool is a violation");
    /* unbalanced surface locks */
    ane_objc.IOSurfaceUnlock(surface, 0, NULL);
    CHECK(violated("not locked"), "an unlock without a lock is a violation");

    ane_objc.CFRelease(surface);
    ane_objc.CFRelease(properties);
    ane_objc.CFRelease(surfaces);
    ane_objc.CFRelease(raw);
    ane_objc.CFRelease(index);
    ane_objc.CFRelease(none);
    ane_objc.CFRelease(zero);
    ane_objc.CFRelease(text);
    ane_objc.CFRelease(bytes);
    ane_objc.CFRelease(weights);
    CHECK(no_violation(), "releasing what one owns raises nothing");
    return check_summary("test_double");
}
