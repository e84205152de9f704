/* The token timeline's request-end work in one C pass (infersight.instrumentation.timeline.analyze).
 *
 * In Python the end of a streamed request costs ~200 ns per token in int arithmetic and formatting
 * (the gaps, the longest gap, the histogram buckets, the offsets and their JSON text: each a pass
 * that builds a list of Python ints); this does all of it in one loop over C integers. timeline.py
 * keeps the same work in Python and uses it when this extension is not built; the tests check that
 * both give identical results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

static PyMethodDef methods[] = {
    {"analyze", analyze, METH_VARARGS,
     "analyze(times, start_ns, bounds, keep) -> (gap_max_ns, stall_index, stall_offset_ns, counts, offsets, json)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_ctimeline", NULL, -1, methods};

PyMODINIT_FUNC PyInit__ctimeline(void) { return PyModule_Create(&module); }
