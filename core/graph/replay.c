/* Replaying a graph's step with one launch. On a device whose backend
 * captures (CUDA and HIP graphs), ug_graph_run launches its first step with
 * given rows, mode and stream node by node, captures the next one's
 * launches, and replays that recording for the steps after: the host's
 * work per step is then a few calls, not one per kernel. A recording holds
 * for every step because everything a step changes is read on the device
 * (the optimizer's gate, dropout's run count). The inputs are copied into
 * buffers of the graph's own before each replay: a loader hands out a
 * different tensor each batch, and a recording reads fixed addresses.
 *
 * A capture happens, and its replays run, on a stream of the graph's own,
 * ordered after the caller's current stream and before its later work by
 * two events: a capture takes in all work issued to its stream, from any
 * thread, and the loader's threads upload batches to the default one
 * meanwhile. A host recording (the CPU and OpenCL) keeps only its own
 * thread's calls, so it is made and replayed on the caller's stream: a
 * side stream of the CPU backend is a thread of its own, whose hand-offs
 * made the MLP's step 1.45 times as long. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fault.h"
#include "core/graph/internal.h"
#include "core/profile/hooks.h"
#include "core/runtime/dispatch.h"
#include "kernels/common/random.h"
#include "unigrad/stream.h"

struct graph_replay {
    bool off;            /* ug_graph_set_replay(g, false) */
    bool failed;         /* a capture failed: launched from then on, why says why */
    bool replayed;       /* the last run was a replay */
    bool prepared;       /* prepare() has run */
    uint64_t key;        /* the rows, mode and stream of the recording */
    uint64_t launched;   /* those of the last launched run: captured when the next matches */
    void *recording;     /* the backend's, or NULL */
    /* Made at the first run, so that later ones allocate nothing: */
    ug_stream *stream;   /* where a capture is made and replayed; NULL: the caller's */
    ug_event *before, *after;
    int input_count;
    ug_value **inputs;   /* the inputs the graph uses */
    ug_tensor **buffers; /* per input, of its declared shape */
    ug_tensor **views;   /* per input, its rows bound at the capture: what the recording reads */
    ug_tensor **held;    /* per input during a capture, what the caller had bound */
    char why[320];
};

static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull; }

/* What a recording depends on beyond the device's own state. */
static uint64_t step_key(const ug_graph *g, const ug_stream *stream)
{
    uint64_t h = mix(0xcbf29ce484222325ull, (uint64_t)g->rows);
    h = mix(h, g->run.training);
    h = mix(h, g->run.seed); /* an argument of the random kernels: a new seed needs a new recording */
    return mix(h, (uint64_t)(uintptr_t)stream);
}

static void drop_recording(ug_graph *g, graph_replay *r)
{
    if (r->recording)
        ug_call_replay_free(g->device, r->recording);
    r->recording = NULL;
    for (int i = 0; r->views && i < r->input_count; i++) {
        ug_tensor_free(r->views[i]);
        r->views[i] = NULL;
    }
}

/* Frees what prepare() made (and the recording). */
static void unprepare(ug_graph *g, graph_replay *r)
{
    drop_recording(g, r);
    for (int i = 0; r->buffers && i < r->input_count; i++)
        ug_tensor_free(r->buffers[i]);
    free(r->inputs);
    free(r->buffers);
    free(r->views);
    free(r->held);
    ug_event_free(r->before);
    ug_event_free(r->after);
    ug_stream_free(r->stream);
    r->inputs = NULL;
    r->buffers = r->views = r->held = NULL;
    r->input_count = 0;
    r->before = r->after = NULL;
    r->stream = NULL;
    r->prepared = false;
}

ug_status ug_graph_make_replay(ug_graph *g)
{
    if (!g->replay && !(g->replay = ug_calloc(1, sizeof *g->replay)))
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    return UG_OK;
}

void ug_graph_free_replay(ug_graph *g)
{
    if (!g->replay)
        return;
    unprepare(g, g->replay);
    free(g->replay);
    g->replay = NULL;
}

/* Why this run is launched node by node, in r->why; NULL when it may be
 * captured or replayed. */
static const char *launched_because(ug_graph *g, graph_replay *r)
{
    if (r->failed)
        return r->why;
    const char *why = NULL;
    if (r->off)
        why = "replay is off (ug_graph_set_replay)";
    else if (ug_profiling())
        why = "the profiler times each kernel";
    else if (g->run.run_count && (g->runs + 1) % UG_RANDOM_RUN_PERIOD == 0)
        why = "dropout's run count wraps at this run";
    if (why)
        snprintf(r->why, sizeof r->why, "%s", why);
    return why;
}

