/* base/cpu.c against the kernel's own account of the CPU: the flags line of /proc/cpuinfo
 * (Linux lists AVX and AVX-512 only when it saves their state). Each ane_cpu_has_* is true
 * exactly when all of its features are listed; the capped answers (ANELUA_CPU) are only
 * checked for consistency. Skipped, and said so, where /proc/cpuinfo has no flags line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ane_core/base/cpu.h"
#include "check.h"

static char flags[8192];

static int listed(const char *flag) {
    size_t n = strlen(flag);
    for (const char *p = flags; (p = strstr(p, flag)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\n' || p[n] == '\0')) return 1;
    return 0;
}

static int all_listed(const char *const *names) {
    for (; *names; names++)
        if (!listed(*names)) return 0;
    return 1;
}

int main(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[sizeof flags];
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "flags", 5) == 0) {
            strcpy(flags, line);
            break;
        }
    if (f) fclose(f);
#if !defined(__x86_64__)
    /* Not x86-64 (the aarch64 row: qemu-user shows the host's /proc/cpuinfo): none of the x86
     * features may be reported, whatever the flags line says. */
    CHECK(!ane_cpu_has_f16c() && !ane_cpu_has_avx2_fma_f16c() && !ane_cpu_has_avx512f() &&
              !ane_cpu_has_avx512_skylake() && !ane_cpu_has_avx512_vnni() && !ane_cpu_has_avx512_bf16(),
          "an x86 feature reported on a CPU that is not x86-64");
    return check_summary("cpu");
#endif
    if (!flags[0]) {
        printf("cpu: no flags line in /proc/cpuinfo here; nothing to compare against (skipped)\n");
        return 0;
    }
    const char *f16c[] = { "avx", "f16c", NULL };
    const char *avx2[] = { "avx", "f16c", "avx2", "fma", NULL };
    const char *avx512f[] = { "avx", "f16c", "avx2", "fma", "avx512f", NULL };
    const char *skylake[] = { "avx", "f16c", "avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", NULL };
    const char *vnni[] = { "avx", "f16c", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", NULL };
    CHECK(ane_cpu_has_avx512_skylake() == all_listed(skylake), "AVX-512 Skylake set: %d, cpuinfo %d",
          ane_cpu_has_avx512_skylake(), all_listed(skylake));
    if (getenv("ANELUA_CPU")) { /* capped: only never more than the CPU has, and each level implies the one below */
        CHECK(!ane_cpu_has_f16c() || all_listed(f16c), "F16C reported only when present");
        CHECK(!ane_cpu_has_avx2_fma_f16c() || ane_cpu_has_f16c(), "AVX2 implies F16C");
        CHECK(!ane_cpu_has_avx512f() || ane_cpu_has_avx2_fma_f16c(), "AVX-512F implies AVX2");
        CHECK(!ane_cpu_has_avx512_vnni() || ane_cpu_has_avx512f(), "AVX-512 VNNI implies AVX-512F");
    } else {
        CHECK(ane_cpu_has_f16c() == all_listed(f16c), "F16C: %d, cpuinfo %d", ane_cpu_has_f16c(), all_listed(f16c));
        CHECK(ane_cpu_has_avx2_fma_f16c() == all_listed(avx2), "AVX2+FMA: %d, cpuinfo %d", ane_cpu_has_avx2_fma_f16c(),
              all_listed(avx2));
        CHECK(ane_cpu_has_avx512f() == all_listed(avx512f), "AVX-512F: %d, cpuinfo %d", ane_cpu_has_avx512f(),
              all_listed(avx512f));
        CHECK(ane_cpu_has_avx512_vnni() == all_listed(vnni), "AVX-512 VNNI: %d, cpuinfo %d", ane_cpu_has_avx512_vnni(),
              all_listed(vnni));
    }
    return check_summary("cpu");
}
