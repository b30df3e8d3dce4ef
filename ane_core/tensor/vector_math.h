/* Elementwise e^x, tanh, sigmoid and SiLU over float arrays, eight lanes at a time where the
 * CPU has AVX2 and FMA (libm's tanhf took ~24 ns an element: a GPT-2 decode step spent 6% of
 * its time in the GELU's tanh). Every path computes the same steps in the same order with
 * fused multiply-adds, so the results are the same bits on every CPU: e^x within 1.5 ulp of
 * the true value, tanh, sigmoid and SiLU within 4.5 (spec/c/test_vector_math.c has each
 * one's error budget). out may equal x. NaN gives NaN. */
#ifndef ANE_TENSOR_VECTOR_MATH_H
#define ANE_TENSOR_VECTOR_MATH_H

#include <stdint.h>

void ane_exp_n(float *out, const float *x, int64_t n);     /* e^x; 0 below -104 (under 2^-150) */
void ane_tanh_n(float *out, const float *x, int64_t n);    /* tanh x */
void ane_sigmoid_n(float *out, const float *x, int64_t n); /* 1 / (1 + e^-x) */
void ane_silu_n(float *out, const float *x, int64_t n);    /* x / (1 + e^-x) */

/* out[i] = e^(x[i] - shift) for i < n, and their sum (a softmax row's numerators). */
float ane_exp_shifted_sum_n(float *out, const float *x, float shift, int64_t n);

/* The sum and the maximum of x [n] (NaN when any element is NaN; -inf and 0 when n is 0),
 * accumulated in eight partial results (elements 0 .. 7 start partials 0 .. 7, later elements
 * of the whole eights go into partial i % 8, those after the last whole eight into partial 0),
 * then the partials combined in order: the same bits on every path, and no single chain of
 * dependent adds. */
float ane_sum_n(const float *x, int64_t n);
float ane_max_n(const float *x, int64_t n);

#endif
