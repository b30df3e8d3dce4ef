/* backend/ane_objc.c: the bind step compares encodings modulo what carries no ABI meaning.
 * The live encodings below are the shapes a Mac reports (objc4's NSObject.h declares
 * release oneway; class dumps of AppleNeuralEngine, spec/ane_double/mac_methods.c). */
#include <stdio.h>
#include <string.h>

#include "ane_core/backend/ane_objc.h"

static int failures;

static void expect_abi(const char *live, const char *want) {
    char got[128];
    ane_objc_abi_encoding(live, got, sizeof got);
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "FAIL: '%s' reduced to '%s', expected '%s'\n", live, got, want);
        failures++;
    }
}

int main(void) {
    expect_abi("Vv16@0:8", "v@:");                           /* -[NSObject release]: oneway void */
    expect_abi("@16@0:8", "@@:");                            /* retain */
    expect_abi("B36@0:8I16@20^@28", "B@:I@^@");               /* compileWithQoS:options:error: on arm64 */
    expect_abi("c36@0:8I16@20^@28", "c@:I@^@");               /* ... on x86-64 (BOOL is signed char) */
    expect_abi("@24@0:8^{__IOSurface=}16", "@@:^{__IOSurface=}");
    expect_abi("@24@0:8r^{__IOSurface=}16", "@@:^{__IOSurface=}"); /* const pointer: 'r' dropped */
    expect_abi("v32@0:8@\"NSData\"16o^@24", "v@:@^@");       /* a class name and an out qualifier */
    expect_abi("v24@0:8@?16", "v@:@?");                       /* a block stays a block */
    expect_abi("v40@0:8{CGPoint=dd}16", "v@:{CGPoint=dd}");   /* a struct's fields are ABI */
    expect_abi("v20@0:8[4i]16", "v@:[4i]");                    /* an array keeps its count */
    expect_abi("", "");
    expect_abi(NULL, "");
    /* real mismatches stay mismatches */
    char a[64], b[64];
    ane_objc_abi_encoding("B40@0:8Q16@24^@32", a, sizeof a);
    ane_objc_abi_encoding("B36@0:8I16@20^@28", b, sizeof b);
    if (!strcmp(a, b)) fprintf(stderr, "FAIL: an NSUInteger QoS reads as an unsigned int\n"), failures++;
    ane_objc_abi_encoding("@36@0:8I16@20^@28", a, sizeof a);
    if (!strcmp(a, b)) fprintf(stderr, "FAIL: an id return reads as a BOOL\n"), failures++;
    /* a short buffer is cut, never overrun */
    char tiny[4];
    ane_objc_abi_encoding("B36@0:8I16@20^@28", tiny, sizeof tiny);
    if (strcmp(tiny, "B@:")) fprintf(stderr, "FAIL: a 4-byte buffer holds '%s'\n", tiny), failures++;
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures != 0;
}
