/* The constants of e^x and tanh (vector_math.h) every kernel level shares (kernels_scalar.c
 * explains the method). */
#ifndef ANE_TENSOR_VECTOR_MATH_CONSTANTS_H
#define ANE_TENSOR_VECTOR_MATH_CONSTANTS_H

#define LOG2_E 1.44269504088896341f
#define LN2_HIGH 0.693145751953125f         /* ln 2 to 15 bits */
#define LN2_LOW 1.42860682030941723212e-6f  /* ln 2 - LN2_HIGH */
#define EXP_LOWEST (-104.0f)                /* e^-104 < 2^-150: 0 in fp32 */
#define EXP_HIGHEST 88.8f                   /* e^88.8 > FLT_MAX: infinity */
#define TANH_SATURATES 9.0f                 /* 1 - tanh 9 < 2^-25: tanh rounds to 1 */

/* 1/k! for k = 8 .. 2, the coefficients of (e^r - 1 - r) / r^2 from its highest power */
static const float TAYLOR[7] = { 1.0f / 40320, 1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f };

#endif
