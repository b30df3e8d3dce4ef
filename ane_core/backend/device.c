/* The `ane` backend: Apple's Neural Engine through the private AppleNeuralEngine framework
 * (docs/reference/private-api.md), in plain C over the boundary of ane_objc.h.
 *
 * compile  parse the MIL (ports, weights, the device rules), build a descriptor from the MIL
 *          bytes and the weights dictionary, make a model, write its temporary directory
 *          (<tmp>/<hexStringIdentifier>/model.mil and weights/...), compile (QoS 21);
 * load     one model object per loaded instance (the first reuses the compiled one, later
 *          ones compile only when the framework has no compiled program for the
 *          identifier), load with one retry after 100 ms, verify the ports against
 *          modelAttributes (names, shapes, row strides);
 * eval     IOSurfaces wrapped as _ANEIOSurfaceObject in a request built once per set of
 *          surfaces: the runtime's own surfaces when they are IOSurfaces of the device's
 *          layout, else the instance's surfaces with a copy in and out; the first eval of an
 *          instance checks the device wrote its outputs (a silent no-op means the compile
 *          budget, ANE-05, is spent);
 * patch    weight bytes change in the instance's copy of the weight files; the batch is
 *          committed before the next eval by the strategy this process found to work
 *          (reload, donor, recompile), checked once against a fresh compile;
 * unload   unload, release, remove the temporary directory when no instance uses it.
 * Errors name the program, the message sent, the framework's status code and text, and the
 * constraint ID where one applies. There is never a fallback to another backend. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#include "../base/budget.h"
#include "../passes/passes.h"
#include "../tensor/surface.h"
#include "ane_objc.h"
#include "backend.h"

#define DEVICE_QOS 21u
#define DEVICE_MAX_LOADED 128        /* programs loaded per process (docs/reference/constraints.md, newer facts) */
#define DEVICE_MAX_PORTS 64
#define DEVICE_MAX_FILES 16
#define DEVICE_REQUEST_CACHE 4       /* requests kept per instance, one per set of surfaces */
#define OWNER_PREFIX ".anelua-owner-" /* one marker per process using a temporary directory */

typedef struct weight_file {
    char *path;                      /* "@model_path/weights/weight.bin" */
    uint8_t *bytes;                  /* [size] */
    size_t size;
} weight_file;

typedef struct device_compiled {
    ane_compiled base;
    ane_graph *graph;                /* the parsed MIL: ports, weights and their file offsets */
    ane_port *inputs, *outputs;      /* [ninputs], [noutputs], alphabetical */
    int ninputs, noutputs;
    char *mil;                       /* [mil_length] the MIL bytes sent */
    size_t mil_length;
    weight_file files[DEVICE_MAX_FILES];
    int nfiles;
    id compiled_model;               /* the model compile() compiled, for the first load */
    int io_rows;                     /* the target's I/O row layout (ane_io_rows), where the
                                        loaded model reports none */
    int holds_dir;                   /* keeps <tmp>/<identifier> while the program is cached */
    char identifier[160];
} device_compiled;

/* How the device lays one port out, from modelAttributes (or the rules when it is silent). */
typedef struct port_layout {
    size_t row_stride;               /* bytes between channel rows; 0 = packed (not [1,C,1,S]) */
    size_t bytes;                    /* bytes the port occupies */
} port_layout;

typedef struct cached_request {
    void *handles[2 * DEVICE_MAX_PORTS]; /* the surfaces, inputs then outputs */
    id request;
    uint64_t last_used;
} cached_request;

typedef enum patch_strategy { STRATEGY_UNKNOWN, STRATEGY_RELOAD, STRATEGY_DONOR, STRATEGY_RECOMPILE } patch_strategy;
static const char *const strategy_names[] = {"unknown", "reload", "donor", "recompile"};

typedef struct device_loaded {
    ane_loaded base;
    device_compiled *program;
    id model;                        /* this instance's own model object, loaded */
    char identifier[160];            /* its hexStringIdentifier */
    weight_file files[DEVICE_MAX_FILES]; /* this instance's weights (patches land here) */
    int dirty;                       /* patches waiting for the commit before the next eval */
    port_layout in[DEVICE_MAX_PORTS], out[DEVICE_MAX_PORTS];
    int in_index[DEVICE_MAX_PORTS], out_index[DEVICE_MAX_PORTS]; /* each port's index in the request:
                                                                    its LiveInputList / LiveOutputList
                                                                    position, else alphabetical */
    size_t alloc_size;               /* the allocation every port's surface shares (ANE-02/18) */
    IOSurfaceRef own_in[DEVICE_MAX_PORTS], own_out[DEVICE_MAX_PORTS]; /* the copy path's surfaces */
    cached_request requests[DEVICE_REQUEST_CACHE];
    uint64_t request_clock;
    int evaluated;                   /* evals so far; the first is checked for a silent no-op */
} device_loaded;

/* What this process learned about the device (ane.stats(), ane.capabilities()). The
 * identifier is assumed to hash the weight bytes (docs/reference/private-api.md) until a patch shows not. */
static ane_device_stats device_stats = {.identifier_hashes_weights = 1, .multi_input = -1, .port_listing = "unknown"};

static patch_strategy process_strategy = STRATEGY_UNKNOWN;
static int loaded_programs;

/* ------------------------------------------------------------------ CF helpers */

static CFStringRef cf_string(const char *text) {
    return ane_objc.CFStringCreateWithCString(NULL, text, kCFStringEncodingUTF8);
}

static CFNumberRef cf_int(int64_t value) { return ane_objc.CFNumberCreate(NULL, kCFNumberSInt64Type, &value); }

static CFMutableDictionaryRef cf_dictionary(void) {
    return ane_objc.CFDictionaryCreateMutable(NULL, 0, ane_objc.kCFTypeDictionaryKeyCallBacks,
                                              ane_objc.kCFTypeDictionaryValueCallBacks);
}

static CFMutableArrayRef cf_array(void) { return ane_objc.CFArrayCreateMutable(NULL, 0, ane_objc.kCFTypeArrayCallBacks); }

static void cf_release(const void *object) {
    if (object) ane_objc.CFRelease(object);
}

/* dict[key] = value, releasing the caller's reference to value. */
static void dictionary_put(CFMutableDictionaryRef dict, const char *key, CFTypeRef value) {
    CFStringRef name = cf_string(key);
    ane_objc.CFDictionarySetValue(dict, name, value);
    cf_release(name);
    cf_release(value);
}

static void array_put(CFMutableArrayRef array, CFTypeRef value) {
    ane_objc.CFArrayAppendValue(array, value);
    cf_release(value);
}

static CFTypeRef dictionary_get(CFTypeRef dict, const char *key, CFTypeID type) {
    if (!dict || ane_objc.CFGetTypeID(dict) != ane_objc.CFDictionaryGetTypeID()) return NULL;
    CFStringRef name = cf_string(key);
    CFTypeRef value = ane_objc.CFDictionaryGetValue((CFDictionaryRef)dict, name);
    cf_release(name);
    return value && ane_objc.CFGetTypeID(value) == type ? value : NULL;
}

static int64_t dictionary_int(CFTypeRef dict, const char *key, int64_t missing) {
    CFNumberRef number = dictionary_get(dict, key, ane_objc.CFNumberGetTypeID());
    int64_t value;
    return number && ane_objc.CFNumberGetValue(number, kCFNumberSInt64Type, &value) ? value : missing;
}

static void string_value(CFTypeRef string, char *out, size_t size) {
    out[0] = '\0';
    if (string && ane_objc.CFGetTypeID(string) == ane_objc.CFStringGetTypeID())
        ane_objc.CFStringGetCString(string, out, (CFIndex)size, kCFStringEncodingUTF8);
}

/* The device's status in an error's text: a Mac's evaluation errors carry it only in their
 * description ("... ANEProgramProcessRequestDirect() Failed with status=0x1d : statusType=0x9:
 * Program Inference error", Code=8, no underlying error: invoke-ai/InvokeAI#4356,
 * jundot/omlx#2940). -1 when the text names none. */
static long status_in_text(const char *text) {
    const char *at = strstr(text, "status=0x");
    return at ? strtol(at + strlen("status=0x"), NULL, 16) : -1;
}

/* "code 8, status 0x1d: <description>; underlying: <its description>", or that there was no
 * NSError. *status is the device's status: from the description's text, else the underlying
 * error's, else the error code itself (the shape of compile errors); 0 without an error. */
static void describe_error(id error, char *out, size_t size, long *status) {
    *status = 0;
    if (!error) {
        snprintf(out, size, "it returned NO without an NSError");
        return;
    }
    CFErrorRef cf_error = (CFErrorRef)error;
    long code = (long)ane_objc.CFErrorGetCode(cf_error);
    char text[400], underlying_text[300] = "";
    CFStringRef description = ane_objc.CFErrorCopyDescription(cf_error);
    string_value(description, text, sizeof text);
    cf_release(description);
    CFDictionaryRef info = ane_objc.CFErrorCopyUserInfo(cf_error);
    if (info) {
        CFTypeRef underlying = ane_objc.CFDictionaryGetValue(info, *ane_objc.kCFErrorUnderlyingErrorKey);
        if (underlying) {
            CFStringRef inner = ane_objc.CFErrorCopyDescription((CFErrorRef)underlying);
            string_value(inner, underlying_text, sizeof underlying_text);
            cf_release(inner);
        }
        cf_release(info);
    }
    *status = status_in_text(text);
    if (*status < 0) *status = status_in_text(underlying_text);
    int length = *status >= 0
                     ? snprintf(out, size, "code %ld, status 0x%lx: %s%s%s", code, *status, text,
                                underlying_text[0] ? "; underlying: " : "", underlying_text)
                     : snprintf(out, size, "status 0x%lx: %s%s%s", code, text, underlying_text[0] ? "; underlying: " : "",
                                underlying_text);
    if (*status < 0) *status = code;
    if (length >= 0 && (size_t)length >= size && size > 4) memcpy(out + size - 4, "...", 4); /* cut, and says so */
}

