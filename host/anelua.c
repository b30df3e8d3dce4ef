/* anelua: a Lua 5.4 runner with the `ane` module preloaded.
 *
 * The command line follows the stock `lua` interpreter (-e, -l, -i, -v, -E, -W, -, --, the
 * `arg` table, LUA_INIT, a #! first line) plus `--backend NAME`. With no script, or with
 * -i, it starts a REPL: each line is tried as `return <line>` first so expressions print,
 * incomplete statements keep reading, readline gives editing and a history in
 * ~/.anelua_history, errors print a traceback, and Ctrl-C interrupts a running chunk
 * (through a Lua hook, and through the core's interrupt flag for long C loops) without
 * leaving the REPL. At the prompt Ctrl-C discards the current input. Where OpenBLAS took
 * the CPU for an unknown model and chose its generic kernels, or the kernel gives huge
 * pages on request, it runs itself again once with the settings a process reads only as
 * it starts (prepare_environment). */
#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#if defined(ANELUA_EDITLINE_HEADER) /* libedit under its own name (Debian's libedit-dev) */
#include <editline/readline.h>
#else /* GNU readline, or libedit under readline's name (macOS) */
#include <readline/history.h>
#include <readline/readline.h>
#endif

#include "../ane_core/base/interrupt.h"
#include "../ane_core/tensor/blas.h"
#include "../bindings/ane_lua.h"

int luaopen_anelua_http(lua_State *L); /* host/http.c */

static const char *program_name = "anelua";

/* ------------------------------------------------------------------ messages */

static void print_usage_to(FILE *out, const char *bad_option) {
    if (bad_option) {
        if (bad_option[1] == 'e' || bad_option[1] == 'l' || strcmp(bad_option, "--backend") == 0 ||
            strcmp(bad_option, "--probe") == 0 || strcmp(bad_option, "--report") == 0)
            fprintf(stderr, "%s: '%s' needs an argument\n", program_name, bad_option);
        else
            fprintf(stderr, "%s: unrecognized option '%s'\n", program_name, bad_option);
    }
    fprintf(out,
            "usage: %s [options] [script [args]]\n"
            "Available options are:\n"
            "  -e stat         execute string 'stat'\n"
            "  -i              enter interactive mode after executing 'script'\n"
            "  -l mod          require library 'mod' into global 'mod'\n"
            "  -l g=mod        require library 'mod' into global 'g'\n"
            "  -v, --version   show version information\n"
            "  -E              ignore environment variables\n"
            "  -W              turn warnings on\n"
            "  --backend NAME  default backend: sim (CPU simulator) or ane (the device);\n"
            "                  also set by ANELUA_BACKEND\n"
            "  --probe LIST    run probes of the device (all, or names separated by commas;\n"
            "                  ane.probe.list() names them) and write a report (docs/probes.md)\n"
            "  --report BASE   where --probe writes BASE.md and BASE.json (ane-probe-report)\n"
            "  --              stop handling options\n"
            "  -               stop handling options and execute stdin\n"
            "  -h, --help      this text\n"
            "Commands: %s run MODEL, chat MODEL, serve MODEL (OpenAI's HTTP API); each with --help.\n"
            "Exit status: 0 done, 1 failed, 2 a mistake in the options, 130 stopped by Ctrl-C.\n"
            "With no script (and a terminal): the REPL, with `ane` as a global (docs/repl.md).\n"
            "Examples and the shipped data: share/anelua (installed) or the checkout; man anelua.\n",
            program_name, program_name);
}

static void print_usage(const char *bad_option) { print_usage_to(stderr, bad_option); }

static void print_message(const char *message) {
    if (program_name) fprintf(stderr, "%s: ", program_name);
    fprintf(stderr, "%s\n", message);
    fflush(stderr);
}

/* Prints the error on top of the stack (if any) and returns the status unchanged. */
static int report(lua_State *L, int status) {
    if (status != LUA_OK) {
        const char *message = lua_tostring(L, -1);
        if (!message) message = "(error object is not a string)";
        print_message(message);
        lua_pop(L, 1);
    }
    return status;
}

