/* Exact Jaccard and the choice among candidates (sketch/jaccard.py, engine/verify.py):
 * the Jaccard of two sorted 64-bit shingle sets, their packed summaries (values and
 * counts per slice of the hash range), and the exact-check rule that picks a
 * document's best candidate above the threshold.
 *
 * In C because verification is a merge of two sorted arrays per candidate, cut short
 * as soon as a bound proves the candidate below the bar: numpy computes the whole
 * intersection and cannot stop early, and a template-heavy page has hundreds of
 * candidates.  `exact_jaccard`, `summarise` and `choose_exact` stay the definition.
 */
#include "_kernels.h"

PyDoc_STRVAR(jaccard_doc,
"jaccard(a, b) -> float\n\n"
"jaccard.exact_jaccard: the Jaccard of two sorted arrays of distinct uint64 (the\n"
"64-bit shingle hashes of two documents), by one merge pass.");

static PyObject *jaccard(PyObject *self, PyObject *args)
{
    PyObject *a_obj, *b_obj;
    if (!PyArg_ParseTuple(args, "OO", &a_obj, &b_obj))
        return NULL;
    Py_buffer views[2];
    if (get_buffers(2, views, (PyObject *[]){a_obj, b_obj}, (Py_ssize_t[]){8, 8},
                    (const char *[]){"a", "b"}) < 0)
        return NULL;
    const uint64_t *a = views[0].buf, *b = views[1].buf;
    Py_ssize_t na = views[0].len / 8, nb = views[1].len / 8, i = 0, j = 0, inter = 0;
    while (i < na && j < nb) { /* branch-free: the comparisons are unpredictable */
        uint64_t x = a[i], y = b[j];
        inter += x == y;
        i += x <= y;
        j += y <= x;
    }
    release_buffers(2, views);
    if (!na || !nb)
        return PyFloat_FromDouble(0.0);
    return PyFloat_FromDouble((double)inter / (double)(na + nb - inter));
}

/* ------------------------------------------------------------------- bounds */

/* J = m / (na + nb - m), in the double arithmetic of jaccard(). */
static inline double jaccard_of(Py_ssize_t m, Py_ssize_t na, Py_ssize_t nb)
{
    return (double)m / (double)(na + nb - m);
}

/* The measure of two sets sharing m values: their Jaccard, or (`contain`) the
 * containment of the first in the second, m / na (containment.py).  Both rise with
 * m, so every bound below serves both. */
static inline double measure_of(Py_ssize_t m, Py_ssize_t na, Py_ssize_t nb, int contain)
{
    return contain ? (double)m / (double)na : jaccard_of(m, na, nb);
}

/* The Jaccard of two sorted distinct uint64 arrays when it reaches `floor` (the very
 * value jaccard() returns); otherwise some value below `floor` (-1.0).  The merge
 * stops once the values shared so far, plus all the shorter remainder could still
 * add, cannot reach `floor`: J grows with the intersection, so the bound is sound,
 * and a template sibling below the bar is left part way through. */
#define SLICES 256 /* counts of a set's values by their top 8 bits (jaccard.py `slice_counts`) */

/* sum over slices of min(ca, cb): a bound on the values two sets share */
static inline uint32_t slice_bound(const uint8_t *ca, const uint8_t *cb)
{
#if defined(__SSE2__)
    /* 16 counts at a time: the unsigned byte minimum, summed by psadbw */
    __m128i acc = _mm_setzero_si128(), zero = _mm_setzero_si128();
    for (int x = 0; x < SLICES; x += 16) {
        __m128i m = _mm_min_epu8(_mm_loadu_si128((const __m128i *)(ca + x)),
                                 _mm_loadu_si128((const __m128i *)(cb + x)));
        acc = _mm_add_epi64(acc, _mm_sad_epu8(m, zero));
    }
    uint64_t lanes[2];
    _mm_storeu_si128((__m128i *)lanes, acc);
    return (uint32_t)(lanes[0] + lanes[1]);
#else
    uint32_t bound = 0;
    for (int x = 0; x < SLICES; x++)
        bound += ca[x] < cb[x] ? ca[x] : cb[x];
    return bound;
#endif
}

