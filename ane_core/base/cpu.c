/* CPU features (cpu.h). */
#include "cpu.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static int f16c, avx2_fma_f16c, avx512f, avx512_bf16, avx512_skylake, avx512_vnni;
static int neon, neon_dotprod, neon_fp16, neon_i8mm;
static pthread_once_t asked = PTHREAD_ONCE_INIT;

#if defined(__x86_64__)
#include <cpuid.h>

/* CPUID leaf 1: ECX bit 12 = FMA, 27 = OSXSAVE, 28 = AVX, 29 = F16C; leaf 7: EBX bit 5 = AVX2;
 * XCR0 bits 1 and 2: the OS saves SSE and AVX state. (clang 14's __builtin_cpu_supports
 * does not know "f16c".) */
static void ask_cpu(void) {
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
    /* leaf 7 EBX bit 16 = AVX-512F; XCR0 bits 5-7: the OS saves the opmask and ZMM state */
    avx512f = avx2_fma_f16c && (b & (1u << 16)) && (xcr0_low & 0xE0u) == 0xE0u;
    /* EBX bits 17 = DQ, 28 = CD, 30 = BW, 31 = VL */
    const unsigned int skylake = (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
    avx512_skylake = avx512f && (b & skylake) == skylake;
    /* ECX bit 11 = AVX512_VNNI; the integer kernels also use BW's byte shuffles */
    avx512_vnni = avx512f && (b & (1u << 30)) && (c & (1u << 11));
    /* leaf 7 subleaf 1 EAX bit 5 = AVX512_BF16 (bf16 pair dot products); with BW's word permutes */
    unsigned int max_subleaf = a;
    avx512_bf16 = avx512f && (b & (1u << 30)) && max_subleaf >= 1 && __get_cpuid_count(7, 1, &a, &b, &c, &d) &&
                  (a & (1u << 5));
}
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>

static int feature(const char *name) { /* hw.optional.arm.FEAT_*: 1 where the CPU has it */
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname(name, &value, &size, NULL, 0) == 0 && value == 1;
}

static void ask_cpu(void) {
    neon = 1;
    neon_dotprod = feature("hw.optional.arm.FEAT_DotProd");
    neon_fp16 = feature("hw.optional.arm.FEAT_FP16");
    neon_i8mm = feature("hw.optional.arm.FEAT_I8MM");
}
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>

/* The kernel's hwcaps (arch/arm64/include/uapi/asm/hwcap.h): AT_HWCAP bit 1 = ASIMD,
 * 10 = ASIMDHP (FEAT_FP16 for vectors), 20 = ASIMDDP; AT_HWCAP2 bit 13 = I8MM. */
static void ask_cpu(void) {
    unsigned long caps = getauxval(AT_HWCAP), caps2 = getauxval(AT_HWCAP2);
    neon = (caps & (1ul << 1)) != 0;
    neon_fp16 = neon && (caps & (1ul << 10));
    neon_dotprod = neon && (caps & (1ul << 20));
    neon_i8mm = neon && (caps2 & (1ul << 13));
}
#else
static void ask_cpu(void) {}
#endif

/* ANELUA_CPU=avx2, neon or scalar turns the newer instruction sets off (the specs check every
 * kernel level on one machine that way). */
static void ask(void) {
    ask_cpu();
    const char *cap = getenv("ANELUA_CPU");
    if (cap && (strcmp(cap, "avx2") == 0 || strcmp(cap, "neon") == 0))
        avx512f = avx512_bf16 = avx512_vnni = neon_dotprod = neon_fp16 = neon_i8mm = 0;
    if (cap && strcmp(cap, "scalar") == 0)
        f16c = avx2_fma_f16c = avx512f = avx512_bf16 = avx512_vnni = neon = neon_dotprod = neon_fp16 = neon_i8mm = 0;
}

int ane_cpu_has_f16c(void) {
    pthread_once(&asked, ask);
    return f16c;
}

int ane_cpu_has_avx2_fma_f16c(void) {
    pthread_once(&asked, ask);
    return avx2_fma_f16c;
}

int ane_cpu_has_avx512_skylake(void) {
    pthread_once(&asked, ask);
    return avx512_skylake;
}

int ane_cpu_has_avx512f(void) {
    pthread_once(&asked, ask);
    return avx512f;
}

int ane_cpu_has_avx512_bf16(void) {
    pthread_once(&asked, ask);
    return avx512_bf16;
}

int ane_cpu_has_avx512_vnni(void) {
    pthread_once(&asked, ask);
    return avx512_vnni;
}

int ane_cpu_has_neon(void) {
    pthread_once(&asked, ask);
    return neon;
}

int ane_cpu_has_neon_dotprod(void) {
    pthread_once(&asked, ask);
    return neon_dotprod;
}

int ane_cpu_has_neon_fp16(void) {
    pthread_once(&asked, ask);
    return neon_fp16;
}

int ane_cpu_has_neon_i8mm(void) {
    pthread_once(&asked, ask);
    return neon_i8mm;
}
