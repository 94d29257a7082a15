/* doctor.timeline._sweep: the timeline's interval sweep inside the OTF2 library's Enter/Leave
 * callbacks, so that no per-event work happens in Python.
 *
 * The OTF2 library decodes the trace (OTF2_Reader + its global event reader, which merges the
 * selected locations' events in time order); this file only does what
 * doctor/timeline/sweep.py's RankSweep does, with the same integer arithmetic, and hands back
 * each rank's state for RankSweep.restore(). Keep the two in step: the tests compare them on
 * every overlap trace.
 *
 *   read(anchor, locations, kinds, steps, origin, window, keep_steps, ranks, batch, progress)
 *     anchor      path of traces.otf2
 *     locations   sequence of (location ref, rank slot, is_gpu)
 *     kinds       bytes: Kind of region ref i (0 ignore, 1 compute, 2 comm, 3 other); refs
 *                 beyond the end are compute, as in the Python reader
 *     steps       bytes: 1 where region ref i is a step region
 *     origin      the trace's start tick; window: 0 region, 1 iteration
 *     progress    None, or called with the records read so far after each batch
 *   returns a list (one per rank slot) of state dicts; raises RuntimeError naming the OTF2 error.
 *
 * Command line equivalent (roughly): otf2-print traces.otf2 | grep -E 'ENTER|LEAVE'.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <otf2/otf2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { IGNORE = 0, COMPUTE = 1, COMM = 2, OTHER = 3 };
#define NTOTALS 10 /* busy compute comm hidden other compute_sum comm_sum other_sum compute_kernels comm_kernels */

typedef struct {
    int64_t origin, last;
    int64_t active[4];
    int64_t totals[NTOTALS];
    int64_t unmatched_leaves, out_of_order, step_depth;
    int has_open, has_closed;
    int64_t open_time, open_totals[NTOTALS];
    int64_t closed_time, closed_totals[NTOTALS];
    int64_t step_count, step_total[NTOTALS + 1];
    int64_t *walls; size_t walls_len, walls_cap;
    int64_t *kept; size_t kept_len, kept_cap; /* rows of (index, start, 11 values) */
    int64_t keep_steps;
    int window_iteration;
    int failed; /* out of memory */
} Sweep;

typedef struct {
    uint64_t ref;
    Sweep *sweep;
    int is_gpu;
} Location;

typedef struct {
    Location *locations; size_t nlocations;
    const unsigned char *kinds; size_t nkinds;
    const unsigned char *steps; size_t nsteps;
    Location *cached;
} Context;

static char last_error[512];

static OTF2_ErrorCode remember_error(void *user_data, const char *file, uint64_t line, const char *function,
                                     OTF2_ErrorCode code, const char *format, va_list va)
{
    (void)user_data; (void)file; (void)line; (void)function;
    char text[400] = "";
    if (format) vsnprintf(text, sizeof text, format, va);
    snprintf(last_error, sizeof last_error, "%s%s%s", OTF2_Error_GetName(code), text[0] ? ": " : "", text);
    return code;
}

/* -- the sweep: doctor/timeline/sweep.py, line for line -------------------------------------- */

static void advance(Sweep *s, int64_t t)
{
    int64_t dt = t - s->last;
    if (dt <= 0) {
        if (dt < 0) s->out_of_order++;
        return;
    }
    s->last = t;
    int64_t compute = s->active[COMPUTE], comm = s->active[COMM], other = s->active[OTHER];
    if (compute || comm || other) {
        int64_t *totals = s->totals;
        totals[0] += dt;
        if (compute) { totals[1] += dt; totals[5] += compute * dt; }
        if (comm) {
            totals[2] += dt; totals[6] += comm * dt;
            if (compute) totals[3] += dt;
        }
        if (other) { totals[4] += dt; totals[7] += other * dt; }
    }
}

static void kernel_enter(Sweep *s, int64_t t, int kind)
{
    advance(s, t);
    s->active[kind]++;
    if (kind == COMPUTE) s->totals[8]++;
    else if (kind == COMM) s->totals[9]++;
}

static void kernel_leave(Sweep *s, int64_t t, int kind)
{
    advance(s, t);
    if (s->active[kind]) s->active[kind]--;
    else s->unmatched_leaves++;
}

/* Make room for one more item of `width` int64 in a doubling array; -1 when out of memory. */
static int grow(int64_t **items, size_t len, size_t *cap, size_t width)
{
    if (len < *cap) return 0;
    size_t more = *cap ? 2 * *cap : 1024;
    int64_t *grown = realloc(*items, more * width * sizeof *grown);
    if (!grown) return -1;
    *items = grown;
    *cap = more;
    return 0;
}