/* later[x]: sum over slices x .. 255 of min(ca, cb), the most values two sets can
 * share at or above slice x (later[256] = 0; later[0] is slice_bound's). */
static inline void later_of(const uint8_t *ca, const uint8_t *cb, uint32_t *later)
{
    later[SLICES] = 0;
    for (int x = SLICES - 1; x >= 0; x--)
        later[x] = later[x + 1] + (ca[x] < cb[x] ? ca[x] : cb[x]);
}

static double jaccard_at_least(const uint64_t *a, Py_ssize_t na, const uint64_t *b,
                               Py_ssize_t nb, const uint8_t *ca, const uint8_t *cb,
                               double floor, int contain)
{
    if (!na || !nb)
        return 0.0 >= floor ? 0.0 : -1.0;
    Py_ssize_t lo = na < nb ? na : nb;
    if (measure_of(lo, na, nb, contain) < floor) /* the size filter: |A|/|B| too far */
        return -1.0;
    if (ca && cb) {
        /* The slice filter: the values two sets share within one slice of the hash
         * range are at most the fewer of the two sets' values there.  256 counts
         * compared in a few dozen instructions reject most template siblings below the
         * bar without touching the sets. */
        uint32_t bound = slice_bound(ca, cb);
        if ((Py_ssize_t)bound < lo)
            lo = bound;
        if (measure_of(lo, na, nb, contain) < floor)
            return -1.0;
    }
    /* need: the least intersection whose measure reaches floor (<= lo, by the line
     * above), from a guess the loops correct in the measure's own arithmetic */
    Py_ssize_t need = contain ? (Py_ssize_t)(floor * (double)na)
                              : (Py_ssize_t)(floor * (double)(na + nb) / (1.0 + floor));
    if (need < 0)
        need = 0;
    if (need > lo)
        need = lo;
    while (need > 0 && measure_of(need - 1, na, nb, contain) >= floor)
        need--;
    while (need < lo && measure_of(need, na, nb, contain) < floor)
        need++;
    /* What the slices from x on can still share, for x = 0 .. 256 (`later_of`): with
     * counts, the merge gives up as soon as the values shared so far and what the
     * slices ahead can share fall short, where the values left alone say so only
     * near the end (template siblings that pass the slice filter share most values of
     * most slices: their shortfall shows slice by slice). */
    uint32_t later[SLICES + 1];
    if (ca && cb)
        later_of(ca, cb, later);
    /* Blocks of 4 against blocks of 4: all 16 pairs compared at once (independent
     * compares, where a one-by-one merge waits on each step's outcome), then the block
     * with the smaller last value moves on (both, when equal).  A later block of the
     * other side starts above that value, so every pair of blocks whose ranges overlap
     * meets once, and each shared value (sets are distinct) is counted once: a shared
     * value not counted yet is at least a[i] and b[j], in the slice of the greater or
     * above it. */
    Py_ssize_t i = 0, j = 0, inter = 0, rounds = 0;
    while (i + 4 <= na && j + 4 <= nb) {
        const uint64_t a0 = a[i], a1 = a[i + 1], a2 = a[i + 2], a3 = a[i + 3];
        const uint64_t b0 = b[j], b1 = b[j + 1], b2 = b[j + 2], b3 = b[j + 3];
        inter += (a0 == b0) + (a0 == b1) + (a0 == b2) + (a0 == b3) + (a1 == b0) + (a1 == b1) +
                 (a1 == b2) + (a1 == b3) + (a2 == b0) + (a2 == b1) + (a2 == b2) + (a2 == b3) +
                 (a3 == b0) + (a3 == b1) + (a3 == b2) + (a3 == b3);
        i += (a3 <= b3) << 2;
        j += (b3 <= a3) << 2;
        if (++rounds % 4 == 0 && i < na && j < nb) {
            Py_ssize_t ra = na - i, rb = nb - j, ahead = ra < rb ? ra : rb;
            if (ca && cb) {
                uint64_t top = a[i] > b[j] ? a[i] : b[j];
                if ((Py_ssize_t)later[top >> 56] < ahead)
                    ahead = (Py_ssize_t)later[top >> 56];
            }
            if (inter + ahead < need)
                return -1.0;
        }
    }
    /* The rest one by one: the blocks left behind met every block above them. */
    while (i < na && j < nb) {
        uint64_t x = a[i], y = b[j];
        inter += x == y;
        i += x <= y;
        j += y <= x;
    }
    return measure_of(inter, na, nb, contain);
}