/* The one error shape of this backend: program, message, status and text, rule. */
static ane_status device_fail(ane_error *err, ane_status status, const char *program, const char *message_sent, id error,
                              const char *advice) {
    char text[640];
    long device_status;
    describe_error(error, text, sizeof text, &device_status);
    const char *rule = "";
    if (device_status == 0x1d)
        rule = " (ANE-02/ANE-04/ANE-18: every I/O surface must hold at least 49,152 bytes and all must share one "
               "allocation size; a device that refuses programs with several inputs answers 0x1d too, see "
               "ane.capabilities().multi_input)";
    return ane_fail(err, status, "backend 'ane', program '%s': %s failed, %s%s%s%s", program, message_sent, text, rule,
                    advice ? "; " : "", advice ? advice : "");
}

/* ------------------------------------------------------------------ surfaces */

static void *iosurface_create(size_t *alloc_size, void **handle, ane_error *err) {
    /* a one-row byte buffer, as every known caller allocates it */
    CFMutableDictionaryRef properties = cf_dictionary();
    const struct { CFStringRef key; int64_t value; } fields[] = {
        {*ane_objc.kIOSurfaceWidth, (int64_t)*alloc_size}, {*ane_objc.kIOSurfaceHeight, 1},
        {*ane_objc.kIOSurfaceBytesPerElement, 1},          {*ane_objc.kIOSurfaceBytesPerRow, (int64_t)*alloc_size},
        {*ane_objc.kIOSurfaceAllocSize, (int64_t)*alloc_size}, {*ane_objc.kIOSurfacePixelFormat, 0},
    };
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        CFNumberRef number = cf_int(fields[i].value);
        ane_objc.CFDictionarySetValue(properties, fields[i].key, number);
        cf_release(number);
    }
    IOSurfaceRef surface = ane_objc.IOSurfaceCreate(properties);
    cf_release(properties);
    if (!surface) {
        ane_fail(err, ANE_ERR_NOMEM, "backend 'ane': IOSurfaceCreate refused a %zu-byte surface", *alloc_size);
        return NULL;
    }
    *alloc_size = ane_objc.IOSurfaceGetAllocSize(surface); /* pages are 16 KiB on Apple silicon */
    *handle = surface;
    ane_objc.IOSurfaceLock(surface, 0, NULL);
    void *base = ane_objc.IOSurfaceGetBaseAddress(surface);
    ane_objc.IOSurfaceUnlock(surface, 0, NULL);
    return base;
}

static void iosurface_release(void *handle) { cf_release(handle); }
static void iosurface_lock(void *handle, int readonly) {
    ane_objc.IOSurfaceLock(handle, readonly ? kIOSurfaceLockReadOnly : 0, NULL);
}
static void iosurface_unlock(void *handle, int readonly) {
    ane_objc.IOSurfaceUnlock(handle, readonly ? kIOSurfaceLockReadOnly : 0, NULL);
}

static const ane_surface_platform iosurfaces = {iosurface_create, iosurface_release, iosurface_lock, iosurface_unlock};

/* ------------------------------------------------------------------ temporary directories */

static void temp_root(char *out, size_t size) {
#if defined(__APPLE__)
    /* what NSTemporaryDirectory() answers */
    if (confstr(_CS_DARWIN_USER_TEMP_DIR, out, size) > 0) {
        size_t n = strlen(out);
        if (n > 1 && out[n - 1] == '/') out[n - 1] = '\0';
        return;
    }
#endif
    const char *tmp = getenv("TMPDIR");
    snprintf(out, size, "%s", tmp && *tmp ? tmp : "/tmp");
    size_t n = strlen(out);
    if (n > 1 && out[n - 1] == '/') out[n - 1] = '\0';
}

/* A program's directory under the temporary root; 0 when it does not fit in size bytes (a
 * TMPDIR close to PATH_MAX long), which writing the directory reports before any other use. */
static int program_dir(const char *identifier, char *out, size_t size) {
    char root[PATH_MAX];
    temp_root(root, sizeof root);
    int length = snprintf(out, size, "%s/%s", root, identifier);
    return length >= 0 && (size_t)length < size;
}

static ane_status program_dir_or_fail(const char *identifier, char *out, size_t size, ane_error *err) {
    if (program_dir(identifier, out, size)) return ANE_OK;
    const char *tmp = getenv("TMPDIR");
    return ane_fail(err, ANE_ERR_IO,
                    "backend 'ane': a program directory under TMPDIR (%zu characters) would be longer than %zu; "
                    "set TMPDIR to a shorter path",
                    tmp ? strlen(tmp) : (size_t)0, size - 1);
}

static int remove_entry(const char *path, const struct stat *info, int flag, struct FTW *ftw) {
    (void)info, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* Identical programs of two processes share a directory (the identifier hashes their
 * bytes), so writing a directory's files and compiling or loading from them, or removing
 * it, is a critical section across anelua processes: an flock on one lock file beside the
 * directories (never removed, so every process locks the same file), re-entrant within
 * this process. The identifier argument says which directory the section is about. */
static int lock_fd = -1, lock_depth;     /* guarded by lock_mutex (helper threads evaluate and commit) */
static pthread_mutex_t lock_mutex;
static pthread_once_t lock_mutex_once = PTHREAD_ONCE_INIT;

static void make_lock_mutex(void) { /* re-entrant, as the flock section is */
    pthread_mutexattr_t attributes;
    pthread_mutexattr_init(&attributes);
    pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&lock_mutex, &attributes);
    pthread_mutexattr_destroy(&attributes);
}

static void lock_dir(const char *identifier) {
    (void)identifier;
    pthread_once(&lock_mutex_once, make_lock_mutex);
    pthread_mutex_lock(&lock_mutex); /* held until the matching unlock_dir */
    if (lock_depth++ > 0) return;
    char root[PATH_MAX], path[PATH_MAX + 32];
    temp_root(root, sizeof root);
    snprintf(path, sizeof path, "%s/.anelua-ane.lock", root);
    lock_fd = open(path, O_RDWR | O_CREAT, 0600);
    if (lock_fd >= 0) flock(lock_fd, LOCK_EX);
}

static void unlock_dir(const char *identifier) {
    (void)identifier;
    if (lock_depth == 0) return; /* (unbalanced: never locked) */
    if (--lock_depth == 0) {
        if (lock_fd >= 0) close(lock_fd); /* releases the flock */
        lock_fd = -1;
    }
    pthread_mutex_unlock(&lock_mutex);
}

/* Whether a live process other than this one has its marker in `dir` (identical programs
 * of two processes share one directory: the identifier hashes their bytes). Markers of
 * dead processes are removed on the way. */
static int other_live_owner(const char *dir) {
    DIR *listing = opendir(dir);
    if (!listing) return 0;
    int live = 0;
    struct dirent *entry;
    while ((entry = readdir(listing))) {
        long pid;
        if (strncmp(entry->d_name, OWNER_PREFIX, strlen(OWNER_PREFIX)) != 0) continue;
        if (sscanf(entry->d_name + strlen(OWNER_PREFIX), "%ld", &pid) != 1 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) {
            live = 1;
        } else {
            char marker[PATH_MAX + 300];
            snprintf(marker, sizeof marker, "%s/%s", dir, entry->d_name);
            remove(marker);
        }
    }
    closedir(listing);
    return live;
}

/* Directories shared by this process's instances with one identifier: removed when the last
 * one unloads and no other process uses the directory. */
static struct { char identifier[160]; int users; } dirs[2 * DEVICE_MAX_LOADED];

static void dir_acquire(const char *identifier) {
    int free_slot = -1;
    for (int i = 0; i < (int)(sizeof dirs / sizeof dirs[0]); i++) {
        if (dirs[i].users && strcmp(dirs[i].identifier, identifier) == 0) {
            dirs[i].users++;
            return;
        }
        if (!dirs[i].users && free_slot < 0) free_slot = i;
    }
    if (free_slot < 0) return; /* more directories than loaded programs: left for the sweep */
    snprintf(dirs[free_slot].identifier, sizeof dirs[free_slot].identifier, "%s", identifier);
    dirs[free_slot].users = 1;
}

static void dir_release(const char *identifier) {
    for (int i = 0; i < (int)(sizeof dirs / sizeof dirs[0]); i++) {
        if (!dirs[i].users || strcmp(dirs[i].identifier, identifier) != 0) continue;
        if (--dirs[i].users == 0) {
            char dir[PATH_MAX], marker[PATH_MAX + 64];
            if (program_dir(identifier, dir, sizeof dir)) { /* (else never written: nothing to remove) */
                snprintf(marker, sizeof marker, "%s/" OWNER_PREFIX "%ld", dir, (long)getpid());
                lock_dir(identifier);
                remove(marker);
                if (!other_live_owner(dir)) remove_tree(dir);
                unlock_dir(identifier);
            }
        }
        return;
    }
}

