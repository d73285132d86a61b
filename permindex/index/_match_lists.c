/*
 * permindex.index._match_lists: the result lists of a batch lookup made in C.
 *
 * match_lists(match_type, n, queries, keys, fingerprints, distances) -> list of n lists
 *   (keys: a list, or a tuple (rows, offsets, data) to decode each match's key from)
 *
 * The optional compiled form of permindex.index.match.match_lists_python (the reference,
 * which the tests compare it with, and the path when this module was not built): the same
 * lists of the same objects, made without a Python-level call per match. Every Match is made
 * as CPython makes a tuple subclass (tp_alloc of the type, then its three items), every list
 * at its final size; a Match whose key is a str is not tracked by the cyclic garbage collector
 * (it holds no container: what CPython's collector does to such tuples on its first pass), nor
 * is a list of such Matches only (an empty one too), nor the outer list when it holds such
 * lists only: a batch's results are then left to reference counting alone (see below).
 * The caller holds the GIL (as for any C function called from Python).
 *
 * SingleLookup(kernel, packed, fingerprints, keys, match_type): one query's lookup on a
 *   packed plan through the kernel's C entry point, its one match made here (see the type's
 *   docstring below).
 *
 * Arguments (checked; a bad one raises TypeError or ValueError and makes nothing):
 *   match_type    tuple, or a class defined in Python over it (permindex.Match)
 *   n             the number of queries (int >= 0)
 *   queries       (m,) int64 buffer: each match's query position, non-decreasing, in [0, n)
 *   keys          list of m objects (each match's key), or a tuple (rows, offsets, data) of
 *                 a key store's arrays, each match's key then decoded from them: rows (m,)
 *                 int64 (each match's row), offsets (r + 1,) int64 (row i's key is
 *                 data[offsets[i]:offsets[i + 1] - 1], its NUL left out), data (b,) uint8 of
 *                 UTF-8 (strict: bad bytes raise UnicodeDecodeError); a row matched many
 *                 times is decoded once (its str shared), and its offsets are checked
 *                 as it is read
 *   fingerprints  (m,) uint64 buffer
 *   distances     (m,) uint8 buffer
 * Returns a list of n lists: list q holds Match(keys[i], fingerprints[i], distances[i]) for
 * every i with queries[i] == q, in order. O(n + m) time.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* A C-contiguous one-dimensional buffer of integers of ``itemsize`` bytes whose struct format
 * character (after any byte-order mark) is one of ``formats``: int64 is "q" or "l", uint64 "Q"
 * or "L", uint8 "B". */