static void close_step(Sweep *s, int64_t end, const int64_t *totals)
{
    int64_t values[NTOTALS + 1];
    values[0] = end - s->open_time;
    for (int i = 0; i < NTOTALS; i++) values[i + 1] = totals[i] - s->open_totals[i];
    int64_t start = s->open_time;
    s->has_open = 0;
    s->has_closed = 0;
    for (int i = 0; i <= NTOTALS; i++) s->step_total[i] += values[i];
    if (grow(&s->walls, s->walls_len, &s->walls_cap, 1) < 0) { s->failed = 1; return; }
    s->walls[s->walls_len++] = values[0];
    if ((int64_t)s->kept_len < s->keep_steps) {
        if (grow(&s->kept, s->kept_len, &s->kept_cap, NTOTALS + 3) < 0) { s->failed = 1; return; }
        int64_t *row = s->kept + s->kept_len * (NTOTALS + 3);
        row[0] = s->step_count; row[1] = start - s->origin;
        memcpy(row + 2, values, sizeof values);
        s->kept_len++;
    }
    s->step_count++;
}

static void step_enter(Sweep *s, int64_t t)
{
    s->step_depth++;
    if (s->step_depth > 1) return;
    advance(s, t);
    if (s->window_iteration && s->has_open) {
        int64_t now[NTOTALS];
        memcpy(now, s->totals, sizeof now);
        close_step(s, s->last, now);
    }
    s->has_open = 1;
    s->open_time = s->last;
    memcpy(s->open_totals, s->totals, sizeof s->open_totals);
}

static void step_leave(Sweep *s, int64_t t)
{
    if (s->step_depth == 0) { s->unmatched_leaves++; return; }
    s->step_depth--;
    if (s->step_depth || !s->has_open) return;
    advance(s, t);
    if (s->window_iteration) {
        s->has_closed = 1;
        s->closed_time = s->last;
        memcpy(s->closed_totals, s->totals, sizeof s->closed_totals);
    } else {
        int64_t now[NTOTALS];
        memcpy(now, s->totals, sizeof now);
        close_step(s, s->last, now);
    }
}

/* -- OTF2 callbacks ------------------------------------------------------------------------------ */

static Location *find_location(Context *c, uint64_t ref)
{
    if (c->cached && c->cached->ref == ref) return c->cached;
    size_t lo = 0, hi = c->nlocations;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->locations[mid].ref < ref) lo = mid + 1;
        else hi = mid;
    }
    if (lo < c->nlocations && c->locations[lo].ref == ref) return c->cached = &c->locations[lo];
    return NULL;
}

static int region_kind(Context *c, OTF2_RegionRef region)
{
    return region < c->nkinds ? c->kinds[region] : COMPUTE;
}

static int is_step(Context *c, OTF2_RegionRef region)
{
    return region < c->nsteps && c->steps[region];
}