/* When the process ends (an atexit handler: os.exit does not collect the programs), this process's directories go. */
static void remove_own_dirs(void) {
    for (int i = 0; i < (int)(sizeof dirs / sizeof dirs[0]); i++) {
        if (!dirs[i].users) continue;
        dirs[i].users = 1;
        dir_release(dirs[i].identifier);
    }
}

/* Directories crashed anelua processes left behind: every marker names a dead process. */
static void sweep_stale_dirs(void) {
    char root[PATH_MAX];
    temp_root(root, sizeof root);
    DIR *listing = opendir(root);
    if (!listing) return;
    struct dirent *entry;
    while ((entry = readdir(listing))) {
        if (entry->d_name[0] == '.') continue;
        char dir[PATH_MAX + 300];
        snprintf(dir, sizeof dir, "%s/%s", root, entry->d_name);
        DIR *inside = opendir(dir);
        if (!inside) continue;
        int markers = 0;
        struct dirent *file;
        while ((file = readdir(inside))) markers += strncmp(file->d_name, OWNER_PREFIX, strlen(OWNER_PREFIX)) == 0;
        closedir(inside);
        lock_dir(entry->d_name);
        if (markers && !other_live_owner(dir)) {
            remove_tree(dir);
            device_stats.stale_dirs_removed++;
        }
        unlock_dir(entry->d_name);
    }
    closedir(listing);
}

static ane_status write_file(const char *path, const void *bytes, size_t size, ane_error *err) {
    FILE *f = fopen(path, "wb");
    if (!f) return ane_fail(err, ANE_ERR_IO, "backend 'ane': cannot write %s: %s", path, strerror(errno));
    size_t written = fwrite(bytes, 1, size, f);
    int closed = fclose(f);
    if (written != size || closed != 0)
        return ane_fail(err, ANE_ERR_IO, "backend 'ane': writing %s failed: %s", path, strerror(errno));
    return ANE_OK;
}

static ane_status make_dirs(const char *path, ane_error *err) {
    char partial[PATH_MAX];
    snprintf(partial, sizeof partial, "%s", path);
    for (char *p = partial + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(partial, 0700) != 0 && errno != EEXIST)
            return ane_fail(err, ANE_ERR_IO, "backend 'ane': cannot create %s: %s", partial, strerror(errno));
        *p = '/';
    }
    if (mkdir(partial, 0700) != 0 && errno != EEXIST)
        return ane_fail(err, ANE_ERR_IO, "backend 'ane': cannot create %s: %s", partial, strerror(errno));
    return ANE_OK;
}

/* A weight file's place in the directory: "@model_path/weights/w.bin" -> "<dir>/weights/w.bin". */
static void weight_path(const char *dir, const char *path, char *out, size_t size) {
    const char *prefix = "@model_path/";
    const char *relative = strncmp(path, prefix, strlen(prefix)) == 0 ? path + strlen(prefix) : path;
    snprintf(out, size, "%s/%s", dir, relative);
}

/* The weight files, the compiled `data` file (the donor path writes the weight file there, as
 * Orion did; only programs of one weight file take that path), or both. */
enum { WRITE_WEIGHTS = 1, WRITE_DATA = 2 };

static ane_status write_weights(const char *dir, const weight_file *files, int nfiles, int what, ane_error *err) {
    ane_status status = ANE_OK;
    for (int i = 0; i < nfiles && !status && (what & WRITE_WEIGHTS); i++) {
        char path[PATH_MAX + 200];
        weight_path(dir, files[i].path, path, sizeof path);
        char *slash = strrchr(path, '/');
        *slash = '\0';
        status = make_dirs(path, err);
        *slash = '/';
        if (!status) status = write_file(path, files[i].bytes, files[i].size, err);
    }
    if (!status && (what & WRITE_DATA)) {
        char path[PATH_MAX + 8];
        snprintf(path, sizeof path, "%s/data", dir);
        FILE *f = fopen(path, "wb");
        if (!f) return ane_fail(err, ANE_ERR_IO, "backend 'ane': cannot write %s: %s", path, strerror(errno));
        int ok = nfiles == 0 || fwrite(files[0].bytes, 1, files[0].size, f) == files[0].size;
        ok &= fclose(f) == 0;
        if (!ok) return ane_fail(err, ANE_ERR_IO, "backend 'ane': writing %s failed: %s", path, strerror(errno));
    }
    return status;
}

/* model.mil, the weight files and the owner marker, as the compiler reads them from disk. */
static ane_status write_program_dir(const device_compiled *p, const char *identifier, const weight_file *files,
                                    ane_error *err) {
    char dir[PATH_MAX], path[PATH_MAX + 32];
    ane_status status = program_dir_or_fail(identifier, dir, sizeof dir, err);
    if (!status) status = make_dirs(dir, err);
    if (!status) {
        snprintf(path, sizeof path, "%s/model.mil", dir);
        status = write_file(path, p->mil, p->mil_length, err);
    }
    if (!status) status = write_weights(dir, files, p->nfiles, WRITE_WEIGHTS, err);
    if (!status) {
        snprintf(path, sizeof path, "%s/" OWNER_PREFIX "%ld", dir, (long)getpid());
        status = write_file(path, "", 0, err);
    }
    return status;
}

/* Copies the donor's compiled files (everything but the weights, the MIL and `data`). */
static ane_status copy_compiled_files(const char *from_identifier, const char *to_identifier, ane_error *err) {
    char from[PATH_MAX], to[PATH_MAX];
    ane_status checked = program_dir_or_fail(from_identifier, from, sizeof from, err);
    if (!checked) checked = program_dir_or_fail(to_identifier, to, sizeof to, err);
    if (checked) return checked;
    DIR *listing = opendir(from);
    if (!listing) return ane_fail(err, ANE_ERR_IO, "backend 'ane': the donor directory %s is gone: %s", from, strerror(errno));
    ane_status status = ANE_OK;
    struct dirent *entry;
    while (!status && (entry = readdir(listing))) {
        const char *name = entry->d_name;
        if (name[0] == '.' || !strcmp(name, "weights") || !strcmp(name, "model.mil") || !strcmp(name, "data")) continue;
        char source[PATH_MAX + 300], target[PATH_MAX + 300];
        snprintf(source, sizeof source, "%s/%s", from, name);
        snprintf(target, sizeof target, "%s/%s", to, name);
        FILE *in = fopen(source, "rb");
        if (!in) continue;
        fseek(in, 0, SEEK_END);
        long size = ftell(in);
        rewind(in);
        char *bytes = malloc(size > 0 ? (size_t)size : 1);
        if (!bytes || fread(bytes, 1, (size_t)size, in) != (size_t)size)
            status = ane_fail(err, ANE_ERR_IO, "backend 'ane': cannot read %s", source);
        else
            status = write_file(target, bytes, (size_t)size, err);
        free(bytes);
        fclose(in);
    }
    closedir(listing);
    return status;
}

/* ------------------------------------------------------------------ models */

static void free_files(weight_file *files, int count) {
    for (int i = 0; i < count; i++) {
        free(files[i].path);
        free(files[i].bytes);
        files[i].path = NULL;
        files[i].bytes = NULL;
    }
}

static ane_status copy_files(weight_file *to, const ane_mil_file *from_mil, const weight_file *from, int count,
                             ane_error *err) {
    for (int i = 0; i < count; i++) {
        const char *path = from_mil ? from_mil[i].path : from[i].path;
        size_t size = from_mil ? from_mil[i].size : from[i].size;
        to[i].path = strdup(path);
        to[i].bytes = malloc(size ? size : 1);
        to[i].size = size;
        if (!to[i].path || !to[i].bytes) {
            free_files(to, i + 1);
            return ane_fail(err, ANE_ERR_NOMEM, "backend 'ane': out of memory copying weight files");
        }
        if (from_mil) ane_mil_file_copy(&from_mil[i], to[i].bytes); /* (one run, or the pieces of a compile's file) */
        else memcpy(to[i].bytes, from[i].bytes, size);
    }
    return ANE_OK;
}

/* A model object (retained) for the program's MIL with these weights, and its identifier:
 * +[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:] with the MIL as
 * NSData (ANE-09) and a weights dictionary, empty but never nil (ANE-11). */
