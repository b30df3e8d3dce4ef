/* Precision and rule profile of a program: shared by the passes (the validator asks a
 * backend what it runs in a profile) and the backends. */
#ifndef ANE_IR_PROFILE_H
#define ANE_IR_PROFILE_H

typedef enum ane_precision { ANE_PRECISION_FP16, ANE_PRECISION_FP32 } ane_precision;

/* Which rules apply: `ane` enforces the device's constraint catalogue; `cpu` runs the same
 * programs but allows what only the device refuses (narrow I/O, fp32 compute, gather, ...). */
typedef enum ane_profile { ANE_PROFILE_ANE, ANE_PROFILE_CPU } ane_profile;

#endif
