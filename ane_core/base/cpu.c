/* CPU features (cpu.h). */
#include "cpu.h"

#include <pthread.h>

static int f16c, avx2_fma_f16c;
static pthread_once_t asked = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
#include <cpuid.h>

/* CPUID leaf 1: ECX bit 12 = FMA, 27 = OSXSAVE, 28 = AVX, 29 = F16C; leaf 7: EBX bit 5 = AVX2;
 * XCR0 bits 1 and 2: the OS saves SSE and AVX state. (clang 14's __builtin_cpu_supports
 * does not know "f16c".) */
static void ask(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    const unsigned int avx_f16c = (1u << 27) | (1u << 28) | (1u << 29);
    if ((c & avx_f16c) != avx_f16c) return;
    unsigned int xcr0_low, xcr0_high;
    __asm__ volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
    (void)xcr0_high;
    if ((xcr0_low & 6u) != 6u) return;
    f16c = 1;
    int fma = (c & (1u << 12)) != 0;
    avx2_fma_f16c = fma && __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 5));
}
#else
static void ask(void) {}
#endif

int ane_cpu_has_f16c(void) {
    pthread_once(&asked, ask);
    return f16c;
}

int ane_cpu_has_avx2_fma_f16c(void) {
    pthread_once(&asked, ask);
    return avx2_fma_f16c;
}