/* ---------------------------------------------------------------- summaries */

/* candidates ahead whose table rows `choose_packed` asks the cache for */
#define PREFETCH_AHEAD 4

/* A summary (jaccard.py `summarise`) packed in one bytes object, so a check reads it
 * without the buffer protocol (two PyObject_GetBuffer calls per check on numpy arrays
 * cost more than the check's slice filter):
 *   uint64 header: the number of slice counts (SLICES, or 0: a slice past 255 values)
 *   uint8 counts[header], uint64 values[...] (sorted, distinct).
 * A byte a count: 256 bytes, four cache lines to read per check where 16-bit counts
 * took eight, and SSE2 has the unsigned byte minimum; a set with a slice of more than
 * 255 values (tens of thousands of shingles) goes without counts. */
typedef struct {
    const uint8_t *counts; /* NULL: none */
    const uint64_t *values;
    Py_ssize_t n;
} Packed;

static int unpack_summary(PyObject *obj, Packed *out)
{
    if (!PyBytes_Check(obj)) {
        PyErr_SetString(PyExc_TypeError, "a summary must be bytes (jaccard.summarise)");
        return -1;
    }
    const char *p = PyBytes_AS_STRING(obj);
    Py_ssize_t len = PyBytes_GET_SIZE(obj);
    uint64_t header;
    if (len < 8)
        goto bad;
    memcpy(&header, p, 8);
    header = le64(header);
    if (header != 0 && header != SLICES)
        goto bad;
    Py_ssize_t at = 8 + (Py_ssize_t)header;
    if (len < at || (len - at) % 8)
        goto bad;
    out->counts = header ? (const uint8_t *)(p + 8) : NULL;
    out->values = (const uint64_t *)(p + at);
    out->n = (len - at) / 8;
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "a summary's layout is wrong (jaccard.summarise)");
    return -1;
}

PyDoc_STRVAR(summarise_doc,
"summarise(hashes) -> bytes\n\n"
"jaccard.summarise(prepare._distinct(hashes)), packed: the sorted distinct values of\n"
"the uint64 `hashes` (any order, repeats allowed) with their counts per slice of the\n"
"hash range, in one pass by the top byte (which is the slice) and a small sort of\n"
"each slice's few values.");

#define FINE_BITS 11 /* `summarise` deals a set of more than 255 values by this many top bits */