/* Binds each input to the first rows of its buffer for the capture,
 * holding what the caller bound: the recording reads those views. */
static ug_status bind_own_inputs(ug_graph *g, graph_replay *r)
{
    for (int i = 0; i < r->input_count; i++) {
        ug_value *v = r->inputs[i];
        const ug_tensor *bound = v->tensor;
        if (!bound)
            return ug_set_error(UG_ERR_STATE, "input '%s' is not bound", v->name);
        UG_TRY(ug_tensor_over_storage(r->buffers[i]->storage, bound->dtype, bound->ndim, bound->shape,
                                      r->buffers[i]->offset, &r->views[i]));
        UG_TRY(ug_tensor_copy(r->views[i], bound));
        UG_TRY(ug_tensor_over_storage(bound->storage, bound->dtype, bound->ndim, bound->shape, bound->offset,
                                      &r->held[i]));
        UG_TRY(ug_graph_bind(g, v, r->views[i]));
    }
    return UG_OK;
}

/* The caller's own bindings back after a capture: each replay copies
 * from them, so data the caller writes into a bound tensor later (without
 * binding it again) is what the next step reads, as when launching. */
static ug_status bind_callers_inputs(ug_graph *g, graph_replay *r)
{
    ug_status st = UG_OK;
    for (int i = 0; i < r->input_count; i++) {
        if (r->held[i] && st == UG_OK)
            st = ug_graph_bind(g, r->inputs[i], r->held[i]);
        ug_tensor_free(r->held[i]);
        r->held[i] = NULL;
    }
    return st;
}

/* The inputs' buffers, and for a capture the graph's stream and its two
 * events, made at the first run (the one launched before a capture). */
static ug_status prepare(ug_graph *g, graph_replay *r)
{
    if (r->prepared)
        return UG_OK;
    int count = 0;
    for (int i = 0; i < g->value_count; i++)
        count += g->values[i]->kind == VALUE_INPUT && g->values[i]->uses > 0;
    r->inputs = ug_calloc((size_t)count + 1, sizeof *r->inputs);
    r->buffers = ug_calloc((size_t)count + 1, sizeof *r->buffers);
    r->views = ug_calloc((size_t)count + 1, sizeof *r->views);
    r->held = ug_calloc((size_t)count + 1, sizeof *r->held);
    if (!r->inputs || !r->buffers || !r->views || !r->held)
        return ug_set_error(UG_ERR_OUT_OF_MEMORY, "out of host memory");
    for (int i = 0; i < g->value_count; i++) {
        ug_value *v = g->values[i];
        if (v->kind != VALUE_INPUT || v->uses == 0)
            continue;
        r->inputs[r->input_count] = v;
        UG_TRY(ug_tensor_new(g->device, v->dtype, v->ndim, v->shape, "replayed input",
                             &r->buffers[r->input_count++]));
    }
    if (ug_backend_captures(g->device)) {
        UG_TRY(ug_event_create(g->device, false, &r->before));
        UG_TRY(ug_event_create(g->device, false, &r->after));
        UG_TRY(ug_stream_create(g->device, &r->stream));
    }
    r->prepared = true;
    return UG_OK;
}

/* The graph's stream waits for the caller's work so far, and becomes this
 * thread's current one until leave(); without one, nothing to do. */
static ug_status enter(ug_graph *g, graph_replay *r, ug_stream *caller)
{
    if (!r->stream)
        return UG_OK;
    UG_TRY(ug_event_record(r->before, caller));
    UG_TRY(ug_stream_wait_event(r->stream, r->before));
    return ug_stream_set_current(g->device, r->stream);
}

/* The caller's stream back, its later work after the graph's. */
static ug_status leave(ug_graph *g, graph_replay *r, ug_stream *caller)
{
    if (!r->stream)
        return UG_OK;
    ug_status st = ug_stream_set_current(g->device, caller);
    if (st == UG_OK)
        st = ug_event_record(r->after, r->stream);
    return st == UG_OK ? ug_stream_wait_event(caller, r->after) : st;
}

/* Where the recording is made and replayed. */
static ug_bstream *recording_stream(const graph_replay *r, const ug_stream *caller)
{
    return (r->stream ? r->stream : caller)->bstream;
}

/* The caller's inputs into the recording's buffers, then the recording,
 * on the graph's stream (a host recording: on the caller's). */
static ug_status replay(ug_graph *g, graph_replay *r, ug_stream *caller, const char *op)
{
    ug_status st = enter(g, r, caller);
    for (int i = 0; st == UG_OK && i < r->input_count; i++) {
        const ug_tensor *bound = r->inputs[i]->tensor, *own = r->views[i];
        if (bound->storage != own->storage || bound->offset != own->offset)
            st = ug_tensor_copy(r->views[i], bound);
    }
    if (st == UG_OK)
        st = ug_call_replay(g->device, recording_stream(r, caller), r->recording, op);
    ug_status back = leave(g, r, caller);
    return st != UG_OK ? st : back;
}