static void print_version(void) {
    printf("anelua %s (%s), default backend %s\n", ANELUA_VERSION, LUA_RELEASE, ane_lua_default_backend());
    fflush(stdout);
}

/* ------------------------------------------------------------------ interrupts */

static lua_State *running_state = NULL;   /* the state running a chunk, for the handler */
static volatile sig_atomic_t prompt_interrupted = 0;
static volatile sig_atomic_t chunk_stopped = 0; /* a Ctrl-C stopped the running chunk (not a request it polls) */

static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    lua_sethook(L, NULL, 0, 0);
    ane_interrupt_clear();
    luaL_error(L, "interrupted!");
}

static void on_sigint(int signal_number) {
    (void)signal_number;
    if (running_state) {
        /* A script in graceful mode polls the stop request; otherwise stop the chunk.
         * lua_sethook is the one Lua call that is safe from a signal handler. */
        if (ane_interrupt_request()) {
            chunk_stopped = 1;
            lua_sethook(running_state, interrupt_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
        }
    } else {
        prompt_interrupted = 1;
    }
}

static void install_sigint_handler(void) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigint;
    sigemptyset(&action.sa_mask);
    action.sa_flags = 0; /* no SA_RESTART: a select() at the prompt must wake up */
    sigaction(SIGINT, &action, NULL);
}

/* ------------------------------------------------------------------ running chunks */

static int message_handler(lua_State *L) {
    const char *message = lua_tostring(L, 1);
    if (chunk_stopped && message) return 1; /* the user's Ctrl-C, not a fault: its message, no traceback */
    if (!message) {
        if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
        message = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    }
    luaL_traceback(L, L, message, 1);
    return 1;
}

/* Calls the function below `nargs` arguments with a traceback handler and Ctrl-C armed. */
static int docall(lua_State *L, int nargs, int nresults) {
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, message_handler);
    lua_insert(L, base);
    chunk_stopped = 0;
    running_state = L;
    int status = lua_pcall(L, nargs, nresults, base);
    running_state = NULL;
    lua_sethook(L, NULL, 0, 0); /* a Ctrl-C that arrived as the chunk ended */
    ane_interrupt_clear();
    lua_remove(L, base);
    return status;
}

static int run_chunk(lua_State *L, int status) {
    if (status == LUA_OK) status = docall(L, 0, 0);
    return report(L, status);
}

static int run_file(lua_State *L, const char *name) { return run_chunk(L, luaL_loadfile(L, name)); }

static int run_string(lua_State *L, const char *code, const char *name) {
    return run_chunk(L, luaL_loadbuffer(L, code, strlen(code), name));
}

/* -l mod or -l global=mod */
static int run_require(lua_State *L, const char *spec) {
    const char *equals = strchr(spec, '=');
    const char *module = equals ? equals + 1 : spec;
    lua_getglobal(L, "require");
    lua_pushstring(L, module);
    int status = docall(L, 1, 1);
    if (status == LUA_OK) {
        if (equals) lua_pushlstring(L, spec, (size_t)(equals - spec));
        else lua_pushstring(L, module);
        lua_insert(L, -2);
        lua_setglobal(L, lua_tostring(L, -2));
        lua_pop(L, 1);
    }
    return report(L, status);
}

/* The host's commands (`anelua run MODEL ...`, `anelua chat MODEL`, `anelua serve MODEL`): a first argument of that name runs
 * lua/ane/commands/<name>.lua's main(...) unless a file of that name is there (`./run` is a script). */
static const char *const COMMANDS[] = {"run", "chat", "serve", NULL};

static int is_command(const char *name) {
    for (int i = 0; COMMANDS[i]; i++)
        if (strcmp(name, COMMANDS[i]) == 0) return access(name, F_OK) != 0;
    return 0;
}