static ane_status new_model(const device_compiled *p, const weight_file *files, id *model, char *identifier,
                            size_t identifier_size, ane_error *err) {
    *model = NULL;
    CFDataRef mil = ane_objc.CFDataCreate(NULL, (const uint8_t *)p->mil, (CFIndex)p->mil_length);
    CFMutableDictionaryRef weights = cf_dictionary();
    for (int i = 0; i < p->nfiles; i++) {
        CFMutableDictionaryRef entry = cf_dictionary();
        dictionary_put(entry, "offset", cf_int(0));
        dictionary_put(entry, "data", ane_objc.CFDataCreate(NULL, files[i].bytes, (CFIndex)files[i].size));
        dictionary_put(weights, files[i].path, entry);
    }
    id descriptor = ANE_SEND(descriptor_create, ANE_CLASS(Descriptor), (id)mil, (id)weights, (id)NULL);
    cf_release(mil);
    cf_release(weights);
    if (!descriptor)
        return device_fail(err, ANE_ERR_FORMAT, p->base.name,
                           "+[_ANEInMemoryModelDescriptor modelWithMILText:weights:optionsPlist:] returned nil and so", NULL,
                           "the framework did not accept the MIL text");
    id created = ANE_SEND(model_create, ANE_CLASS(Model), descriptor);
    if (!created)
        return device_fail(err, ANE_ERR_FORMAT, p->base.name, "+[_ANEInMemoryModel inMemoryModelWithDescriptor:] returned nil and so",
                           NULL, NULL);
    *model = ANE_SEND0(retain, created);
    string_value((CFTypeRef)ANE_SEND0(model_identifier, *model), identifier, identifier_size);
    if (!identifier[0] || strchr(identifier, '/') || strstr(identifier, "..")) {
        ANE_SEND0(release, *model);
        *model = NULL;
        return ane_fail(err, ANE_ERR_FORMAT, "backend 'ane', program '%s': -[_ANEInMemoryModel hexStringIdentifier] gave "
                        "no usable directory name ('%s')", p->base.name, identifier);
    }
    return ANE_OK;
}

static ane_status compile_model(const device_compiled *p, id model, const char *identifier, const weight_file *files,
                                int own, ane_error *err) {
    if (own) {
        char what[ANE_NAME_MAX + 64];
        snprintf(what, sizeof what, "program '%s' (the backend's own compile)", p->base.name);
        ane_status over = ane_budget_check(what, err);
        if (over) return over;
    }
    lock_dir(identifier);
    ane_status status = write_program_dir(p, identifier, files, err);
    BOOL ok = NO;
    id error = NULL;
    if (!status) {
        CFMutableDictionaryRef options = cf_dictionary();
        ok = ANE_SEND(model_compile, model, DEVICE_QOS, (id)options, &error);
        cf_release(options);
        if (own) ane_budget_count(1);
    }
    unlock_dir(identifier);
    if (status) return status;
    if (ok) return ANE_OK;
    if (!error) {
        char advice[200];
        snprintf(advice, sizeof advice,
                 "after %lld compiles in this process that is the device's compile budget (ANE-05) running out: "
                 "restart the process (training restarts itself with --resume)", (long long)ane_budget_used());
        return device_fail(err, ANE_ERR_CONSTRAINT, p->base.name, "-[_ANEInMemoryModel compileWithQoS:options:error:]",
                           NULL, advice);
    }
    return device_fail(err, ANE_ERR_CONSTRAINT, p->base.name, "-[_ANEInMemoryModel compileWithQoS:options:error:]", error,
                       NULL);
}

static void sleep_ms(int ms) {
    struct timespec pause = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&pause, NULL);
}

/* loadWithQoS with one retry after 100 ms (a transient failure is known). */
static ane_status load_model(const device_compiled *p, id model, const char *identifier, ane_error *err) {
    if (loaded_programs >= DEVICE_MAX_LOADED)
        return ane_fail(err, ANE_ERR_CONSTRAINT,
                        "backend 'ane', program '%s': %d programs are loaded in this process, the device's limit (the "
                        "%dth load fails); close programs you no longer use (prog:close())",
                        p->base.name, loaded_programs, DEVICE_MAX_LOADED + 1);
    id error = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        CFMutableDictionaryRef options = cf_dictionary();
        error = NULL;
        lock_dir(identifier); /* the framework may read the directory */
        BOOL ok = ANE_SEND(model_load, model, DEVICE_QOS, (id)options, &error);
        unlock_dir(identifier);
        cf_release(options);
        if (ok) {
            loaded_programs++;
            return ANE_OK;
        }
        if (attempt == 0) {
            device_stats.load_retries++;
            sleep_ms(100);
        }
    }
    return device_fail(err, ANE_ERR_UNAVAILABLE, p->base.name, "-[_ANEInMemoryModel loadWithQoS:options:error:] (twice, 100 ms apart)",
                       error, NULL);
}

static void unload_model(id model) {
    if (!model) return;
    id error = NULL;
    if (ANE_SEND(model_unload, model, DEVICE_QOS, &error)) loaded_programs--;
    ANE_SEND0(release, model);
}

/* ------------------------------------------------------------------ ports */

static size_t port_bytes(const ane_port *port) {
    size_t count = 1;
    for (int i = 0; i < port->rank; i++) count *= (size_t)port->shape[i];
    return count * ane_dtype_size(port->dtype);
}

/* The port's entry in a LiveInputList / LiveOutputList (outputs are named "<name>@output")
 * and its position there. */
static CFTypeRef find_live_port(CFTypeRef list, const char *name, int output, int *position) {
    if (!list) return NULL;
    CFIndex count = ane_objc.CFArrayGetCount(list);
    for (CFIndex i = 0; i < count; i++) {
        CFTypeRef entry = ane_objc.CFArrayGetValueAtIndex(list, i);
        char live[ANE_NAME_MAX + 16];
        string_value(dictionary_get(entry, "Name", ane_objc.CFStringGetTypeID()), live, sizeof live);
        size_t n = strlen(name);
        if (strncmp(live, name, n) == 0 && (live[n] == '\0' || (output && strcmp(live + n, "@output") == 0))) {
            *position = (int)i;
            return entry;
        }
    }
    return NULL;
}

/* Records whether the device lists a side's ports (two or more) in alphabetical order. */
static void note_port_listing(CFTypeRef list) {
    CFIndex count = list ? ane_objc.CFArrayGetCount(list) : 0;
    if (count < 2) return;
    char previous[ANE_NAME_MAX + 16] = "", name[ANE_NAME_MAX + 16];
    int sorted = 1;
    for (CFIndex i = 0; i < count; i++) {
        string_value(dictionary_get(ane_objc.CFArrayGetValueAtIndex(list, i), "Name", ane_objc.CFStringGetTypeID()), name,
                     sizeof name);
        if (i > 0 && strcmp(previous, name) > 0) sorted = 0;
        memcpy(previous, name, sizeof previous);
    }
    device_stats.port_listing = sorted ? "alphabetical" : "not alphabetical";
}

/* Lays out every port as the device reports it (modelAttributes: names, shapes, a row stride
 * where it reports one; the key RowStride is read though no device-run project saw it), else
 * by the target's row layout (generic: 64-byte rows, ANE-21; m4 packed; m5 32 elements; a
 * probe report: what row_layout measured on the chip), and gives each
 * port its index in a request: its position in the reported list, which is the binding order
 * on every device that reports one (Orion on M4 saw it alphabetical, ane-bridge-rs on M5
 * neither declaration nor alphabetical order), else its alphabetical position (ANE-03/19). */
static ane_status verify_ports(device_loaded *instance, ane_error *err) {
    const device_compiled *p = instance->program;
    CFTypeRef attributes = (CFTypeRef)ANE_SEND0(model_attributes, instance->model);
    CFTypeRef status_list = dictionary_get(attributes, "NetworkStatusList", ane_objc.CFArrayGetTypeID());
    CFTypeRef network = status_list && ane_objc.CFArrayGetCount(status_list) > 0
                            ? ane_objc.CFArrayGetValueAtIndex(status_list, 0) : NULL;
    CFTypeRef lists[2] = {dictionary_get(network, "LiveInputList", ane_objc.CFArrayGetTypeID()),
                          dictionary_get(network, "LiveOutputList", ane_objc.CFArrayGetTypeID())};
    if (!network) device_stats.ports_unverified++;
    note_port_listing(lists[0]), note_port_listing(lists[1]);
    size_t common = ANE_SURFACE_MIN_ALLOC;
    for (int side = 0; side < 2; side++) {
        const ane_port *ports = side ? p->outputs : p->inputs;
        int count = side ? p->noutputs : p->ninputs;
        port_layout *layouts = side ? instance->out : instance->in;
        int *indices = side ? instance->out_index : instance->in_index;
        for (int i = 0; i < count; i++) {
            indices[i] = i;
            const ane_port *port = &ports[i];
            int64_t want[4] = {1, 1, 1, 1}; /* N, C, H, W of the port, padded on the left */
            for (int k = 0; k < port->rank && k < 4; k++) want[4 - port->rank + k] = port->shape[k];
            size_t element = ane_dtype_size(port->dtype);
            size_t natural_row = ((size_t)want[3] * element + ANE_SURFACE_ROW_ALIGN - 1) / ANE_SURFACE_ROW_ALIGN * ANE_SURFACE_ROW_ALIGN;
            size_t row = ane_io_row_bytes(p->io_rows, want[3], element);
            if (network) {
                CFTypeRef live = find_live_port(lists[side], port->name, side, &indices[i]);
                if (!live)
                    return ane_fail(err, ANE_ERR_FORMAT, "backend 'ane', program '%s': the loaded model has no %s '%s' "
                                    "(modelAttributes lists other ports): the MIL and the device disagree",
                                    p->base.name, side ? "output" : "input", port->name);
                int64_t got[4] = {dictionary_int(live, "Batches", 1), dictionary_int(live, "Channels", 1),
                                  dictionary_int(live, "Height", 1), dictionary_int(live, "Width", 1)};
                int64_t depth = dictionary_int(live, "Depth", 1);
                if (memcmp(got, want, sizeof want) != 0 || depth != 1)
                    return ane_fail(err, ANE_ERR_SHAPE, "backend 'ane', program '%s': %s '%s' is [%lld, %lld, %lld, %lld] "
                                    "in the MIL but the device reports Batches %lld, Channels %lld, Height %lld, Width "
                                    "%lld, Depth %lld", p->base.name, side ? "output" : "input", port->name,
                                    (long long)want[0], (long long)want[1], (long long)want[2], (long long)want[3],
                                    (long long)got[0], (long long)got[1], (long long)got[2], (long long)got[3],
                                    (long long)depth);
                int64_t stride = dictionary_int(live, "RowStride", 0);
                if (stride > 0) row = (size_t)stride;
                if (row < (size_t)want[3] * element)
                    return ane_fail(err, ANE_ERR_FORMAT, "backend 'ane', program '%s': %s '%s' has rows of %zu bytes but "
                                    "the device reports RowStride %zu", p->base.name, side ? "output" : "input",
                                    port->name, (size_t)want[3] * element, row);
            }
            if (row != natural_row) device_stats.row_stride_mismatches++;
            layouts[i].row_stride = ane_port_is_surface(port) ? row : 0;
            layouts[i].bytes = ane_port_is_surface(port) ? (size_t)port->shape[1] * row : port_bytes(port);
            if (layouts[i].bytes > common) common = layouts[i].bytes;
        }
    }
    instance->alloc_size = common;
    return ANE_OK;
}

