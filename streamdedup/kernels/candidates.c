/* Candidates (store/tables.py `gather_newest`, sketch/signature.py `rank_gathered`,
 * engine/search.py): a document's candidates gathered from its buckets' postings (the
 * newest `cap` of each, stored and the batch's own, distinct and ascending), then
 * ranked by their signature estimate; for one document (`gather`, `rank`) or for a
 * whole batch in one call (`gather_batch`, `rank_batch`), on the same helpers.
 *
 * In C because a template page meets thousands of postings: reading them as Python
 * ints, sorting and deduplicating with numpy, and ranking by lexsort cost more than
 * the rest of its search; these loops read the ints in place, sort by radix or bitmap
 * and rank by a counting sort.  The Python and numpy code stays the definition.
 */
#include "_kernels.h"

/* ---------------------------------------------------------------- gathering */

static void small_sort_u64(uint64_t *a, Py_ssize_t n)
{
    if (n > 24) {
        qsort(a, (size_t)n, sizeof(uint64_t), cmp_u64);
        return;
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t v = a[i];
        Py_ssize_t j = i;
        while (j > 0 && a[j - 1] > v) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = v;
    }
}

/* Ascending distinct non-negative int64 in place (LSD radix by bytes, as many passes as
 * the largest value needs; insertion sort for a few); returns the count kept. */
static Py_ssize_t sort_distinct_docnos(int64_t *a, int64_t *tmp, Py_ssize_t n)
{
    int64_t lo = INT64_MAX, hi = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        lo = a[i] < lo ? a[i] : lo;
        hi = a[i] > hi ? a[i] : hi;
    }
    if (n > 32 && (uint64_t)(hi - lo) / 64 < (uint64_t)n) {
        /* Docnos close together (a page's siblings, numbered as they came): a bitmap
         * of the span, set then read in order, sorts and makes distinct in two
         * passes; `tmp` (n values) holds the span's n words at most. */
        uint64_t *bits = (uint64_t *)tmp;
        Py_ssize_t words = (Py_ssize_t)((uint64_t)(hi - lo) / 64) + 1;
        memset(bits, 0, (size_t)words * 8);
        for (Py_ssize_t i = 0; i < n; i++)
            bits[(a[i] - lo) >> 6] |= 1ULL << ((a[i] - lo) & 63);
        Py_ssize_t m = 0;
        for (Py_ssize_t w = 0; w < words; w++)
            for (uint64_t b = bits[w]; b; b &= b - 1)
                a[m++] = lo + w * 64 + __builtin_ctzll(b);
        return m;
    }
    if (n <= 32) {
        small_sort_u64((uint64_t *)a, n);
    } else {
        uint64_t top = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            top |= (uint64_t)a[i];
        int64_t *src = a, *dst = tmp;
        for (int shift = 0; shift < 64 && (top >> shift); shift += 8) {
            Py_ssize_t count[257] = {0};
            for (Py_ssize_t i = 0; i < n; i++)
                count[(((uint64_t)src[i] >> shift) & 0xFF) + 1]++;
            for (int x = 0; x < 256; x++)
                count[x + 1] += count[x];
            for (Py_ssize_t i = 0; i < n; i++)
                dst[count[((uint64_t)src[i] >> shift) & 0xFF]++] = src[i];
            int64_t *t = src;
            src = dst;
            dst = t;
        }
        if (src != a)
            memcpy(a, src, (size_t)n * 8);
    }
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (m == 0 || a[i] != a[m - 1])
            a[m++] = a[i];
    return m;
}

/* Append items [from, to) of a list of docnos (int) to buf; -1 on error. */
static int append_docnos(int64_t *buf, Py_ssize_t *m, PyObject *list, Py_ssize_t from,
                         Py_ssize_t to)
{
    for (Py_ssize_t i = from; i < to; i++) {
        long long v = docno_value(PyList_GET_ITEM(list, i));
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0) {
            PyErr_SetString(PyExc_ValueError, "gather: a docno below 0");
            return -1;
        }
        buf[(*m)++] = v;
    }
    return 0;
}

/* How many docnos a bucket's postings hold: a list of ints, or an int64 array
 * (array('q'): the form a batch keeps them in); -1 with TypeError otherwise. */