/* The packed summary of the n hashes at h (`summarise`'s work), a new bytes object. */
static PyObject *summary_from(const uint64_t *h, Py_ssize_t n)
{
    /* Dealt by their top bits into buckets of a value or two (hashes spread evenly),
     * then one insertion pass over the whole, which finds little to move: where a
     * sort of each top-byte slice's three or four values mispredicted a branch a
     * value (9 ns a value on an 800-shingle page).  A bucket of many (values close
     * together) is sorted on its own first, so the pass stays linear. */
    int bits = 8; /* about two buckets a value, at most 2 ** FINE_BITS buckets */
    while (bits < FINE_BITS && ((Py_ssize_t)1 << bits) < n)
        bits++;
    int shift = 64 - bits;
    Py_ssize_t buckets = (Py_ssize_t)1 << bits;
    Py_ssize_t start[((Py_ssize_t)1 << FINE_BITS) + 1];
    memset(start, 0, (size_t)(buckets + 1) * sizeof(Py_ssize_t));
    for (Py_ssize_t i = 0; i < n; i++)
        start[(h[i] >> shift) + 1]++;
    Py_ssize_t most = 0;
    for (Py_ssize_t x = 0; x < buckets; x++) {
        most = start[x + 1] > most ? start[x + 1] : most;
        start[x + 1] += start[x];
    }
    uint64_t *tmp = PyMem_Malloc((size_t)(n ? n : 1) * 8);
    PyObject *out = tmp ? PyBytes_FromStringAndSize(NULL, 8 + SLICES + n * 8) : NULL;
    if (out == NULL) {
        PyMem_Free(tmp);
        return tmp ? NULL : PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) /* start[x] ends as the end of bucket x */
        tmp[start[h[i] >> shift]++] = h[i];
    if (most > 24)
        for (Py_ssize_t x = 0, lo = 0; x < buckets; lo = start[x], x++)
            if (start[x] - lo > 24)
                qsort(tmp + lo, (size_t)(start[x] - lo), sizeof(uint64_t), cmp_u64);
    for (Py_ssize_t i = 1; i < n; i++) { /* moves values only within their bucket */
        uint64_t v = tmp[i];
        Py_ssize_t j = i;
        while (j > 0 && tmp[j - 1] > v) {
            tmp[j] = tmp[j - 1];
            j--;
        }
        tmp[j] = v;
    }
    char *base = PyBytes_AS_STRING(out);
    uint32_t slice[SLICES] = {0};
    uint64_t *values = (uint64_t *)(base + 8 + SLICES);
    Py_ssize_t m = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (i == 0 || tmp[i] != tmp[i - 1]) {
            values[m++] = tmp[i];
            slice[tmp[i] >> 56]++;
        }
    PyMem_Free(tmp);
    uint8_t counts[SLICES];
    int fits = 1;
    for (int x = 0; x < SLICES; x++) {
        fits &= slice[x] <= 255;
        counts[x] = (uint8_t)slice[x]; /* unused unless every count fits */
    }
    uint64_t header = le64(fits ? SLICES : 0);
    memcpy(base, &header, 8);
    if (header) {
        memcpy(base + 8, counts, sizeof(counts));
    } else {
        memmove(base + 8, values, (size_t)m * 8);
    }
    if (_PyBytes_Resize(&out, 8 + (header ? SLICES : 0) + m * 8) < 0)
        return NULL;
    return out;
}

static PyObject *summarise(PyObject *self, PyObject *args)
{
    PyObject *obj;
    if (!PyArg_ParseTuple(args, "O", &obj))
        return NULL;
    Py_buffer view;
    if (get_buffer(obj, &view, 8, "hashes") < 0)
        return NULL;
    PyObject *out = summary_from(view.buf, view.len / 8);
    PyBuffer_Release(&view);
    return out;
}

PyDoc_STRVAR(summarise_many_doc,
"summarise_many(hashes, offsets, picks) -> list[bytes]\n\n"
"jaccard.summaries_of: `summarise` of the uint64 hashes[offsets[j]:offsets[j + 1]]\n"
"for each j of the int64 `picks`, in one call (a batch's documents' own sets, where\n"
"a call each cost a slice, a buffer and a call in Python).");

static PyObject *summarise_many(PyObject *self, PyObject *args)
{
    PyObject *objs[3];
    if (!PyArg_ParseTuple(args, "OOO", &objs[0], &objs[1], &objs[2]))
        return NULL;
    Py_buffer views[3];
    if (get_buffers(3, views, objs, (Py_ssize_t[]){8, 8, 8},
                    (const char *[]){"hashes", "offsets", "picks"}) < 0)
        return NULL;
    const uint64_t *h = views[0].buf;
    const int64_t *off = views[1].buf, *picks = views[2].buf;
    Py_ssize_t n_docs = views[1].len / 8 - 1, n = views[2].len / 8;
    PyObject *out = NULL;
    if (n_docs < 0 || !offsets_ok(off, n_docs, views[0].len / 8, INT64_MAX)) {
        PyErr_SetString(PyExc_ValueError, "summarise_many: offsets do not fit the hashes");
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        if (picks[k] < 0 || picks[k] >= n_docs) {
            PyErr_SetString(PyExc_ValueError, "summarise_many: a pick past the documents");
            goto done;
        }
    if ((out = PyList_New(n)) == NULL)
        goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t j = picks[k];
        PyObject *got = summary_from(h + off[j], (Py_ssize_t)(off[j + 1] - off[j]));
        if (got == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, k, got);
    }
done:
    release_buffers(3, views);
    return out;
}

