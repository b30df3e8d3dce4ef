/* A tiny check harness for the C tests: CHECK records a failure with its location and
 * keeps going; check_summary() prints the counts and gives the exit status. */
#ifndef ANE_SPEC_CHECK_H
#define ANE_SPEC_CHECK_H

#include <stdio.h>

static int checks_passed = 0, checks_failed = 0;

#define CHECK(condition, ...)                                                   \
    do {                                                                        \
        if (condition) {                                                        \
            checks_passed++;                                                    \
        } else {                                                                \
            checks_failed++;                                                    \
            if (checks_failed <= 20) {                                          \
                fprintf(stderr, "%s:%d: check failed: ", __FILE__, __LINE__);   \
                fprintf(stderr, __VA_ARGS__);                                   \
                fputc('\n', stderr);                                            \
            }                                                                   \
        }                                                                       \
    } while (0)

static int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, checks_passed, checks_failed);
    return checks_failed ? 1 : 0;
}

#endif