/* Runs the script with the arguments after it as `...`. */
static int run_script(lua_State *L, char **argv, int script_index) {
    const char *name = argv[script_index];
    if (strcmp(name, "-") == 0 && strcmp(argv[script_index - 1], "--") != 0) name = NULL; /* stdin */
    int status;
    if (name && is_command(name)) {
        char chunk[128];
        snprintf(chunk, sizeof chunk, "return require('ane.commands.%s').main(...)", name);
        status = luaL_loadbuffer(L, chunk, strlen(chunk), name);
    } else {
        status = luaL_loadfile(L, name);
    }
    if (status == LUA_OK) {
        lua_getglobal(L, "arg");
        if (lua_type(L, -1) != LUA_TTABLE) return report(L, luaL_error(L, "'arg' is not a table"));
        int count = (int)luaL_len(L, -1);
        luaL_checkstack(L, count + 3, "too many arguments to script");
        for (int i = 1; i <= count; i++) lua_geti(L, -i, i);
        lua_remove(L, -count - 1);
        status = docall(L, count, LUA_MULTRET);
    }
    return report(L, status);
}

/* The `arg` table: arg[0] is the script, negative indices the interpreter and options. */
static void create_arg_table(lua_State *L, char **argv, int argc, int script_index) {
    if (script_index == argc) script_index = 0; /* no script: arg[0] is the interpreter */
    lua_createtable(L, argc - script_index, script_index + 1);
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - script_index);
    }
    lua_setglobal(L, "arg");
}

static int run_lua_init(lua_State *L) {
    const char *name = "=LUA_INIT_5_4";
    const char *init = getenv("LUA_INIT_5_4");
    if (!init) {
        name = "=LUA_INIT";
        init = getenv("LUA_INIT");
    }
    if (!init) return LUA_OK;
    if (init[0] == '@') return run_file(L, init + 1);
    return run_string(L, init, name);
}

/* ------------------------------------------------------------------ the REPL */

static char history_path[4096];
static char *finished_line = NULL;
static int line_done = 0;

static void on_readline_line(char *line) {
    finished_line = line;
    line_done = 1;
    rl_callback_handler_remove();
}

typedef enum { READ_OK, READ_EOF, READ_INTERRUPTED } read_result;

/* Reads one line with readline's callback interface, so that Ctrl-C (which only sets a
 * flag) can abandon the line cleanly. Non-terminal input is read with fgets. */
static read_result read_line(const char *prompt, char **out) {
    if (!isatty(STDIN_FILENO)) {
        fputs(prompt, stdout);
        fflush(stdout);
        char buffer[65536];
        if (!fgets(buffer, sizeof buffer, stdin)) return READ_EOF;
        size_t length = strlen(buffer);
        if (length && buffer[length - 1] == '\n') buffer[--length] = '\0';
        *out = strdup(buffer);
        return READ_OK;
    }
    line_done = 0;
    finished_line = NULL;
    prompt_interrupted = 0;
    rl_callback_handler_install(prompt, on_readline_line);
    while (!line_done) {
        fd_set readable;
        FD_ZERO(&readable);
        FD_SET(STDIN_FILENO, &readable);
        int ready = select(STDIN_FILENO + 1, &readable, NULL, NULL, NULL);
        if (prompt_interrupted) {
            prompt_interrupted = 0;
            fputs("^C\n", stdout); /* at the cursor, before readline resets the line */
            fflush(stdout);
            rl_free_line_state();
#if defined(RL_READLINE_VERSION) && RL_READLINE_VERSION >= 0x0700 /* GNU readline 7 (libedit says 0x0402) */
            rl_callback_sigcleanup();
#endif
            rl_callback_handler_remove();
            return READ_INTERRUPTED;
        }
        if (ready < 0) {
            if (errno == EINTR) continue;
            rl_callback_handler_remove();
            return READ_EOF;
        }
        rl_callback_read_char();
    }
    if (!finished_line) return READ_EOF;
    *out = finished_line;
    return READ_OK;
}

