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

#endif
