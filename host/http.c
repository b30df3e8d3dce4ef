/* anelua.http: the HTTP/1.1 server under `anelua serve`, from libmicrohttpd (a thread per
 * connection: it parses requests, keeps connections alive, writes chunked streams and times
 * out idle clients). Each complete request is handed to the Lua side through a queue; the
 * Lua loop, single-threaded, takes them with server:next(seconds) and answers whole
 * (request:respond) or as a stream of chunks (request:stream, request:write, request:finish).
 * A body over the limit is refused with 413 here: read and dropped, then answered, so the client
 * (still sending) reads the answer; a body announced at over 64 times the limit is answered at
 * once and its connection closed.
 *
 *   local http = require("anelua.http")
 *   local server = assert(http.listen{ host = "127.0.0.1", port = 8080, max_body = 1 << 20, timeout = 30 })
 *   local request = server:next(0.1)   -- nil when none came in that time
 *   request:method(), request:path(), request:body(), request:header("authorization")
 *   request:respond(200, { ["Content-Type"] = "application/json" }, "{}")
 *   request:stream(200, { ["Content-Type"] = "text/event-stream" }); request:write("data: x\n\n"); request:finish()
 *   request:gone()   -- the client closed its connection (a write would be lost)
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

#include "../ane_core/base/interrupt.h"

#define SERVER_TYPE "anelua.http.server"
#define REQUEST_TYPE "anelua.http.request"
#define STREAM_BUFFER_LIMIT (8u << 20) /* a client this far behind a stream is taken as gone */
#define DROP_LIMIT_FACTOR 64            /* a refused body is read (and dropped) up to 64 times the limit */

enum request_state { WAITING, ANSWERED, STREAMING, FINISHED };

typedef struct http_server http_server;

typedef struct http_request {
    http_server *server;
    struct MHD_Connection *connection;
    int fd;
    char method[16];
    char *path, *body;
    size_t body_length, body_capacity;
    char **headers; /* [header_count * 2]: lower-case name, value */
    int header_count;
    int refused;    /* over the limit: its body dropped as it comes, then 413 */
    size_t dropped; /* bytes of a refused body read so far */
    int queued;     /* handed to Lua */
    /* under server->lock: */
    enum request_state state;
    struct MHD_Response *response;
    unsigned status;
    char *stream;   /* written by Lua, not yet read by the connection */
    size_t stream_length, stream_read, stream_capacity;
    int gone;       /* the connection ended before the answer did */
    int references; /* the connection thread's and the Lua userdata's */
    struct http_request *next_queued;
    pthread_cond_t changed; /* its answer, its stream's next chunk or end, its connection's end, a stop:
                               what its connection thread waits for (a write wakes that thread alone) */
    struct http_request *live_previous, *live_next; /* every request not yet freed */
} http_request;

struct http_server {
    struct MHD_Daemon *daemon;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a request queued, or the server stopping: what server:next waits for */
    http_request *live;     /* every request not yet freed (a stop wakes each) */
    http_request *queue_head, *queue_tail;
    size_t max_body;
    int stopping;
    int closed;             /* server:close() ran: freed with its last request */
    size_t live_requests;   /* requests not yet freed (a Lua request may outlive the server) */
    int port;
};

/* ------------------------------------------------------------------ requests (any thread, lock held) */

/* Wakes the connection thread waiting on r. */
static void wake_request(http_request *r) { pthread_cond_signal(&r->changed); }

/* The server stops: server:next and every connection thread wake. */
static void wake_all(http_server *s) {
    pthread_cond_broadcast(&s->changed);
    for (http_request *r = s->live; r; r = r->live_next) pthread_cond_broadcast(&r->changed);
}

static void server_free(http_server *s) {
    pthread_cond_destroy(&s->changed);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* Drops a reference to r (lock held); returns 1 when that freed the last request of a closed
 * server, which the caller then frees once it has unlocked. */
static int request_release(http_request *r) {
    if (--r->references > 0) return 0;
    http_server *s = r->server;
    if (r->live_previous) r->live_previous->live_next = r->live_next;
    else s->live = r->live_next;
    if (r->live_next) r->live_next->live_previous = r->live_previous;
    pthread_cond_destroy(&r->changed);
    if (r->response) MHD_destroy_response(r->response);
    for (int i = 0; i < 2 * r->header_count; i++) free(r->headers[i]);
    free(r->headers);
    free(r->path);
    free(r->body);
    free(r->stream);
    free(r);
    return --s->live_requests == 0 && s->closed;
}

/* Releases r and unlocks its server, freeing the server when r was all that kept it. */
static void release_and_unlock(http_request *r) {
    http_server *s = r->server;
    int free_server = request_release(r);
    pthread_mutex_unlock(&s->lock);
    if (free_server) server_free(s);
}

static char *copy_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy) memcpy(copy, s, n);
    return copy;
}