/* ------------------------------------------------------------------ requests */

/* A retained _ANERequest over these surfaces, inputs then outputs, each at its position in
 * alphabetical name order (the index arrays, ANE-03/19). */
static ane_status build_request(device_loaded *instance, IOSurfaceRef const *surfaces, id *out, ane_error *err) {
    const device_compiled *p = instance->program;
    CFMutableArrayRef lists[4] = {cf_array(), cf_array(), cf_array(), cf_array()};
    for (int i = 0; i < p->ninputs + p->noutputs; i++) {
        int output = i >= p->ninputs;
        id wrapped = ANE_SEND(surface_object_create, ANE_CLASS(SurfaceObject), surfaces[i]);
        if (!wrapped) {
            for (int k = 0; k < 4; k++) cf_release(lists[k]);
            return device_fail(err, ANE_ERR_UNAVAILABLE, p->base.name, "+[_ANEIOSurfaceObject objectWithIOSurface:] returned nil and so",
                               NULL, NULL);
        }
        ane_objc.CFArrayAppendValue(lists[output ? 2 : 0], wrapped);
        array_put(lists[output ? 3 : 1], cf_int(output ? instance->out_index[i - p->ninputs] : instance->in_index[i]));
    }
    CFNumberRef procedure = cf_int(0);
    id request = ANE_SEND(request_create, ANE_CLASS(Request), (id)lists[0], (id)lists[1], (id)lists[2], (id)lists[3],
                          (id)NULL, (id)NULL, (id)procedure);
    cf_release(procedure);
    for (int k = 0; k < 4; k++) cf_release(lists[k]);
    if (!request)
        return device_fail(err, ANE_ERR_UNAVAILABLE, p->base.name,
                           "+[_ANERequest requestWithInputs:inputIndices:outputs:outputIndices:...] returned nil and so",
                           NULL, NULL);
    *out = ANE_SEND0(retain, request);
    __atomic_add_fetch(&device_stats.requests_built, 1, __ATOMIC_RELAXED);
    return ANE_OK;
}

/* The request for this set of surfaces: cached (least recently used replaced). */
static ane_status request_for(device_loaded *instance, IOSurfaceRef const *surfaces, id *out, ane_error *err) {
    int count = instance->program->ninputs + instance->program->noutputs;
    cached_request *slot = &instance->requests[0];
    for (int i = 0; i < DEVICE_REQUEST_CACHE; i++) {
        cached_request *c = &instance->requests[i];
        if (c->request && memcmp(c->handles, surfaces, (size_t)count * sizeof *surfaces) == 0) {
            c->last_used = ++instance->request_clock;
            *out = c->request;
            return ANE_OK;
        }
        if (!c->request || (slot->request && c->last_used < slot->last_used)) slot = c;
    }
    if (slot->request) ANE_SEND0(release, slot->request);
    slot->request = NULL;
    ane_status status = build_request(instance, surfaces, &slot->request, err);
    if (status) return status;
    memcpy(slot->handles, surfaces, (size_t)count * sizeof *surfaces);
    slot->last_used = ++instance->request_clock;
    *out = slot->request;
    return ANE_OK;
}

static void drop_requests(device_loaded *instance) {
    for (int i = 0; i < DEVICE_REQUEST_CACHE; i++) {
        if (instance->requests[i].request) ANE_SEND0(release, instance->requests[i].request);
        instance->requests[i].request = NULL;
    }
}

/* The instance's own surfaces (the copy path), made on first use. */
static ane_status own_surfaces(device_loaded *instance, ane_error *err) {
    const device_compiled *p = instance->program;
    for (int i = 0; i < p->ninputs + p->noutputs; i++) {
        IOSurfaceRef *slot = i < p->ninputs ? &instance->own_in[i] : &instance->own_out[i - p->ninputs];
        if (*slot) continue;
        size_t size = instance->alloc_size;
        void *handle;
        if (!iosurface_create(&size, &handle, err)) return err->status;
        *slot = handle;
    }
    return ANE_OK;
}

/* A tensor over a surface's bytes laid out as the device wants the port: rows at the
 * device's stride, or packed at the start (ANE-20). `pin` is the storage header it uses. */
static ane_tensor surface_tensor(const ane_port *port, const port_layout *layout, void *base, size_t size,
                                 ane_storage *pin) {
    memset(pin, 0, sizeof *pin);
    pin->refcount = 1;
    pin->data = base;
    pin->nbytes = size;
    ane_tensor view;
    memset(&view, 0, sizeof view);
    view.storage = pin;
    view.dtype = port->dtype;
    view.ndim = port->rank;
    int64_t stride = 1;
    for (int i = port->rank - 1; i >= 0; i--) {
        view.shape[i] = port->shape[i];
        view.strides[i] = stride;
        stride *= port->shape[i];
    }
    if (layout->row_stride) {
        int64_t row = (int64_t)(layout->row_stride / ane_dtype_size(port->dtype));
        view.strides[3] = 1;
        view.strides[2] = view.strides[1] = row;
        view.strides[0] = row * port->shape[1];
    }
    return view;
}

/* Copies a binding into the surface (to_surface) or the surface into the binding. */
static ane_status copy_port(const ane_port *port, const port_layout *layout, ane_tensor *binding, IOSurfaceRef surface,
                            int to_surface, ane_error *err) {
    ane_storage pin;
    ane_objc.IOSurfaceLock(surface, to_surface ? 0 : kIOSurfaceLockReadOnly, NULL);
    ane_tensor device = surface_tensor(port, layout, ane_objc.IOSurfaceGetBaseAddress(surface),
                                       ane_objc.IOSurfaceGetAllocSize(surface), &pin);
    ane_status status = to_surface ? ane_tensor_copy_into(&device, binding, err) : ane_tensor_copy_into(binding, &device, err);
    ane_objc.IOSurfaceUnlock(surface, to_surface ? 0 : kIOSurfaceLockReadOnly, NULL);
    return status;
}

/* Resident inputs live in the instance's own input surface (the copy path's), which the CPU
 * writes a few positions of: a KV cache takes one row per token, never a whole copy. */
static ane_status device_write_input(ane_loaded *loaded, int port, int64_t offset, const ane_tensor *value, int first,
                                     ane_error *err) {
    device_loaded *instance = (device_loaded *)loaded;
    const ane_port *p = &instance->program->inputs[port];
    ane_status status = own_surfaces(instance, err);
    if (status) return status;
    IOSurfaceRef surface = instance->own_in[port];
    ane_objc.IOSurfaceLock(surface, 0, NULL);
    if (first) memset(ane_objc.IOSurfaceGetBaseAddress(surface), 0, ane_objc.IOSurfaceGetAllocSize(surface));
    ane_storage pin;
    ane_tensor whole = surface_tensor(p, &instance->in[port], ane_objc.IOSurfaceGetBaseAddress(surface),
                                      ane_objc.IOSurfaceGetAllocSize(surface), &pin), target;
    status = ane_tensor_slice(&target, &whole, p->rank - 1, offset, offset + value->shape[value->ndim - 1], err);
    if (!status) status = ane_tensor_copy_into(&target, value, err);
    ane_objc.IOSurfaceUnlock(surface, 0, NULL);
    return status;
}

static ane_status device_read_input(ane_loaded *loaded, int port, ane_tensor *out, ane_error *err) {
    device_loaded *instance = (device_loaded *)loaded;
    return copy_port(&instance->program->inputs[port], &instance->in[port], out, instance->own_in[port], 0, err);
}

/* Whether the binding's bytes already are an IOSurface in the device's layout. Its
 * allocation size is the device's business (ANE-02/04/18 answer 0x1d), as on a Mac. */
static int usable_directly(const ane_binding *b, const ane_port *port, const port_layout *layout) {
    if (!b->surface_handle) return 0;
    if (!layout->row_stride) return ane_tensor_is_contiguous(&b->view);
    return (size_t)b->view.strides[1] * ane_dtype_size(port->dtype) == layout->row_stride &&
           b->view.dtype == port->dtype && ane_tensor_data(&b->view) == ane_objc.IOSurfaceGetBaseAddress(b->surface_handle);
}