static const char *get_prompt(lua_State *L, int continuation) {
    lua_getglobal(L, continuation ? "_PROMPT2" : "_PROMPT");
    const char *prompt = lua_tostring(L, -1);
    if (!prompt) prompt = continuation ? ">> " : "> ";
    lua_pop(L, 1);
    return prompt; /* stays valid: globals are anchored, literals are static */
}

#define HISTORY_LINES 1000

/* Adds a line to the history (at most HISTORY_LINES kept in memory) and appends it to the
 * file, which is cut back to HISTORY_LINES now and then: a long session neither grows in
 * memory nor rewrites the whole file per line (found by scripts/repl_cycles.sh). */
static void remember(const char *text) {
    static int appended;
    if (!isatty(STDIN_FILENO) || !*text) return;
    add_history(text);
    if (!history_path[0]) return;
    if (append_history(1, history_path) != 0) write_history(history_path); /* a first line creates the file */
    if (++appended % 100 == 0) history_truncate_file(history_path, HISTORY_LINES);
}

/* ------------------------------------------------------------------ lines for scripts */

/* The host's line editor for scripts (require("anelua.lines"), e.g. `anelua chat`):
 * read(prompt) -> the line (kept in the history), or nil at the end of input, or false when
 * Ctrl-C abandoned it; history(name) keeps this script's lines in ~/.anelua_<name>_history.
 * While a line is read Ctrl-C belongs to the prompt, as in the REPL, not to the script. */
static int lines_history(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    const char *home = getenv("HOME");
    for (const char *c = name; *c; c++) {
        if (!isalnum((unsigned char)*c) && *c != '-' && *c != '_') return luaL_argerror(L, 1, "letters, digits, - and _");
    }
    stifle_history(HISTORY_LINES);
    if (home && *home && isatty(STDIN_FILENO)) {
        snprintf(history_path, sizeof history_path, "%s/.anelua_%s_history", home, name);
        read_history(history_path);
        history_truncate_file(history_path, HISTORY_LINES);
    }
    return 0;
}

static int lines_read(lua_State *L) {
    const char *prompt = luaL_optstring(L, 1, "> ");
    rl_readline_name = "anelua";
    rl_catch_signals = 0;
    lua_State *was_running = running_state;
    running_state = NULL; /* Ctrl-C now abandons the line */
    char *line = NULL;
    read_result result = read_line(prompt, &line);
    running_state = was_running;
    if (result == READ_INTERRUPTED) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (result == READ_EOF) {
        if (isatty(STDIN_FILENO)) fputc('\n', stdout); /* Ctrl-D leaves the cursor after the prompt */
        lua_pushnil(L);
        return 1;
    }
    remember(line);
    lua_pushstring(L, line);
    free(line);
    return 1;
}

static int open_lines(lua_State *L) {
    static const luaL_Reg functions[] = { { "read", lines_read }, { "history", lines_history }, { NULL, NULL } };
    luaL_newlib(L, functions);
    return 1;
}

/* A syntax error that ends at <eof> means the statement is unfinished. */
static int is_incomplete(lua_State *L, int status) {
    if (status != LUA_ERRSYNTAX) return 0;
    size_t length;
    const char *message = lua_tolstring(L, -1, &length);
    const char *eof_mark = "<eof>";
    size_t mark_length = strlen(eof_mark);
    if (length >= mark_length && strcmp(message + length - mark_length, eof_mark) == 0) {
        lua_pop(L, 1);
        return 1;
    }
    return 0;
}

/* Reads and compiles one statement (several lines if needed). Leaves the compiled chunk
 * (or an error message) on the stack and returns the load status, or -1 at end of input. */