static enum MHD_Result collect_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    http_request *r = cls;
    char **grown = realloc(r->headers, (size_t)(r->header_count + 1) * 2 * sizeof *grown);
    if (!grown) return MHD_NO;
    r->headers = grown;
    char *name = copy_string(key), *text = copy_string(value ? value : "");
    if (!name || !text) {
        free(name);
        free(text);
        return MHD_NO;
    }
    for (char *c = name; *c; c++)
        if (*c >= 'A' && *c <= 'Z') *c = (char)(*c - 'A' + 'a');
    r->headers[2 * r->header_count] = name;
    r->headers[2 * r->header_count + 1] = text;
    r->header_count++;
    return MHD_YES;
}

/* An error in OpenAI's shape, answered by the connection thread itself. */
static enum MHD_Result answer_error(struct MHD_Connection *connection, unsigned status, const char *message,
                                    const char *type) {
    char body[512];
    snprintf(body, sizeof body, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\",\"param\":null,\"code\":null}}", message,
             type);
    struct MHD_Response *response = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
    if (!response) return MHD_NO;
    MHD_add_response_header(response, "Content-Type", "application/json");
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

/* ------------------------------------------------------------------ connection threads */

/* The chunks of a stream as Lua writes them; waits for the next one. */
static ssize_t read_stream(void *cls, uint64_t position, char *buffer, size_t max) {
    (void)position;
    http_request *r = cls;
    http_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    while (r->stream_read == r->stream_length && r->state == STREAMING && !s->stopping)
        pthread_cond_wait(&r->changed, &s->lock);
    ssize_t n;
    if (r->stream_read < r->stream_length) {
        size_t count = r->stream_length - r->stream_read;
        if (count > max) count = max;
        memcpy(buffer, r->stream + r->stream_read, count);
        r->stream_read += count;
        if (r->stream_read == r->stream_length) r->stream_read = r->stream_length = 0;
        n = (ssize_t)count;
    } else {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    }
    pthread_mutex_unlock(&s->lock);
    return n;
}

static void release_stream(void *cls) {
    http_request *r = cls;
    pthread_mutex_lock(&r->server->lock);
    release_and_unlock(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *connection, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **context) {
    (void)version;
    http_server *s = cls;
    http_request *r = *context;
    if (!r) { /* the headers are in: a request begins */
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        r->server = s;
        r->connection = connection;
        r->references = 1;
        pthread_cond_init(&r->changed, NULL);
        pthread_mutex_lock(&s->lock);
        s->live_requests++;
        r->live_next = s->live;
        if (s->live) s->live->live_previous = r;
        s->live = r;
        pthread_mutex_unlock(&s->lock);
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
        r->fd = info ? info->connect_fd : -1;
        snprintf(r->method, sizeof r->method, "%s", method);
        r->path = copy_string(url);
        *context = r;
        if (!r->path || MHD_get_connection_values(connection, MHD_HEADER_KIND, collect_header, r) < 0) return MHD_NO;
        const char *length = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        unsigned long long announced = length ? strtoull(length, NULL, 10) : 0;
        if (announced > s->max_body) r->refused = 1;
        if (announced > (unsigned long long)s->max_body * DROP_LIMIT_FACTOR) /* not worth reading: answered now */
            return answer_error(connection, 413 /* content too large */, "the request body is larger than the server takes",
                                "invalid_request_error");
        return MHD_YES;
    }
    if (r->refused) { /* a body over the limit: dropped as it comes, answered once it is in */
        r->dropped += *upload_data_size;
        int done = *upload_data_size == 0;
        *upload_data_size = 0;
        if (done || r->dropped > s->max_body * DROP_LIMIT_FACTOR)
            return answer_error(connection, 413 /* content too large */, "the request body is larger than the server takes",
                                "invalid_request_error");
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (r->body_length + *upload_data_size > s->max_body) {
            r->refused = 1;
            r->dropped = r->body_length + *upload_data_size;
            *upload_data_size = 0;
            return MHD_YES;
        }
        if (r->body_length + *upload_data_size + 1 > r->body_capacity) {
            size_t capacity = (r->body_length + *upload_data_size + 1) * 2;
            char *grown = realloc(r->body, capacity);
            if (!grown) return MHD_NO;
            r->body = grown;
            r->body_capacity = capacity;
        }
        memcpy(r->body + r->body_length, upload_data, *upload_data_size);
        r->body_length += *upload_data_size;
        r->body[r->body_length] = '\0';
        *upload_data_size = 0;
        return MHD_YES;
    }
    /* the whole request: to Lua, then wait for its answer */
    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        return answer_error(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is shutting down", "server_error");
    }
    r->references++; /* the queue's, then the Lua userdata's */
    r->queued = 1;
    if (s->queue_tail) s->queue_tail->next_queued = r;
    else s->queue_head = r;
    s->queue_tail = r;
    pthread_cond_broadcast(&s->changed);
    while (r->state == WAITING && !s->stopping) pthread_cond_wait(&r->changed, &s->lock);
    struct MHD_Response *response = r->response;
    unsigned status = r->status;
    r->response = NULL;
    pthread_mutex_unlock(&s->lock);
    if (!response && status == MHD_HTTP_INTERNAL_SERVER_ERROR)
        return answer_error(connection, status, "the server dropped this request unanswered", "server_error");
    if (!response)
        return answer_error(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is shutting down", "server_error");
    enum MHD_Result result = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return result;
}

/* The connection's request is over: sent, or cut off by the client, a timeout or a stop. */
static void on_completed(void *cls, struct MHD_Connection *connection, void **context,
                         enum MHD_RequestTerminationCode why) {
    (void)connection;
    http_server *s = cls;
    http_request *r = *context;
    if (!r) return;
    *context = NULL;
    pthread_mutex_lock(&s->lock);
    if (why != MHD_REQUEST_TERMINATED_COMPLETED_OK || r->state != FINISHED) r->gone = 1;
    r->fd = -1;
    wake_request(r);
    release_and_unlock(r);
}

/* ------------------------------------------------------------------ the Lua side */

static http_server *check_server(lua_State *L) {
    http_server **box = luaL_checkudata(L, 1, SERVER_TYPE);
    if (!*box) luaL_error(L, "the server is closed");
    return *box;
}

static http_request *check_request(lua_State *L) { return *(http_request **)luaL_checkudata(L, 1, REQUEST_TYPE); }

static int integer_option(lua_State *L, const char *name, lua_Integer fallback, lua_Integer min, lua_Integer max) {
    lua_getfield(L, 1, name);
    lua_Integer value = fallback;
    if (!lua_isnil(L, -1)) {
        int ok;
        value = lua_tointegerx(L, -1, &ok);
        if (!ok || value < min || value > max)
            return luaL_error(L, "listen: %s must be an integer from %d to %d", name, (int)min, (int)max);
    }
    lua_pop(L, 1);
    return (int)value;
}

static void on_sigterm(int signal_number) {
    (void)signal_number;
    ane_interrupt_request(); /* as a first Ctrl-C: the serve loop stops taking requests */
}

/* http.listen{host =, port =, max_body =, timeout =, connections =} -> server, or nil and why */
static int l_listen(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "host");
    const char *host = luaL_optstring(L, -1, "127.0.0.1");
    lua_pop(L, 1);
    int port = integer_option(L, "port", 8080, 0, 65535);
    lua_Integer max_body = integer_option(L, "max_body", 1 << 20, 1, 1 << 30);
    int timeout = integer_option(L, "timeout", 30, 1, 86400);
    int connections = integer_option(L, "connections", 64, 1, 4096);
    struct sockaddr_in address;
    memset(&address, 0, sizeof address);
    address.sin_family = AF_INET;
    address.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &address.sin_addr) != 1) {
        lua_pushnil(L);
        lua_pushfstring(L, "--host %s is not an IPv4 address (e.g. 127.0.0.1 or 0.0.0.0)", host);
        return 2;
    }
    http_server **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = NULL;
    luaL_setmetatable(L, SERVER_TYPE);
    http_server *s = calloc(1, sizeof *s);
    if (!s) return luaL_error(L, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->changed, NULL);
    s->max_body = (size_t)max_body;
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, 0, NULL,
                                 NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&address,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout, MHD_OPTION_CONNECTION_LIMIT,
                                 (unsigned)connections, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 << 10),
                                 MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        int error = errno;
        server_free(s);
        lua_pushnil(L);
        lua_pushfstring(L, "cannot listen on %s:%d: %s", host, port, error ? strerror(error) : "libmicrohttpd refused");
        return 2;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    *box = s;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_sigterm;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    return 1;
}

