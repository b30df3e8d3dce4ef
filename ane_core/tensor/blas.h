/* The one place that picks the BLAS: Accelerate on macOS, OpenBLAS's cblas elsewhere. */
#ifndef ANE_TENSOR_BLAS_H
#define ANE_TENSOR_BLAS_H

#if defined(__APPLE__)
#define ACCELERATE_NEW_LAPACK 1
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

/* The kernels the BLAS runs ("SkylakeX", "Haswell", ... for OpenBLAS; "Accelerate"). */
const char *ane_blas_kernels(void);
/* The OpenBLAS kernel set (for OPENBLAS_CORETYPE, read when OpenBLAS loads) this CPU runs
 * when OpenBLAS fell back to its generic one; NULL when its choice stands. */
const char *ane_blas_better_kernels(void);
/* Puts OpenBLAS's threads to rest before the process's first BLAS call: it starts them when
 * it loads and they poll for work (sched_yield) for about a tenth of a second before they
 * sleep, taking a core from start-up and decoding, which call no BLAS, on a 2-core machine.
 * The next multi-threaded call starts them again. Call it only while no thread is inside the
 * BLAS (the module's opening); a no-op for other BLAS libraries. */
void ane_blas_rest_threads(void);

#endif
