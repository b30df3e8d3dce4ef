/* What the CPU offers the vector kernels (tensor/kernels.h), asked once per process (CPUID traps
 * to the hypervisor on virtual machines) and safe to ask from any thread: on x86-64 through
 * CPUID and XGETBV, on arm64 Linux through getauxval(AT_HWCAP, AT_HWCAP2), on arm64 macOS
 * through sysctlbyname("hw.optional.arm.FEAT_*"). ANELUA_CPU caps what is reported, to run the
 * lower kernel levels on one machine: avx2 (no AVX-512), neon (no dot products) or scalar
 * (nothing). */
#ifndef ANE_BASE_CPU_H
#define ANE_BASE_CPU_H

int ane_cpu_has_f16c(void);          /* AVX + F16C, with the OS saving AVX state */
int ane_cpu_has_avx2_fma_f16c(void); /* ... and AVX2 and FMA */
int ane_cpu_has_avx512f(void);       /* ... and AVX-512F, with the OS saving ZMM state */
int ane_cpu_has_avx512_skylake(void); /* ... and AVX-512 CD, BW, DQ, VL (Skylake-SP's set); not capped */
int ane_cpu_has_avx512_vnni(void);    /* AVX-512F, BW and VNNI (byte dot products) */
int ane_cpu_has_avx512_bf16(void);    /* AVX-512F, BW and BF16 (bf16 pair dot products) */


int ane_cpu_has_neon(void);         /* arm64's Advanced SIMD (every arm64 CPU has it) */
int ane_cpu_has_neon_dotprod(void); /* FEAT_DotProd: sdot / udot (Apple M1 on; Cortex-A55, A76, Neoverse N1 on) */
int ane_cpu_has_neon_fp16(void);    /* FEAT_FP16: half-precision arithmetic (M1 on) */
int ane_cpu_has_neon_i8mm(void);    /* FEAT_I8MM: smmla / usdot (M2 on) */

#endif