/* ------------------------------------------------------------------ eval */

static ane_status evaluate(device_loaded *instance, id model, id request, ane_error *err) {
    const device_compiled *p = instance->program;
    CFMutableDictionaryRef options = cf_dictionary();
    id error = NULL;
    BOOL ok = ANE_SEND(model_evaluate, model, DEVICE_QOS, (id)options, request, &error);
    cf_release(options);
    long status = 0;
    char text[640];
    if (!ok) describe_error(error, text, sizeof text, &status);
    if (p->ninputs > 1 && (ok || status == 0x1d)) __atomic_store_n(&device_stats.multi_input, ok ? 1 : 0, __ATOMIC_RELAXED);
    if (ok) return ANE_OK;
    const char *advice = p->ninputs > 1 && status == 0x1d
                             ? "this device may refuse programs with several inputs (docs/reference/constraints.md, open question 2): "
                               "pack the inputs into one [1, C, 1, S] input and slice it inside the program"
                             : NULL;
    return device_fail(err, ANE_ERR_CONSTRAINT, p->base.name, "-[_ANEInMemoryModel evaluateWithQoS:options:request:error:]",
                       error, advice);
}

/* The first eval of an instance (and every probe of the patch check) fills its outputs with
 * 0xFF (an fp16/fp32 NaN the ANE never writes) and checks they changed: a compile that
 * "succeeded" after the budget ran out loads and evaluates nothing. */
static void fill_sentinel(IOSurfaceRef surface, size_t bytes) {
    ane_objc.IOSurfaceLock(surface, 0, NULL);
    memset(ane_objc.IOSurfaceGetBaseAddress(surface), 0xFF, bytes);
    ane_objc.IOSurfaceUnlock(surface, 0, NULL);
}

static int still_sentinel(IOSurfaceRef surface, size_t bytes) {
    ane_objc.IOSurfaceLock(surface, kIOSurfaceLockReadOnly, NULL);
    const uint8_t *data = ane_objc.IOSurfaceGetBaseAddress(surface);
    int untouched = 1;
    for (size_t i = 0; i < bytes && untouched; i++) untouched = data[i] == 0xFF;
    ane_objc.IOSurfaceUnlock(surface, kIOSurfaceLockReadOnly, NULL);
    return untouched;
}

static ane_status commit_patches(device_loaded *instance, ane_error *err);

/* ANE-05's silent form, when an output still holds the sentinel after an eval. */
static ane_status check_outputs_written(const device_loaded *instance, IOSurfaceRef const *outputs, ane_error *err) {
    const device_compiled *p = instance->program;
    for (int i = 0; i < p->noutputs; i++)
        if (still_sentinel(outputs[i], instance->out[i].bytes))
            return ane_fail(err, ANE_ERR_CONSTRAINT,
                            "backend 'ane', program '%s': the device accepted the program but wrote nothing to output "
                            "'%s': after %lld compiles in this process that is the silent form of the compile budget "
                            "running out (ANE-05); restart the process (training restarts itself with --resume)",
                            p->base.name, p->outputs[i].name, (long long)ane_budget_used());
    return ANE_OK;
}

static ane_status device_eval_in_pool(device_loaded *instance, const ane_binding *inputs, int ninputs, ane_binding *outputs,
                                      int noutputs, ane_error *err) {
    const device_compiled *p = instance->program;
    ane_status status = instance->dirty ? commit_patches(instance, err) : ANE_OK;
    if (status) return status;
    IOSurfaceRef surfaces[2 * DEVICE_MAX_PORTS];
    int direct = 1;
    for (int i = 0; i < ninputs + noutputs && direct; i++) {
        const ane_binding *b = i < ninputs ? &inputs[i] : &outputs[i - ninputs];
        const ane_port *port = i < ninputs ? &p->inputs[i] : &p->outputs[i - ninputs];
        const port_layout *layout = i < ninputs ? &instance->in[i] : &instance->out[i - ninputs];
        direct = !b->resident && usable_directly(b, port, layout);
        surfaces[i] = b->surface_handle;
    }
    if (!direct) { /* the instance's own surfaces; resident inputs are already in theirs */
        status = own_surfaces(instance, err);
        for (int i = 0; i < ninputs && !status; i++)
            if (!inputs[i].resident)
                status = copy_port(&p->inputs[i], &instance->in[i], (ane_tensor *)&inputs[i].view, instance->own_in[i], 1, err);
        if (status) return status;
        memcpy(surfaces, instance->own_in, (size_t)ninputs * sizeof *surfaces);
        memcpy(surfaces + ninputs, instance->own_out, (size_t)noutputs * sizeof *surfaces);
    }
    id request;
    status = request_for(instance, surfaces, &request, err);
    if (status) return status;
    int check = instance->evaluated == 0;
    for (int i = 0; check && i < noutputs; i++) fill_sentinel(surfaces[ninputs + i], instance->out[i].bytes);
    status = evaluate(instance, instance->model, request, err);
    if (!status && check) status = check_outputs_written(instance, surfaces + ninputs, err);
    if (status) return status;
    instance->evaluated++;
    for (int i = 0; !direct && i < noutputs && !status; i++)
        status = copy_port(&p->outputs[i], &instance->out[i], &outputs[i].view, instance->own_out[i], 0, err);
    /* (atomic: evals also run on the asynchronous helpers) */
    __atomic_add_fetch(direct ? &device_stats.zero_copy_evals : &device_stats.copied_evals, 1, __ATOMIC_RELAXED);
    return status;
}

static ane_status device_eval(ane_loaded *loaded, const ane_binding *inputs, int ninputs, ane_binding *outputs,
                              int noutputs, ane_error *err) {
    device_loaded *instance = (device_loaded *)loaded;
    if (ninputs > DEVICE_MAX_PORTS || noutputs > DEVICE_MAX_PORTS)
        return ane_fail(err, ANE_ERR_ARGUMENT, "backend 'ane': at most %d inputs and outputs", DEVICE_MAX_PORTS);
    void *pool = ane_objc.objc_autoreleasePoolPush();
    ane_status status = device_eval_in_pool(instance, inputs, ninputs, outputs, noutputs, err);
    ane_objc.objc_autoreleasePoolPop(pool);
    return status;
}

/* ------------------------------------------------------------------ patching */

/* Outputs for a fixed probe input, evaluated by `model` on the instance's own surfaces;
 * *bytes (malloc'ed, [noutputs * alloc_size]) for comparing strategies byte for byte. */
static ane_status probe(device_loaded *instance, id model, uint8_t **bytes, ane_error *err) {
    const device_compiled *p = instance->program;
    *bytes = NULL;
    ane_status status = own_surfaces(instance, err);
    if (status) return status;
    uint32_t state = 12345u;
    for (int i = 0; i < p->ninputs; i++) {
        ane_objc.IOSurfaceLock(instance->own_in[i], 0, NULL);
        uint8_t *data = ane_objc.IOSurfaceGetBaseAddress(instance->own_in[i]);
        size_t size = ane_objc.IOSurfaceGetAllocSize(instance->own_in[i]);
        memset(data, 0, size);
        /* small fp16 values (exponent 0x38-0x3B, i.e. |x| in [0.5, 1)) keep every op finite */
        for (size_t k = 0; k + 1 < instance->in[i].bytes; k += 2) {
            state = state * 1664525u + 1013904223u;
            uint16_t half = (uint16_t)(0x3800u | ((state >> 16) & 0x3FFu) | ((state >> 31) << 15));
            memcpy(data + k, &half, 2);
        }
        ane_objc.IOSurfaceUnlock(instance->own_in[i], 0, NULL);
    }
    for (int i = 0; i < p->noutputs; i++) fill_sentinel(instance->own_out[i], instance->alloc_size);
    IOSurfaceRef surfaces[2 * DEVICE_MAX_PORTS];
    memcpy(surfaces, instance->own_in, (size_t)p->ninputs * sizeof *surfaces);
    memcpy(surfaces + p->ninputs, instance->own_out, (size_t)p->noutputs * sizeof *surfaces);
    id request;
    status = request_for(instance, surfaces, &request, err);
    if (!status) status = evaluate(instance, model, request, err);
    /* an output left as the sentinel is no verdict: a hollow program (the budget spent) */
    if (!status) status = check_outputs_written(instance, instance->own_out, err);
    if (status) return status;
    *bytes = malloc((size_t)p->noutputs * instance->alloc_size + 1);
    if (!*bytes) return ane_fail(err, ANE_ERR_NOMEM, "backend 'ane': out of memory checking a patch");
    for (int i = 0; i < p->noutputs; i++) {
        ane_objc.IOSurfaceLock(instance->own_out[i], kIOSurfaceLockReadOnly, NULL);
        memcpy(*bytes + (size_t)i * instance->alloc_size, ane_objc.IOSurfaceGetBaseAddress(instance->own_out[i]),
               instance->alloc_size);
        ane_objc.IOSurfaceUnlock(instance->own_out[i], kIOSurfaceLockReadOnly, NULL);
    }
    return ANE_OK;
}

/* A loaded model for the instance's current weights, by one strategy; *model and
 * identifier are the new ones (for reload: the instance's own, reloaded). */