/* Captures the step's launches and runs them by a first replay. A capture
 * that fails ran nothing: the step is launched instead, and so are the
 * later ones, with the reason kept. */
static ug_status capture(ug_graph *g, graph_replay *r, unsigned mask, ug_stream *caller, const char *op)
{
    const uint64_t runs = g->runs;
    drop_recording(g, r); /* of other rows, mode or stream */
    ug_status st = bind_own_inputs(g, r);
    if (st == UG_OK)
        st = enter(g, r, caller);
    if (st == UG_OK) {
        st = ug_call_capture_begin(g->device, recording_stream(r, caller), op);
        if (st == UG_OK) {
            ug_status launched = ug_graph_launch_phases(g, mask, op);
            char launch_error[256] = "";
            if (launched != UG_OK)
                snprintf(launch_error, sizeof launch_error, "%s", ug_last_error());
            st = ug_call_capture_end(g->device, recording_stream(r, caller), &r->recording, op);
            if (st == UG_OK && launched != UG_OK) {
                ug_call_replay_free(g->device, r->recording);
                r->recording = NULL;
                st = ug_set_error(launched, "%s", launch_error);
            }
        }
        ug_status back = leave(g, r, caller);
        st = st != UG_OK ? st : back;
    }
    ug_status rebound = bind_callers_inputs(g, r);
    st = st != UG_OK ? st : rebound;
    if (st == UG_OK)
        return replay(g, r, caller, op);
    snprintf(r->why, sizeof r->why, "capturing the step failed, so each kernel is launched: %s", ug_last_error());
    r->failed = true;
    g->runs = runs; /* nothing of the capture ran */
    unprepare(g, r);
    return ug_graph_launch_phases(g, mask, op);
}

ug_status ug_graph_run_step(ug_graph *g, unsigned mask, const char *op)
{
    graph_replay *r = g->replay; /* made by ug_graph_compile */
    r->replayed = false;
    ug_stream *caller = ug_stream_current(g->device);
    const uint64_t key = step_key(g, caller);
    const bool launch = launched_because(g, r) != NULL;
    if (!launch && r->recording && r->key == key) {
        UG_TRY(replay(g, r, caller, op));
        g->runs++; /* the recording advances the device's count */
        r->replayed = true;
        return UG_OK;
    }
    if (!launch && r->prepared && r->launched == key) {
        r->key = key;
        UG_TRY(capture(g, r, mask, caller, op));
        r->replayed = r->recording != NULL;
        return UG_OK;
    }
    if (launch)
        return ug_graph_launch_phases(g, mask, op);
    /* The step before a capture runs on the graph's stream too: what its
     * queue sets up on first use (reduction scratch, the BLAS library's
     * workspace) is then in place, as a capture cannot allocate. */
    if (prepare(g, r) != UG_OK) {
        snprintf(r->why, sizeof r->why, "preparing to capture failed, so each kernel is launched: %s", ug_last_error());
        r->failed = true;
        unprepare(g, r);
        ug_clear_error();
        return ug_graph_launch_phases(g, mask, op);
    }
    UG_TRY(enter(g, r, caller));
    ug_status st = ug_graph_launch_phases(g, mask, op);
    ug_status back = leave(g, r, caller);
    UG_TRY(st);
    UG_TRY(back);
    r->launched = key;
    snprintf(r->why, sizeof r->why, "the first step with these rows, mode and stream is launched; the next is captured");
    return UG_OK;
}

ug_status ug_graph_set_replay(ug_graph *g, bool on)
{
    if (!g)
        return ug_set_error(UG_ERR_INVALID_ARGUMENT, "ug_graph_set_replay: graph is NULL");
    ug_status st = ug_graph_make_replay(g);
    if (st != UG_OK)
        return ug_prefix_error(st, "ug_graph_set_replay");
    g->replay->off = !on;
    g->replay->failed = false; /* turned on again: a capture is tried again */
    g->replay->launched = 0;
    if (!on)
        drop_recording(g, g->replay);
    return UG_OK;
}

bool ug_graph_replaying(const ug_graph *g, char *why, size_t why_len)
{
    const graph_replay *r = g ? g->replay : NULL;
    if (why && why_len)
        snprintf(why, why_len, "%s",
                 !g ? "the graph is NULL" : !r ? "the graph has not run (ug_graph_run)" : r->replayed ? "" : r->why);
    return r && r->replayed;
}
