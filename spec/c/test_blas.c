/* tensor/blas.c against base/cpu.c: the BLAS names its kernels, and the better set it asks
 * for is exactly the documented one: none unless OpenBLAS fell back to its generic Prescott
 * kernels, then SkylakeX on a CPU with Skylake-SP's AVX-512, Haswell on one with AVX2 + FMA,
 * none on older ones. (The host's re-exec that applies it: host_spec.) */
#include <stdio.h>
#include <string.h>

#include "ane_core/base/cpu.h"
#include "ane_core/tensor/blas.h"
#include "check.h"

int main(void) {
    const char *kernels = ane_blas_kernels(), *better = ane_blas_better_kernels();
    CHECK(kernels && kernels[0], "the BLAS names its kernels");
    const char *expected = NULL;
    if (strcmp(kernels, "Prescott") == 0)
        expected = ane_cpu_has_avx512_skylake() ? "SkylakeX" : ane_cpu_has_avx2_fma_f16c() ? "Haswell" : NULL;
    CHECK((better == NULL && expected == NULL) || (better && expected && strcmp(better, expected) == 0),
          "kernels %s: better %s, expected %s", kernels, better ? better : "(none)", expected ? expected : "(none)");
    printf("blas: kernels %s, better %s\n", kernels, better ? better : "(none)");
    return check_summary("blas");
}