static int
get_vector(PyObject *object, Py_buffer *view, Py_ssize_t itemsize, const char *formats,
           const char *function, const char *name)
{
    if (PyObject_GetBuffer(object, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        return -1;
    }
    const char *format = view->format == NULL ? "B" : view->format;
    if (*format == '@' || *format == '=' || *format == '<') {
        format++;
    }
    if (view->ndim != 1 || view->itemsize != itemsize || format[0] == '\0' ||
        format[1] != '\0' || strchr(formats, format[0]) == NULL) {
        PyErr_Format(PyExc_TypeError,
                     "%s: %s must be a one-dimensional array of %zd-byte integers "
                     "(struct format one of \"%s\")",
                     function, name, itemsize, formats);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The deallocator of classes defined in Python (CPython's subtype_dealloc), read from a class
 * made at import (match_type_ok). */
static destructor python_class_dealloc;

/* Whether ``object`` is a type whose instances these functions may make as a tuple of three
 * items (tp_alloc of the type, then its items): tuple itself, or a class defined in Python over
 * it (a NamedTuple such as permindex.Match). Else TypeError, naming ``function``: a C subclass
 * may free its instances by a layout of its own (a struct sequence reads its own field count,
 * past the three items: a crash). */
static int
match_type_ok(PyObject *object, const char *function)
{
    if (PyType_Check(object) && PyType_IsSubtype((PyTypeObject *)object, &PyTuple_Type)) {
        PyTypeObject *type = (PyTypeObject *)object;
        while (type != &PyTuple_Type && type->tp_dealloc == python_class_dealloc &&
               type->tp_itemsize == PyTuple_Type.tp_itemsize) {
            type = type->tp_base;
        }
        if (type == &PyTuple_Type) {
            return 1;
        }
    }
    PyErr_Format(PyExc_TypeError, "%s: match_type must be tuple or a class defined in Python "
                 "over it (such as permindex.Match)", function);
    return 0;
}

/* match_type(key, fingerprint, distance) as CPython makes a tuple subclass (tp_alloc of the
 * type, then its three items), a new reference; ``key`` is stolen, also on failure (NULL with
 * the error set). */
static PyObject *
new_match(PyTypeObject *match_type, PyObject *key, uint64_t fingerprint, long distance)
{
    PyObject *fingerprint_object = PyLong_FromUnsignedLongLong(fingerprint);
    PyObject *distance_object = PyLong_FromLong(distance);
    PyObject *match = match_type->tp_alloc(match_type, 3);
    if (fingerprint_object == NULL || distance_object == NULL || match == NULL) {
        Py_DECREF(key);
        Py_XDECREF(fingerprint_object);
        Py_XDECREF(distance_object);
        Py_XDECREF(match);
        return NULL;
    }
    PyTuple_SET_ITEM(match, 0, key);
    PyTuple_SET_ITEM(match, 1, fingerprint_object);
    PyTuple_SET_ITEM(match, 2, distance_object);
    return match;
}

/* The key of ``row`` (a new reference): data[offsets[row]:offsets[row + 1] - 1] decoded as
 * UTF-8 (strict), the row and its offsets checked here, as they are read. NULL with
 * UnicodeDecodeError, or ``error`` naming ``function`` and ``why``, set. */
static PyObject *
key_of_row(int64_t row, const int64_t *offsets, Py_ssize_t offsets_size, const char *data,
           Py_ssize_t data_size, PyObject *error, const char *function, const char *why)
{
    if (row < 0 || row >= offsets_size - 1) { /* not row + 1: it overflows at INT64_MAX */
        PyErr_Format(error, "%s: a row outside the offsets (%s)", function, why);
        return NULL;
    }
    int64_t start = offsets[row], end = offsets[row + 1];
    if (start < 0 || end <= start || end > data_size) {
        PyErr_Format(error, "%s: a key outside the data (%s)", function, why);
        return NULL;
    }
    return PyUnicode_DecodeUTF8(data + start, end - 1 - start, "strict");
}

/* Slots of the decoded keys' cache (a power of two). */
#define KEY_CACHE 1024

/* The key of ``row`` (a new reference, from key_of_row), or the str decoded for that row
 * before (``cached_rows``/``cached_keys``, direct-mapped by a multiplicative hash of the row).
 * The row and its offsets are checked as they are read, not before the pass: the arrays are
 * the caller's, and an allocation of the pass may run a finaliser that changes them. NULL
 * with ValueError (or UnicodeDecodeError) set. */
static PyObject *
decoded_key(int64_t row, const int64_t *offsets, Py_ssize_t offsets_size, const char *data,
            Py_ssize_t data_size, int64_t *cached_rows, PyObject **cached_keys)
{
    size_t slot = (size_t)(((uint64_t)row * UINT64_C(0x9E3779B97F4A7C15)) >> 54);
    if (cached_rows[slot] == row && cached_keys[slot] != NULL) {
        Py_INCREF(cached_keys[slot]);
        return cached_keys[slot];
    }
    PyObject *key = key_of_row(row, offsets, offsets_size, data, data_size, PyExc_ValueError,
                               "match_lists", "or changed while read");
    if (key == NULL) {
        return NULL;
    }
    Py_XSETREF(cached_keys[slot], key);
    Py_INCREF(key);
    cached_rows[slot] = row;
    return key;
}

static PyObject *
match_lists(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "match_lists takes 6 arguments, not %zd", nargs);
        return NULL;
    }
    PyObject *type_object = args[0];
    if (!match_type_ok(type_object, "match_lists")) {
        return NULL;
    }
    PyTypeObject *match_type = (PyTypeObject *)type_object;
    Py_ssize_t n = PyLong_AsSsize_t(args[1]);
    if (n == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "match_lists: n must be >= 0");
        return NULL;
    }
    PyObject *keys = args[3];
    int decode = PyTuple_Check(keys) && PyTuple_GET_SIZE(keys) == 3 &&
                 PyObject_CheckBuffer(PyTuple_GET_ITEM(keys, 0)) &&
                 PyObject_CheckBuffer(PyTuple_GET_ITEM(keys, 1)) &&
                 PyObject_CheckBuffer(PyTuple_GET_ITEM(keys, 2));
    if (!decode && !PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "match_lists: keys must be a list or a tuple (rows, "
                                         "offsets, data) of arrays");
        return NULL;
    }
    Py_buffer queries_view, fps_view, distances_view;
    Py_buffer rows_view = {0}, offsets_view = {0}, data_view = {0};
    PyObject *results = NULL;
    /* Decoded keys by row, direct-mapped (KEY_CACHE slots): a row matched by many queries is
     * decoded once and its str shared, as KeyRows.keys shares it. */
    int64_t *cached_rows = NULL;
    PyObject **cached_keys = NULL;
    if (decode) {
        if (get_vector(PyTuple_GET_ITEM(keys, 0), &rows_view, 8, "ql", "match_lists", "rows") <
            0) {
            return NULL;
        }
        if (get_vector(PyTuple_GET_ITEM(keys, 1), &offsets_view, 8, "ql", "match_lists",
                       "offsets") < 0) {
            PyBuffer_Release(&rows_view);
            return NULL;
        }
        if (get_vector(PyTuple_GET_ITEM(keys, 2), &data_view, 1, "B", "match_lists", "data") <
            0) {
            PyBuffer_Release(&rows_view);
            PyBuffer_Release(&offsets_view);
            return NULL;
        }
    }
    if (get_vector(args[2], &queries_view, 8, "ql", "match_lists", "queries") < 0) {
        goto release_keys;
    }
    if (get_vector(args[4], &fps_view, 8, "QL", "match_lists", "fingerprints") < 0) {
        PyBuffer_Release(&queries_view);
        goto release_keys;
    }
    if (get_vector(args[5], &distances_view, 1, "B", "match_lists", "distances") < 0) {
        PyBuffer_Release(&queries_view);
        PyBuffer_Release(&fps_view);
        goto release_keys;
    }
    Py_ssize_t m = queries_view.shape[0];
    Py_ssize_t key_count = decode ? rows_view.shape[0] : PyList_GET_SIZE(keys);
    if (fps_view.shape[0] != m || distances_view.shape[0] != m || key_count != m) {
        PyErr_SetString(PyExc_ValueError,
                        "match_lists: queries, keys, fingerprints and distances differ in length");
        goto done;
    }
    const int64_t *queries = (const int64_t *)queries_view.buf;
    const uint64_t *fps = (const uint64_t *)fps_view.buf;
    const uint8_t *distances = (const uint8_t *)distances_view.buf;
    const int64_t *rows = (const int64_t *)rows_view.buf;
    const int64_t *offsets = (const int64_t *)offsets_view.buf;
    const char *data = (const char *)data_view.buf;
    for (Py_ssize_t i = 0; i < m; i++) {
        if (queries[i] < 0 || queries[i] >= n || (i && queries[i] < queries[i - 1])) {
            PyErr_SetString(PyExc_ValueError,
                            "match_lists: queries must be non-decreasing and in [0, n)");
            goto done;
        }
    }
    if (decode) {
        cached_rows = PyMem_Malloc(KEY_CACHE * sizeof(int64_t));
        cached_keys = PyMem_Calloc(KEY_CACHE, sizeof(PyObject *));
        if (cached_rows == NULL || cached_keys == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t c = 0; c < KEY_CACHE; c++) {
            cached_rows[c] = -1;
        }
    }
    results = PyList_New(n);
    if (results == NULL) {
        goto done;
    }
    Py_ssize_t i = 0;
    int lists_untracked = 1; /* every list of the batch left untracked so far */
    for (Py_ssize_t q = 0; q < n; q++) {
        Py_ssize_t start = i;
        while (i < m && queries[i] == q) {
            i++;
        }
        PyObject *list = PyList_New(i - start);
        if (list == NULL) {
            goto fail;
        }
        PyList_SET_ITEM(results, q, list);
        int matches_untracked = 1; /* every Match of this list left untracked so far */
        for (Py_ssize_t j = start; j < i; j++) {
            PyObject *key;
            if (decode) {
                key = decoded_key(rows[j], offsets, offsets_view.shape[0], data,
                                  data_view.shape[0], cached_rows, cached_keys);
            }
            else if (j < PyList_GET_SIZE(keys)) {
                key = PyList_GET_ITEM(keys, j);
                Py_INCREF(key);
            }
            else { /* the list changed by a finaliser run by an allocation */
                PyErr_SetString(PyExc_RuntimeError, "match_lists: keys changed while read");
                key = NULL;
            }
            if (key == NULL) {
                goto fail;
            }
            int str_key = PyUnicode_CheckExact(key);
            PyObject *match = new_match(match_type, key, fps[j], distances[j]);
            if (match == NULL) {
                goto fail;
            }
            if (str_key && PyObject_GC_IsTracked(match)) {
                /* a str and two ints: the tuple can never be part of a reference cycle, so
                 * the cyclic collector need not follow it (CPython's own collector untracks
                 * such tuples when it first meets them; here no collection pays for that) */
                PyObject_GC_UnTrack(match);
            }
            if (PyObject_GC_IsTracked(match)) {
                matches_untracked = 0;
            }
            PyList_SET_ITEM(list, j - start, match);
        }
        /* A list of untracked objects only (an empty one too) cannot be in a cycle as made:
         * left to reference counting, it is not walked by every collection while the caller
         * holds it, nor promoted to the old generation, whose full collections (all of the
         * process's objects) its promotion would trigger. The one that holds such lists only
         * likewise. The price: a cycle the caller makes through one of them later (a list
         * appended to itself) is not collected; the docstring of Index.query_many says so. */
        if (matches_untracked) {
            PyObject_GC_UnTrack(list);
        }
        else {
            lists_untracked = 0;
        }
    }
    if (lists_untracked) {
        PyObject_GC_UnTrack(results);
    }
    goto done;
fail:
    Py_CLEAR(results);
done:
    if (cached_keys != NULL) {
        for (Py_ssize_t c = 0; c < KEY_CACHE; c++) {
            Py_XDECREF(cached_keys[c]);
        }
    }
    PyMem_Free(cached_keys);
    PyMem_Free(cached_rows);
    PyBuffer_Release(&queries_view);
    PyBuffer_Release(&fps_view);
    PyBuffer_Release(&distances_view);
release_keys:
    if (decode) {
        PyBuffer_Release(&rows_view);
        PyBuffer_Release(&offsets_view);
        PyBuffer_Release(&data_view);
    }
    return results;
}