static Py_ssize_t docnos_len(PyObject *o)
{
    if (PyList_Check(o))
        return PyList_GET_SIZE(o);
    if (!PyObject_CheckBuffer(o) || PyBytes_Check(o) || PyByteArray_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "gather: postings must be lists or int64 arrays");
        return -1;
    }
    return PyObject_Size(o);
}

/* Append items [from, to) of a bucket's postings (`docnos_len`) to buf; -1 on error.
 * An int64 array is copied as it is, where a list's ints are read one by one: a
 * batch's own docnos are int objects scattered over the heap, a cache miss each, and
 * reading them was most of `gather`'s time on a template page. */
static int append_range(int64_t *buf, Py_ssize_t *m, PyObject *o, Py_ssize_t from, Py_ssize_t to)
{
    if (from >= to) /* nothing to read: `o` may be NULL (a bucket without postings) */
        return 0;
    if (PyList_Check(o))
        return append_docnos(buf, m, o, from, to);
    Py_buffer v;
    if (PyObject_GetBuffer(o, &v, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    const char *f = v.format ? v.format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    if (v.itemsize != 8 || (strcmp(f, "q") && strcmp(f, "l")) || to * 8 > v.len) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_TypeError, "gather: postings must be lists or int64 arrays");
        return -1;
    }
    const int64_t *d = (const int64_t *)v.buf;
    int64_t low = 0;
    for (Py_ssize_t i = from; i < to; i++) {
        low |= d[i]; /* a sign bit anywhere: a docno below 0 */
        buf[(*m)++] = d[i];
    }
    PyBuffer_Release(&v);
    if (low < 0) {
        PyErr_SetString(PyExc_ValueError, "gather: a docno below 0");
        return -1;
    }
    return 0;
}

/* What gathering one document's candidates needs, kept across the documents of a
 * batch (`gather_batch`) so that its buffers are allocated once: for each band key
 * of the document its bucket's stored postings (`lists[b]`) and the batch's own
 * (`lists[n_keys + b]`; borrowed, NULL where none) with their lengths, and the
 * postings collected (`buf`, twice the room, for `sort_distinct_docnos`). */
typedef struct {
    PyObject **lists;
    Py_ssize_t *sizes;
    Py_ssize_t lists_room;
    int64_t *buf;
    Py_ssize_t buf_room;
} Gathering;

static void gathering_free(Gathering *g)
{
    PyMem_Free(g->lists);
    PyMem_Free(g->sizes);
    PyMem_Free(g->buf);
}

/* `gather`'s rule for one document, whose band keys are the list `keys`: the distinct
 * docnos, ascending, of each bucket's newest `cap` postings -- the batch's own
 * (`added_of`, oldest first, all newer than the stored ones) before the stored ones
 * (`read_ahead`, newest first) -- left in g->buf; their number, and *capped set if a
 * cap cut a bucket (or a bucket is `hot`); -1 with an exception set. */
