/* doctor.timeline._sweep: the timeline's interval sweep inside the OTF2 library's Enter/Leave
 * callbacks, so that no per-event work happens in Python.
 *
 * The OTF2 library decodes the trace (OTF2_Reader + its global event reader, which merges the
 * selected locations' events in time order); this file only does what
 * doctor/timeline/sweep.py's RankSweep does, with the same integer arithmetic, and hands back
 * each rank's state for RankSweep.restore(). Keep the two in step: the tests compare them on
 * every overlap trace.
 *
 *   read(anchor, locations, refs, kinds, steps, origin, end, window, keep_steps, ranks, batch, progress,
 *        gap_threshold)
 *     anchor      path of traces.otf2
 *     locations   sequence of (location ref, rank slot, is_gpu)
 *     refs        bytes: the defined region refs, sorted, as uint64; a ref is looked up by binary
 *                 search (refs are mapped, never used as an index: a damaged ref near 2^32
 *                 costs nothing), refs not there count as compute, as in the Python reader
 *     kinds       bytes: Kind of the region at position i (0 ignore, 1 compute, 2 comm, 3 other)
 *     steps       bytes: 1 where the region at position i is a step region
 *     origin, end the trace's clock range: records outside it are counted per location, not used
 *     window      0 region, 1 iteration
 *     progress    None, or called with the records read so far after each batch
 *     gap_threshold  gaps between a stream's kernels shorter than this are kernel waits (HTA)
 *   returns a list (one per rank slot) of state dicts; raises RuntimeError naming the OTF2 error.
 *
 *   check(anchor) -> "" when the system's OTF2 library reads the anchor and global definitions,
 *   else its error.
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
    int64_t unmatched_leaves, out_of_order, step_depth, events;
    int has_open, has_closed, overflow;
    int64_t open_time, open_totals[NTOTALS];
    int64_t closed_time, closed_totals[NTOTALS];
    int64_t step_count, step_total[NTOTALS + 1];
    int64_t *walls; size_t walls_len, walls_cap;
    int64_t *comm_starts; size_t comm_len, comm_cap;
    int64_t *kept; size_t kept_len, kept_cap; /* rows of (index, start, 11 values) */
    int64_t keep_steps, gap_threshold;
    int64_t first_kernel, busy_end, comm_last, gaps[3];
    int has_cut;
    int64_t cut_time, cut_totals[NTOTALS], cut_busy_end, cut_gaps[3];
    int64_t *exclusive, *visits; /* per region position, + 1 for refs without a definition; made at the
                                    rank's first CPU event (a rank without CPU events costs nothing) */
    size_t nregions;
    int window_iteration;
    int failed; /* out of memory */
} Sweep;

typedef struct {
    uint64_t ref;
    Sweep *sweep;
    int is_gpu;
    int64_t prev_end, out_of_range, cpu_last;
    int32_t *stack; size_t depth, stack_cap;
} Location;

typedef struct {
    Location *locations; size_t nlocations;
    const uint64_t *refs; size_t nrefs;
    const unsigned char *kinds;
    const unsigned char *steps;
    Location *cached;
    uint64_t cached_ref; int64_t cached_pos;
    int64_t first, end;
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

static void add(Sweep *s, int i, int64_t value)
{
    if (__builtin_add_overflow(s->totals[i], value, &s->totals[i])) { s->overflow = 1; s->totals[i] = INT64_MAX; }
}

static void add_product(Sweep *s, int i, int64_t count, int64_t dt)
{
    int64_t product;
    if (__builtin_mul_overflow(count, dt, &product)) { s->overflow = 1; s->totals[i] = INT64_MAX; return; }
    add(s, i, product);
}

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
        add(s, 0, dt);
        if (compute) { add(s, 1, dt); add_product(s, 5, compute, dt); }
        if (comm) {
            add(s, 2, dt); add_product(s, 6, comm, dt);
            if (compute) add(s, 3, dt);
        }
        if (other) { add(s, 4, dt); add_product(s, 7, other, dt); }
    }
}

