/* Postings runs (store/postings.py, store/batch.py): a batch's band keys sorted with
 * their docnos, two stored runs merged, and the postings of many keys probed in runs.
 *
 * In C because these touch every posting of a batch (a hundred and fifty thousand
 * keys for one-line documents): numpy's stable argsort and gathers, or a pair of
 * searchsorted calls per run, made a tenth of such a batch's time; a radix sort by the
 * keys' top byte and a merge in one pass do not.  The numpy code stays the definition.
 */
#include "_kernels.h"

typedef struct {
    uint64_t key, value;
} Pair;

/* Stable insertion sort by key (a few pairs). */
static void insertion_pairs(Pair *a, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        Pair p = a[i];
        Py_ssize_t j = i;
        while (j > 0 && a[j - 1].key > p.key) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = p;
    }
}

/* Stable LSD radix sort by the low `bytes` bytes of the keys (the rest equal), bytes
 * whose digit is the same for every pair skipped; the result in `a`. */
static void lsd_pairs(Pair *a, Pair *tmp, Py_ssize_t n, int bytes)
{
    Py_ssize_t count[8][256];
    memset(count, 0, sizeof(count[0]) * (size_t)bytes);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint64_t k = a[i].key;
        for (int d = 0; d < bytes; d++)
            count[d][(k >> (8 * d)) & 0xFF]++;
    }
    Pair *src = a, *dst = tmp;
    for (int d = 0; d < bytes; d++) {
        Py_ssize_t *c = count[d];
        if (c[(src[0].key >> (8 * d)) & 0xFF] == n) /* one digit for all: nothing moves */
            continue;
        Py_ssize_t at = 0;
        for (int x = 0; x < 256; x++) {
            Py_ssize_t m = c[x];
            c[x] = at;
            at += m;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            dst[c[(src[i].key >> (8 * d)) & 0xFF]++] = src[i];
        Pair *t = src;
        src = dst;
        dst = t;
    }
    if (src != a)
        memcpy(a, src, (size_t)n * sizeof(Pair));
}

/* The first position in [lo, n) of sorted keys (little-endian) whose key is not
 * below x (`above`: above x). */
static inline Py_ssize_t bound_in(const uint64_t *keys, Py_ssize_t lo, Py_ssize_t n, uint64_t x,
                                  int above)
{
    Py_ssize_t hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        uint64_t k = le64(keys[mid]);
        if (k < x || (above && k == x))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A growing output buffer of `width`-byte items. */
typedef struct {
    char *buf;
    Py_ssize_t n, room, width;
} Grown;

static int grown_put(Grown *g, const void *item)
{
    if (g->n == g->room) {
        Py_ssize_t room = g->room ? 2 * g->room : 1024;
        char *buf = PyMem_Realloc(g->buf, (size_t)(room * g->width));
        if (buf == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        g->buf = buf;
        g->room = room;
    }
    memcpy(g->buf + g->n * g->width, item, (size_t)g->width);
    g->n++;
    return 0;
}

PyDoc_STRVAR(probe_runs_doc,
"probe_runs(keys, runs, cap) -> (query, cut, docnos)\n\n"
"postings.probe_runs: the postings of the sorted distinct uint64 `keys` found in\n"
"`runs` (a list of (partition, stored run): the raw value, its keys then its docnos,\n"
"little-endian), the newest `cap` of each key's slice of each run: for every posting\n"
"taken, its key's position in `keys` (int64), whether its slice was cut to `cap`\n"
"(bool) and its docno (uint64), run after run, each slice in the run's order.  What\n"
"numpy did with two searchsorted and a gather per run, by a binary search per key\n"
"that starts where the last one ended.");

static PyObject *probe_runs(PyObject *self, PyObject *args)
{
    PyObject *keys_obj, *runs;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "OO!n", &keys_obj, &PyList_Type, &runs, &cap))
        return NULL;
    if (cap < 0) {
        PyErr_SetString(PyExc_ValueError, "probe_runs: cap >= 0");
        return NULL;
    }
    Py_buffer kv;
    if (get_buffer(keys_obj, &kv, 8, "keys") < 0)
        return NULL;
    const uint64_t *keys = kv.buf;
    Py_ssize_t nk = kv.len / 8;
    /* where each partition's keys begin (the keys ascend, so do their top bytes) */
    Py_ssize_t bounds[257];
    for (int p = 0, i = 0; p <= 256; p++) {
        while (i < nk && (Py_ssize_t)(keys[i] >> 56) < p)
            i++;
        bounds[p] = i;
    }
    Grown q = {NULL, 0, 0, 8}, c = {NULL, 0, 0, 1}, d = {NULL, 0, 0, 8};
    PyObject *result = NULL;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(runs); r++) {
        PyObject *item = PyList_GET_ITEM(runs, r);
        Py_ssize_t part;
        Py_buffer rv;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "ny*", &part, &rv)) {
            if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
                PyErr_Clear();
                PyErr_SetString(PyExc_TypeError, "probe_runs: runs are (partition, run) tuples");
            }
            goto done;
        }
        if (part < 0 || part > 255 || rv.len % 16) {
            PyBuffer_Release(&rv);
            PyErr_SetString(PyExc_ValueError, "probe_runs: a partition in 0..255, runs of 16-byte postings");
            goto done;
        }
        Py_ssize_t n = rv.len / 16, at = 0;
        const uint64_t *rk = rv.buf, *rd = rk + n;
        int bad = 0;
        for (Py_ssize_t i = bounds[part]; i < bounds[part + 1] && at < n && !bad; i++) {
            uint64_t x = keys[i];
            Py_ssize_t lo = bound_in(rk, at, n, x, 0);
            if (lo == n)
                break;
            if (le64(rk[lo]) != x) {
                at = lo;
                continue;
            }
            Py_ssize_t hi = bound_in(rk, lo, n, x, 1);
            uint8_t was_cut = hi - lo > cap;
            int64_t qi = (int64_t)i;
            for (Py_ssize_t t = hi - cap > lo ? hi - cap : lo; t < hi; t++) {
                uint64_t docno = le64(rd[t]);
                if (grown_put(&q, &qi) < 0 || grown_put(&c, &was_cut) < 0 ||
                    grown_put(&d, &docno) < 0) {
                    bad = 1;
                    break;
                }
            }
            at = hi;
        }
        PyBuffer_Release(&rv);
        if (bad)
            goto done;
    }
    result = Py_BuildValue("y#y#y#", q.buf ? q.buf : "", q.n * 8, c.buf ? c.buf : "", c.n,
                           d.buf ? d.buf : "", d.n * 8);
