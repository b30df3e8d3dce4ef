/* The bind step of the `ane` backend's boundary (ane_objc.h): open the framework, resolve
 * the C functions and data symbols, look up classes and methods, and check every method's
 * live type encoding against the table, modulo offsets and qualifiers, before anything is
 * sent. */
#include "ane_objc.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

ane_objc_api ane_objc;

typedef struct message_info {
    const char *selector, *encoding;
    int cls, class_method;
} message_info;

static const message_info messages[ANE_MSG_COUNT] = {
#define ANE_OBJC_MESSAGE_INFO(name, cls, class_method, selector, ret, params, encoding) \
    {selector, encoding, ANE_CLASS_##cls, class_method},
    ANE_OBJC_MESSAGES(ANE_OBJC_MESSAGE_INFO)
#undef ANE_OBJC_MESSAGE_INFO
};

static const struct { const char *name; int required; } classes[ANE_CLASS_COUNT] = {
#define ANE_OBJC_CLASS_INFO(name, objc_name, required) {objc_name, required},
    ANE_OBJC_CLASSES(ANE_OBJC_CLASS_INFO)
#undef ANE_OBJC_CLASS_INFO
};

static const char *live_encodings[ANE_MSG_COUNT];
static pthread_once_t bind_once = PTHREAD_ONCE_INIT;
static ane_error bind_result;

/* The encoding's types reduced to their ABI (ane_objc.h): each type's qualifiers (r n N o O R
 * V) skipped, a pointer's target reduced the same way, a struct, union or array copied whole,
 * an object's class name ("@\"NSData\"") dropped; the frame offset after each type skipped. */
typedef struct encoding_writer {
    char *out;
    size_t size, used;
} encoding_writer;

static void emit(encoding_writer *w, const char *from, size_t count) {
    for (size_t i = 0; i < count && w->used + 1 < w->size; i++) w->out[w->used++] = from[i];
    w->out[w->used] = '\0';
}

static const char *reduce_type(const char *p, encoding_writer *w) {
    while (*p && strchr("rnNoORV", *p)) p++;
    if (*p == '^') {
        emit(w, p, 1);
        return reduce_type(p + 1, w);
    }
    if (*p == '{' || *p == '(' || *p == '[') {
        const char *start = p;
        int depth = 0;
        do {
            if (*p == '{' || *p == '(' || *p == '[') depth++;
            else if (*p == '}' || *p == ')' || *p == ']') depth--;
            p++;
        } while (*p && depth > 0);
        emit(w, start, (size_t)(p - start));
        return p;
    }
    if (*p == '@') {
        emit(w, p++, 1);
        if (*p == '?') emit(w, p++, 1); /* a block */
        else if (*p == '"') {
            const char *close = strchr(p + 1, '"');
            p = close ? close + 1 : p + strlen(p);
        }
        return p;
    }
    if (*p == 'b') { /* a bit field and its width */
        const char *start = p++;
        while (*p >= '0' && *p <= '9') p++;
        emit(w, start, (size_t)(p - start));
        return p;
    }
    if (*p) emit(w, p++, 1);
    return p;
}

void ane_objc_abi_encoding(const char *encoding, char *out, size_t size) {
    encoding_writer w = {out, size, 0};
    if (size) out[0] = '\0';
    for (const char *p = encoding ? encoding : ""; *p;) {
        p = reduce_type(p, &w);
        if (*p == '-') p++;
        while (*p >= '0' && *p <= '9') p++;
    }
}

static void *resolve(void *framework, const char *symbol) {
    void *address = dlsym(framework, symbol);
    return address ? address : dlsym(RTLD_DEFAULT, symbol);
}

static ane_status bind_all(ane_error *err) {
    const char *path = getenv(ANE_FRAMEWORK_ENV);
    int overridden = path && *path;
    if (!overridden) path = ANE_FRAMEWORK_DEFAULT;
#if !defined(__APPLE__)
    if (!overridden)
        return ane_fail(err, ANE_ERR_UNAVAILABLE,
                        "this machine has no Neural Engine (it needs macOS with AppleNeuralEngine.framework); use "
                        "backend 'sim' (" ANE_FRAMEWORK_ENV " can point at the test double)");
#endif
    snprintf(ane_objc.framework, sizeof ane_objc.framework, "%s", path);
    void *framework = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!framework)
        return ane_fail(err, ANE_ERR_UNAVAILABLE, "cannot open the framework %s%s: %s", path,
                        overridden ? " (from " ANE_FRAMEWORK_ENV ")" : "", dlerror());
    ane_objc.is_double = dlsym(framework, "anelua_ane_double") != NULL;
#define ANE_RESOLVE_FUNCTION(fn)                                                                              \
    if (!(ane_objc.fn = (__typeof__(&fn))resolve(framework, #fn)))                                           \
        return ane_fail(err, ANE_ERR_UNAVAILABLE, "%s does not provide %s", path, #fn);
    ANE_C_FUNCTIONS(ANE_RESOLVE_FUNCTION)
#undef ANE_RESOLVE_FUNCTION
#define ANE_RESOLVE_DATA(symbol)                                                                              \
    if (!(ane_objc.symbol = (__typeof__(&symbol))resolve(framework, #symbol)))                               \
        return ane_fail(err, ANE_ERR_UNAVAILABLE, "%s does not provide %s", path, #symbol);
    ANE_C_DATA(ANE_RESOLVE_DATA)
#undef ANE_RESOLVE_DATA
    for (int i = 0; i < ANE_CLASS_COUNT; i++) {
        ane_objc.classes[i] = ane_objc.objc_getClass(classes[i].name);
        if (!ane_objc.classes[i] && classes[i].required)
            return ane_fail(err, ANE_ERR_UNAVAILABLE, "%s defines no class %s", path, classes[i].name);
    }
    char mismatches[ANE_ERROR_MESSAGE_MAX] = "";
    size_t used = 0;
    for (int i = 0; i < ANE_MSG_COUNT; i++) {
        const message_info *m = &messages[i];
        ane_objc.selectors[i] = ane_objc.sel_registerName(m->selector);
        Class cls = ane_objc.classes[m->cls];
        Method method = m->class_method ? ane_objc.class_getClassMethod(cls, ane_objc.selectors[i])
                                        : ane_objc.class_getInstanceMethod(cls, ane_objc.selectors[i]);
        if (!method)
            return ane_fail(err, ANE_ERR_UNAVAILABLE, "%s has no method %c[%s %s]", path,
                            m->class_method ? '+' : '-', classes[m->cls].name, m->selector);
        live_encodings[i] = ane_objc.method_getTypeEncoding(method);
        char live[128];
        ane_objc_abi_encoding(live_encodings[i], live, sizeof live);
        if (strcmp(live, m->encoding) != 0 && used < sizeof mismatches)
            used += (size_t)snprintf(mismatches + used, sizeof mismatches - used, "\n  %c[%s %s]: expected %s, live %s",
                                     m->class_method ? '+' : '-', classes[m->cls].name, m->selector, m->encoding,
                                     live_encodings[i] ? live_encodings[i] : "(none)");
    }
    if (used)
        return ane_fail(err, ANE_ERR_UNAVAILABLE,
                        "the framework's type encodings differ from the prototypes anelua was built "
                        "with (ane_core/backend/ane_objc.h), beyond offsets and qualifiers; refusing to send "
                        "any message:%s", mismatches);
    return ANE_OK;
}

static void bind_once_body(void) { bind_all(&bind_result); }

ane_status ane_objc_bind(ane_error *err) {
    pthread_once(&bind_once, bind_once_body);
    if (bind_result.status) return ane_fail(err, bind_result.status, "%s", bind_result.message);
    return ANE_OK;
}

void ane_objc_encoding_report(void (*line)(void *context, const char *text), void *context) {
    char text[512];
    for (int i = 0; i < ANE_MSG_COUNT; i++) {
        const message_info *m = &messages[i];
        char live[128] = "(not bound)";
        if (live_encodings[i]) ane_objc_abi_encoding(live_encodings[i], live, sizeof live);
        snprintf(text, sizeof text, "%c[%s %s] expected %s live %s%s", m->class_method ? '+' : '-', classes[m->cls].name,
                 m->selector, m->encoding, live_encodings[i] ? live_encodings[i] : live,
                 live_encodings[i] && strcmp(live, m->encoding) != 0 ? "  MISMATCH" : "");
        line(context, text);
    }
}

void ane_objc_message_info(int index, const char **selector, const char **encoding, const char **class_name,
                           int *class_method) {
    *selector = messages[index].selector;
    *encoding = messages[index].encoding;
    *class_name = classes[messages[index].cls].name;
    *class_method = messages[index].class_method;
}