static Py_ssize_t gather_into(Gathering *g, PyObject *keys, PyObject *read_ahead,
                              PyObject *added_of, PyObject *hot, Py_ssize_t cap, int *capped)
{
    if (!PyList_Check(keys)) {
        PyErr_SetString(PyExc_TypeError, "gather: band keys must be a list");
        return -1;
    }
    Py_ssize_t n_keys = PyList_GET_SIZE(keys), total = 0;
    if (2 * n_keys + 1 > g->lists_room) {
        PyMem_Free(g->lists);
        PyMem_Free(g->sizes);
        g->lists_room = 2 * n_keys + 1;
        g->lists = PyMem_Calloc((size_t)g->lists_room, sizeof(PyObject *));
        g->sizes = PyMem_Calloc((size_t)g->lists_room, sizeof(Py_ssize_t));
        if (g->lists == NULL || g->sizes == NULL) {
            g->lists_room = 0;
            PyErr_NoMemory();
            return -1;
        }
    }
    PyObject **stored = g->lists, **added = g->lists + n_keys;
    Py_ssize_t *n_stored = g->sizes, *n_added = g->sizes + n_keys;
    int any_hot = PySet_GET_SIZE(hot) > 0;
    for (Py_ssize_t b = 0; b < n_keys; b++) {
        PyObject *bk = PyList_GET_ITEM(keys, b);
        stored[b] = PyDict_GetItemWithError(read_ahead, bk);
        if (stored[b] == NULL && PyErr_Occurred())
            return -1;
        added[b] = PyDict_GetItemWithError(added_of, bk);
        if (added[b] == NULL && PyErr_Occurred())
            return -1;
        n_stored[b] = stored[b] ? docnos_len(stored[b]) : 0;
        n_added[b] = added[b] ? docnos_len(added[b]) : 0;
        if (n_stored[b] < 0 || n_added[b] < 0)
            return -1;
        if (any_hot) {
            int is_hot = PySet_Contains(hot, bk);
            if (is_hot < 0)
                return -1;
            *capped |= is_hot;
        }
        total += n_stored[b] + n_added[b];
    }
    if (2 * total + 1 > g->buf_room) {
        PyMem_Free(g->buf);
        g->buf_room = 2 * total + 1 > 2 * g->buf_room ? 2 * total + 1 : 2 * g->buf_room;
        g->buf = PyMem_Malloc((size_t)g->buf_room * 8);
        if (g->buf == NULL) {
            g->buf_room = 0;
            PyErr_NoMemory();
            return -1;
        }
    }
    int64_t *buf = g->buf;
    Py_ssize_t m = 0;
    for (Py_ssize_t b = 0; b < n_keys; b++) {
        Py_ssize_t ns = n_stored[b], na = n_added[b];
        int bad;
        if (na == 0) {
            bad = append_range(buf, &m, stored[b], 0, ns);
        } else {
            if (na + ns > cap)
                *capped = 1;
            if (na >= cap) {
                /* added[-cap:], as Python slices it: all of it for a cap of 0 */
                bad = append_range(buf, &m, added[b], cap ? na - cap : 0, na);
            } else {
                Py_ssize_t take = cap - na < ns ? cap - na : ns;
                bad = append_range(buf, &m, added[b], 0, na) ||
                      append_range(buf, &m, stored[b], 0, take);
            }
        }
        if (bad)
            return -1;
    }
    return sort_distinct_docnos(buf, buf + total, m);
}

PyDoc_STRVAR(gather_doc,
"gather(band_keys, read_ahead, added, hot, cap) -> (bytes, capped)\n\n"
"tables.gather_newest: the distinct docnos (int64, ascending) of the newest `cap`\n"
"postings of each bucket of a document whose buckets were read ahead (`read_ahead`:\n"
"key -> stored docnos newest first; `added`: key -> the batch's docnos, oldest first;\n"
"each a list of ints or an int64 array, array('q'), which is copied as it is;\n"
"`hot`: keys holding more than the cap), and whether a cap cut any bucket.");

static PyObject *gather(PyObject *self, PyObject *args)
{
    PyObject *keys, *read_ahead, *added_of, *hot;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "O!O!O!On", &PyList_Type, &keys, &PyDict_Type, &read_ahead,
                          &PyDict_Type, &added_of, &hot, &cap))
        return NULL;
    if (!PyAnySet_Check(hot) || cap < 0) {
        PyErr_SetString(PyExc_TypeError, "gather: hot must be a set, cap >= 0");
        return NULL;
    }
    Gathering g = {0};
    int capped = 0;
    Py_ssize_t m = gather_into(&g, keys, read_ahead, added_of, hot, cap, &capped);
    PyObject *raw = m < 0 ? NULL : PyBytes_FromStringAndSize((const char *)g.buf, m * 8);
    gathering_free(&g);
    if (raw == NULL)
        return NULL;
    return Py_BuildValue("NO", raw, capped ? Py_True : Py_False);
}

PyDoc_STRVAR(gather_batch_doc,
"gather_batch(rows, docnos, read_ahead, added, hot, cap) -> (flat, offsets, capped)\n\n"
"search.gather_all: `gather` for each document of a batch in turn (`rows`: each one's\n"
"band keys, a list of 8-byte keys; `docnos`: int64, its number), each document's\n"
"docno appended to the lists of `added` (key -> the batch's docnos, oldest first)\n"
"that its keys have once it is gathered, as the loop's insert adds it: so a document\n"
"meets exactly the earlier ones.  Returns the candidates of all of them end to end\n"
"(int64 bytes), where each one's begin (int64 bytes, n + 1 offsets) and whether a cap\n"
"cut a bucket of each (uint8 bytes).  `added` is changed in place.");