done:
    PyBuffer_Release(&kv);
    PyMem_Free(q.buf);
    PyMem_Free(c.buf);
    PyMem_Free(d.buf);
    return result;
}

PyDoc_STRVAR(merge_runs_doc,
"merge_runs(older_keys, older_docnos, newer_keys, newer_docnos) -> bytes | None\n\n"
"postings.merge_runs: two runs (uint64 little-endian keys and docnos, each ordered by\n"
"key) as one, packed as a run is stored (`pack`: the keys, then the docnos), the\n"
"older run's postings first within a key (numpy's searchsorted(side=\"right\") merge).\n"
"None when that leaves a key's docnos out of ascending order (documents restored in\n"
"any order): the caller sorts those by (key, docno) itself.");

static PyObject *merge_runs(PyObject *self, PyObject *args)
{
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3]))
        return NULL;
    Py_buffer views[4];
    if (get_buffers(4, views, objs, (Py_ssize_t[]){8, 8, 8, 8},
                    (const char *[]){"older_keys", "older_docnos", "newer_keys",
                                     "newer_docnos"}) < 0)
        return NULL;
    Py_ssize_t na = views[0].len / 8, nb = views[2].len / 8;
    if (views[1].len / 8 != na || views[3].len / 8 != nb) {
        release_buffers(4, views);
        PyErr_SetString(PyExc_ValueError, "merge_runs: as many docnos as keys");
        return NULL;
    }
    const uint64_t *ak = views[0].buf, *ad = views[1].buf, *bk = views[2].buf,
                   *bd = views[3].buf;
    Py_ssize_t n = na + nb;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 16 * n);
    if (out == NULL) {
        release_buffers(4, views);
        return NULL;
    }
    uint64_t *ok = (uint64_t *)PyBytes_AS_STRING(out), *od = ok + n;
    Py_ssize_t i = 0, j = 0, m = 0;
    uint64_t last_key = 0, last_docno = 0;
    int disorder = 0;
    /* each posting written once, and checked against the one before it */
