/* Asynchronous evaluation (async.h): a FIFO of tickets and two helper threads. */
#include "async.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define ASYNC_THREADS 2
#define ASYNC_MAX_IO 64

struct ane_ticket {
    ane_program *program;
    ane_io inputs[ASYNC_MAX_IO], destinations[ASYNC_MAX_IO];
    int ninputs, ndestinations, noutputs;
    ane_tensor results[ASYNC_MAX_IO];
    ane_status status;
    ane_error err;
    int done;
    ane_ticket *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER, finished = PTHREAD_COND_INITIALIZER;
static ane_ticket *head, *tail;
static const ane_program *running[ASYNC_THREADS];

static int in_flight(const ane_program *program) {
    for (ane_ticket *t = head; t; t = t->next)
        if (t->program == program) return 1;
    for (int i = 0; i < ASYNC_THREADS; i++)
        if (running[i] == program) return 1;
    return 0;
}

void ane_async_wait_idle(const ane_program *program) {
    pthread_mutex_lock(&lock);
    while (in_flight(program)) pthread_cond_wait(&finished, &lock);
    pthread_mutex_unlock(&lock);
}

static void *helper(void *argument) {
    int slot = (int)(intptr_t)argument;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!head) pthread_cond_wait(&queued, &lock);
        ane_ticket *t = head;
        head = t->next;
        if (!head) tail = NULL;
        running[slot] = t->program;
        pthread_mutex_unlock(&lock);
        t->status = ane_program_eval_now(t->program, t->inputs, t->ninputs, t->destinations, t->ndestinations,
                                         t->results, &t->err);
        pthread_mutex_lock(&lock);
        running[slot] = NULL;
        t->done = 1;
        pthread_cond_broadcast(&finished);
    }
    return NULL;
}

static int helpers_started;

static ane_status start_helpers(ane_error *err) {
    for (; helpers_started < ASYNC_THREADS; helpers_started++) {
        pthread_t thread;
        pthread_attr_t attributes;
        pthread_attr_init(&attributes);
        pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attributes, helper, (void *)(intptr_t)helpers_started);
        pthread_attr_destroy(&attributes);
        if (failed) return ane_fail(err, ANE_ERR_NOMEM, "cannot start the threads of asynchronous evaluation");
    }
    return ANE_OK;
}

ane_status ane_program_submit(ane_program *program, const ane_io *inputs, int ninputs, const ane_io *destinations,
                              int ndestinations, ane_ticket **out, ane_error *err) {
    *out = NULL;
    if (ninputs > ASYNC_MAX_IO || ndestinations > ASYNC_MAX_IO)
        return ane_fail(err, ANE_ERR_ARGUMENT, "at most %d inputs and outputs", ASYNC_MAX_IO);
    ane_async_wait_idle(program); /* one eval of a program at a time */
    ane_status status = ane_program_commit(program, err);
    if (status) return status;
    ane_ticket *t = calloc(1, sizeof *t);
    if (!t) return ane_fail(err, ANE_ERR_NOMEM, "out of memory submitting an eval");
    t->program = program;
    memcpy(t->inputs, inputs, (size_t)ninputs * sizeof *inputs);
    if (ndestinations) memcpy(t->destinations, destinations, (size_t)ndestinations * sizeof *destinations);
    t->ninputs = ninputs;
    t->ndestinations = ndestinations;
    const ane_port *in_ports, *out_ports;
    int nin;
    ane_program_ports(program, &in_ports, &nin, &out_ports, &t->noutputs);
    pthread_mutex_lock(&lock);
    status = start_helpers(err);
    if (!status) {
        if (tail) tail->next = t;
        else head = t;
        tail = t;
        pthread_cond_signal(&queued);
    }
    pthread_mutex_unlock(&lock);
    if (status) {
        free(t);
        return status;
    }
    *out = t;
    return ANE_OK;
}

ane_status ane_ticket_wait(ane_ticket *ticket, ane_tensor *results, ane_error *err) {
    pthread_mutex_lock(&lock);
    while (!ticket->done) pthread_cond_wait(&finished, &lock);
    pthread_mutex_unlock(&lock);
    ane_status status = ticket->status; /* (the program may be closed by now: nothing of it is read) */
    if (status) {
        if (err) *err = ticket->err;
    } else {
        memcpy(results, ticket->results, (size_t)ticket->noutputs * sizeof *results);
    }
    free(ticket);
    return status;
}
