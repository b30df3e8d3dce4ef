/* The BLAS's own choices (blas.h), checked against the CPU. */
#include "blas.h"

#include <string.h>

#if !defined(__APPLE__)
/* OpenBLAS's pthreads build exports it (its fork handler calls it); weak: absent in others */
extern int blas_thread_shutdown_(void) __attribute__((weak));
#endif

#include "../base/cpu.h"

const char *ane_blas_kernels(void) {
#if defined(__APPLE__)
    return "Accelerate";
#else
    return openblas_get_corename();
#endif
}

/* OpenBLAS's DYNAMIC_ARCH build picks its kernels from the CPU's model number when it loads;
 * a model it does not know gets the generic Prescott (SSE3) kernels. Debian's 0.3.21 does
 * that to the unnamed "Intel Xeon Processor" of some virtual machines, which has AVX-512:
 * sgemm ran at 19.5 GFLOPS there, 73 with the SkylakeX kernels. */
const char *ane_blas_better_kernels(void) {
#if defined(__APPLE__)
    return NULL;
#else
    if (strcmp(ane_blas_kernels(), "Prescott") != 0) return NULL;
    if (ane_cpu_has_avx512_skylake()) return "SkylakeX";
    if (ane_cpu_has_avx2_fma_f16c()) return "Haswell";
    return NULL;
#endif
}

void ane_blas_rest_threads(void) {
#if !defined(__APPLE__)
    if (blas_thread_shutdown_) blas_thread_shutdown_();
#endif
}
