/* The kernel table (kernels.h), built once per process from the scalar level up through every
 * instruction set the CPU has (base/cpu.h, capped by ANELUA_CPU). */
#include "kernels.h"

#include <pthread.h>
#include <stdio.h>

#include "../base/cpu.h"

static ane_kernel_table table;
static char level[64];
static pthread_once_t built = PTHREAD_ONCE_INIT;

static void build(void) {
    ane_kernels_scalar(&table);
    const char *name = "scalar";
#if defined(__x86_64__)
    if (ane_cpu_has_f16c()) ane_kernels_x86_avx(&table), name = "avx";
    if (ane_cpu_has_avx2_fma_f16c()) ane_kernels_x86_avx2(&table), name = "avx2";
    if (ane_cpu_has_avx512f()) ane_kernels_x86_avx512(&table), name = "avx512";
    int vnni = ane_cpu_has_avx512_vnni(), bf16 = ane_cpu_has_avx512_bf16();
    if (vnni) ane_kernels_x86_avx512_vnni(&table);
    if (bf16) ane_kernels_x86_avx512_bf16(&table);
    snprintf(level, sizeof level, "%s%s%s", name, vnni ? "-vnni" : "", bf16 ? "-bf16" : "");
#elif defined(__aarch64__)
    if (ane_cpu_has_neon()) ane_kernels_arm_neon(&table), name = "neon";
    if (ane_cpu_has_neon_dotprod()) ane_kernels_arm_dotprod(&table), name = "neon-dotprod";
    snprintf(level, sizeof level, "%s", name);
#else
    snprintf(level, sizeof level, "%s", name);
#endif
    table.level = level;
}

const ane_kernel_table *ane_kernels(void) {
    pthread_once(&built, build);
    return &table;
}