static int read_statement(lua_State *L) {
    char *line;
    read_result result = read_line(get_prompt(L, 0), &line);
    if (result == READ_EOF) return -1;
    if (result == READ_INTERRUPTED) return -2;

    /* Expressions first: "return <line>". */
    const char *with_return = lua_pushfstring(L, "return %s;", line);
    int status = luaL_loadbuffer(L, with_return, strlen(with_return), "=stdin");
    if (status == LUA_OK) {
        lua_remove(L, -2);
        remember(line);
        free(line);
        return status;
    }
    lua_pop(L, 2);

    luaL_Buffer text;
    luaL_buffinit(L, &text);
    luaL_addstring(&text, line);
    free(line);
    luaL_pushresult(&text); /* the statement so far */
    for (;;) {
        size_t length;
        const char *code = lua_tolstring(L, -1, &length);
        status = luaL_loadbuffer(L, code, length, "=stdin");
        if (!is_incomplete(L, status)) break;
        result = read_line(get_prompt(L, 1), &line);
        if (result != READ_OK) {
            lua_pop(L, 1);
            return result == READ_EOF ? -1 : -2;
        }
        lua_pushfstring(L, "%s\n%s", code, line);
        free(line);
        lua_remove(L, -2);
    }
    remember(lua_tostring(L, -2));
    lua_remove(L, -2);
    return status;
}

/* The REPL's helpers from ane.repl (registry references): the printer and the completer. */
static int show_ref = LUA_NOREF, complete_ref = LUA_NOREF, notes_ref = LUA_NOREF;
static lua_State *completion_state;

static void load_repl_helpers(lua_State *L) {
    static const char setup[] = "local repl = require('ane.repl')\n"
                                "help = function(...) print(repl.help(...)) end\n"
                                "return repl.show, repl.complete, repl.notes\n";
    if (luaL_loadbuffer(L, setup, sizeof setup - 1, "=repl") != LUA_OK || lua_pcall(L, 0, 3, 0) != LUA_OK) {
        lua_pop(L, 1); /* plain printing and no completion, as lua.c */
        return;
    }
    notes_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    complete_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    show_ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* readline: the completions of the word before the cursor, from ane.repl.complete. */
static char *next_completion(const char *text, int state) {
    (void)text;
    static int index, count;
    lua_State *L = completion_state;
    if (state == 0) {
        lua_settop(L, 0);
        lua_rawgeti(L, LUA_REGISTRYINDEX, complete_ref);
        lua_pushlstring(L, rl_line_buffer, (size_t)rl_point);
        if (lua_pcall(L, 1, 1, 0) != LUA_OK || !lua_istable(L, -1)) {
            lua_settop(L, 0);
            return NULL;
        }
        index = 1;
        count = (int)luaL_len(L, -1);
    }
    if (lua_gettop(L) < 1 || index > count) return NULL;
    lua_rawgeti(L, -1, index++);
    char *match = lua_isstring(L, -1) ? strdup(lua_tostring(L, -1)) : NULL;
    lua_pop(L, 1);
    return match;
}

static char **complete_names(const char *text, int start, int end) {
    (void)start;
    (void)end;
    rl_attempted_completion_over = 1; /* never file names */
    rl_completion_append_character = '\0'; /* readline resets it before every completion */
    if (complete_ref == LUA_NOREF) return NULL;
    return rl_completion_matches(text, next_completion);
}

static void print_results(lua_State *L) {
    int count = lua_gettop(L);
    if (count == 0) return;
    luaL_checkstack(L, LUA_MINSTACK, "too many results to print");
    if (show_ref != LUA_NOREF) lua_rawgeti(L, LUA_REGISTRYINDEX, show_ref);
    else lua_getglobal(L, "print");
    lua_insert(L, 1);
    if (lua_pcall(L, count, 0, 0) != LUA_OK)
        print_message(lua_pushfstring(L, "error calling 'print' (%s)", lua_tostring(L, -1)));
}

/* What the session learned that the user should hear once (ane.repl.notes), e.g. which
 * weight-update strategy the device backend found. */
static void print_notes(lua_State *L) {
    if (notes_ref == LUA_NOREF) return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, notes_ref);
    if (lua_pcall(L, 0, 1, 0) == LUA_OK && lua_isstring(L, -1)) {
        fprintf(stdout, "%s\n", lua_tostring(L, -1));
        fflush(stdout);
    }
    lua_settop(L, 0);
}