#define MERGE_PUT(K, D)                                                                    \
    do {                                                                                   \
        uint64_t k_ = (K), d_ = (D);                                                       \
        disorder |= m > 0 && k_ == last_key && d_ < last_docno;                            \
        ok[m] = le64(k_);                                                                  \
        od[m] = le64(d_);                                                                  \
        last_key = k_;                                                                     \
        last_docno = d_;                                                                   \
        m++;                                                                               \
    } while (0)
    while (i < na && j < nb) {
        uint64_t x = le64(ak[i]), y = le64(bk[j]);
        if (x <= y) { /* the older first within a key */
            MERGE_PUT(x, le64(ad[i]));
            i++;
        } else {
            MERGE_PUT(y, le64(bd[j]));
            j++;
        }
    }
    for (; i < na; i++)
        MERGE_PUT(le64(ak[i]), le64(ad[i]));
    for (; j < nb; j++)
        MERGE_PUT(le64(bk[j]), le64(bd[j]));
#undef MERGE_PUT
    release_buffers(4, views);
    if (disorder) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

PyDoc_STRVAR(sort_pairs_doc,
"sort_pairs(keys, values) -> (keys, values)\n\n"
"postings.sort_pairs: the uint64 `keys` in ascending order, stably (equal keys keep\n"
"their order), each with its uint64 `value` (as bytes, native order): numpy's\n"
"argsort(kind=\"stable\") and two gathers, value for value.  Band keys are hashes,\n"
"spread evenly over the 64 bits: one pass deals them by their top byte (the postings'\n"
"partition) into 256 runs of a few hundred, each then sorted by its other seven bytes\n"
"while it sits in the L1 cache (radix passes; a few pairs by insertion), where numpy's\n"
"argsort of a batch's 150,000 keys and the gathers after it made a tenth of a batch\n"
"of one-line documents' time.");

static PyObject *sort_pairs(PyObject *self, PyObject *args)
{
    PyObject *keys_obj, *values_obj;
    if (!PyArg_ParseTuple(args, "OO", &keys_obj, &values_obj))
        return NULL;
    Py_buffer views[2];
    if (get_buffers(2, views, (PyObject *[]){keys_obj, values_obj}, (Py_ssize_t[]){8, 8},
                    (const char *[]){"keys", "values"}) < 0)
        return NULL;
    Py_ssize_t n = views[0].len / 8;
    if (views[1].len / 8 != n) {
        release_buffers(2, views);
        PyErr_SetString(PyExc_ValueError, "sort_pairs: as many values as keys");
        return NULL;
    }
    const uint64_t *keys = views[0].buf, *values = views[1].buf;
    Pair *a = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Pair) * 2);
    PyObject *out_keys = PyBytes_FromStringAndSize(NULL, n * 8);
    PyObject *out_values = PyBytes_FromStringAndSize(NULL, n * 8);
    if (a == NULL || out_keys == NULL || out_values == NULL) {
        release_buffers(2, views);
        PyMem_Free(a);
        Py_XDECREF(out_keys);
        Py_XDECREF(out_values);
        return a == NULL ? PyErr_NoMemory() : NULL;
    }
    Pair *tmp = a + n;
    /* dealt by the top byte into tmp (stable), each run sorted there, read out */
    Py_ssize_t start[257] = {0};
    for (Py_ssize_t i = 0; i < n; i++)
        start[(keys[i] >> 56) + 1]++;
    for (int x = 0; x < 256; x++)
        start[x + 1] += start[x];
    Py_ssize_t fill[256];
    memcpy(fill, start, sizeof(fill));
    for (Py_ssize_t i = 0; i < n; i++) {
        Pair p = {keys[i], values[i]};
        tmp[fill[keys[i] >> 56]++] = p;
    }
    release_buffers(2, views);
    for (int x = 0; x < 256; x++) {
        Py_ssize_t m = start[x + 1] - start[x];
        if (m <= 32)
            insertion_pairs(tmp + start[x], m);
        else
            lsd_pairs(tmp + start[x], a + start[x], m, 7);
    }
    uint64_t *ok = (uint64_t *)PyBytes_AS_STRING(out_keys);
    uint64_t *ov = (uint64_t *)PyBytes_AS_STRING(out_values);
    for (Py_ssize_t i = 0; i < n; i++) {
        ok[i] = tmp[i].key;
        ov[i] = tmp[i].value;
    }
    PyMem_Free(a);
    return Py_BuildValue("NN", out_keys, out_values);
}

PyMethodDef kernels_postings_methods[] = {
    {"sort_pairs", sort_pairs, METH_VARARGS, sort_pairs_doc},
    {"merge_runs", merge_runs, METH_VARARGS, merge_runs_doc},
    {"probe_runs", probe_runs, METH_VARARGS, probe_runs_doc},
    {NULL, NULL, 0, NULL},
};