/* ----------------------------------------------------------------- choosing */

/* The ranked candidates of one document, as `choose_run` reads them: a list of docnos
 * (int; `choose_packed`) or an int64 array (`choose_batch`, whose caller has them in
 * one array for the whole batch: a list per document cost its `tolist`). */
typedef struct {
    PyObject *list; /* NULL: `arr` */
    const int64_t *arr;
} Ranked;

/* The docno of rank k (-1 with an exception set: not an int of a C long long). */
static inline long long ranked_docno(const Ranked *r, Py_ssize_t k)
{
    return r->list ? docno_value(PyList_GET_ITEM(r->list, k)) : (long long)r->arr[k];
}

/* The docno of rank k if it is cheap to read (-1 if not: the prefetch just skips it). */
static inline long long ranked_peek(const Ranked *r, Py_ssize_t k)
{
    if (!r->list)
        return (long long)r->arr[k];
    PyObject *o = PyList_GET_ITEM(r->list, k);
    return is_small_docno(o) ? docno_value(o) : -1;
}

/* The dict key of rank k (a new reference; NULL with an exception set). */
static inline PyObject *ranked_key(const Ranked *r, Py_ssize_t k)
{
    if (r->list) {
        PyObject *o = PyList_GET_ITEM(r->list, k);
        Py_INCREF(o);
        return o;
    }
    return PyLong_FromLongLong((long long)r->arr[k]);
}

/* jaccard.py `SetTable`: sizes and slice counts of sets by docno (docnos 0: none). */
typedef struct {
    const int32_t *rows; /* docno -> row, -1: none */
    Py_ssize_t docnos;
    const uint8_t *counts; /* SLICES a row */
    const int64_t *sizes;
    Py_ssize_t n; /* rows */
} Table;

/* `choose_exact`'s rule for one document (its summary `mine`) over its `n` ranked
 * candidates (estimates `est`, descending), resumed at rank *checks with the best so
 * far (*best its rank, -1: none; *best_sim): the state is updated in place.  Returns
 * 0 when the rule is done, 1 when it wants the set of rank *checks and no dict of
 * `sets` holds it (the caller reads it and calls again), -1 on error. */