static OTF2_CallbackCode on_enter(OTF2_LocationRef location, OTF2_TimeStamp time, void *data,
                                  OTF2_AttributeList *attributes, OTF2_RegionRef region)
{
    (void)attributes;
    Location *loc = find_location(data, location);
    if (!loc) return OTF2_CALLBACK_SUCCESS;
    if (loc->is_gpu) {
        int kind = region_kind(data, region);
        if (kind) kernel_enter(loc->sweep, (int64_t)time, kind);
    } else if (is_step(data, region)) {
        step_enter(loc->sweep, (int64_t)time);
    }
    return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode on_leave(OTF2_LocationRef location, OTF2_TimeStamp time, void *data,
                                  OTF2_AttributeList *attributes, OTF2_RegionRef region)
{
    (void)attributes;
    Location *loc = find_location(data, location);
    if (!loc) return OTF2_CALLBACK_SUCCESS;
    if (loc->is_gpu) {
        int kind = region_kind(data, region);
        if (kind) kernel_leave(loc->sweep, (int64_t)time, kind);
    } else if (is_step(data, region)) {
        step_leave(loc->sweep, (int64_t)time);
    }
    return OTF2_CALLBACK_SUCCESS;
}

/* -- reading ------------------------------------------------------------------------------------- */

static int otf2_failed(OTF2_ErrorCode code, const char *what)
{
    if (code == OTF2_SUCCESS) return 0;
    if (!last_error[0]) snprintf(last_error, sizeof last_error, "%s", OTF2_Error_GetName(code));
    PyErr_Format(PyExc_RuntimeError, "%s: OTF2 %s", what, last_error);
    return -1;
}

static int compare_locations(const void *a, const void *b)
{
    uint64_t x = ((const Location *)a)->ref, y = ((const Location *)b)->ref;
    return (x > y) - (x < y);
}

/* Select the locations and open the global event reader (OTF2's reader example; as trace.py). */
static OTF2_GlobalEvtReader *open_events(OTF2_Reader *reader, Context *c)
{
    for (size_t i = 0; i < c->nlocations; i++)
        if (otf2_failed(OTF2_Reader_SelectLocation(reader, c->locations[i].ref), "cannot select a location"))
            return NULL;
    /* Local definitions (Score-P's id mappings) are optional: a missing file is not an error. */
    int def_files = OTF2_Reader_OpenDefFiles(reader) == OTF2_SUCCESS;
    if (otf2_failed(OTF2_Reader_OpenEvtFiles(reader), "cannot open the event files")) return NULL;
    for (size_t i = 0; i < c->nlocations; i++) {
        if (def_files) {
            OTF2_DefReader *def_reader = OTF2_Reader_GetDefReader(reader, c->locations[i].ref);
            if (def_reader) {
                uint64_t read = 0;
                OTF2_Reader_ReadAllLocalDefinitions(reader, def_reader, &read);
                OTF2_Reader_CloseDefReader(reader, def_reader);
            }
        }
        OTF2_Reader_GetEvtReader(reader, c->locations[i].ref);
    }
    if (def_files) OTF2_Reader_CloseDefFiles(reader);
    last_error[0] = '\0';
    OTF2_GlobalEvtReader *events = OTF2_Reader_GetGlobalEvtReader(reader);
    if (!events) otf2_failed(OTF2_ERROR_INVALID, "cannot open the global event reader");
    return events;
}

static int stream(OTF2_Reader *reader, Context *c, uint64_t batch, PyObject *progress)
{
    OTF2_GlobalEvtReader *events = open_events(reader, c);
    if (!events) return -1;
    OTF2_GlobalEvtReaderCallbacks *callbacks = OTF2_GlobalEvtReaderCallbacks_New();
    OTF2_GlobalEvtReaderCallbacks_SetEnterCallback(callbacks, on_enter);
    OTF2_GlobalEvtReaderCallbacks_SetLeaveCallback(callbacks, on_leave);
    OTF2_GlobalEvtReader_SetCallbacks(events, callbacks, c);
    OTF2_GlobalEvtReaderCallbacks_Delete(callbacks);
    uint64_t total = 0, read = batch;
    int status = 0;
    while (read == batch) {
        OTF2_ErrorCode code;
        read = 0;
        Py_BEGIN_ALLOW_THREADS
        code = OTF2_GlobalEvtReader_ReadEvents(events, batch, &read);
        Py_END_ALLOW_THREADS
        total += read;
        if (code != OTF2_SUCCESS) {
            if (!last_error[0]) snprintf(last_error, sizeof last_error, "%s", OTF2_Error_GetName(code));
            PyErr_Format(PyExc_RuntimeError, "after %llu records: OTF2 %s", (unsigned long long)total, last_error);
            status = -1;
            break;
        }
        if (PyErr_CheckSignals() < 0) { status = -1; break; }
        if (progress != Py_None) {
            PyObject *r = PyObject_CallFunction(progress, "K", (unsigned long long)total);
            if (!r) { status = -1; break; }
            Py_DECREF(r);
        }
    }
    OTF2_Reader_CloseGlobalEvtReader(reader, events);
    OTF2_Reader_CloseEvtFiles(reader);
    return status;
}

/* -- results ------------------------------------------------------------------------------------- */

static PyObject *int_list(const int64_t *values, size_t n)
{
    PyObject *list = PyList_New((Py_ssize_t)n);
    if (!list) return NULL;
    for (size_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(values[i]);
        if (!v) { Py_DECREF(list); return NULL; }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

static PyObject *snapshot(int present, int64_t time, const int64_t *totals)
{
    if (!present) Py_RETURN_NONE;
    PyObject *list = int_list(totals, NTOTALS);
    return list ? Py_BuildValue("(LN)", (long long)time, list) : NULL;
}

static PyObject *state(const Sweep *s)
{
    return Py_BuildValue(
        "{s:L,s:N,s:N,s:L,s:L,s:L,s:N,s:N,s:L,s:N,s:y#,s:y#}",
        "last", (long long)s->last, "active", int_list(s->active, 4), "totals", int_list(s->totals, NTOTALS),
        "unmatched_leaves", (long long)s->unmatched_leaves, "out_of_order", (long long)s->out_of_order,
        "step_depth", (long long)s->step_depth,
        "step_open", snapshot(s->has_open, s->open_time, s->open_totals),
        "step_closed", snapshot(s->has_closed, s->closed_time, s->closed_totals),
        "step_count", (long long)s->step_count, "step_total", int_list(s->step_total, NTOTALS + 1),
        "step_walls", s->walls ? (const char *)s->walls : "", (Py_ssize_t)(s->walls_len * sizeof(int64_t)),
        "kept", s->kept ? (const char *)s->kept : "", (Py_ssize_t)(s->kept_len * (NTOTALS + 3) * sizeof(int64_t)));
}

/* -- the module ---------------------------------------------------------------------------------- */

static int parse_locations(PyObject *seq, Context *c, Sweep *sweeps, Py_ssize_t ranks)
{
    PyObject *fast = PySequence_Fast(seq, "locations must be a sequence of (ref, rank, is_gpu)");
    if (!fast) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    c->locations = calloc((size_t)(n ? n : 1), sizeof *c->locations);
    if (!c->locations) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long ref; Py_ssize_t rank; int is_gpu;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "Knp", &ref, &rank, &is_gpu)) {
            Py_DECREF(fast); return -1;
        }
        if (rank < 0 || rank >= ranks) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_ValueError, "location's rank slot out of range");
            return -1;
        }
        c->locations[i] = (Location){ref, &sweeps[rank], is_gpu};
    }
    c->nlocations = (size_t)n;
    Py_DECREF(fast);
    qsort(c->locations, c->nlocations, sizeof *c->locations, compare_locations);
    return 0;
}