static int server_port(lua_State *L) {
    lua_pushinteger(L, check_server(L)->port);
    return 1;
}

/* server:next([seconds]) -> the next request, or nil after that long (default 0: no wait) */
static int server_next(lua_State *L) {
    http_server *s = check_server(L);
    double seconds = luaL_optnumber(L, 2, 0);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (seconds > 0) {
        long long nanoseconds = until.tv_nsec + (long long)(seconds * 1e9);
        until.tv_sec += (time_t)(nanoseconds / 1000000000);
        until.tv_nsec = (long)(nanoseconds % 1000000000);
    }
    pthread_mutex_lock(&s->lock);
    while (!s->queue_head && seconds > 0 && !ane_interrupt_stop_requested())
        if (pthread_cond_timedwait(&s->changed, &s->lock, &until) == ETIMEDOUT) break;
    http_request *r = s->queue_head;
    if (r) {
        s->queue_head = r->next_queued;
        if (!s->queue_head) s->queue_tail = NULL;
        r->next_queued = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    if (!r) return 0;
    http_request **box = lua_newuserdatauv(L, sizeof *box, 0);
    *box = r; /* (the queue's reference becomes the userdata's) */
    luaL_setmetatable(L, REQUEST_TYPE);
    return 1;
}

/* Stops taking requests, answers the ones still waiting with 503, ends open streams and
 * waits for the connections to close. */
static int server_close(lua_State *L) {
    http_server **box = luaL_checkudata(L, 1, SERVER_TYPE);
    http_server *s = *box;
    if (!s) return 0;
    *box = NULL;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    wake_all(s);
    http_request *queued = s->queue_head;
    s->queue_head = s->queue_tail = NULL;
    while (queued) {
        http_request *next = queued->next_queued;
        request_release(queued); /* (the connection still holds each: the server lives on) */
        queued = next;
    }
    pthread_mutex_unlock(&s->lock);
    MHD_stop_daemon(s->daemon); /* waits for every connection thread */
    pthread_mutex_lock(&s->lock);
    s->closed = 1;
    int free_now = s->live_requests == 0;
    pthread_mutex_unlock(&s->lock);
    if (free_now) server_free(s);
    return 0;
}

static int request_gc(lua_State *L) {
    http_request **box = luaL_checkudata(L, 1, REQUEST_TYPE);
    http_request *r = *box;
    if (!r) return 0;
    *box = NULL;
    http_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    if (r->state == WAITING) { /* never answered: the connection must not wait for ever */
        r->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r->state = FINISHED;
        wake_request(r);
    } else if (r->state == STREAMING) {
        r->state = FINISHED;
        wake_request(r);
    }
    release_and_unlock(r);
    return 0;
}

static int request_method(lua_State *L) {
    lua_pushstring(L, check_request(L)->method);
    return 1;
}

static int request_path(lua_State *L) {
    lua_pushstring(L, check_request(L)->path);
    return 1;
}

static int request_body(lua_State *L) {
    http_request *r = check_request(L);
    lua_pushlstring(L, r->body ? r->body : "", r->body_length);
    return 1;
}

/* request:header(name) -> its value (names compared without case), or nil */
static int request_header(lua_State *L) {
    http_request *r = check_request(L);
    const char *name = luaL_checkstring(L, 2);
    for (int i = 0; i < r->header_count; i++) {
        if (strcasecmp(r->headers[2 * i], name) == 0) {
            lua_pushstring(L, r->headers[2 * i + 1]);
            return 1;
        }
    }
    return 0;
}

/* Whether the client has gone: its connection ended, or its socket reads as closed. */
static int client_gone(http_request *r) {
    if (r->gone) return 1;
    if (r->fd < 0) return 0;
    char byte;
    ssize_t n = recv(r->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int request_gone(lua_State *L) {
    http_request *r = check_request(L);
    pthread_mutex_lock(&r->server->lock);
    int gone = client_gone(r);
    pthread_mutex_unlock(&r->server->lock);
    lua_pushboolean(L, gone);
    return 1;
}

/* The response headers of table argument `index`. */
static int add_headers(lua_State *L, int index, struct MHD_Response *response) {
    if (lua_isnoneornil(L, index)) return 1;
    luaL_checktype(L, index, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, index)) {
        const char *name = lua_tostring(L, -2), *value = lua_tostring(L, -1);
        if (!name || !value || MHD_add_response_header(response, name, value) != MHD_YES) {
            lua_pop(L, 2);
            return 0;
        }
        lua_pop(L, 1);
    }
    return 1;
}

/* Hands the response to the waiting connection. */
static int answer(lua_State *L, http_request *r, unsigned status, struct MHD_Response *response,
                  enum request_state state) {
    if (!response) return luaL_error(L, "out of memory for a response");
    if (!add_headers(L, 3, response)) {
        MHD_destroy_response(response);
        return luaL_error(L, "response headers must be strings");
    }
    http_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    if (r->state != WAITING) {
        pthread_mutex_unlock(&s->lock);
        MHD_destroy_response(response);
        return luaL_error(L, "this request has been answered already");
    }
    r->response = response;
    r->status = status;
    r->state = state;
    wake_request(r);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* request:respond(status, headers, body) */
static int request_respond(lua_State *L) {
    http_request *r = check_request(L);
    lua_Integer status = luaL_checkinteger(L, 2);
    size_t length;
    const char *body = luaL_optlstring(L, 4, "", &length);
    answer(L, r, (unsigned)status, MHD_create_response_from_buffer(length, (void *)body, MHD_RESPMEM_MUST_COPY), FINISHED);
    return 0;
}

/* request:stream(status, headers): a chunked response whose body request:write adds to */
static int request_stream(lua_State *L) {
    http_request *r = check_request(L);
    lua_Integer status = luaL_checkinteger(L, 2);
    pthread_mutex_lock(&r->server->lock);
    r->references++; /* the response's, dropped by release_stream */
    pthread_mutex_unlock(&r->server->lock);
    struct MHD_Response *response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, read_stream, r, release_stream);
    if (!response) {
        pthread_mutex_lock(&r->server->lock);
        release_and_unlock(r);
    }
    answer(L, r, (unsigned)status, response, STREAMING);
    return 0;
}

/* request:write(text) -> true, or false when the client has gone (the text is dropped) */
static int request_write(lua_State *L) {
    http_request *r = check_request(L);
    size_t length;
    const char *text = luaL_checklstring(L, 2, &length);
    http_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    if (r->state != STREAMING) {
        pthread_mutex_unlock(&s->lock);
        return luaL_error(L, "write: request:stream() first (and not after finish)");
    }
    int ok = !client_gone(r) && r->stream_length + length <= STREAM_BUFFER_LIMIT;
    if (ok && r->stream_length + length > r->stream_capacity) {
        size_t capacity = (r->stream_length + length) * 2;
        char *grown = realloc(r->stream, capacity);
        if (grown) r->stream = grown, r->stream_capacity = capacity;
        else ok = 0;
    }
    if (ok) {
        memcpy(r->stream + r->stream_length, text, length);
        r->stream_length += length;
        wake_request(r);
    } else {
        r->gone = 1;
    }
    pthread_mutex_unlock(&s->lock);
    lua_pushboolean(L, ok);
    return 1;
}

/* request:finish(): the end of a stream */
static int request_finish(lua_State *L) {
    http_request *r = check_request(L);
    http_server *s = r->server;
    pthread_mutex_lock(&s->lock);
    if (r->state == STREAMING) r->state = FINISHED;
    wake_request(r);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int luaopen_anelua_http(lua_State *L) {
    static const luaL_Reg server_methods[] = {
        {"next", server_next}, {"port", server_port}, {"close", server_close}, {NULL, NULL}};
    static const luaL_Reg request_methods[] = {
        {"method", request_method}, {"path", request_path}, {"body", request_body},     {"header", request_header},
        {"gone", request_gone},     {"respond", request_respond}, {"stream", request_stream}, {"write", request_write},
        {"finish", request_finish}, {NULL, NULL}};
    luaL_newmetatable(L, SERVER_TYPE);
    luaL_newlib(L, server_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, server_close);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    luaL_newmetatable(L, REQUEST_TYPE);
    luaL_newlib(L, request_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, request_gc);
    lua_setfield(L, -2, "__gc");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushcfunction(L, l_listen);
    lua_setfield(L, -2, "listen");
    return 1;
}
