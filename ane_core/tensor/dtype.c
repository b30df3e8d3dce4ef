/* The dtype table, element access and row conversion (see dtype.h). */
#include "dtype.h"

#include <math.h>
#include <string.h>

#include "../base/fp16.h"

typedef struct dtype_info {
    const char *name;
    size_t size;
    const char *safetensors_code;
    ane_dtype_kind kind;
} dtype_info;

static const dtype_info dtype_table[] = {
#define X(id, name, size, st, kind) {name, size, st, kind},
    ANE_DTYPE_TABLE(X)
#undef X
};
_Static_assert(sizeof dtype_table / sizeof dtype_table[0] == ANE_DTYPE_COUNT,
               "dtype table and enum disagree");

const char *ane_dtype_name(ane_dtype dtype) {
    return (unsigned)dtype < ANE_DTYPE_COUNT ? dtype_table[dtype].name : "?";
}
size_t ane_dtype_size(ane_dtype dtype) { return dtype_table[dtype].size; }
const char *ane_dtype_safetensors_code(ane_dtype dtype) { return dtype_table[dtype].safetensors_code; }
ane_dtype_kind ane_dtype_kind_of(ane_dtype dtype) { return dtype_table[dtype].kind; }

int ane_dtype_from_name(const char *name, ane_dtype *out) {
    for (int i = 0; i < ANE_DTYPE_COUNT; i++)
        if (strcmp(dtype_table[i].name, name) == 0) {
            *out = (ane_dtype)i;
            return 1;
        }
    return 0;
}

int ane_dtype_from_safetensors_code(const char *code, ane_dtype *out) {
    for (int i = 0; i < ANE_DTYPE_COUNT; i++)
        if (strcmp(dtype_table[i].safetensors_code, code) == 0) {
            *out = (ane_dtype)i;
            return 1;
        }
    return 0;
}

const char *ane_dtype_all_names(void) {
#define X(id, name, size, st, kind) name ", "
    static const char all[] = ANE_DTYPE_TABLE(X);
#undef X
    static char trimmed[sizeof all];
    if (!trimmed[0]) {
        memcpy(trimmed, all, sizeof all);
        trimmed[sizeof all - 3] = '\0'; /* drop the last ", " */
    }
    return trimmed;
}

/* Unaligned-safe loads of each element type (memcpy compiles to a plain load). */
#define DEFINE_LOAD(suffix, type) \
    static inline type load_##suffix(const void *p) { type v; memcpy(&v, p, sizeof v); return v; }
DEFINE_LOAD(f32, float)
DEFINE_LOAD(u16, uint16_t)
DEFINE_LOAD(i16, int16_t)
DEFINE_LOAD(i32, int32_t)
DEFINE_LOAD(i64, int64_t)
DEFINE_LOAD(i8, int8_t)
DEFINE_LOAD(u8, uint8_t)
#undef DEFINE_LOAD
#define STORE_AS(type, ptr, value) do { type v_ = (type)(value); memcpy((ptr), &v_, sizeof v_); } while (0)

double ane_dtype_load(const void *p, ane_dtype dtype) {
    switch (dtype) {
    case ANE_FP32: return load_f32(p);
    case ANE_FP16: return ane_fp16_to_fp32(load_u16(p));
    case ANE_BF16: return ane_bf16_to_fp32(load_u16(p));
    case ANE_INT32: return load_i32(p);
    case ANE_INT64: return (double)load_i64(p);
    case ANE_INT16: return load_i16(p);
    case ANE_UINT16: return load_u16(p);
    case ANE_INT8: return load_i8(p);
    case ANE_UINT8: return load_u8(p);
    case ANE_BOOL: return load_u8(p) != 0;
    case ANE_DTYPE_COUNT: break;
    }
    return 0;
}

int64_t ane_dtype_load_int(const void *p, ane_dtype dtype) {
    if (dtype == ANE_INT64) return load_i64(p);
    double value = ane_dtype_load(p, dtype);
    if (isnan(value)) return 0;
    if (value >= 9223372036854775807.0) return INT64_MAX;
    if (value <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)value;
}

/* Float to integer with truncation toward zero and saturation at the type's range. */
static int64_t saturate(double value, double lo, double hi) {
    if (isnan(value)) return 0;
    if (value <= lo) return (int64_t)lo;
    if (value >= hi) return (int64_t)hi;
    return (int64_t)value;
}

void ane_dtype_store(void *p, ane_dtype dtype, double value) {
    switch (dtype) {
    case ANE_FP32: STORE_AS(float, p, value); break;
    case ANE_FP16: STORE_AS(uint16_t, p, ane_fp32_to_fp16((float)value)); break;
    case ANE_BF16: STORE_AS(uint16_t, p, ane_fp32_to_bf16((float)value)); break;
    case ANE_INT32: STORE_AS(int32_t, p, saturate(value, INT32_MIN, INT32_MAX)); break;
    case ANE_INT64: STORE_AS(int64_t, p, saturate(value, -9223372036854775808.0, 9223372036854775807.0)); break;
    case ANE_INT16: STORE_AS(int16_t, p, saturate(value, INT16_MIN, INT16_MAX)); break;
    case ANE_UINT16: STORE_AS(uint16_t, p, saturate(value, 0, UINT16_MAX)); break;
    case ANE_INT8: STORE_AS(int8_t, p, saturate(value, INT8_MIN, INT8_MAX)); break;
    case ANE_UINT8: STORE_AS(uint8_t, p, saturate(value, 0, UINT8_MAX)); break;
    case ANE_BOOL: STORE_AS(uint8_t, p, (value != 0 && !isnan(value)) ? 1 : 0); break;
    case ANE_DTYPE_COUNT: break;
    }
}