static PyObject *gather_batch(PyObject *self, PyObject *args)
{
    PyObject *rows, *docnos_obj, *read_ahead, *added_of, *hot;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "O!OO!O!On", &PyList_Type, &rows, &docnos_obj, &PyDict_Type,
                          &read_ahead, &PyDict_Type, &added_of, &hot, &cap))
        return NULL;
    if (!PyAnySet_Check(hot) || cap < 0) {
        PyErr_SetString(PyExc_TypeError, "gather_batch: hot must be a set, cap >= 0");
        return NULL;
    }
    Py_buffer view;
    if (get_buffer(docnos_obj, &view, 8, "docnos") < 0)
        return NULL;
    const int64_t *docnos = view.buf;
    Py_ssize_t n = PyList_GET_SIZE(rows);
    PyObject *result = NULL, *offsets = NULL, *capped_out = NULL;
    int64_t *flat = NULL;
    Gathering g = {0};
    Py_ssize_t flat_room = 1024, flat_used = 0;
    if (view.len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "gather_batch: one docno a row");
        goto done;
    }
    offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
    capped_out = PyBytes_FromStringAndSize(NULL, n ? n : 0);
    flat = PyMem_Malloc((size_t)flat_room * 8);
    if (offsets == NULL || capped_out == NULL || flat == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int64_t *off = (int64_t *)PyBytes_AS_STRING(offsets);
    uint8_t *capped_of = (uint8_t *)PyBytes_AS_STRING(capped_out);
    off[0] = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *keys = PyList_GET_ITEM(rows, j);
        int capped = 0;
        Py_ssize_t m = gather_into(&g, keys, read_ahead, added_of, hot, cap, &capped);
        if (m < 0)
            goto done;
        if (flat_used + m > flat_room) {
            Py_ssize_t room = 2 * flat_room > flat_used + m ? 2 * flat_room : flat_used + m;
            int64_t *grown = PyMem_Realloc(flat, (size_t)room * 8);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            flat = grown;
            flat_room = room;
        }
        memcpy(flat + flat_used, g.buf, (size_t)m * 8);
        flat_used += m;
        off[j + 1] = flat_used;
        capped_of[j] = (uint8_t)capped;
        /* the document is stored: its docno joins the batch's lists of its keys */
        Py_ssize_t n_keys = PyList_GET_SIZE(keys);
        PyObject **added = g.lists + n_keys;
        PyObject *d = NULL;
        for (Py_ssize_t b = 0; b < n_keys; b++) {
            if (added[b] == NULL)
                continue;
            if (d == NULL && (d = PyLong_FromLongLong(docnos[j])) == NULL)
                goto done;
            int failed;
            if (PyList_Check(added[b])) {
                failed = PyList_Append(added[b], d) < 0;
            } else { /* an int64 array (array('q')), as a batch keeps them */
                PyObject *r = PyObject_CallMethod(added[b], "append", "O", d);
                failed = r == NULL;
                Py_XDECREF(r);
            }
            if (failed) {
                Py_DECREF(d);
                goto done;
            }
        }
        Py_XDECREF(d);
    }
    PyObject *raw = PyBytes_FromStringAndSize((const char *)flat, flat_used * 8);
    if (raw != NULL)
        result = Py_BuildValue("NOO", raw, offsets, capped_out);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(capped_out);
    PyMem_Free(flat);
    gathering_free(&g);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------ ranking */

/* positions where two signatures agree */
static inline uint32_t agreeing(const uint16_t *r, const uint16_t *sig, Py_ssize_t k)
{
    uint32_t a = 0;
    Py_ssize_t x = 0;
#if defined(__SSE2__)
    /* 8 lanes at a time, counted in 16-bit lanes: an equal lane compares to 0xFFFF
     * (-1), subtracted from its counter.  What the compiler made of the plain loop
     * widened every comparison to 32 bits first (three times the instructions: the
     * count ran at 22 ns a 128-lane row, a tenth of a template page's apply time).
     * A lane's counter takes at most 0x7FFF vectors before it is summed. */
    while (x + 8 <= k) {
        __m128i acc = _mm_setzero_si128();
        Py_ssize_t stop = x + 8 * 0x7FFF < k ? x + 8 * 0x7FFF : k;
        for (; x + 8 <= stop; x += 8) {
            __m128i eq = _mm_cmpeq_epi16(_mm_loadu_si128((const __m128i *)(r + x)),
                                         _mm_loadu_si128((const __m128i *)(sig + x)));
            acc = _mm_sub_epi16(acc, eq);
        }
        /* the 8 counters summed: pairs to 32 bits (madd by 1), then across */
        acc = _mm_madd_epi16(acc, _mm_set1_epi16(1));
        acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, _MM_SHUFFLE(1, 0, 3, 2)));
        acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, _MM_SHUFFLE(2, 3, 0, 1)));
        a += (uint32_t)_mm_cvtsi128_si32(acc);
    }
