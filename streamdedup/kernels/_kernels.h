/* The private header of the compiled kernels (`streamdedup.kernels._kernels`): what
 * more than one of their source files needs.  Every helper is `static inline`, so each
 * file compiles them as the one file before them did (no call crosses a file).
 *
 * Arrays cross the boundary as buffers (bytes, or numpy arrays via the buffer
 * protocol) and come back as bytes, so building needs no numpy headers.
 */
#ifndef STREAMDEDUP_KERNELS_H
#define STREAMDEDUP_KERNELS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static inline uint64_t le64(uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

/* A buffer argument of the expected item size, released by PyBuffer_Release. */
static inline int get_buffer_as(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name,
                         int flags)
{
    if (PyObject_GetBuffer(obj, view, flags) < 0)
        return -1;
    if (view->len % itemsize) {
        PyErr_Format(PyExc_ValueError, "%s: %zd bytes is not a whole number of %zd-byte items",
                     name, view->len, itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static inline int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name)
{
    return get_buffer_as(obj, view, itemsize, name, PyBUF_C_CONTIGUOUS);
}

static inline void release_buffers(int n, Py_buffer *views)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
}

/* n buffer arguments, all or none (get_buffer_as for each, with `flags`;
 * release_buffers after). */
static inline int get_buffers_as(int n, Py_buffer *views, PyObject *const *objs,
                          const Py_ssize_t *itemsizes, const char *const *names, int flags)
{
    for (int i = 0; i < n; i++) {
        if (get_buffer_as(objs[i], &views[i], itemsizes[i], names[i], flags) < 0) {
            release_buffers(i, views);
            return -1;
        }
    }
    return 0;
}

/* n read-only buffer arguments (get_buffers_as, C-contiguous). */
static inline int get_buffers(int n, Py_buffer *views, PyObject *const *objs,
                       const Py_ssize_t *itemsizes, const char *const *names)
{
    return get_buffers_as(n, views, objs, itemsizes, names, PyBUF_C_CONTIGUOUS);
}

/* Do n_docs + 1 offsets ascend from >= 0 to <= n_values, no run longer than max_run? */
static inline int offsets_ok(const int64_t *offsets, Py_ssize_t n_docs, Py_ssize_t n_values,
                      int64_t max_run)
{
    if (n_docs < 0 || offsets[0] < 0)
        return 0;
    for (Py_ssize_t d = 0; d < n_docs; d++)
        if (offsets[d + 1] < offsets[d] || offsets[d + 1] > n_values ||
            offsets[d + 1] - offsets[d] > max_run)
            return 0;
    return 1;
}

/* A docno (int) as a C integer, -1 with an exception set on error: an int of one
 * digit (below 2**30: every docno of an index below a billion documents) read in
 * place, any other through PyLong_AsLongLong.  The call and its checks were a third
 * of `gather`'s time on a template page's two thousand postings.  `is_small_docno`:
 * whether `o` is an int small enough to read in place. */
static inline int is_small_docno(PyObject *o)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)o);
#else
    return PyLong_CheckExact(o) && Py_SIZE(o) == 1;
#endif
}

static inline long long docno_value(PyObject *o)
{
    if (is_small_docno(o)) {
#if PY_VERSION_HEX >= 0x030C0000
        return (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
#else
        return (long long)((PyLongObject *)o)->ob_digit[0];
#endif
    }
    return PyLong_AsLongLong(o);
}

static inline int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Each source file's kernels, as the module (module.c) gathers them. */
extern PyMethodDef kernels_shingling_methods[];
extern PyMethodDef kernels_signatures_methods[];
extern PyMethodDef kernels_jaccard_methods[];
extern PyMethodDef kernels_candidates_methods[];
extern PyMethodDef kernels_postings_methods[];
extern PyMethodDef kernels_partitions_methods[];

#endif