static ane_status apply_strategy(device_loaded *instance, patch_strategy strategy, id *model, char *identifier,
                                 size_t identifier_size, ane_error *err) {
    const device_compiled *p = instance->program;
    char dir[PATH_MAX];
    *model = NULL;
    if (strategy == STRATEGY_RELOAD) {
        /* unload, overwrite the weight files, reload the same model object */
        ane_status checked = program_dir_or_fail(instance->identifier, dir, sizeof dir, err);
        if (checked) return checked;
        id error = NULL;
        lock_dir(instance->identifier);
        if (ANE_SEND(model_unload, instance->model, DEVICE_QOS, &error)) loaded_programs--;
        ane_status status = write_weights(dir, instance->files, p->nfiles, WRITE_WEIGHTS, err);
        if (!status) status = load_model(p, instance->model, instance->identifier, err);
        unlock_dir(instance->identifier);
        if (status) return status;
        *model = instance->model;
        snprintf(identifier, identifier_size, "%s", instance->identifier);
        device_stats.reloads++;
        return ANE_OK;
    }
    ane_status status = new_model(p, instance->files, model, identifier, identifier_size, err);
    if (status) return status;
    dir_acquire(identifier);
    if (strategy == STRATEGY_DONOR) {
        /* Orion's path: the donor's compiled files, the new weights and `data`, no compile */
        status = program_dir_or_fail(identifier, dir, sizeof dir, err);
        if (!status) {
            lock_dir(identifier);
            status = write_program_dir(p, identifier, instance->files, err);
            if (!status && strcmp(identifier, instance->identifier) != 0)
                status = copy_compiled_files(instance->identifier, identifier, err);
            if (!status) status = write_weights(dir, instance->files, p->nfiles, WRITE_DATA, err);
            if (!status) status = load_model(p, *model, identifier, err);
            unlock_dir(identifier);
        }
        if (!status) device_stats.donor_loads++;
    } else {
        status = compile_model(p, *model, identifier, instance->files, 1, err);
        if (!status) status = load_model(p, *model, identifier, err);
        if (!status) device_stats.recompiles++;
    }
    if (status) {
        ANE_SEND0(release, *model);
        *model = NULL;
        dir_release(identifier);
    }
    return status;
}

/* Makes (model, identifier) the instance's loaded model, unloading the one it replaces. */
static void adopt_model(device_loaded *instance, id model, const char *identifier) {
    if (model == instance->model) return;
    unload_model(instance->model);
    dir_release(instance->identifier);
    instance->model = model;
    snprintf(instance->identifier, sizeof instance->identifier, "%s", identifier);
}

static void discard_model(id model, const char *identifier) {
    if (!model) return;
    unload_model(model);
    dir_release(identifier);
}

/* The first commit of the process: try the strategies that need no compile, then compile a
 * reference and keep the first strategy whose probe output equals it. The reference comes
 * last: compiled first, it would put the new weights into the framework's cache under an
 * identifier that ignores weight bytes, and a broken donor path would look correct. */
static ane_status check_strategies(device_loaded *instance, ane_error *err) {
    const device_compiled *p = instance->program;
    device_stats.patch_checks++;
    uint8_t *before = NULL, *reloaded = NULL, *donor_out = NULL, *reference = NULL;
    ane_status status = probe(instance, instance->model, &before, err);
    if (status) return status;
    ane_error ignored;
    id donor = NULL, fresh = NULL, same_model;
    char donor_id[160] = "", fresh_id[160] = "", same_id[160], original[160], dir[PATH_MAX];
    /* the reload trial writes patched weights where another process may compile this
     * program: under the directory's lock until the original files are back */
    snprintf(original, sizeof original, "%s", instance->identifier);
    lock_dir(original);
    int reload_ok = apply_strategy(instance, STRATEGY_RELOAD, &same_model, same_id, sizeof same_id, &ignored) == ANE_OK &&
                    probe(instance, instance->model, &reloaded, &ignored) == ANE_OK;
    if (program_dir(original, dir, sizeof dir)) write_weights(dir, p->files, p->nfiles, WRITE_WEIGHTS, &ignored);
    unlock_dir(original);
    /* the donor path is known for one weight file (Orion writes it as `data`); how a compiled
       `data` holds several is unknown, so such programs decline it and recompile */
    int donor_known = p->nfiles <= 1;
    int donor_ok = donor_known &&
                   apply_strategy(instance, STRATEGY_DONOR, &donor, donor_id, sizeof donor_id, &ignored) == ANE_OK &&
                   probe(instance, donor, &donor_out, &ignored) == ANE_OK;
    if (donor_id[0]) device_stats.identifier_hashes_weights = strcmp(donor_id, instance->identifier) != 0;
    status = apply_strategy(instance, STRATEGY_RECOMPILE, &fresh, fresh_id, sizeof fresh_id, err);
    if (!status) status = probe(instance, fresh, &reference, err);
    size_t size = (size_t)p->noutputs * instance->alloc_size;
    if (!status) {
        int reload_works = reload_ok && memcmp(reloaded, reference, size) == 0;
        int donor_works = donor_ok && memcmp(donor_out, reference, size) == 0;
        int conclusive = memcmp(before, reference, size) != 0;
        patch_strategy chosen = reload_works ? STRATEGY_RELOAD : donor_works ? STRATEGY_DONOR : STRATEGY_RECOMPILE;
        snprintf(device_stats.patch_check, sizeof device_stats.patch_check, "reload %s, donor %s, identifier %s weights%s",
                 !reload_ok ? "fails" : reload_works ? "works" : "stale",
                 !donor_known ? "declined (several weight files)" : !donor_ok ? "fails" : donor_works ? "works" : "stale",
                 device_stats.identifier_hashes_weights ? "hashes" : "ignores",
                 conclusive ? "" : " (inconclusive: the patch did not change the probe output)");
        if (conclusive) process_strategy = chosen;
        /* the fresh compile is right in any case; keep the chosen strategy's model when it works */
        if (conclusive && chosen == STRATEGY_DONOR) {
            adopt_model(instance, donor, donor_id);
            donor = NULL;
        } else if (!conclusive || chosen == STRATEGY_RECOMPILE) {
            adopt_model(instance, fresh, fresh_id);
            fresh = NULL;
        }
    }
    discard_model(donor, donor_id);
    discard_model(fresh, fresh_id);
    free(before), free(reloaded), free(donor_out), free(reference);
    return status;
}

static ane_status commit_patches(device_loaded *instance, ane_error *err) {
    ane_status status;
    if (process_strategy == STRATEGY_UNKNOWN) {
        status = check_strategies(instance, err);
    } else {
        id model;
        char identifier[160];
        patch_strategy strategy = process_strategy;
        if (strategy == STRATEGY_DONOR && instance->program->nfiles > 1) strategy = STRATEGY_RECOMPILE; /* declined */
        status = apply_strategy(instance, strategy, &model, identifier, sizeof identifier, err);
        if (!status) adopt_model(instance, model, identifier);
    }
    if (!status) {
        instance->dirty = 0;
        instance->evaluated = 0;
        device_stats.commits++;
    }
    return status;
}

static ane_status device_commit(ane_loaded *loaded, ane_error *err) {
    device_loaded *instance = (device_loaded *)loaded;
    if (!instance->dirty) return ANE_OK;
    void *pool = ane_objc.objc_autoreleasePoolPush();
    ane_status status = commit_patches(instance, err);
    ane_objc.objc_autoreleasePoolPop(pool);
    return status;
}

static ane_status device_patch(ane_loaded *loaded, const char *name, const ane_tensor *value, int64_t *sanitized,
                               ane_error *err) {
    device_loaded *instance = (device_loaded *)loaded;
    const device_compiled *p = instance->program;
    const ane_node *node = ane_graph_find(p->graph, name);
    if (!node || node->op != ANE_OP_CONST)
        return ane_fail(err, ANE_ERR_ARGUMENT, "program '%s' has no weight '%s'", p->base.name, name);
    if (node->encoding) return ane_refuse_encoded_patch(p->base.name, node, err);
    if (!node->blob.size)
        return ane_fail(err, ANE_ERR_ARGUMENT, "backend 'ane', program '%s': weight '%s' is written inline in the MIL "
                        "text, not in a weight file, so only a recompile changes it (patch BLOBFILE weights, or "
                        "build the program with the new value)", p->base.name, name);
    int64_t numel = ane_node_numel(node);
    if (ane_tensor_numel(value) != numel)
        return ane_fail(err, ANE_ERR_SHAPE, "weight '%s' has %lld elements, the patch %lld", name, (long long)numel,
                        (long long)ane_tensor_numel(value));
    ane_tensor packed;
    ane_status status = ane_tensor_to(&packed, value, ANE_FP32, err);
    if (status) return status;
    float *values = (float *)ane_tensor_data(&packed);
    *sanitized += ane_sanitize_weight_values(values, (size_t)numel, node->dtype);
    uint8_t *target = instance->files[node->blob.file].bytes + node->blob.offset;
    ane_dtype_convert_row(target, node->dtype, values, ANE_FP32, (size_t)numel);
    ane_tensor_release(&packed);
    instance->dirty = 1; /* committed before the next eval: one weight-file rewrite per batch */
    return ANE_OK;
}

/* ------------------------------------------------------------------ the vtable */