#endif
    for (; x < k; x++)
        a += r[x] == sig[x];
    return a;
}

/* The signature estimate of `a` agreeing positions of `k` (estimate_jaccard's
 * arithmetic: an accidental agreement of two 16-bit minima, 1 in 65536, taken out;
 * floored at 0). */
static inline double estimate_of(uint32_t a, Py_ssize_t k)
{
    const double accidental = 1.0 / 65536.0;
    double e = ((double)a / (double)k - accidental) / (1.0 - accidental);
    return e > 0.0 ? e : 0.0;
}

/* The rows of `matrix` holding the signatures of candidates docnos[0..n) (ascending
 * from 0), looked up in `slot` (-1, or a docno past it: none) into rows[]; how many
 * have none, or -1 with an exception (`name`: the kernel's, for its message). */
static Py_ssize_t rows_of(const int64_t *docnos, Py_ssize_t n, const int32_t *slot,
                          Py_ssize_t n_slot, Py_ssize_t n_rows, int32_t *rows,
                          const char *name)
{
    Py_ssize_t missing = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        int64_t d = docnos[j];
        if (d < 0 || (j && d <= docnos[j - 1])) {
            PyErr_Format(PyExc_ValueError, "%s: docnos must ascend from 0", name);
            return -1;
        }
        int32_t row = d < n_slot ? slot[d] : -1;
        if (row >= n_rows) {
            PyErr_Format(PyExc_IndexError, "%s: a row outside the matrix", name);
            return -1;
        }
        rows[j] = row;
        missing += row < 0;
    }
    return missing;
}

/* The candidates whose `rows_of` found a row, ranked against `sig` (k positions):
 * agree[j] becomes candidate j's agreeing positions (-1: no row), order[0..kept)
 * the candidates by agreement, the most first, ties by docno (a counting sort:
 * `start` has k + 2 entries); `kept`, how many have a row.  The estimate is a
 * strictly increasing function of the agreement, so this is numpy's lexsort by
 * (-estimate, docno). */
static Py_ssize_t rank_rows(const uint16_t *sig, Py_ssize_t k, const uint16_t *matrix,
                            int32_t *agree, Py_ssize_t n, Py_ssize_t *start, Py_ssize_t *order)
{
    Py_ssize_t kept = 0;
    memset(start, 0, ((size_t)k + 2) * sizeof(Py_ssize_t));
    for (Py_ssize_t j = 0; j < n; j++) {
        int32_t row = agree[j];
        if (row < 0)
            continue;
        uint32_t a = agreeing(matrix + (Py_ssize_t)row * k, sig, k);
        agree[j] = (int32_t)a;
        start[k - a + 1]++; /* bucket k - a: the most agreeing first */
        kept++;
    }
    for (Py_ssize_t a = 0; a <= k; a++)
        start[a + 1] += start[a];
    for (Py_ssize_t j = 0; j < n; j++) /* stable: docnos ascending within a bucket */
        if (agree[j] >= 0)
            order[start[k - agree[j]]++] = j;
    return kept;
}

PyDoc_STRVAR(rank_doc,
"rank(sig, matrix, slot, docnos, bar, limit, fill) -> (missing, kept, ranked, est)\n\n"
"signature.rank_gathered: the candidates `docnos` (int64, ascending) whose signature\n"
"is a row of `matrix` (uint16, K per row; `slot`: int32 docno -> row, -1 none),\n"
"ranked by their estimate against `sig` (estimate_jaccard's arithmetic), highest\n"
"first, ties by docno: `kept` how many have a row, `ranked` (list of int) and `est`\n"
"(float64 bytes) the first `limit` of those whose estimate is at least `bar`.  With\n"
"`fill`, a candidate without a row (or past `slot`) stops it first: `missing` is then\n"
"their distinct docnos (int64 bytes; else None), for the caller to read and ask again.\n"
"The estimate is a strictly increasing function of the agreeing positions, so a\n"
"counting sort by those is numpy's lexsort by (-estimate, docno), value for value.");