static PyObject *read_trace(PyObject *self, PyObject *args)
{
    (void)self;
    const char *anchor;
    PyObject *locations, *progress;
    Py_buffer kinds, steps;
    long long origin, keep_steps;
    int window;
    Py_ssize_t ranks;
    unsigned long long batch;
    if (!PyArg_ParseTuple(args, "sOy*y*LiLnKO", &anchor, &locations, &kinds, &steps, &origin, &window,
                          &keep_steps, &ranks, &batch, &progress))
        return NULL;
    PyObject *result = NULL;
    Context c = {0};
    Sweep *sweeps = NULL;
    OTF2_Reader *reader = NULL;
    if (ranks < 0 || keep_steps < 0 || batch == 0) {
        PyErr_SetString(PyExc_ValueError, "ranks and keep_steps must be >= 0, batch > 0");
        goto done;
    }
    sweeps = calloc((size_t)(ranks ? ranks : 1), sizeof *sweeps);
    if (!sweeps) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t r = 0; r < ranks; r++) {
        Sweep *s = &sweeps[r];
        s->origin = s->last = origin;
        s->keep_steps = keep_steps;
        s->window_iteration = window == 1;
    }
    if (parse_locations(locations, &c, sweeps, ranks) < 0) goto done;
    c.kinds = kinds.buf; c.nkinds = (size_t)kinds.len;
    c.steps = steps.buf; c.nsteps = (size_t)steps.len;

    last_error[0] = '\0';
    OTF2_Error_RegisterCallback(remember_error, NULL);
    reader = OTF2_Reader_Open(anchor);
    if (!reader) { otf2_failed(OTF2_ERROR_INVALID, "cannot open the trace"); goto done; }
    if (otf2_failed(OTF2_Reader_SetSerialCollectiveCallbacks(reader), "cannot set up the reader")) goto done;
    if (c.nlocations && stream(reader, &c, batch, progress) < 0) goto done;
    for (Py_ssize_t r = 0; r < ranks; r++)
        if (sweeps[r].failed) { PyErr_NoMemory(); goto done; }

    result = PyList_New(ranks);
    if (!result) goto done;
    for (Py_ssize_t r = 0; r < ranks; r++) {
        PyObject *one = state(&sweeps[r]);
        if (!one) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, r, one);
    }
done:
    if (reader) OTF2_Reader_Close(reader);
    if (sweeps)
        for (Py_ssize_t r = 0; r < ranks; r++) { free(sweeps[r].walls); free(sweeps[r].kept); }
    free(sweeps);
    free(c.locations);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&steps);
    return result;
}

static PyMethodDef methods[] = {
    {"read", read_trace, METH_VARARGS, "Sweep the Enter/Leave events of the selected locations; see the source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "doctor.timeline._sweep",
    "The timeline's interval sweep in OTF2's Enter/Leave callbacks (see doctor/timeline/creader.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__sweep(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddIntConstant(m, "OTF2_VERSION_MAJOR", OTF2_VERSION_MAJOR) < 0) { Py_DECREF(m); return NULL; }
    if (m && PyModule_AddIntConstant(m, "OTF2_VERSION_MINOR", OTF2_VERSION_MINOR) < 0) { Py_DECREF(m); return NULL; }
    return m;
}