void ane_dtype_store_int(void *p, ane_dtype dtype, int64_t value) {
    switch (dtype) {
    case ANE_INT64: STORE_AS(int64_t, p, value); break;
    case ANE_INT32: STORE_AS(int32_t, p, value < INT32_MIN ? INT32_MIN : value > INT32_MAX ? INT32_MAX : value); break;
    case ANE_INT16: STORE_AS(int16_t, p, value < INT16_MIN ? INT16_MIN : value > INT16_MAX ? INT16_MAX : value); break;
    case ANE_UINT16: STORE_AS(uint16_t, p, value < 0 ? 0 : value > UINT16_MAX ? UINT16_MAX : value); break;
    case ANE_INT8: STORE_AS(int8_t, p, value < INT8_MIN ? INT8_MIN : value > INT8_MAX ? INT8_MAX : value); break;
    case ANE_UINT8: STORE_AS(uint8_t, p, value < 0 ? 0 : value > UINT8_MAX ? UINT8_MAX : value); break;
    case ANE_BOOL: STORE_AS(uint8_t, p, value != 0); break;
    default: ane_dtype_store(p, dtype, (double)value); break;
    }
}

void ane_dtype_convert_row(void *dst, ane_dtype dst_dtype, const void *src, ane_dtype src_dtype,
                           size_t n) {
    if (dst_dtype == src_dtype) {
        memcpy(dst, src, n * ane_dtype_size(dst_dtype));
        return;
    }
    /* The vector converters need aligned pointers; anything else takes the generic path. */
    int aligned = ((uintptr_t)dst % 4 == 0) && ((uintptr_t)src % 4 == 0);
    if (aligned && src_dtype == ANE_FP32 && dst_dtype == ANE_FP16) {
        ane_fp32_to_fp16_n(dst, src, n);
        return;
    }
    if (aligned && src_dtype == ANE_FP16 && dst_dtype == ANE_FP32) {
        ane_fp16_to_fp32_n(dst, src, n);
        return;
    }
    if (aligned && src_dtype == ANE_FP32 && dst_dtype == ANE_BF16) {
        ane_fp32_to_bf16_n(dst, src, n);
        return;
    }
    if (aligned && src_dtype == ANE_BF16 && dst_dtype == ANE_FP32) {
        ane_bf16_to_fp32_n(dst, src, n);
        return;
    }
    int half_to_half = (src_dtype == ANE_BF16 && dst_dtype == ANE_FP16) || (src_dtype == ANE_FP16 && dst_dtype == ANE_BF16);
    if (aligned && half_to_half) { /* through fp32 (exact for both), a chunk at a time, with the vector converters */
        enum { CHUNK = 1024 };
        float chunk[CHUNK];
        const uint16_t *from = src;
        uint16_t *to = dst;
        for (size_t at = 0; at < n; at += CHUNK) {
            size_t count = n - at < CHUNK ? n - at : CHUNK;
            if (src_dtype == ANE_BF16) ane_bf16_to_fp32_n(chunk, from + at, count);
            else ane_fp16_to_fp32_n(chunk, from + at, count);
            if (dst_dtype == ANE_FP16) ane_fp32_to_fp16_n(to + at, chunk, count);
            else ane_fp32_to_bf16_n(to + at, chunk, count);
        }
        return;
    }
    size_t dst_size = ane_dtype_size(dst_dtype), src_size = ane_dtype_size(src_dtype);
    char *d = dst;
    const char *s = src;
    int integer_to_integer = ane_dtype_kind_of(dst_dtype) != ANE_KIND_FLOAT &&
                             ane_dtype_kind_of(src_dtype) != ANE_KIND_FLOAT;
    for (size_t i = 0; i < n; i++, d += dst_size, s += src_size) {
        if (integer_to_integer)
            ane_dtype_store_int(d, dst_dtype, ane_dtype_load_int(s, src_dtype));
        else
            ane_dtype_store(d, dst_dtype, ane_dtype_load(s, src_dtype));
    }
}

int64_t ane_sanitize_weight_values(float *values, size_t count, ane_dtype weight_dtype) {
    float limit = weight_dtype == ANE_FP16 ? 65504.0f : 3.4028234663852886e38f;
    /* First a branch-free count (it vectorizes; NaN fails the comparison): weights are almost
     * always all in range, and then nothing is written. */
    size_t outside = 0;
    for (size_t i = 0; i < count; i++) outside += !(fabsf(values[i]) <= limit);
    if (outside == 0) return 0;
    int64_t replaced = 0;
    for (size_t i = 0; i < count; i++) {
        float v = values[i];
        if (v != v) values[i] = 0.0f, replaced++;
        else if (v > limit || v < -limit) values[i] = v > 0 ? limit : -limit, replaced++;
    }
    return replaced;
}