static PyObject *rank(PyObject *self, PyObject *args)
{
    PyObject *sig_obj, *matrix_obj, *slot_obj, *docnos_obj;
    double bar;
    Py_ssize_t limit;
    int fill;
    if (!PyArg_ParseTuple(args, "OOOOdnp", &sig_obj, &matrix_obj, &slot_obj, &docnos_obj, &bar,
                          &limit, &fill))
        return NULL;
    Py_buffer views[4];
    if (get_buffers(4, views, (PyObject *[]){sig_obj, matrix_obj, slot_obj, docnos_obj},
                    (Py_ssize_t[]){2, 2, 4, 8},
                    (const char *[]){"sig", "matrix", "slot", "docnos"}) < 0)
        return NULL;
    const uint16_t *sig = views[0].buf, *matrix = views[1].buf;
    const int32_t *slot = views[2].buf;
    const int64_t *docnos = views[3].buf;
    Py_ssize_t k = views[0].len / 2, n_rows = k ? views[1].len / 2 / k : 0;
    Py_ssize_t n_slot = views[2].len / 4, n = views[3].len / 8;
    PyObject *result = NULL;
    int32_t *agree = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(int32_t));
    Py_ssize_t *start = PyMem_Calloc((size_t)k + 2, sizeof(Py_ssize_t));
    Py_ssize_t *order = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (!agree || !start || !order) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t missing = rows_of(docnos, n, slot, n_slot, n_rows, agree, "rank");
    if (missing < 0)
        goto done;
    if (fill && missing) { /* ascending and distinct already */
        PyObject *raw = PyBytes_FromStringAndSize(NULL, missing * 8);
        if (raw == NULL)
            goto done;
        int64_t *out = (int64_t *)PyBytes_AS_STRING(raw);
        for (Py_ssize_t j = 0, m = 0; j < n; j++)
            if (agree[j] < 0)
                out[m++] = docnos[j];
        result = Py_BuildValue("Nn[]y#", raw, (Py_ssize_t)0, "", (Py_ssize_t)0);
        goto done;
    }
    Py_ssize_t kept = rank_rows(sig, k, matrix, agree, n, start, order);
    Py_ssize_t take = 0;
    if (limit < 0)
        limit = 0;
    while (take < kept && take < limit && estimate_of(agree[order[take]], k) >= bar)
        take++;
    PyObject *ranked = PyList_New(take);
    PyObject *est = ranked ? PyBytes_FromStringAndSize(NULL, take * 8) : NULL;
    if (est == NULL) {
        Py_XDECREF(ranked);
        goto done;
    }
    double *e = (double *)PyBytes_AS_STRING(est);
    for (Py_ssize_t j = 0; j < take; j++) {
        PyObject *d = PyLong_FromLongLong(docnos[order[j]]);
        if (d == NULL) {
            Py_DECREF(ranked);
            Py_DECREF(est);
            goto done;
        }
        PyList_SET_ITEM(ranked, j, d);
        e[j] = estimate_of(agree[order[j]], k);
    }
    result = Py_BuildValue("OnNN", Py_None, kept, ranked, est);
done:
    PyMem_Free(agree);
    PyMem_Free(start);
    PyMem_Free(order);
    release_buffers(4, views);
    return result;
}

PyDoc_STRVAR(rank_batch_doc,
"rank_batch(sigs, matrix, slot, flat, offsets, bar, limit) -> (kept, ranked, est, at)\n\n"
"search.rank_all: `rank` (fill false) for each document of a batch: row j of `sigs`\n"
"(uint16, K per row) against its candidates flat[offsets[j]:offsets[j+1]] (int64,\n"
"each ascending), whose signatures are rows of `matrix` (`slot`: int32 docno -> row,\n"
"-1 none).  Returns how many of each have a row (int64 bytes), the ranked docnos and\n"
"their estimates of all of them end to end (int64 and float64 bytes), and where each\n"
"one's begin (int64 bytes, n + 1 offsets).");