static void kernel_enter(Sweep *s, Location *loc, int64_t t, int kind)
{
    advance(s, t);
    if (s->first_kernel < 0) s->first_kernel = t;
    if (loc->prev_end >= 0) {
        int64_t gap = t - loc->prev_end;
        s->gaps[gap < s->gap_threshold ? 1 : 2] += gap; /* no launch times in OTF2: never a host wait */
    }
    s->active[kind]++;
    if (kind == COMPUTE) s->totals[8]++;
    else if (kind == COMM) { s->totals[9]++; s->comm_last = t; }
}

static void kernel_leave(Sweep *s, Location *loc, int64_t t, int kind)
{
    advance(s, t);
    loc->prev_end = t;
    if (s->active[kind]) {
        s->active[kind]--;
        if (!(s->active[COMPUTE] || s->active[COMM] || s->active[OTHER])) s->busy_end = t;
    }
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
    for (int i = 0; i <= NTOTALS; i++)
        if (__builtin_add_overflow(s->step_total[i], values[i], &s->step_total[i])) s->overflow = 1;
    if (grow(&s->walls, s->walls_len, &s->walls_cap, 1) < 0) { s->failed = 1; return; }
    s->walls[s->walls_len++] = values[0];
    if (grow(&s->comm_starts, s->comm_len, &s->comm_cap, 1) < 0) { s->failed = 1; return; }
    s->comm_starts[s->comm_len++] = s->comm_last;
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
    int running = s->active[COMPUTE] || s->active[COMM] || s->active[OTHER];
    s->has_cut = 1;
    s->cut_time = s->last;
    memcpy(s->cut_totals, s->totals, sizeof s->cut_totals);
    s->cut_busy_end = running ? s->last : s->busy_end;
    memcpy(s->cut_gaps, s->gaps, sizeof s->cut_gaps);
    s->comm_last = -1;
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

/* CPU regions: exclusive time goes to the region on top of the thread's stack. */
static void region_enter(Sweep *s, Location *loc, int64_t t, int64_t pos)
{
    if (!s->exclusive) {
        s->exclusive = calloc(s->nregions + 1, sizeof *s->exclusive);
        s->visits = calloc(s->nregions + 1, sizeof *s->visits);
        if (!s->exclusive || !s->visits) { s->failed = 1; free(s->exclusive); free(s->visits);
                                           s->exclusive = s->visits = NULL; return; }
    }
    if (loc->depth) {
        int64_t dt = t - loc->cpu_last;
        if (dt > 0) s->exclusive[loc->stack[loc->depth - 1]] += dt;
    }
    if (loc->depth == loc->stack_cap) {
        size_t more = loc->stack_cap ? 2 * loc->stack_cap : 64;
        int32_t *grown = realloc(loc->stack, more * sizeof *grown);
        if (!grown) { s->failed = 1; return; }
        loc->stack = grown; loc->stack_cap = more;
    }
    loc->stack[loc->depth++] = (int32_t)pos;
    loc->cpu_last = t;
    s->visits[pos]++;
}

static void region_leave(Sweep *s, Location *loc, int64_t t)
{
    if (loc->depth && s->exclusive) {
        int64_t dt = t - loc->cpu_last;
        if (dt > 0) s->exclusive[loc->stack[loc->depth - 1]] += dt;
        loc->depth--;
    }
    loc->cpu_last = t;
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

/* The region's position among the defined refs; nrefs for a ref without a definition. */
static int64_t region_pos(Context *c, uint64_t ref)
{
    if (c->cached_pos >= 0 && c->cached_ref == ref) return c->cached_pos;
    size_t lo = 0, hi = c->nrefs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c->refs[mid] < ref) lo = mid + 1;
        else hi = mid;
    }
    int64_t pos = (lo < c->nrefs && c->refs[lo] == ref) ? (int64_t)lo : (int64_t)c->nrefs;
    c->cached_ref = ref; c->cached_pos = pos;
    return pos;
}

