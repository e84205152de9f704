/* The token timeline's request-end work in one C pass (infersight.instrumentation.timeline.analyze).
 *
 * In Python the end of a streamed request costs ~200 ns per token in int arithmetic and formatting
 * (the gaps, the longest gap, the histogram buckets, the offsets and their JSON text: each a pass
 * that builds a list of Python ints); this does all of it in one loop over C integers. timeline.py
 * keeps the same work in Python and uses it when this extension is not built; the tests check that
 * both give identical results.
 *
 * Recorder is the hot path's buffer: ``token()`` reads CLOCK_MONOTONIC (time.perf_counter_ns's clock
 * on Linux) and stores it, a C call with no Python frame; it keeps the last ``max_tokens`` readings
 * (a ring once full, as the deque with a maxlen it replaces) and the first one apart.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>

/* The decimal digits of value at p, as "%lld" writes them (sprintf is ~10x slower: locale and format parsing). */
static char *write_int(char *p, long long value) {
    char digits[24];
    int n = 0;
    unsigned long long u = value < 0 ? 0ULL - (unsigned long long)value : (unsigned long long)value;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (value < 0) *p++ = '-';
    while (n) *p++ = digits[--n];
    return p;
}

static long long floor_div(long long a, long long b) {
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* analyze(times, start_ns, bounds, keep) -> (gap_max_ns, stall_index, stall_offset_ns, counts, offsets, json)
 *
 * times: list of int (ns readings, in order); bounds: tuple of float (histogram bounds in ns, ascending).
 * Below two readings the first four are None. offsets (us from start, floored) and json only when keep.
 */
static PyObject *analyze(PyObject *self, PyObject *args) {
    PyObject *times, *bounds_obj;
    long long start;
    int keep;
    if (!PyArg_ParseTuple(args, "O!LO!p", &PyList_Type, &times, &start, &PyTuple_Type, &bounds_obj, &keep))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(times), nb = PyTuple_GET_SIZE(bounds_obj);
    long long *t = PyMem_Malloc((n > 0 ? n : 1) * sizeof(long long));
    double *bounds = PyMem_Malloc((nb > 0 ? nb : 1) * sizeof(double));
    Py_ssize_t *counts = PyMem_Calloc(nb + 1, sizeof(Py_ssize_t));
    PyObject *result = NULL, *counts_list = NULL, *offsets = NULL, *json = NULL;
    char *text = NULL;
    if (!t || !bounds || !counts) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        /* AndOverflow reads the digits in a loop; plain PyLong_AsLongLong goes through a byte array
         * (~5x slower for readings past 2**30, i.e. every perf_counter_ns one). */
        int overflow = 0;
        t[i] = PyLong_AsLongLongAndOverflow(PyList_GET_ITEM(times, i), &overflow);
        if (overflow) {
            PyErr_SetString(PyExc_OverflowError, "token time out of range of a 64-bit integer");
            goto done;
        }
        if (t[i] == -1 && PyErr_Occurred()) goto done;
    }
    for (Py_ssize_t j = 0; j < nb; j++) {
        bounds[j] = PyFloat_AsDouble(PyTuple_GET_ITEM(bounds_obj, j));
        if (bounds[j] == -1.0 && PyErr_Occurred()) goto done;
    }
    long long longest = 0;
    Py_ssize_t longest_at = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        long long gap = t[i] - t[i - 1];
        if (i == 1 || gap > longest) {  /* the first longest gap, as list.index finds it */
            longest = gap;
            longest_at = i;
        }
        double g = (double)gap;
        Py_ssize_t j = 0;  /* the first bucket whose bound holds the gap (le), as bisect_right counts it */
        while (j < nb && g > bounds[j]) j++;
        counts[j]++;
    }
    if (keep) {
        offsets = PyList_New(n);
        if (!offsets) goto done;
        text = PyMem_Malloc(n * 21 + 3);  /* at most 20 characters and a comma per offset, the brackets */
        if (!text) {
            PyErr_NoMemory();
            goto done;
        }
        char *p = text;
        *p++ = '[';
        for (Py_ssize_t i = 0; i < n; i++) {
            long long offset = floor_div(t[i] - start, 1000);
            PyObject *value = PyLong_FromLongLong(offset);
            if (!value) goto done;
            PyList_SET_ITEM(offsets, i, value);
            if (i) *p++ = ',';
            p = write_int(p, offset);
        }
        *p++ = ']';
        json = PyUnicode_FromStringAndSize(text, p - text);
        if (!json) goto done;
    } else {
        offsets = Py_NewRef(Py_None);
        json = Py_NewRef(Py_None);
    }
    if (n >= 2) {
        counts_list = PyList_New(nb + 1);
        if (!counts_list) goto done;
        for (Py_ssize_t j = 0; j <= nb; j++) {
            PyObject *count = PyLong_FromSsize_t(counts[j]);
            if (!count) goto done;
            PyList_SET_ITEM(counts_list, j, count);
        }
        result = Py_BuildValue("(LnLOOO)", longest, longest_at, t[longest_at - 1] - start, counts_list, offsets, json);
    } else {
        result = Py_BuildValue("(OOOOOO)", Py_None, Py_None, Py_None, Py_None, offsets, json);
    }
done:
    Py_XDECREF(counts_list);
    Py_XDECREF(offsets);
    Py_XDECREF(json);
    PyMem_Free(text);
    PyMem_Free(t);
    PyMem_Free(bounds);
    PyMem_Free(counts);
    return result;
}