static PyObject *rank_batch(PyObject *self, PyObject *args)
{
    PyObject *objs[5];
    double bar;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OOOOOdn", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4],
                          &bar, &limit))
        return NULL;
    Py_buffer views[5];
    if (get_buffers(5, views, objs, (Py_ssize_t[]){2, 2, 4, 8, 8},
                    (const char *[]){"sigs", "matrix", "slot", "flat", "offsets"}) < 0)
        return NULL;
    const uint16_t *sigs = views[0].buf, *matrix = views[1].buf;
    const int32_t *slot = views[2].buf;
    const int64_t *flat = views[3].buf, *offsets = views[4].buf;
    Py_ssize_t n = views[4].len / 8 - 1, n_flat = views[3].len / 8, n_slot = views[2].len / 4;
    PyObject *result = NULL, *kept_out = NULL, *at_out = NULL;
    int32_t *agree = NULL;
    Py_ssize_t *order = NULL, *start = NULL;
    int64_t *ranked = NULL;
    double *est = NULL;
    if (n < 0 || (n > 0 && views[0].len % (2 * n))) {
        PyErr_SetString(PyExc_ValueError, "rank_batch: one signature a document");
        goto done;
    }
    Py_ssize_t k = n ? views[0].len / 2 / n : 0;
    Py_ssize_t n_rows = k ? views[1].len / 2 / k : 0;
    if (n > 0 && !offsets_ok(offsets, n, n_flat, INT64_MAX)) {
        PyErr_SetString(PyExc_ValueError, "rank_batch: offsets out of order");
        goto done;
    }
    if (limit < 0)
        limit = 0;
    kept_out = PyBytes_FromStringAndSize(NULL, n * 8);
    at_out = PyBytes_FromStringAndSize(NULL, (n + 1) * 8);
    agree = PyMem_Malloc((size_t)(n_flat ? n_flat : 1) * sizeof(int32_t));
    order = PyMem_Malloc((size_t)(n_flat ? n_flat : 1) * sizeof(Py_ssize_t));
    start = PyMem_Malloc(((size_t)k + 2) * sizeof(Py_ssize_t));
    /* at most `limit` ranked a document, and never more than its candidates */
    Py_ssize_t room = n_flat < n * limit ? n_flat : n * limit;
    ranked = PyMem_Malloc((size_t)(room ? room : 1) * 8);
    est = PyMem_Malloc((size_t)(room ? room : 1) * 8);
    if (!kept_out || !at_out || !agree || !order || !start || !ranked || !est) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    int64_t *kept_of = (int64_t *)PyBytes_AS_STRING(kept_out);
    int64_t *at = (int64_t *)PyBytes_AS_STRING(at_out);
    Py_ssize_t used = 0;
    at[0] = 0;
    for (Py_ssize_t j = 0; j < n; j++) {
        Py_ssize_t lo = (Py_ssize_t)offsets[j], m = (Py_ssize_t)offsets[j + 1] - lo;
        if (rows_of(flat + lo, m, slot, n_slot, n_rows, agree + lo, "rank_batch") < 0)
            goto done;
        Py_ssize_t kept = rank_rows(sigs + j * k, k, matrix, agree + lo, m, start, order + lo);
        Py_ssize_t take = 0;
        while (take < kept && take < limit) {
            Py_ssize_t x = lo + order[lo + take];
            double e = estimate_of(agree[x], k);
            if (e < bar)
                break;
            ranked[used + take] = flat[x];
            est[used + take] = e;
            take++;
        }
        used += take;
        kept_of[j] = kept;
        at[j + 1] = used;
    }
    PyObject *r = PyBytes_FromStringAndSize((const char *)ranked, used * 8);
    PyObject *e = r ? PyBytes_FromStringAndSize((const char *)est, used * 8) : NULL;
    if (e == NULL) {
        Py_XDECREF(r);
        goto done;
    }
    result = Py_BuildValue("ONNO", kept_out, r, e, at_out);
done:
    Py_XDECREF(kept_out);
    Py_XDECREF(at_out);
    PyMem_Free(agree);
    PyMem_Free(order);
    PyMem_Free(start);
    PyMem_Free(ranked);
    PyMem_Free(est);
    release_buffers(5, views);
    return result;
}

PyMethodDef kernels_candidates_methods[] = {
    {"gather", gather, METH_VARARGS, gather_doc},
    {"gather_batch", gather_batch, METH_VARARGS, gather_batch_doc},
    {"rank", rank, METH_VARARGS, rank_doc},
    {"rank_batch", rank_batch, METH_VARARGS, rank_batch_doc},
    {NULL, NULL, 0, NULL},
};