static OTF2_CallbackCode on_event(OTF2_LocationRef location, OTF2_TimeStamp time, void *data,
                                  OTF2_RegionRef region, int entering)
{
    Context *c = data;
    Location *loc = find_location(c, location);
    if (!loc) return OTF2_CALLBACK_SUCCESS;
    if (time < (uint64_t)c->first || time > (uint64_t)c->end) { loc->out_of_range++; return OTF2_CALLBACK_SUCCESS; }
    Sweep *s = loc->sweep;
    s->events++;
    int64_t pos = region_pos(c, region);
    if (loc->is_gpu) {
        int kind = pos < (int64_t)c->nrefs ? c->kinds[pos] : COMPUTE;
        if (!kind) return OTF2_CALLBACK_SUCCESS;
        if (entering) kernel_enter(s, loc, (int64_t)time, kind);
        else kernel_leave(s, loc, (int64_t)time, kind);
        return OTF2_CALLBACK_SUCCESS;
    }
    int step = pos < (int64_t)c->nrefs && c->steps[pos];
    if (entering) { region_enter(s, loc, (int64_t)time, pos); if (step) step_enter(s, (int64_t)time); }
    else { region_leave(s, loc, (int64_t)time); if (step) step_leave(s, (int64_t)time); }
    return OTF2_CALLBACK_SUCCESS;
}

static OTF2_CallbackCode on_enter(OTF2_LocationRef location, OTF2_TimeStamp time, void *data,
                                  OTF2_AttributeList *attributes, OTF2_RegionRef region)
{
    (void)attributes;
    return on_event(location, time, data, region, 1);
}