static void repl(lua_State *L) {
    const char *saved_name = program_name;
    program_name = NULL;
    const char *home = getenv("HOME");
    if (home && *home && isatty(STDIN_FILENO)) {
        snprintf(history_path, sizeof history_path, "%s/.anelua_history", home);
        read_history(history_path);
        history_truncate_file(history_path, HISTORY_LINES);
    }
    stifle_history(HISTORY_LINES);
    rl_readline_name = "anelua";
    rl_catch_signals = 0;
    load_repl_helpers(L);
    completion_state = lua_newthread(L); /* its own stack, so completing never disturbs a statement */
    luaL_ref(L, LUA_REGISTRYINDEX);
    rl_attempted_completion_function = complete_names;
    rl_basic_word_break_characters = " \t\n\"\\'`@$><=;|&{(,+-*/%^~#[]";
    install_sigint_handler();
    lua_settop(L, 0); /* results are counted from an empty stack */
    for (;;) {
        int status = read_statement(L);
        if (status == -1) break;
        if (status == -2) continue; /* Ctrl-C at the prompt: start over */
        if (status == LUA_OK) status = docall(L, 0, LUA_MULTRET);
        if (status == LUA_OK) print_results(L);
        else {
            const char *message = lua_tostring(L, -1);
            fprintf(stderr, "%s\n", message ? message : "(error object is not a string)");
            fflush(stderr);
        }
        lua_settop(L, 0);
        print_notes(L);
    }
    lua_settop(L, 0);
    fputc('\n', stdout);
    fflush(stdout);
    program_name = saved_name;
}

/* --probe LIST: ane.probe.main(LIST, report base) (lua/ane/probe.lua). */
/* Exit statuses: success, a failure, and a mistake in how the host was called (a usage error). */
enum { EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/* Calls ane.probe's `function` with the probe list and the report's base name (or nil); a
 * misspelled name is the user's mistake: its message, no traceback. Returns the status. */
static int call_probe_module(lua_State *L, const char *function, const char *list, const char *report_base) {
    lua_getglobal(L, "require");
    lua_pushliteral(L, "ane.probe");
    int status = docall(L, 1, 1);
    if (status == LUA_OK) {
        lua_getfield(L, -1, function);
        lua_pushstring(L, list);
        if (report_base) lua_pushstring(L, report_base);
        else lua_pushnil(L);
        status = lua_pcall(L, 2, 0, 0);
        if (status == LUA_OK) lua_pop(L, 1);
    }
    return report(L, status);
}

/* Whether every probe `list` names exists (else the message, as a usage error). */
static int probes_exist(lua_State *L, const char *list) { return call_probe_module(L, "select", list, NULL) == LUA_OK; }

static int run_probes(lua_State *L, const char *list, const char *report_base) {
    return call_probe_module(L, "main", list, report_base);
}

/* ------------------------------------------------------------------ main */

typedef struct options {
    int interactive, version, ignore_env, warnings, has_exec;
    int script_index; /* argc when there is no script */
    const char *backend, *probe, *report;
} options;

/* Parses options up to the script; returns 0 on a bad option (after printing usage). */
static int parse_options(int argc, char **argv, options *opts) {
    memset(opts, 0, sizeof *opts);
    opts->script_index = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            opts->script_index = i;
            return 1;
        }
        if (strcmp(a, "--") == 0) {
            opts->script_index = i + 1 < argc ? i + 1 : argc;
            return 1;
        }
        if (strcmp(a, "-") == 0) {
            opts->script_index = i;
            return 1;
        }
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            print_usage_to(stdout, NULL);
            exit(EXIT_SUCCESS);
        }
        if (strcmp(a, "--version") == 0) {
            opts->version = 1;
            continue;
        }
        if (strcmp(a, "--backend") == 0) {
            if (++i >= argc) return print_usage(a), 0;
            opts->backend = argv[i];
        } else if (strncmp(a, "--backend=", 10) == 0) {
            opts->backend = a + 10;
        } else if (strcmp(a, "--probe") == 0 || strcmp(a, "--report") == 0) {
            if (++i >= argc) return print_usage(a), 0;
            *(a[2] == 'p' ? &opts->probe : &opts->report) = argv[i];
        } else if (strncmp(a, "--probe=", 8) == 0) {
            opts->probe = a + 8;
        } else if (strncmp(a, "--report=", 9) == 0) {
            opts->report = a + 9;
        } else if (strcmp(a, "-i") == 0) {
            opts->interactive = opts->version = 1;
        } else if (strcmp(a, "-v") == 0) {
            opts->version = 1;
        } else if (strcmp(a, "-E") == 0) {
            opts->ignore_env = 1;
        } else if (strcmp(a, "-W") == 0) {
            opts->warnings = 1;
        } else if (a[1] == 'e' || a[1] == 'l') {
            if (a[1] == 'e') opts->has_exec = 1;
            if (a[2] == '\0' && (++i >= argc || argv[i][0] == '-')) return print_usage(a), 0;
        } else {
            return print_usage(a), 0;
        }
    }
    return 1;
}

