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

/* The larger of a running worst error and a new one, where a NaN error wins (fmax would drop
 * it, and a check of `worst <= bound` would pass). Also what gcc 12's aarch64 vectorizer
 * compiles: it crashes on some fmax reductions of doubles. */
static inline double worse_error(double worst, double error) { return error <= worst ? worst : error; }

#endif