static int choose_run(const Packed *mine, PyObject *sets, const Ranked *ranked,
                      const double *est, Py_ssize_t n, double threshold, double margin,
                      Py_ssize_t max_checks, const Table *table, int contain,
                      Py_ssize_t *checks_io, Py_ssize_t *best_io, double *best_sim_io)
{
    Py_ssize_t n_dicts = PyTuple_GET_SIZE(sets), checks = *checks_io, best = *best_io;
    double best_sim = *best_sim_io;
    /* a set without counts has nothing to bound with: the table is no use to it */
    Py_ssize_t t_docnos = table && mine->counts ? table->docnos : 0;
    int status = 0;
    for (; checks < n; checks++) {
        double floor = best < 0 ? threshold : best_sim;
        if (checks >= max_checks || est[checks] < floor - margin)
            break;
#if defined(__SSE2__)
        if (t_docnos && checks + PREFETCH_AHEAD < n) {
            /* the table row of a candidate a few ranks on, asked of the cache while
             * this one is checked (rows are scattered: their misses were most of a
             * rejection's cost) */
            long long d = ranked_peek(ranked, checks + PREFETCH_AHEAD);
            int32_t r = d >= 0 && d < t_docnos ? table->rows[d] : -1;
            if (r >= 0 && r < table->n)
                for (int at = 0; at < SLICES; at += 64)
                    _mm_prefetch((const char *)(table->counts + (Py_ssize_t)r * SLICES + at),
                                 _MM_HINT_T0);
        }
#endif
        if (t_docnos) {
            /* The table first: the size and slice filters of jaccard_at_least, from one
             * contiguous row, with no dict lookup and no summary touched.  A candidate
             * they reject would be rejected by jaccard_at_least (-1.0) alike. */
            long long d = ranked_docno(ranked, checks);
            if (d == -1 && PyErr_Occurred()) {
                status = -1;
                break;
            }
            int32_t r = d >= 0 && d < t_docnos ? table->rows[d] : -1;
            if (r >= 0 && r < table->n) {
                Py_ssize_t nb = (Py_ssize_t)table->sizes[r], na = mine->n;
                if (na && nb) {
                    Py_ssize_t lo = na < nb ? na : nb;
                    if (measure_of(lo, na, nb, contain) < floor)
                        continue;
                    uint32_t bound =
                        slice_bound(mine->counts, table->counts + (Py_ssize_t)r * SLICES);
                    if ((Py_ssize_t)bound < lo && measure_of(bound, na, nb, contain) < floor)
                        continue;
                }
            }
        }
        PyObject *key = ranked_key(ranked, checks), *set = NULL;
        if (key == NULL) {
            status = -1;
            break;
        }
        for (Py_ssize_t d = 0; d < n_dicts && set == NULL; d++)
            set = PyDict_GetItemWithError(PyTuple_GET_ITEM(sets, d), key);
        Py_DECREF(key);
        if (set == NULL) {
            status = PyErr_Occurred() ? -1 : 1;
            break;
        }
        Packed theirs;
        if (unpack_summary(set, &theirs) < 0) {
            status = -1;
            break;
        }
        int both = mine->counts && theirs.counts;
        double sim = jaccard_at_least(mine->values, mine->n, theirs.values, theirs.n,
                                      both ? mine->counts : NULL, both ? theirs.counts : NULL,
                                      floor, contain);
        if (sim >= threshold && (best < 0 || sim > best_sim)) {
            best = checks;
            best_sim = sim;
        }
    }
    *checks_io = checks;
    *best_io = best;
    *best_sim_io = best_sim;
    return status;
}

/* The sets' dicts (a tuple of dicts) and the optional table (rows, counts, sizes:
 * views[0..3) from `objs`, none if rows is None) of choose_packed and choose_batch:
 * 0 with *n_views buffers held, -1 with none. */
