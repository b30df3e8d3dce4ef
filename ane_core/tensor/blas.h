/* The one place that picks the BLAS: Accelerate on macOS, OpenBLAS's cblas elsewhere. */
#ifndef ANE_TENSOR_BLAS_H
#define ANE_TENSOR_BLAS_H

#if defined(__APPLE__)
#define ACCELERATE_NEW_LAPACK 1
#include <Accelerate/Accelerate.h>
#else
#include <cblas.h>
#endif

#endif