static OTF2_CallbackCode on_leave(OTF2_LocationRef location, OTF2_TimeStamp time, void *data,
                                  OTF2_AttributeList *attributes, OTF2_RegionRef region)
{
    (void)attributes;
    return on_event(location, time, data, region, 0);
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

static PyObject *cut(const Sweep *s)
{
    if (!s->has_cut) Py_RETURN_NONE;
    return Py_BuildValue("(LNLN)", (long long)s->cut_time, int_list(s->cut_totals, NTOTALS),
                         (long long)s->cut_busy_end, int_list(s->cut_gaps, 3));
}

static PyObject *regions(const Sweep *s, size_t nrefs)
{
    PyObject *list = PyList_New(0);
    if (!list || !s->exclusive) return list;
    for (size_t i = 0; i <= nrefs; i++) {
        if (!s->visits[i] && !s->exclusive[i]) continue;
        PyObject *row = Py_BuildValue("(nLL)", i == nrefs ? (Py_ssize_t)-1 : (Py_ssize_t)i,
                                      (long long)s->exclusive[i], (long long)s->visits[i]);
        if (!row || PyList_Append(list, row) < 0) { Py_XDECREF(row); Py_DECREF(list); return NULL; }
        Py_DECREF(row);
    }
    return list;
}

static PyObject *outside(const Sweep *s, const Context *c)
{
    PyObject *list = PyList_New(0);
    if (!list) return NULL;
    for (size_t i = 0; i < c->nlocations; i++) {
        const Location *loc = &c->locations[i];
        if (loc->sweep != s || !loc->out_of_range) continue;
        PyObject *row = Py_BuildValue("(KL)", (unsigned long long)loc->ref, (long long)loc->out_of_range);
        if (!row || PyList_Append(list, row) < 0) { Py_XDECREF(row); Py_DECREF(list); return NULL; }
        Py_DECREF(row);
    }
    return list;
}

static PyObject *state(const Sweep *s, const Context *c)
{
    return Py_BuildValue(
        "{s:L,s:N,s:N,s:L,s:L,s:L,s:N,s:N,s:L,s:N,s:y#,s:y#,s:y#,s:L,s:L,s:L,s:i,s:N,s:N,s:N,s:N,s:L}",
        "last", (long long)s->last, "active", int_list(s->active, 4), "totals", int_list(s->totals, NTOTALS),
        "unmatched_leaves", (long long)s->unmatched_leaves, "out_of_order", (long long)s->out_of_order,
        "step_depth", (long long)s->step_depth,
        "step_open", snapshot(s->has_open, s->open_time, s->open_totals),
        "step_closed", snapshot(s->has_closed, s->closed_time, s->closed_totals),
        "step_count", (long long)s->step_count, "step_total", int_list(s->step_total, NTOTALS + 1),
        "step_walls", s->walls ? (const char *)s->walls : "", (Py_ssize_t)(s->walls_len * sizeof(int64_t)),
        "kept", s->kept ? (const char *)s->kept : "", (Py_ssize_t)(s->kept_len * (NTOTALS + 3) * sizeof(int64_t)),
        "comm_starts", s->comm_starts ? (const char *)s->comm_starts : "",
        (Py_ssize_t)(s->comm_len * sizeof(int64_t)),
        "first_kernel", (long long)s->first_kernel, "busy_end", (long long)s->busy_end,
        "events", (long long)s->events, "overflow", s->overflow, "gaps", int_list(s->gaps, 3), "cut", cut(s),
        "regions", regions(s, c->nrefs), "out_of_range", outside(s, c), "comm_last", (long long)s->comm_last);
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
        c->locations[i] = (Location){.ref = ref, .sweep = &sweeps[rank], .is_gpu = is_gpu, .prev_end = -1};
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
    Py_buffer refs, kinds, steps;
    long long origin, end, keep_steps, gap_threshold;
    int window;
    Py_ssize_t ranks;
    unsigned long long batch;
    if (!PyArg_ParseTuple(args, "sOy*y*y*LLiLnKOL", &anchor, &locations, &refs, &kinds, &steps, &origin, &end,
                          &window, &keep_steps, &ranks, &batch, &progress, &gap_threshold))
        return NULL;
    PyObject *result = NULL;
    Context c = {0};
    Sweep *sweeps = NULL;
    OTF2_Reader *reader = NULL;
    size_t nrefs = (size_t)refs.len / sizeof(uint64_t);
    if (ranks < 0 || keep_steps < 0 || batch == 0 || (size_t)kinds.len != nrefs || (size_t)steps.len != nrefs
        || refs.len % (Py_ssize_t)sizeof(uint64_t) || nrefs >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "ranks and keep_steps must be >= 0, batch > 0, one kind and step flag per ref");
        goto done;
    }
    sweeps = calloc((size_t)(ranks ? ranks : 1), sizeof *sweeps);
    if (!sweeps) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t r = 0; r < ranks; r++) {
        Sweep *s = &sweeps[r];
        s->origin = s->last = origin;
        s->keep_steps = keep_steps;
        s->gap_threshold = gap_threshold;
        s->window_iteration = window == 1;
        s->first_kernel = s->busy_end = s->comm_last = -1;
        s->nregions = nrefs;
    }
    if (parse_locations(locations, &c, sweeps, ranks) < 0) goto done;
    c.refs = refs.buf; c.nrefs = nrefs;
    c.kinds = kinds.buf;
    c.steps = steps.buf;
    c.cached_pos = -1;
    c.first = origin; c.end = end;

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
        PyObject *one = state(&sweeps[r], &c);
        if (!one) { Py_CLEAR(result); goto done; }
        PyList_SET_ITEM(result, r, one);
    }