static int sets_and_table(PyObject *sets, PyObject *const *objs, Py_buffer *views,
                          int *n_views, Table *table)
{
    for (Py_ssize_t d = 0; d < PyTuple_GET_SIZE(sets); d++)
        if (!PyDict_Check(PyTuple_GET_ITEM(sets, d))) {
            PyErr_SetString(PyExc_TypeError, "choose: sets must be a tuple of dicts");
            return -1;
        }
    memset(table, 0, sizeof(*table));
    *n_views = 0;
    if (objs[0] == Py_None)
        return 0;
    static const Py_ssize_t sizes_of[3] = {4, SLICES, 8};
    static const char *names[3] = {"rows", "counts", "sizes"};
    if (get_buffers(3, views, objs, sizes_of, names) < 0)
        return -1;
    *n_views = 3;
    table->rows = views[0].buf;
    table->docnos = views[0].len / 4;
    table->counts = views[1].buf;
    table->sizes = views[2].buf;
    table->n = views[2].len / 8;
    if (views[1].len / SLICES != table->n) {
        release_buffers(3, views);
        *n_views = 0;
        PyErr_SetString(PyExc_ValueError, "choose: counts and sizes disagree");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(choose_packed_doc,
"choose_packed(mine, sets, ranked, est, threshold, margin, max_checks, start, best,\n"
"              best_sim) -> (best, best_sim, checks, more)\n\n"
"jaccard.choose_ranked: verify.choose_exact over candidates already in rank order,\n"
"`ranked` their docnos (a list of int), `est` their float64 estimates, `sets` a tuple\n"
"of dicts docno -> packed summary (`summarise`), looked up in turn; `mine` the\n"
"document's own packed summary.  Resumes at rank `start` with the best so far (`best`\n"
"-1: none); returns the best's rank and exact Jaccard, the checks made as\n"
"choose_exact counts them, and `more`: the rule wants the set of rank `checks`,\n"
"which no dict holds.  A candidate that cannot beat the bar is left as soon as a\n"
"bound proves it (jaccard_at_least): the answer is choose_exact's, value for value.\n\n"
"Optional `rows, counts, sizes` (verify.py `SetTable`): int32 row by docno (-1: none),\n"
"uint8 (rows, 256) slice counts and int64 set sizes by row, of sets the dicts hold or\n"
"held (a docno's set never changes): a candidate whose row proves it below the bar by\n"
"size or slice counts is counted as checked and left without its dict lookup or its\n"
"summary.  Optional `contain` (after the table, which may be None, None, None): the\n"
"measure is the containment of `mine` in each candidate, |A n B| / |A|, not Jaccard.");

static PyObject *choose_packed(PyObject *self, PyObject *args)
{
    PyObject *mine_obj, *sets, *ranked, *est_obj;
    PyObject *table_objs[3] = {Py_None, Py_None, Py_None};
    double threshold, margin, best_sim;
    Py_ssize_t max_checks, checks, best;
    int contain = 0;
    if (!PyArg_ParseTuple(args, "OO!O!Oddnnnd|OOOp", &mine_obj, &PyTuple_Type, &sets,
                          &PyList_Type, &ranked, &est_obj, &threshold, &margin, &max_checks,
                          &checks, &best, &best_sim, &table_objs[0], &table_objs[1],
                          &table_objs[2], &contain))
        return NULL;
    Packed mine;
    if (unpack_summary(mine_obj, &mine) < 0)
        return NULL;
    Py_buffer views[3], est_view;
    int n_views;
    Table table;
    if (sets_and_table(sets, table_objs, views, &n_views, &table) < 0)
        return NULL;
    if (get_buffer(est_obj, &est_view, 8, "est") < 0) {
        release_buffers(n_views, views);
        return NULL;
    }
    Py_ssize_t n = est_view.len / 8;
    int status = -1;
    if (PyList_GET_SIZE(ranked) != n || checks < 0 || best >= n) {
        PyErr_SetString(PyExc_ValueError, "choose_packed: ranked and est disagree");
    } else {
        Ranked r = {ranked, NULL};
        status = choose_run(&mine, sets, &r, est_view.buf, n, threshold, margin, max_checks,
                            n_views ? &table : NULL, contain, &checks, &best, &best_sim);
    }
    PyBuffer_Release(&est_view);
    release_buffers(n_views, views);
    if (status < 0)
        return NULL;
    return Py_BuildValue("ndnO", best, best_sim, checks, status ? Py_True : Py_False);
}

PyDoc_STRVAR(choose_batch_doc,
"choose_batch(mines, sets, ranked, est, at, threshold, margin, max_checks, best,\n"
"             best_sim, checks, first[, rows, counts, sizes]) -> int\n\n"
"jaccard.choose_all: choose_packed for documents first, first + 1, ... of a batch in\n"
"one call: document j's packed summary mines[j] (a list of bytes), its candidates\n"
"ranked[at[j]:at[j + 1]] (int64 docnos) with their float64 estimates est[...].  Its\n"
"state is best[j] (int64 rank, -1: none), best_sim[j] (float64) and checks[j] (int64),\n"
"writable arrays updated in place: resumed from, and left as choose_packed leaves\n"
"them.  Returns the first document whose rule wants a set no dict holds (that of rank\n"
"checks[j]: the caller reads it and calls again from j), or len(mines).  `sets`, the\n"
"optional table and `contain` as for choose_packed.");

static PyObject *choose_batch(PyObject *self, PyObject *args)
{
    PyObject *mines, *sets, *ranked_obj, *est_obj, *at_obj, *best_obj, *sim_obj, *checks_obj;
    PyObject *table_objs[3] = {Py_None, Py_None, Py_None};
    double threshold, margin;
    Py_ssize_t max_checks, first;
    int contain = 0;
    if (!PyArg_ParseTuple(args, "O!O!OOOddnOOOn|OOOp", &PyList_Type, &mines, &PyTuple_Type,
                          &sets, &ranked_obj, &est_obj, &at_obj, &threshold, &margin,
                          &max_checks, &best_obj, &sim_obj, &checks_obj, &first,
                          &table_objs[0], &table_objs[1], &table_objs[2], &contain))
        return NULL;
    Py_buffer views[3], in[3], state[3];
    int n_views;
    Table table;
    if (sets_and_table(sets, table_objs, views, &n_views, &table) < 0)
        return NULL;
    if (get_buffers(3, in, (PyObject *[]){ranked_obj, est_obj, at_obj}, (Py_ssize_t[]){8, 8, 8},
                    (const char *[]){"ranked", "est", "at"}) < 0) {
        release_buffers(n_views, views);
        return NULL;
    }
    int n_state =
        get_buffers_as(3, state, (PyObject *[]){best_obj, sim_obj, checks_obj},
                       (Py_ssize_t[]){8, 8, 8}, (const char *[]){"best", "best_sim", "checks"},
                       PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0
            ? 0
            : 3;
    Py_ssize_t result = -1;
    if (n_state == 3) {
        const int64_t *ranked = in[0].buf, *at = in[2].buf;
        const double *est = in[1].buf;
        int64_t *best = state[0].buf, *checks = state[2].buf;
        double *best_sim = state[1].buf;
        Py_ssize_t n_docs = PyList_GET_SIZE(mines), n_values = in[0].len / 8;
        if (in[1].len / 8 != n_values || in[2].len / 8 != n_docs + 1 ||
            !offsets_ok(at, n_docs, n_values, INT64_MAX) || state[0].len / 8 != n_docs ||
            state[1].len / 8 != n_docs || state[2].len / 8 != n_docs || first < 0 ||
            first > n_docs) {
            PyErr_SetString(PyExc_ValueError, "choose_batch: arrays of disagreeing lengths");
        } else {
            for (result = first; result < n_docs; result++) {
                Py_ssize_t n = (Py_ssize_t)(at[result + 1] - at[result]);
                Py_ssize_t c = (Py_ssize_t)checks[result], b = (Py_ssize_t)best[result];
                Packed mine;
                if (c < 0 || b >= n) {
                    PyErr_SetString(PyExc_ValueError, "choose_batch: a state out of range");
                    result = -1;
                    break;
                }
                if (unpack_summary(PyList_GET_ITEM(mines, result), &mine) < 0) {
                    result = -1;
                    break;
                }
                Ranked r = {NULL, ranked + at[result]};
                int status = choose_run(&mine, sets, &r, est + at[result], n, threshold, margin,
                                        max_checks, n_views ? &table : NULL, contain, &c, &b,
                                        &best_sim[result]);
                checks[result] = c;
                best[result] = b;
                if (status < 0)
                    result = -1;
                if (status)
                    break;
            }
        }
    }
    release_buffers(n_state, state);
    release_buffers(3, in);
    release_buffers(n_views, views);
    return result < 0 ? NULL : PyLong_FromSsize_t(result);
}

PyMethodDef kernels_jaccard_methods[] = {
    {"jaccard", jaccard, METH_VARARGS, jaccard_doc},
    {"summarise", summarise, METH_VARARGS, summarise_doc},
    {"summarise_many", summarise_many, METH_VARARGS, summarise_many_doc},
    {"choose_packed", choose_packed, METH_VARARGS, choose_packed_doc},
    {"choose_batch", choose_batch, METH_VARARGS, choose_batch_doc},
    {NULL, NULL, 0, NULL},
};