/* The single-query kernel: lookup_kernels.lookup_packed_c, a numba cfunc. Its capsule's name. */
typedef int64_t (*packed_kernel)(uint64_t, int64_t *);
#define KERNEL_CAPSULE "permindex.lookup_packed"

typedef struct {
    PyObject_HEAD
    packed_kernel kernel;
    PyTypeObject *match_type; /* NULL until every field below is set */
    PyObject *keys;           /* the key store (KeyRows): its arrays' buffers taken per call */
    Py_buffer packed, fps;
} SingleLookup;

static PyObject *offsets_name, *data_name; /* "_off_mv", "_data_mv", interned */

static void
single_lookup_dealloc(SingleLookup *self)
{
    if (self->match_type != NULL) {
        PyBuffer_Release(&self->packed);
        PyBuffer_Release(&self->fps);
        Py_DECREF(self->keys);
        Py_DECREF(self->match_type);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
single_lookup_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *capsule, *packed, *fps, *keys, *match_type;
    static char *names[] = {"kernel", "packed", "fingerprints", "keys", "match_type", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOOO:SingleLookup", names, &capsule,
                                     &packed, &fps, &keys, &match_type)) {
        return NULL;
    }
    if (!PyCapsule_IsValid(capsule, KERNEL_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError,
                        "SingleLookup: kernel must be the capsule \"" KERNEL_CAPSULE "\" "
                        "(permindex.index.lookup.packed_kernel_capsule)");
        return NULL;
    }
    if (!match_type_ok(match_type, "SingleLookup")) {
        return NULL;
    }
    SingleLookup *self = (SingleLookup *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->kernel = (packed_kernel)PyCapsule_GetPointer(capsule, KERNEL_CAPSULE);
    if (get_vector(packed, &self->packed, 8, "ql", "SingleLookup", "packed") < 0) {
        goto fail;
    }
    if (get_vector(fps, &self->fps, 8, "QL", "SingleLookup", "fingerprints") < 0) {
        PyBuffer_Release(&self->packed);
        goto fail;
    }
    /* The header of a packed plan (lookup_kernels.PACKED_HEADER = 10 entries), checked once:
     * its size, and that it points to these fingerprints. */
    const int64_t *header = (const int64_t *)self->packed.buf;
    Py_ssize_t entries = self->packed.shape[0];
    if (self->packed.readonly || entries < 10 || entries > (1 << 24) || header[0] < 0 ||
        header[1] < 0 || header[2] < 0 || header[0] > entries || header[1] > entries ||
        header[2] > entries || 10 + header[0] * header[2] + header[1] * 9 != entries ||
        header[3] != (int64_t)(intptr_t)self->fps.buf || header[5] != self->fps.shape[0]) {
        PyErr_SetString(PyExc_ValueError, "SingleLookup: packed is not a writable plan over "
                                          "these fingerprints");
        PyBuffer_Release(&self->packed);
        PyBuffer_Release(&self->fps);
        goto fail;
    }
    Py_INCREF(keys);
    self->keys = keys;
    Py_INCREF(match_type);
    self->match_type = (PyTypeObject *)match_type;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* The buffer of the key store's attribute ``name`` (any one-dimensional C-contiguous buffer of
 * integers of ``itemsize`` bytes: KeyRows holds memoryviews), acquired into ``view`` (the
 * caller releases it): a released memoryview is refused here, as any other bad attribute
 * (TypeError, ValueError or AttributeError set, -1 returned). */
static int
key_buffer(PyObject *keys, PyObject *name, Py_buffer *view, Py_ssize_t itemsize,
           const char *formats)
{
    PyObject *attribute = PyObject_GetAttr(keys, name);
    if (attribute == NULL) {
        return -1;
    }
    int status = get_vector(attribute, view, itemsize, formats, "SingleLookup", "a key array");
    Py_DECREF(attribute); /* the buffer holds the exporter */
    return status;
}

/* [match_type(key, fingerprint, distance)]: the one match of a query, its key decoded from
 * the key store as it is now (rows below the plan's never change). */
static PyObject *
one_match(SingleLookup *self, int64_t row, long distance)
{
    if (row < 0 || row >= self->fps.shape[0]) {
        PyErr_SetString(PyExc_RuntimeError, "SingleLookup: the kernel found a row outside the "
                                            "fingerprints (the plan is stale)");
        return NULL;
    }
    Py_buffer offsets_view, data_view;
    if (key_buffer(self->keys, offsets_name, &offsets_view, 8, "ql") < 0) {
        return NULL;
    }
    if (key_buffer(self->keys, data_name, &data_view, 1, "B") < 0) {
        PyBuffer_Release(&offsets_view);
        return NULL;
    }
    PyObject *key = key_of_row(row, (const int64_t *)offsets_view.buf, offsets_view.shape[0],
                               (const char *)data_view.buf, data_view.shape[0],
                               PyExc_RuntimeError, "SingleLookup", "the plan is stale");
    PyBuffer_Release(&offsets_view);
    PyBuffer_Release(&data_view);
    if (key == NULL) {
        return NULL;
    }
    PyObject *match =
        new_match(self->match_type, key, ((const uint64_t *)self->fps.buf)[row], distance);
    if (match == NULL) {
        return NULL;
    }
    PyObject *list = PyList_New(1);
    if (list == NULL) {
        Py_DECREF(match);
        return NULL;
    }
    PyList_SET_ITEM(list, 0, match);
    return list;
}

static PyObject *
single_lookup_lookup(SingleLookup *self, PyObject *query)
{
    uint64_t value = PyLong_AsUnsignedLongLong(query);
    if (value == (uint64_t)-1 && PyErr_Occurred()) {
        return NULL;
    }
    int64_t found = self->kernel(value, (int64_t *)self->packed.buf);
    if (found == 0) {
        return PyList_New(0);
    }
    if (found > 0) {
        return PyLong_FromLongLong(found);
    }
    found = -(found + 1);
    return one_match(self, found >> 6, (long)(found & 63));
}

static PyMethodDef single_lookup_methods[] = {
    {"lookup", (PyCFunction)single_lookup_lookup, METH_O,
     "lookup(query) -> list or int\n\n"
     "The matches of one query (int in [0, 2^64)) in the plan's frozen runs: a list of its\n"
     "one Match, or an empty list; else the kernel's count of matches (an int >= 2), written\n"
     "to the plan's output array for the caller to read back."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject SingleLookupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "permindex.index._match_lists.SingleLookup",
    .tp_basicsize = sizeof(SingleLookup),
    .tp_dealloc = (destructor)single_lookup_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc =
        "SingleLookup(kernel, packed, fingerprints, keys, match_type)\n\n"
        "One query's lookup on a packed plan (lookup_kernels.lookup_packed) through the\n"
        "kernel's C entry point (kernel: permindex.index.lookup.packed_kernel_capsule()),\n"
        "without numba's dispatch, its one match made here: the key decoded from the key\n"
        "store keys (a KeyRows: its memoryviews _off_mv and _data_mv, acquired as buffers\n"
        "at each call that finds one match, a released one refused),\n"
        "the fingerprint from fingerprints (n,) uint64, the array the plan points to.\n"
        "packed (p,) int64 is writable (the kernel writes the output array whose address it\n"
        "holds). Holds packed and fingerprints (their buffers) until freed; the caller keeps\n"
        "the other arrays the plan points to alive and calls lookup under the index's lock.\n"
        "The GIL stays held during the kernel (under a microsecond).",
    .tp_methods = single_lookup_methods,
    .tp_new = single_lookup_new,
};

static PyMethodDef methods[] = {
    {"match_lists", (PyCFunction)(void (*)(void))match_lists, METH_FASTCALL,
     "match_lists(match_type, n, queries, keys, fingerprints, distances) -> list of n lists\n\n"
     "The Match lists of a batch lookup (see permindex.index.match.match_lists_python)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_definition = {
    PyModuleDef_HEAD_INIT,
    "permindex.index._match_lists",
    "The result lists of a batch lookup made in C (permindex.index.match).",
    0,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__match_lists(void)
{
    PyObject *probe = PyObject_CallFunction((PyObject *)&PyType_Type, "s(O){}",
                                            "match_type_probe", (PyObject *)&PyTuple_Type);
    if (probe == NULL) {
        return NULL;
    }
    python_class_dealloc = ((PyTypeObject *)probe)->tp_dealloc;
    Py_DECREF(probe);
    offsets_name = PyUnicode_InternFromString("_off_mv");
    data_name = PyUnicode_InternFromString("_data_mv");
    if (offsets_name == NULL || data_name == NULL || PyType_Ready(&SingleLookupType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_definition);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&SingleLookupType);
    if (PyModule_AddObject(module, "SingleLookup", (PyObject *)&SingleLookupType) < 0) {
        Py_DECREF(&SingleLookupType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