done:
    if (reader) OTF2_Reader_Close(reader);
    if (sweeps)
        for (Py_ssize_t r = 0; r < ranks; r++) {
            free(sweeps[r].walls); free(sweeps[r].kept); free(sweeps[r].comm_starts);
            free(sweeps[r].exclusive); free(sweeps[r].visits);
        }
    free(sweeps);
    if (c.locations)
        for (size_t i = 0; i < c.nlocations; i++) free(c.locations[i].stack);
    free(c.locations);
    PyBuffer_Release(&refs);
    PyBuffer_Release(&kinds);
    PyBuffer_Release(&steps);
    return result;
}

static OTF2_CallbackCode count_location(void *data, OTF2_LocationRef self, OTF2_StringRef name,
                                        OTF2_LocationType type, uint64_t events, OTF2_LocationGroupRef group)
{
    (void)self; (void)name; (void)type; (void)events; (void)group;
    (*(uint64_t *)data)++;
    return OTF2_CALLBACK_SUCCESS;
}

/* As otf2-print does: the anchor's counts of definitions and locations must be what is there. */
static PyObject *check_trace(PyObject *self, PyObject *args)
{
    (void)self;
    const char *anchor;
    if (!PyArg_ParseTuple(args, "s", &anchor)) return NULL;
    last_error[0] = '\0';
    OTF2_Error_RegisterCallback(remember_error, NULL);
    char problem[600] = "";
    OTF2_Reader *reader = OTF2_Reader_Open(anchor);
    if (!reader) {
        snprintf(problem, sizeof problem, "cannot open it: %s", last_error[0] ? last_error : "OTF2 error");
        return PyUnicode_DecodeUTF8(problem, (Py_ssize_t)strlen(problem), "replace");
    }
    OTF2_ErrorCode code = OTF2_Reader_SetSerialCollectiveCallbacks(reader);
    OTF2_GlobalDefReader *defs = code == OTF2_SUCCESS ? OTF2_Reader_GetGlobalDefReader(reader) : NULL;
    if (!defs) {
        snprintf(problem, sizeof problem, "cannot read the definitions: %s", last_error[0] ? last_error : "OTF2 error");
    } else {
        uint64_t read = 0, locations = 0, want_defs = 0, want_locations = 0;
        OTF2_GlobalDefReaderCallbacks *callbacks = OTF2_GlobalDefReaderCallbacks_New();
        OTF2_GlobalDefReaderCallbacks_SetLocationCallback(callbacks, count_location);
        OTF2_Reader_RegisterGlobalDefCallbacks(reader, defs, callbacks, &locations);
        OTF2_GlobalDefReaderCallbacks_Delete(callbacks);
        code = OTF2_Reader_ReadAllGlobalDefinitions(reader, defs, &read);
        if (code != OTF2_SUCCESS)
            snprintf(problem, sizeof problem, "cannot read the definitions: %s",
                     last_error[0] ? last_error : OTF2_Error_GetName(code));
        else if (OTF2_Reader_GetNumberOfGlobalDefinitions(reader, &want_defs) != OTF2_SUCCESS || want_defs != read)
            snprintf(problem, sizeof problem, "the anchor file announces %llu global definitions, %llu are there",
                     (unsigned long long)want_defs, (unsigned long long)read);
        else if (OTF2_Reader_GetNumberOfLocations(reader, &want_locations) != OTF2_SUCCESS
                 || want_locations != locations)
            snprintf(problem, sizeof problem, "the anchor file announces %llu locations, %llu are defined",
                     (unsigned long long)want_locations, (unsigned long long)locations);
        OTF2_Reader_CloseGlobalDefReader(reader, defs);
    }
    OTF2_Reader_Close(reader);
    return PyUnicode_DecodeUTF8(problem, (Py_ssize_t)strlen(problem), "replace");
}

static PyMethodDef methods[] = {
    {"read", read_trace, METH_VARARGS, "Sweep the Enter/Leave events of the selected locations; see the source."},
    {"check", check_trace, METH_VARARGS, "\"\" when the system's OTF2 library reads the anchor and global definitions."},
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
