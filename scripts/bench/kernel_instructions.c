/* A driver for scripts/bench/kernel_instructions.sh: runs one kernel of the kernel table
 * (ane_core/tensor/kernels.h) `calls` times on a decode-sized input, at the scalar level or at
 * the CPU's own, and prints the elements one call covers. Run twice under qemu's instruction
 * trace (calls = 0 and calls = N), the difference of the two counts over N x elements is the
 * kernel's instructions per element: everything else the process does is the same in both.
 *   kernel_instructions KERNEL scalar|native CALLS
 * KERNELS: gemv_fp16 gemv_fp32 gemv_int8 gemv_lut4 vecmat_fp16 q8_int8 q8_lut4 q16_lut4 exp tanh
 *          adamw lut4_decode transpose */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/fp16.h"
#include "ane_core/tensor/gemv.h"
#include "ane_core/tensor/kernels.h"

enum { ROWS = 4, K = 1024 }; /* four rows of a Stories110M-sized row length (768 there; 1024 in Qwen3-0.6B) */

static uint32_t state = 1;
static float uniform(void) {
    state = state * 1664525u + 1013904223u;
    return (float)((double)(state >> 8) / (1 << 23) - 1.0);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s KERNEL scalar|native CALLS\n", argv[0]);
        return 2;
    }
    const char *kernel = argv[1];
    static ane_kernel_table scalar;
    ane_kernels_scalar(&scalar);
    const ane_kernel_table *t = strcmp(argv[2], "scalar") == 0 ? &scalar : ane_kernels();
    long calls = atol(argv[3]);

    float *w = malloc(sizeof(float) * ROWS * K), *x = malloc(sizeof(float) * K), *y = malloc(sizeof(float) * 2 * K);
    float *palettes = malloc(sizeof(float) * ROWS * 16), *split = malloc(sizeof(float) * K), scales[ROWS];
    uint16_t *w16 = malloc(2 * ROWS * K);
    int8_t *q = malloc(ROWS * K);
    uint8_t *packed = malloc(ROWS * K / 2);
    for (int i = 0; i < ROWS * K; i++) w[i] = uniform(), w16[i] = ane_fp32_to_fp16(w[i]), q[i] = (int8_t)(uniform() * 127);
    for (int i = 0; i < ROWS * K / 2; i++) packed[i] = (uint8_t)(uniform() * 128 + 128);
    for (int i = 0; i < ROWS * 16; i++) palettes[i] = uniform();
    for (int i = 0; i < K; i++) x[i] = uniform();
    for (int r = 0; r < ROWS; r++) scales[r] = 0.01f;

    /* integer activations: x's codes and the palettes' integer entries, prepared outside the count */
    ane_activations activations = strcmp(kernel, "q16_lut4") == 0 ? ANE_ACTIVATIONS_INT16 : ANE_ACTIVATIONS_INT8;
    int lut4 = strstr(kernel, "lut4") != NULL;
    code_vector codes;
    void *code_memory = malloc(code_vector_bytes(K, activations));
    quantize_codes_with(t, &codes, code_memory, x, 1, K, activations, lut4);
    char *palette_codes = malloc(ane_palette_codes_stride(activations) * ROWS);
    for (int r = 0; r < ROWS; r++) {
        if (activations == ANE_ACTIVATIONS_INT8) t->palette8((palette8 *)palette_codes + r, palettes + 16 * r);
        else t->palette16((palette16 *)palette_codes + r, palettes + 16 * r);
    }
    float m[K], v[K];
    memset(m, 0, sizeof m), memset(v, 0, sizeof v);
    adamw_constants constants = {0.9f, 0.999f, 1e-3f, 1e-8f, 0.01f, 10.0f, 1000.0f, 1.0f};
    uint32_t *tile_in = malloc(4 * 64 * 64), *tile_out = malloc(4 * 64 * 64);
    memcpy(tile_in, w, 4 * 64 * 64);
    transpose_job transpose = {tile_out, tile_in, 64, 64, 64};

    long elements = 0;
    for (long call = 0; call <= calls; call++) { /* call == calls: only the element count */
        int count = call < calls;
        if (strncmp(kernel, "gemv_", 5) == 0) {
            elements = ROWS * K;
            kernel_weights weights = strcmp(kernel, "gemv_fp16") == 0   ? WEIGHTS_FP16
                                     : strcmp(kernel, "gemv_fp32") == 0 ? WEIGHTS_FP32
                                     : strcmp(kernel, "gemv_int8") == 0 ? WEIGHTS_INT8
                                                                        : WEIGHTS_LUT4;
            const void *data = weights == WEIGHTS_FP16 ? (const void *)w16 : weights == WEIGHTS_FP32 ? (const void *)w
                             : weights == WEIGHTS_INT8 ? (const void *)q : (const void *)packed;
            gemv_job job = {y, data, x, K, K, weights == WEIGHTS_INT8 ? scales : palettes,
                            weights == WEIGHTS_LUT4 ? t->split_lut4(split, x, K) : NULL, NULL};
            if (count) t->rows_float[weights](&job, 0, ROWS);
        } else if (strcmp(kernel, "vecmat_fp16") == 0) {
            elements = ROWS * 64; /* a head of 64 against ROWS positions' values */
            if (count) t->vecmat_fp16(y, x, w16, 64, ROWS, 64);
        } else if (strncmp(kernel, "q8_", 3) == 0 || strncmp(kernel, "q16_", 4) == 0) {
            elements = ROWS * K;
            integer_job job = {y, lut4 ? (const void *)packed : q, scales, palette_codes, &codes, 1, K,
                               lut4 ? ANE_ENCODING_LUT4 : ANE_ENCODING_INT8, activations};
            if (count) t->rows_integer[lut4][activations == ANE_ACTIVATIONS_INT16](&job, 0, ROWS);
        } else if (strcmp(kernel, "exp") == 0 || strcmp(kernel, "tanh") == 0) {
            elements = K;
            if (count) (kernel[0] == 'e' ? t->exp : t->tanh)(y, x, K);
        } else if (strcmp(kernel, "adamw") == 0) {
            elements = K;
            if (count) t->adamw(&constants, w, m, v, x, K);
        } else if (strcmp(kernel, "lut4_decode") == 0) {
            elements = K;
            if (count) t->lut4_decode(packed, palettes, K, y);
        } else if (strcmp(kernel, "transpose") == 0) {
            elements = 32 * 32;
            if (count) t->transpose_tile(&transpose, 0, 0);
        } else {
            fprintf(stderr, "unknown kernel %s\n", kernel);
            return 2;
        }
    }
    printf("%s %s %ld\n", kernel, t->level, elements);
    return 0;
}