/* Runs the -e and -l options in order. */
static int run_exec_options(lua_State *L, char **argv, int script_index) {
    for (int i = 1; i < script_index; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || (a[1] != 'e' && a[1] != 'l') || a[1] == '-') {
            if (strcmp(a, "--backend") == 0 || strcmp(a, "--probe") == 0 || strcmp(a, "--report") == 0) i++;
            continue;
        }
        const char *value = a[2] ? a + 2 : argv[++i];
        int status = a[1] == 'e' ? run_string(L, value, "=(command line)") : run_require(L, value);
        if (status != LUA_OK) return 0;
    }
    return 1;
}

static int protected_main(lua_State *L) {
    int argc = (int)lua_tointeger(L, 1);
    char **argv = lua_touserdata(L, 2);
    options opts;
    if (!parse_options(argc, argv, &opts)) {
        lua_pushinteger(L, EXIT_USAGE);
        return 1;
    }
    if (opts.report && !opts.probe) {
        print_message("--report names where --probe writes its report; give --probe too");
        lua_pushinteger(L, EXIT_USAGE);
        return 1;
    }
    luaL_checkversion(L);
    if (opts.ignore_env) {
        lua_pushboolean(L, 1);
        lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV"); /* read by the package library */
    }
    luaL_openlibs(L);
    lua_newtable(L); /* ane.compile prints each distinct warning once, on stderr, in scripts and the REPL */
    lua_setfield(L, LUA_REGISTRYINDEX, "ane.repl_warnings");
    luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
    lua_pushcfunction(L, luaopen_ane);
    lua_setfield(L, -2, "ane");
    lua_pushcfunction(L, open_lines);
    lua_setfield(L, -2, "anelua.lines");
    lua_pushcfunction(L, luaopen_anelua_http); /* host/http.c: `anelua serve`'s server */
    lua_setfield(L, -2, "anelua.http");
    lua_pop(L, 1);
    ane_lua_add_library_path(L);
    if (opts.backend) {
        char message[ANE_ERROR_MESSAGE_MAX + 64];
        int refused = ane_lua_set_default_backend(opts.backend, message, sizeof message);
        if (refused) {
            print_message(message);
            lua_pushinteger(L, refused == -2 ? EXIT_USAGE : EXIT_FAILURE); /* a name it does not know: usage */
            return 1;
        }
    } else {
        char message[ANE_ERROR_MESSAGE_MAX + 64];
        if (ane_lua_backend_from_environment(message, sizeof message) != 0) {
            print_message(message);
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    create_arg_table(L, argv, argc, opts.script_index);
    lua_gc(L, LUA_GCRESTART);
    lua_gc(L, LUA_GCGEN, 0, 0);
    if (opts.warnings) lua_warning(L, "@on", 0);
    if (opts.version) print_version();
    if (!opts.ignore_env && run_lua_init(L) != LUA_OK) {
        lua_pushboolean(L, 0);
        return 1;
    }
    install_sigint_handler();
    if (!run_exec_options(L, argv, opts.script_index)) {
        if (chunk_stopped) lua_pushinteger(L, EXIT_INTERRUPTED);
        else lua_pushboolean(L, 0);
        return 1;
    }
    if (opts.probe && !probes_exist(L, opts.probe)) {
        lua_pushinteger(L, EXIT_USAGE);
        return 1;
    }
    if (opts.probe && run_probes(L, opts.probe, opts.report) != LUA_OK) {
        lua_pushboolean(L, 0);
        return 1;
    }
    if (opts.script_index < argc && run_script(L, argv, opts.script_index) != LUA_OK) {
        if (chunk_stopped) lua_pushinteger(L, EXIT_INTERRUPTED); /* as shells report SIGINT */
        else lua_pushboolean(L, 0);
        return 1;
    }
    int no_script = opts.script_index == argc;
    if (opts.interactive || (no_script && !opts.has_exec && !opts.version && !opts.probe)) {
        if (opts.interactive || isatty(STDIN_FILENO)) {
            if (!opts.version) print_version();
            /* In the REPL `ane` is a global for convenience; scripts require it. */
            lua_getglobal(L, "require");
            lua_pushliteral(L, "ane");
            if (docall(L, 1, 1) == LUA_OK) lua_setglobal(L, "ane");
            else report(L, LUA_ERRRUN);
            repl(L);
        } else if (run_file(L, NULL) != LUA_OK) { /* piped input runs as a script */
            lua_pushboolean(L, 0);
            return 1;
        }
    }
    lua_pushboolean(L, 1);
    return 1;
}

/* A setting the process reads only as it starts, so it starts again, once, with it set:
 * OPENBLAS_CORETYPE, where OpenBLAS took the CPU for an unknown model and chose its generic
 * kernels (blas.c says when and why). A setting already in the environment, the user's or
 * this re-run's, stands. The re-run puts the environment back as the user gave it
 * (ANELUA_ADDED_ENV), so the programs a script starts (a benchmark's peers) do not inherit
 * it. If the re-run cannot start, the process goes on as it is. (Transparent huge pages are
 * asked for by the storage of large blocks itself, ane_core/tensor/storage.c; asking glibc
 * for them on all of malloc's heap made start-up slower: docs/performance-log.md, stop 39.) */
#if defined(__linux__)
static void restore_user_environment(void) {
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("ANELUA_ADDED_ENV");
}
#endif

static void prepare_environment(char **argv) {
#if defined(__linux__)
    if (getenv("ANELUA_ADDED_ENV")) { /* this is the re-run */
        restore_user_environment();
        return;
    }
    const char *better = ane_blas_better_kernels();
    if (!better || getenv("OPENBLAS_CORETYPE")) return;
    setenv("OPENBLAS_CORETYPE", better, 1);
    setenv("ANELUA_ADDED_ENV", "OPENBLAS_CORETYPE", 1);
    execv("/proc/self/exe", argv);
    restore_user_environment(); /* could not start again: go on as we are */
#else
    (void)argv;
#endif
}

int main(int argc, char **argv) {
    prepare_environment(argv);
    if (argv[0] && argv[0][0]) program_name = argv[0];
    lua_State *L = luaL_newstate();
    if (!L) {
        print_message("cannot create state: not enough memory");
        return EXIT_FAILURE;
    }
    lua_gc(L, LUA_GCSTOP);
    lua_pushcfunction(L, protected_main);
    lua_pushinteger(L, argc);
    lua_pushlightuserdata(L, argv);
    int status = lua_pcall(L, 2, 1, 0);
    int code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : lua_toboolean(L, -1) ? EXIT_SUCCESS : EXIT_FAILURE;
    report(L, status);
    lua_close(L);
    return status == LUA_OK ? code : EXIT_FAILURE;
}
