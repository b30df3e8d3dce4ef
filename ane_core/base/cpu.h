/* What the x86-64 CPU offers the vector kernels, asked once per process (CPUID traps to the
 * hypervisor on virtual machines) and safe to ask from any thread. ANELUA_CPU=avx2 | scalar
 * caps what is reported (to test the older kernel paths). */
#ifndef ANE_BASE_CPU_H
#define ANE_BASE_CPU_H

int ane_cpu_has_f16c(void);          /* AVX + F16C, with the OS saving AVX state */
int ane_cpu_has_avx2_fma_f16c(void); /* ... and AVX2 and FMA */
int ane_cpu_has_avx512f(void);       /* ... and AVX-512F, with the OS saving ZMM state */
int ane_cpu_has_avx512_skylake(void); /* ... and AVX-512 CD, BW, DQ, VL (Skylake-SP's set); not capped */
int ane_cpu_has_avx512_vnni(void);    /* AVX-512F, BW and VNNI (byte dot products) */
int ane_cpu_has_avx512_bf16(void);    /* AVX-512F, BW and BF16 (bf16 pair dot products) */

#endif
