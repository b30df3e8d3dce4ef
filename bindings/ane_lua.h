/* Shared declarations of the `ane` Lua module's C files: type names, argument checks and
 * the one function that turns a core error into a Lua result or error. */
#ifndef ANE_BINDINGS_ANE_LUA_H
#define ANE_BINDINGS_ANE_LUA_H

#include <lauxlib.h>
#include <lua.h>

#include "../ane_core/backend/backend.h"
#include "../ane_core/base/status.h"
#include "../ane_core/tensor/quantize.h"
#include "../ane_core/tensor/tensor.h"

#define ANE_TENSOR_TYPE "ane.Tensor"
#define ANE_SURFACE_TYPE "ane.Surface"
#define ANE_MAPPING_TYPE "ane.Mapping"
#define ANE_GRAPH_TYPE "ane.Graph"

#define ANELUA_VERSION "0.1.0"

int luaopen_ane(lua_State *L);

/* Adds the project's lua/ directory (found next to the executable or shared object that
 * holds this code: the build tree or an installed prefix) to package.path. */
void ane_lua_add_library_path(lua_State *L);

/* The default backend ("sim" unless ANELUA_BACKEND or --backend says otherwise).
 * Setting an unknown or unavailable backend fails with a message. */
const char *ane_lua_default_backend(void);
/* The backend a program naming none gets: sim for profile cpu and the fp32 reference, else the default. */
const char *ane_lua_backend_for(const ane_compile_options *options);
/* 0, or the message and -2 for a name no backend has, -1 for a backend this machine cannot use. */
int ane_lua_set_default_backend(const char *name, char *message, size_t message_size);
/* Applies ANELUA_BACKEND when set; -1 with a message naming the variable when it is unusable. */
int ane_lua_backend_from_environment(char *message, size_t message_size);

/* Raises a Lua error for a failed status: programming errors as they are, environmental
 * ones too (used where the caller has no `nil, msg` contract). Interrupts clear the flag. */
int ane_lua_raise(lua_State *L, const ane_error *err);
/* Pushes `nil, message` for an environmental error and returns 2; raises otherwise. */
int ane_lua_fail(lua_State *L, const ane_error *err);

/* --- tensors (l_tensor.c) --- */
void ane_lua_open_tensor(lua_State *L);       /* pushes the ane.tensor table */
ane_tensor *ane_lua_check_tensor(lua_State *L, int index);
ane_tensor *ane_lua_test_tensor(lua_State *L, int index);
/* Pushes a new tensor userdata that takes over `t`'s reference. */
void ane_lua_push_tensor(lua_State *L, ane_tensor *t);
/* A new, empty tensor userdata on the stack for a core function to fill. */
ane_tensor *ane_lua_new_tensor_slot(lua_State *L);
int64_t ane_lua_check_integer_arg(lua_State *L, int index, const char *what);
/* The integers of the Lua array at index, in a userdata pushed on the stack; *count of them. */
int64_t *ane_lua_read_integers(lua_State *L, int index, const char *what, lua_Integer *count);
/* options[key] as a number, or fallback when the table or the field is absent. */
double ane_lua_option_number(lua_State *L, int index, const char *key, double fallback);
/* l_train.c: ane.tensor.cross_entropy / adamw, and the methods sum_of_squares / clamp_activations. */
extern const luaL_Reg ane_lua_train_functions[];
extern const luaL_Reg ane_lua_train_methods[];
ane_dtype ane_lua_check_dtype(lua_State *L, int index, ane_dtype fallback);
/* Reads a shape table (or the integers from index to the top when `index` is a number). */
int ane_lua_check_shape(lua_State *L, int index, int64_t *shape);

/* --- surfaces (l_surface.c) and files (l_io.c) --- */
void ane_lua_open_surface(lua_State *L);      /* pushes the ane.surface constructor */
void ane_lua_open_io_internal(lua_State *L);  /* pushes the table of C helpers of ane.io */
void ane_lua_open_graph(lua_State *L);        /* pushes the ane.graph constructor table */
void ane_lua_open_milblob(lua_State *L);      /* pushes the ane.milblob table */
void ane_lua_open_bpe(lua_State *L);          /* pushes the constructor of ane._bpe tokenizers */
void ane_lua_open_spm(lua_State *L);          /* pushes the constructor of ane._spm tokenizers */
void ane_lua_open_nfc(lua_State *L);  /* ane._nfc: Unicode NFC */

struct ane_surface;
/* The surface at index, or NULL when it is not one (raises for a closed surface). */
struct ane_surface *ane_lua_test_surface(lua_State *L, int index);
/* A list of the notes' lines (and a last "... and N more" when some were dropped). */
void ane_lua_push_notes(lua_State *L, const ane_notes *notes);
/* --- quantized weights (l_quantize.c) --- */
typedef struct ane_quantized_weight {
    ane_weight_encoding encoding;
    ane_dtype dtype;                /* what the program computes with: fp16 or fp32 */
    int rank;
    int64_t shape[ANE_MAX_DIMS];    /* the dense weight's shape; rows = shape[0] */
    ane_tensor data, table;         /* as ane_quantize_rows makes them */
    void *palette_codes[2];         /* 4-bit rows' palettes for int8 / int16 activations (tensor/gemv.h),
                                       made by the first q:matmul that multiplies on them */
} ane_quantized_weight;
ane_quantized_weight *ane_lua_test_quantized(lua_State *L, int index);
void ane_lua_open_quantize(lua_State *L);     /* adds ane.quantize and ane.quantized to the table on top */
void ane_lua_open_target(lua_State *L);       /* adds ane.target, ane.set_default_target, ... */
/* The `target` (and `max_conv_channels`) of the options table at options_index (l_target.c). */
void ane_lua_read_target(lua_State *L, int options_index, ane_target *out);
void ane_lua_open_kernels(lua_State *L);      /* adds ane.cpu_kernels and ane.kernel_time to the table on top */
void ane_lua_open_program(lua_State *L);      /* adds compile, compile_mil, cached, stats, ... to the table on top */

struct ane_report;
/* Pushes a report's diagnostics as a list of { id =, node =, message =, severity = }. */
void ane_lua_push_diagnostics(lua_State *L, const struct ane_report *report);

struct ane_mil_file;
/* Reads a weights table { [MIL path] = MILBlob bytes or a file path } into files; returns the count. */
int ane_lua_weight_files(lua_State *L, int index, struct ane_mil_file *files, int capacity);

/* The graph of an ane.Graph userdata at index (a Lua error when it is not one, or closed). */
struct ane_graph *ane_lua_check_graph(lua_State *L, int index);

/* Sets field `key` of the table on top of the stack. */
static inline void ane_lua_set_number(lua_State *L, const char *key, double value) {
    lua_pushnumber(L, value);
    lua_setfield(L, -2, key);
}
static inline void ane_lua_set_integer(lua_State *L, const char *key, lua_Integer value) {
    lua_pushinteger(L, value);
    lua_setfield(L, -2, key);
}
static inline void ane_lua_set_boolean(lua_State *L, const char *key, int value) {
    lua_pushboolean(L, value);
    lua_setfield(L, -2, key);
}
static inline void ane_lua_set_string(lua_State *L, const char *key, const char *value) {
    lua_pushstring(L, value);
    lua_setfield(L, -2, key);
}

#endif