static int device_available(char *why, size_t size) {
    ane_error err;
    if (ane_objc_bind(&err) != ANE_OK) {
        snprintf(why, size, "%s", err.message);
        return 0;
    }
    static int prepared;
    if (!prepared) {
        prepared = 1;
        ane_surface_use_platform(&iosurfaces);
        sweep_stale_dirs();
        atexit(remove_own_dirs);
    }
    return 1;
}

static void device_close(ane_compiled *compiled) {
    device_compiled *p = (device_compiled *)compiled;
    if (!p) return;
    if (p->compiled_model) { /* (release may autorelease what the model held: inside a pool) */
        void *pool = ane_objc.objc_autoreleasePoolPush();
        ANE_SEND0(release, p->compiled_model);
        ane_objc.objc_autoreleasePoolPop(pool);
        dir_release(p->identifier);
    }
    if (p->holds_dir) dir_release(p->identifier);
    ane_graph_free(p->graph);
    free(p->inputs);
    free(p->outputs);
    free(p->mil);
    free_files(p->files, p->nfiles);
    free(p);
}

static ane_status device_compile_in_pool(device_compiled *p, const ane_compile_options *options, const char *mil,
                                         size_t length, const ane_mil_file *files, int nfiles, ane_error *err) {
    if (options->profile != ANE_PROFILE_ANE)
        return ane_fail(err, ANE_ERR_ARGUMENT, "backend 'ane' runs programs of profile 'ane' only; profile 'cpu' is "
                        "the CPU path of backend 'sim' (pass backend = 'sim')");
    if (options->precision != ANE_PRECISION_FP16)
        return ane_fail(err, ANE_ERR_ARGUMENT, "backend 'ane' computes in fp16 only (ANE-26); the fp32 reference is "
                        "backend 'sim' with precision 'fp32' (pass backend = 'sim')");
    if (nfiles > DEVICE_MAX_FILES)
        return ane_fail(err, ANE_ERR_ARGUMENT, "backend 'ane': at most %d weight files per program", DEVICE_MAX_FILES);
    ane_status status = ane_parse_mil(mil, length, "model.mil", files, nfiles, NULL, &p->graph, &p->base.notes, err);
    if (status) return status;
    ane_graph *g = p->graph;
    snprintf(p->base.name, sizeof p->base.name, "%s", options->name[0] ? options->name : g->name);
    snprintf(g->name, sizeof g->name, "%s", p->base.name);
    if (!options->rules_checked) status = ane_check_device_rules(g, options, ane_device_backend.supports_op, NULL, err);
    if (!status) status = ane_graph_ports(g, &p->inputs, &p->ninputs, &p->outputs, &p->noutputs, err);
    if (status) return status;
    if (p->ninputs > DEVICE_MAX_PORTS || p->noutputs > DEVICE_MAX_PORTS)
        return ane_fail(err, ANE_ERR_ARGUMENT, "backend 'ane': program '%s' has more than %d inputs or outputs",
                        p->base.name, DEVICE_MAX_PORTS);
    p->base.sram_spill_nodes = options->rules_checked ? options->sram_spill_nodes : ane_sram_spill_nodes(g);
    ane_target target;
    ane_target_complete(&options->target, &target);
    p->io_rows = target.io_rows;
    p->mil = malloc(length + 1);
    if (!p->mil) return ane_fail(err, ANE_ERR_NOMEM, "backend 'ane': out of memory copying the MIL");
    memcpy(p->mil, mil, length);
    p->mil_length = length;
    status = copy_files(p->files, files, NULL, nfiles, err);
    if (status) return status;
    p->nfiles = nfiles;
    status = new_model(p, p->files, &p->compiled_model, p->identifier, sizeof p->identifier, err);
    if (status) return status;
    dir_acquire(p->identifier); /* the compiled model's, handed to the first instance */
    dir_acquire(p->identifier); /* the program's own: later instances copy compiled files from it */
    p->holds_dir = 1;
    return compile_model(p, p->compiled_model, p->identifier, p->files, 0, err);
}

static ane_status device_compile(const ane_compile_options *options, const char *mil, size_t length,
                                 const ane_mil_file *files, int nfiles, ane_compiled **out, ane_error *err) {
    *out = NULL;
    char why[ANE_ERROR_MESSAGE_MAX];
    if (!device_available(why, sizeof why))
        return ane_fail(err, ANE_ERR_UNAVAILABLE, "backend 'ane' is not available: %s", why);
    device_compiled *p = calloc(1, sizeof *p);
    if (!p) return ane_fail(err, ANE_ERR_NOMEM, "out of memory compiling a program");
    p->base.backend = &ane_device_backend;
    void *pool = ane_objc.objc_autoreleasePoolPush();
    ane_status status = device_compile_in_pool(p, options, mil, length, files, nfiles, err);
    ane_objc.objc_autoreleasePoolPop(pool);
    if (status) {
        device_close(&p->base);
        return status;
    }
    *out = &p->base;
    return ANE_OK;
}

static void device_ports(const ane_compiled *compiled, const ane_port **inputs, int *ninputs, const ane_port **outputs,
                         int *noutputs) {
    const device_compiled *p = (const device_compiled *)compiled;
    *inputs = p->inputs;
    *ninputs = p->ninputs;
    *outputs = p->outputs;
    *noutputs = p->noutputs;
}

static void device_unload(ane_loaded *loaded) {
    device_loaded *instance = (device_loaded *)loaded;
    if (!instance) return;
    void *pool = ane_objc.objc_autoreleasePoolPush();
    drop_requests(instance);
    for (int i = 0; i < DEVICE_MAX_PORTS; i++) {
        cf_release(instance->own_in[i]);
        cf_release(instance->own_out[i]);
    }
    if (instance->model) {
        unload_model(instance->model);
        dir_release(instance->identifier);
    }
    ane_objc.objc_autoreleasePoolPop(pool);
    free_files(instance->files, instance->program->nfiles);
    free(instance);
}

static ane_status device_load_in_pool(device_compiled *p, device_loaded *instance, ane_error *err) {
    ane_status status = copy_files(instance->files, NULL, p->files, p->nfiles, err);
    if (status) return status;
    if (p->compiled_model) { /* the first instance takes the model compile() compiled */
        instance->model = p->compiled_model;
        p->compiled_model = NULL;
        snprintf(instance->identifier, sizeof instance->identifier, "%s", p->identifier);
    } else {
        status = new_model(p, instance->files, &instance->model, instance->identifier, sizeof instance->identifier, err);
        if (status) return status;
        dir_acquire(instance->identifier);
        /* an identifier that ignores weight bytes may name another instance's patched program */
        int cached = device_stats.identifier_hashes_weights && ANE_SEND0(model_compiled_exists, instance->model);
        if (!cached) status = compile_model(p, instance->model, instance->identifier, instance->files, 1, err);
        if (status) return status;
    }
    status = load_model(p, instance->model, instance->identifier, err);
    if (status) {
        ANE_SEND0(release, instance->model);
        dir_release(instance->identifier);
        instance->model = NULL;
        return status;
    }
    return verify_ports(instance, err);
}

static ane_status device_load(ane_compiled *compiled, ane_loaded **out, ane_error *err) {
    device_compiled *p = (device_compiled *)compiled;
    *out = NULL;
    device_loaded *instance = calloc(1, sizeof *instance);
    if (!instance) return ane_fail(err, ANE_ERR_NOMEM, "out of memory loading a program");
    instance->base.backend = &ane_device_backend;
    instance->program = p;
    void *pool = ane_objc.objc_autoreleasePoolPush();
    ane_status status = device_load_in_pool(p, instance, err);
    ane_objc.objc_autoreleasePoolPop(pool);
    if (status) {
        device_unload(&instance->base);
        return status;
    }
    *out = &instance->base;
    return ANE_OK;
}

static void device_weights(const ane_compiled *compiled, void (*visit)(void *, const ane_node *), void *context) {
    const device_compiled *p = (const device_compiled *)compiled;
    for (int i = 0; i < p->graph->count; i++)
        if (p->graph->nodes[i]->op == ANE_OP_CONST && !p->graph->nodes[i]->dead) visit(context, p->graph->nodes[i]);
}

void ane_device_stats_get(ane_device_stats *out) {
    *out = device_stats;
    out->patch_strategy = strategy_names[process_strategy];
    out->loaded = loaded_programs;
    out->loaded_limit = DEVICE_MAX_LOADED;
    out->bound = ane_objc.objc_msgSend != NULL;
    out->is_double = ane_objc.is_double;
    out->framework = ane_objc.framework;
}

int ane_device_chip(char *out, size_t size) {
#if defined(__APPLE__)
    size_t length = size;
    if (sysctlbyname("machdep.cpu.brand_string", out, &length, NULL, 0) == 0 && out[0]) return 1;
#endif
    (void)out, (void)size;
    return 0;
}

void ane_device_encoding_report(void (*line)(void *context, const char *text), void *context) {
    ane_objc_encoding_report(line, context);
}

const ane_backend ane_device_backend = {
    .name = "ane",
    .available = device_available,
    .supports_op = ane_device_op_set,
    .compile = device_compile,
    .ports = device_ports,
    .load = device_load,
    .eval = device_eval,
    .patch = device_patch,
    .write_input = device_write_input,
    .read_input = device_read_input,
    .commit = device_commit,
    .weights = device_weights,
    .unload = device_unload,
    .close = device_close,
};
