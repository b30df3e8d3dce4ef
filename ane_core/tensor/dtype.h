/* Element types of host tensors and surfaces: one X-macro table, expanded into the enum and
 * the metadata (name, byte size, safetensors code, kind). */
#ifndef ANE_TENSOR_DTYPE_H
#define ANE_TENSOR_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* X(ID, name, size in bytes, safetensors code, kind) */
#define ANE_DTYPE_TABLE(X)                         \
    X(FP32, "fp32", 4, "F32", ANE_KIND_FLOAT)      \
    X(FP16, "fp16", 2, "F16", ANE_KIND_FLOAT)      \
    X(BF16, "bf16", 2, "BF16", ANE_KIND_FLOAT)     \
    X(INT32, "int32", 4, "I32", ANE_KIND_SIGNED)   \
    X(INT64, "int64", 8, "I64", ANE_KIND_SIGNED)   \
    X(INT16, "int16", 2, "I16", ANE_KIND_SIGNED)   \
    X(UINT16, "uint16", 2, "U16", ANE_KIND_UNSIGNED) \
    X(INT8, "int8", 1, "I8", ANE_KIND_SIGNED)      \
    X(UINT8, "uint8", 1, "U8", ANE_KIND_UNSIGNED)  \
    X(BOOL, "bool", 1, "BOOL", ANE_KIND_BOOL)

typedef enum ane_dtype {
#define X(id, name, size, st, kind) ANE_##id,
    ANE_DTYPE_TABLE(X)
#undef X
    ANE_DTYPE_COUNT
} ane_dtype;

typedef enum ane_dtype_kind { ANE_KIND_FLOAT, ANE_KIND_SIGNED, ANE_KIND_UNSIGNED, ANE_KIND_BOOL } ane_dtype_kind;

const char *ane_dtype_name(ane_dtype dtype);
size_t ane_dtype_size(ane_dtype dtype);
const char *ane_dtype_safetensors_code(ane_dtype dtype);
ane_dtype_kind ane_dtype_kind_of(ane_dtype dtype);

/* Lookups by name; return 0 and leave *out alone when the name is unknown. */
int ane_dtype_from_name(const char *name, ane_dtype *out);
int ane_dtype_from_safetensors_code(const char *code, ane_dtype *out);

/* A comma-separated list of all dtype names, for error messages. */
const char *ane_dtype_all_names(void);

/* One element <-> double. Integer values beyond 2^53 lose precision as doubles, so
 * integer dtypes also have int64 accessors. Pointers need no alignment. */
double ane_dtype_load(const void *element, ane_dtype dtype);
void ane_dtype_store(void *element, ane_dtype dtype, double value);
int64_t ane_dtype_load_int(const void *element, ane_dtype dtype);
void ane_dtype_store_int(void *element, ane_dtype dtype, int64_t value);

/* Converts a row of n elements between dtypes (dst and src contiguous, not overlapping).
 * fp32 <-> fp16/bf16 use the vectorized converters; floats to integers truncate toward
 * zero and saturate; NaN becomes 0 for integers and false for bool. */
/* Values bound for a weight of `weight_dtype` (patching): NaN -> 0, +-inf and values beyond
 * the dtype's range -> +-65504 (fp16) or +-FLT_MAX; returns how many were replaced. */
int64_t ane_sanitize_weight_values(float *values /* [count] */, size_t count, ane_dtype weight_dtype);

void ane_dtype_convert_row(void *dst, ane_dtype dst_dtype, const void *src, ane_dtype src_dtype,
                           size_t n);

#endif
