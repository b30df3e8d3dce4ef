/* ane_compile_graph: a graph to a loaded program in one C pipeline (see compile.c). */
#ifndef ANE_RUNTIME_COMPILE_H
#define ANE_RUNTIME_COMPILE_H

#include "../passes/passes.h"
#include "program.h"

/* Compiles `graph` (left unchanged) for `backend_name`: a copy goes through the pass
 * pipeline (the verifier between passes), is emitted as MIL text and one MILBlob weight
 * file, and handed to the runtime (cache, budget, backend compile and load). `key` may be
 * NULL; `report` (may be NULL) receives the warnings: the pipeline's (SRAM, ANE-27) and,
 * in the `ane` profile, the device rules' (the backend's compile reports the errors). */
ane_status ane_compile_graph(const ane_graph *graph, const char *backend_name, const ane_compile_options *options,
                             const char *key, ane_program **out, ane_report *report, ane_error *err);

#endif