typedef struct {
    PyObject_HEAD
    long long *buf;
    Py_ssize_t cap;       /* readings kept at most (max_tokens) */
    Py_ssize_t alloc;     /* slots allocated (grows by doubling up to cap) */
    long long total;      /* readings ever stored */
    long long first;
} Recorder;

static int recorder_store(Recorder *r, long long value) {
    if (r->total < r->cap) {
        if (r->total == r->alloc) {
            Py_ssize_t alloc = r->alloc ? r->alloc * 2 : 64;
            if (alloc > r->cap) alloc = r->cap;
            long long *buf = PyMem_Realloc(r->buf, alloc * sizeof(long long));
            if (!buf) {
                PyErr_NoMemory();
                return -1;
            }
            r->buf = buf;
            r->alloc = alloc;
        }
        r->buf[r->total] = value;
    } else {
        r->buf[r->total % r->cap] = value;
    }
    if (r->total == 0) r->first = value;
    r->total++;
    return 0;
}

static int recorder_init(Recorder *r, PyObject *args, PyObject *kwds) {
    static char *names[] = {"max_tokens", NULL};
    Py_ssize_t cap;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "n", names, &cap)) return -1;
    if (cap < 1) {
        PyErr_Format(PyExc_ValueError, "max_tokens must be at least 1, got %zd", cap);
        return -1;
    }
    PyMem_Free(r->buf);
    r->buf = NULL;
    r->cap = cap;
    r->alloc = 0;
    r->total = 0;
    return 0;
}

static void recorder_dealloc(Recorder *r) {
    PyMem_Free(r->buf);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *recorder_token(Recorder *r, PyObject *unused) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (recorder_store(r, (long long)now.tv_sec * 1000000000LL + now.tv_nsec) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *recorder_append(Recorder *r, PyObject *value) {
    int overflow = 0;
    long long ns = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) {
        PyErr_SetString(PyExc_OverflowError, "token time out of range of a 64-bit integer");
        return NULL;
    }
    if (ns == -1 && PyErr_Occurred()) return NULL;
    if (recorder_store(r, ns) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *recorder_extend(Recorder *r, PyObject *iterable) {
    PyObject *it = PyObject_GetIter(iterable), *item;
    if (!it) return NULL;
    while ((item = PyIter_Next(it))) {
        PyObject *ok = recorder_append(r, item);
        Py_DECREF(item);
        if (!ok) {
            Py_DECREF(it);
            return NULL;
        }
        Py_DECREF(ok);
    }
    Py_DECREF(it);
    if (PyErr_Occurred()) return NULL;
    Py_RETURN_NONE;
}

/* readings() -> (the last max_tokens readings in order, whether earlier ones were dropped) */
static PyObject *recorder_readings(Recorder *r, PyObject *unused) {
    Py_ssize_t n = r->total < r->cap ? (Py_ssize_t)r->total : r->cap;
    Py_ssize_t oldest = r->total < r->cap ? 0 : (Py_ssize_t)(r->total % r->cap);
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *value = PyLong_FromLongLong(r->buf[(oldest + i) % r->cap]);
        if (!value) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, value);
    }
    return Py_BuildValue("(NO)", list, r->total > r->cap ? Py_True : Py_False);
}

static PyObject *recorder_first(Recorder *r, void *closure) {
    if (r->total == 0) Py_RETURN_NONE;
    return PyLong_FromLongLong(r->first);
}

static PyObject *recorder_maxlen(Recorder *r, void *closure) { return PyLong_FromSsize_t(r->cap); }

static Py_ssize_t recorder_len(Recorder *r) { return r->total < r->cap ? (Py_ssize_t)r->total : r->cap; }

static PyMethodDef recorder_methods[] = {
    {"token", (PyCFunction)recorder_token, METH_NOARGS, "Store this moment's CLOCK_MONOTONIC reading (perf_counter_ns)."},
    {"append", (PyCFunction)recorder_append, METH_O, "Store a reading (a perf_counter_ns value)."},
    {"extend", (PyCFunction)recorder_extend, METH_O, "Store every reading of an iterable."},
    {"readings", (PyCFunction)recorder_readings, METH_NOARGS,
     "(the last max_tokens readings in order, whether earlier ones were dropped)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef recorder_getset[] = {
    {"first", (getter)recorder_first, NULL, "the first reading, kept or not; None before any", NULL},
    {"maxlen", (getter)recorder_maxlen, NULL, "readings kept at most", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods recorder_sequence = {.sq_length = (lenfunc)recorder_len};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "infersight.instrumentation._ctimeline.Recorder",
    .tp_doc = "Recorder(max_tokens): a request's token times, the last max_tokens of them and the first.",
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)recorder_init,
    .tp_dealloc = (destructor)recorder_dealloc,
    .tp_methods = recorder_methods,
    .tp_getset = recorder_getset,
    .tp_as_sequence = &recorder_sequence,
};

static PyMethodDef methods[] = {
    {"analyze", analyze, METH_VARARGS,
     "analyze(times, start_ns, bounds, keep) -> (gap_max_ns, stall_index, stall_offset_ns, counts, offsets, json)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ctimeline", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ctimeline(void) {
    if (PyType_Ready(&RecorderType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&RecorderType);
    if (PyModule_AddObject(m, "Recorder", (PyObject *)&RecorderType) < 0) {
        Py_DECREF(&RecorderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
