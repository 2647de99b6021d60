/* Compiled inner loops of the prepare and verify stages.
 *
 * Each function computes bit for bit what a numpy function of the package computes
 * (named in its docstring; for the partitioner, kafka-python's own), which stays the
 * definition, the fallback where this module could not be built, and what the tests
 * compare it with.  numpy pays a pass over memory and an allocation per operation;
 * these loops make one pass each, over data that stays in the CPU cache.
 *
 * Arrays cross the boundary as buffers (bytes, or numpy arrays via the buffer
 * protocol) and come back as bytes, so building needs no numpy headers.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define P61 0x1FFFFFFFFFFFFFFFULL /* 2**61 - 1: the field of the keyed shingle hash */
#define SPREAD 0x9E3779B97F4A7C15ULL /* hashing.finish: a field value spread over 64 bits */
#define FINGERPRINT_BITS 24
#define EMPTY_BIN 0xFFFF0000U

static inline uint64_t fmix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDULL;
    x ^= x >> 33;
    x *= 0xC4CEB9FE1A85EC53ULL;
    x ^= x >> 33;
    return x;
}

/* Up to 8 bytes at p as a little-endian integer (bytes past n count as zero). */
static inline uint64_t load_le(const uint8_t *p, Py_ssize_t n)
{
    uint64_t v = 0;
    for (Py_ssize_t i = (n < 8 ? n : 8) - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t le64(uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

static inline uint32_t le32(uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap32(v);
#else
    return v;
#endif
}

/* A buffer argument of the expected item size, released by PyBuffer_Release. */
static int get_buffer_as(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name,
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

static int get_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t itemsize, const char *name)
{
    return get_buffer_as(obj, view, itemsize, name, PyBUF_C_CONTIGUOUS);
}

static void release_buffers(int n, Py_buffer *views)
{
    for (int i = 0; i < n; i++)
        PyBuffer_Release(&views[i]);
}

/* n buffer arguments, all or none (get_buffer_as for each, with `flags`;
 * release_buffers after). */
static int get_buffers_as(int n, Py_buffer *views, PyObject *const *objs,
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
static int get_buffers(int n, Py_buffer *views, PyObject *const *objs,
                       const Py_ssize_t *itemsizes, const char *const *names)
{
    return get_buffers_as(n, views, objs, itemsizes, names, PyBUF_C_CONTIGUOUS);
}

/* Do n_docs + 1 offsets ascend from >= 0 to <= n_values, no run longer than max_run? */
static int offsets_ok(const int64_t *offsets, Py_ssize_t n_docs, Py_ssize_t n_values,
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

/* ------------------------------------------------------------------ shingling */

/* x mod P61 for x < 2**64, and a * b mod P61 for a, b < P61 (hashing.py's
 * reduce_np and mulmod_np): 2**61 = 1 mod P61, so the bits above 61 add back in. */
static inline uint64_t reduce61(uint64_t x)
{
    x = (x & P61) + (x >> 61);
    return x >= P61 ? x - P61 : x;
}

static inline uint64_t mulmod61(uint64_t a, uint64_t b)
{
    __uint128_t m = (__uint128_t)a * b;
    return reduce61(((uint64_t)m & P61) + (uint64_t)(m >> 61));
}

/* x folded once: below 2**61 + 8 for any x, and = x mod P61 (the lazy half of reduce61). */
static inline uint64_t fold61(uint64_t x) { return (x & P61) + (x >> 61); }

/* a * b folded once, = a * b mod P61: below 2**61 + 2**62 for a < 2**62 and b < P61,
 * at most 2 * P61 for a, b < P61 (the high part is then below 2**61). */
static inline uint64_t mulfold61(uint64_t a, uint64_t b)
{
    __uint128_t m = (__uint128_t)a * b;
    return ((uint64_t)m & P61) + (uint64_t)(m >> 61);
}

/* One keyed polynomial (hashing.Poly): its base, start, and start * base**j for the
 * few lengths the common cases need; for windows of k digits, base**k and
 * start * base**k (`poly_window`). */
typedef struct {
    uint64_t base, start, head[9], rk, headk;
} Poly;

static void poly_init(Poly *q, uint64_t base, uint64_t start)
{
    q->base = base % P61;
    q->start = start % P61;
    q->head[0] = q->start;
    for (int j = 1; j < 9; j++)
        q->head[j] = mulmod61(q->head[j - 1], q->base);
}

static void poly_window(Poly *q, Py_ssize_t k)
{
    q->rk = 1;
    for (Py_ssize_t j = 0; j < k; j++)
        q->rk = mulmod61(q->rk, q->base);
    q->headk = mulmod61(q->start, q->rk);
}

/* Hash of one token: shingle.reference_token_hash, the keyed polynomial over its
 * bytes as 4-byte little-endian digits.  `room` bytes may be read from p on, at
 * least n: with 8 of them, a token of up to 8 bytes is one unaligned read. */
static inline uint64_t token_hash(const Poly *q, const uint8_t *p, Py_ssize_t n, Py_ssize_t room)
{
    if (n <= 8) {
        uint64_t v;
        if (room >= 8) {
            memcpy(&v, p, 8);
            v = le64(v) & (n == 8 ? ~0ULL : ((1ULL << (8 * n)) - 1));
        } else {
            v = load_le(p, n);
        }
        uint64_t low = v & 0xFFFFFFFFULL, high = v >> 32;
        if (n <= 4)
            return reduce61(q->head[1] + low);
        return reduce61(q->head[2] + mulfold61(low, q->base) + high); /* < 2**63 */
    }
    uint64_t acc = q->start;
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t d;
        memcpy(&d, p + i, 4);
        acc = reduce61(mulmod61(acc, q->base) + le32(d));
    }
    if (i < n) /* the last digit, zero-padded (the caller's room covers 8 bytes on) */
        acc = reduce61(mulmod61(acc, q->base) + load_le(p + i, n - i));
    return acc;
}

/* The finished hashes of the windows of one run of n digits below P61
 * (shingle._window_hashes): every k consecutive ones, or all n if n < k; under nk
 * keys (1 or 2, q[h] `poly_window`ed for k) at once, digits th[h], into out[h].
 * Sliding on, a window's digits part (its hash less start * base**k) becomes
 * body * base + th[j] - th[j-k] * base**k: the one product that depends on the
 * window before is folded lazily, so each step waits on one multiply and two adds;
 * the two keys' chains run side by side. */
static void emit_windows(uint64_t **out, const Poly *q, uint64_t *const *th, int nk, Py_ssize_t n,
                         Py_ssize_t k)
{
    if (n == 0)
        return;
    Py_ssize_t w = n < k ? n : k;
    uint64_t body[2] = {0, 0};
    for (int h = 0; h < nk; h++) {
        uint64_t acc = q[h].start;
        for (Py_ssize_t j = 0; j < w; j++)
            acc = reduce61(mulmod61(acc, q[h].base) + th[h][j]);
        *out[h]++ = acc * SPREAD;
        body[h] = reduce61(acc + P61 - q[h].headk);
    }
    if (n <= k)
        return;
#define SLIDE(h)                                                                          \
    do {                                                                                  \
        uint64_t d_ = th[h][j] + 2 * P61 - mulfold61(th[h][j - k], q[h].rk);              \
        body[h] = fold61(mulfold61(body[h], q[h].base) + d_);                             \
        *out[h]++ = reduce61(body[h] + q[h].headk) * SPREAD;                              \
    } while (0)
    if (nk == 2) {
        for (Py_ssize_t j = k; j < n; j++) {
            SLIDE(0);
            SLIDE(1);
        }
    } else {
        for (Py_ssize_t j = k; j < n; j++)
            SLIDE(0);
    }
#undef SLIDE
}

/* Bit j of the result: is byte j of the 64 at p an ASCII \w ([0-9A-Za-z_]; a test
 * checks that the regex engine agrees), and, in *high, is it not ASCII at all. */
static inline uint64_t ascii_word_bits(const uint8_t *p, uint64_t *high)
{
#if defined(__SSE2__)
    uint64_t word = 0, hi = 0;
    for (int q = 0; q < 4; q++) {
        __m128i c = _mm_loadu_si128((const __m128i *)(p + 16 * q));
        __m128i low = _mm_or_si128(c, _mm_set1_epi8(0x20));
        __m128i digit = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)),
                                      _mm_cmplt_epi8(c, _mm_set1_epi8('9' + 1)));
        __m128i alpha = _mm_and_si128(_mm_cmpgt_epi8(low, _mm_set1_epi8('a' - 1)),
                                      _mm_cmplt_epi8(low, _mm_set1_epi8('z' + 1)));
        __m128i under = _mm_cmpeq_epi8(c, _mm_set1_epi8('_'));
        __m128i is = _mm_or_si128(_mm_or_si128(digit, alpha), under);
        word |= (uint64_t)(uint16_t)_mm_movemask_epi8(is) << (16 * q);
        hi |= (uint64_t)(uint16_t)_mm_movemask_epi8(c) << (16 * q);
    }
    *high = hi;
    return word;
#else
    uint64_t word = 0, hi = 0;
    for (int j = 0; j < 64; j++) {
        uint8_t c = p[j], low = c | 0x20;
        int is = (c >= '0' && c <= '9') || (low >= 'a' && low <= 'z') || c == '_';
        word |= (uint64_t)is << j;
        hi |= (uint64_t)(c >> 7) << j;
    }
    *high = hi;
    return word;
#endif
}

/* The code point of the UTF-8 character whose lead byte is at p (well-formed UTF-8,
 * lone surrogates allowed, as `encode` writes it), and its length in bytes. */
static inline uint32_t decode_utf8(const uint8_t *p, const uint8_t *stop, int *size)
{
    uint8_t b0 = p[0];
    int n = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
    if (p + n > stop)
        n = (int)(stop - p);
    uint32_t cp = b0 & (0x7F >> n);
    for (int j = 1; j < n; j++)
        cp = (cp << 6) | (p[j] & 0x3F);
    *size = n;
    return cp < 0x110000 ? cp : 0; /* not Unicode (no encoder writes it): not \w */
}

/* Shingle hashes of the documents whose tokens were collected: up to the one that
 * holds byte `pos`.  Called once per document, so it may keep its state in memory. */
typedef struct {
    Py_ssize_t k, n_docs, doc, n; /* n: token hashes in th[h] of document `doc` */
    int keys;                     /* how many keyed hashes: 1 or 2 */
    Poly token[2], window[2];
    const int64_t *end;
    uint64_t *th[2], *out[2];
    int64_t *count;
} Docs;

static Py_ssize_t close_docs_before(Docs *t, Py_ssize_t pos)
{
    while (t->doc < t->n_docs && pos >= t->end[t->doc]) {
        uint64_t *before = t->out[0];
        emit_windows(t->out, t->window, t->th, t->keys, t->n, t->k);
        t->count[t->doc++] = t->out[0] - before;
        t->n = 0;
    }
    return t->doc < t->n_docs ? t->end[t->doc] : PY_SSIZE_T_MAX;
}

PyDoc_STRVAR(word_shingles_doc,
"word_shingles(data, is_word, doc_ends, k, keys) -> (hashes, [hashes2,] counts) | int\n\n"
"Shingler._words: the word:k shingle hashes (uint64) of the documents laid end to\n"
"end in data (UTF-8), document i ending before doc_ends[i] (int64), under one or two\n"
"keys (`keys`: (token_base, token_start, window_base, window_start) once or twice in\n"
"one tuple: the keyed polynomials of the tokens' bytes and of the windows' token\n"
"hashes), and each document's number of shingles (int64).  Tokens are the runs of \\w characters;\n"
"is_word[cp] (one byte per code point) classifies the non-ASCII ones.  If data\n"
"holds a code point past the table, returns it instead: grow the table, call again.");

static PyObject *word_shingles(PyObject *self, PyObject *args)
{
    PyObject *data_obj, *table_obj, *ends_obj;
    Py_ssize_t k;
    unsigned long long kv[8];
    PyObject *keys_obj;
    if (!PyArg_ParseTuple(args, "OOOnO!", &data_obj, &table_obj, &ends_obj, &k, &PyTuple_Type,
                          &keys_obj))
        return NULL;
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "k must be at least 1");
        return NULL;
    }
    Py_ssize_t n_kv = PyTuple_GET_SIZE(keys_obj);
    if (n_kv != 4 && n_kv != 8) {
        PyErr_SetString(PyExc_ValueError, "keys: 4 or 8 integers (one or two keys)");
        return NULL;
    }
    for (Py_ssize_t j = 0; j < n_kv; j++) {
        kv[j] = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(keys_obj, j));
        if (kv[j] == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer views[3];
    if (get_buffers(3, views, (PyObject *[]){data_obj, table_obj, ends_obj},
                    (Py_ssize_t[]){1, 1, 8}, (const char *[]){"data", "is_word", "doc_ends"}) < 0)
        return NULL;
    const Py_buffer data = views[0], table = views[1], ends = views[2];
    PyObject *result = NULL, *hashes[2] = {NULL, NULL}, *counts = NULL;
    Docs t = {.k = k, .n_docs = ends.len / 8, .end = ends.buf, .keys = (int)(n_kv / 4)};
    for (int h = 0; h < t.keys; h++) {
        poly_init(&t.token[h], kv[4 * h], kv[4 * h + 1]);
        poly_init(&t.window[h], kv[4 * h + 2], kv[4 * h + 3]);
        poly_window(&t.window[h], k);
    }
    const uint8_t *text = data.buf, *is_word = table.buf;
    Py_ssize_t len = data.len, n_docs = t.n_docs, table_len = table.len;
    for (Py_ssize_t d = 0; d < n_docs; d++) {
        if (t.end[d] < 0 || t.end[d] > len || (d && t.end[d] < t.end[d - 1])) {
            PyErr_SetString(PyExc_ValueError, "doc_ends must ascend within data");
            goto done;
        }
    }
    /* A token is followed by a non-word byte or the end, so a document has at most
     * (bytes + 1) / 2 tokens, and at most that many shingles (one if any at all). */
    Py_ssize_t bound = 0, widest = 0;
    for (Py_ssize_t d = 0; d < n_docs; d++) {
        Py_ssize_t span = t.end[d] - (d ? t.end[d - 1] : 0), most = span / 2 + 1;
        bound += most;
        if (most > widest)
            widest = most;
    }
    counts = PyBytes_FromStringAndSize(NULL, n_docs * 8);
    if (!counts)
        goto done;
    uint64_t *first[2] = {NULL, NULL};
    for (int h = 0; h < t.keys; h++) {
        hashes[h] = PyBytes_FromStringAndSize(NULL, bound * 8);
        t.th[h] = PyMem_Malloc((widest + 1) * sizeof(uint64_t));
        if (!hashes[h] || !t.th[h]) {
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            goto done;
        }
        first[h] = t.out[h] = (uint64_t *)PyBytes_AS_STRING(hashes[h]);
    }
    t.count = (int64_t *)PyBytes_AS_STRING(counts);
    long missing = -1; /* a code point past the table */
    /* One token, [start, stop): its hash joins its document's (closing the documents
     * before it first: a rare branch, one per document). */
#define TOKEN(start, stop)                                                                \
    do {                                                                                  \
        Py_ssize_t s_ = (start), e_ = (stop);                                             \
        if (s_ >= doc_end) {                                                              \
            t.n = n;                                                                      \
            doc_end = close_docs_before(&t, s_);                                          \
            n = 0;                                                                        \
        }                                                                                 \
        if (doc_end != PY_SSIZE_T_MAX) {                                                  \
            th[n] = token_hash(&t.token[0], text + s_, e_ - s_, len - s_);                \
            if (th2)                                                                      \
                th2[n] = token_hash(&t.token[1], text + s_, e_ - s_, len - s_);           \
            n++;                                                                          \
        }                                                                                 \
    } while (0)
    Py_BEGIN_ALLOW_THREADS
    uint64_t *th = t.th[0], *th2 = t.keys == 2 ? t.th[1] : NULL;
    Py_ssize_t n = 0, doc_end = close_docs_before(&t, 0), token_start = -1; /* inside a token: where it began */
    uint64_t carry = 0;         /* is the byte before this block a word byte */
    uint8_t tail[64];
    for (Py_ssize_t base = 0; base < len && missing < 0; base += 64) {
        const uint8_t *block = text + base;
        Py_ssize_t size = len - base < 64 ? len - base : 64;
        if (size < 64) { /* the last, partial block: padded with non-word bytes */
            memset(tail, 0, sizeof tail);
            memcpy(tail, block, size);
            block = tail;
        }
        uint64_t high, word = ascii_word_bits(block, &high);
        while (high) { /* non-ASCII characters: look their code points up */
            int j = __builtin_ctzll(high), n;
            if ((block[j] & 0xC0) == 0x80) { /* a continuation of the previous block's */
                high &= high - 1;
                Py_ssize_t at = base + j, lead = at;
                while (lead > 0 && at - lead < 3 && (text[lead] & 0xC0) == 0x80)
                    lead--;
                uint32_t cp = decode_utf8(text + lead, text + len, &n);
                if (cp >= (uint32_t)table_len) {
                    missing = cp;
                    break;
                }
                word |= (uint64_t)(is_word[cp] != 0) << j;
                continue;
            }
            uint32_t cp = decode_utf8(text + base + j, text + len, &n);
            if (cp >= (uint32_t)table_len) {
                missing = cp;
                break;
            }
            uint64_t bytes = (n >= 64 ? ~0ULL : ((1ULL << n) - 1)) << j;
            if (is_word[cp])
                word |= bytes;
            high &= ~bytes;
        }
        if (missing >= 0)
            break;
        uint64_t starts = word & ~((word << 1) | carry);
        uint64_t stops = ~word & ((word << 1) | carry);
        carry = word >> 63;
        /* Starts and stops alternate: a token open from an earlier block ends at the
         * first stop, then each start pairs with the next stop, if it is in this block. */
        if (token_start >= 0 && stops) {
            TOKEN(token_start, base + __builtin_ctzll(stops));
            stops &= stops - 1;
            token_start = -1;
        }
        while (starts) {
            Py_ssize_t s = base + __builtin_ctzll(starts);
            starts &= starts - 1;
            if (!stops) {
                token_start = s;
                break;
            }
            TOKEN(s, base + __builtin_ctzll(stops));
            stops &= stops - 1;
        }
    }
    if (missing < 0) {
        if (token_start >= 0) /* a token runs to the end of data */
            TOKEN(token_start, len);
        t.n = n;
        close_docs_before(&t, PY_SSIZE_T_MAX);
    }
    Py_END_ALLOW_THREADS
#undef TOKEN
    if (missing >= 0) {
        result = PyLong_FromLong(missing);
        goto done;
    }
    for (int h = 0; h < t.keys; h++)
        if (_PyBytes_Resize(&hashes[h], (t.out[h] - first[h]) * 8) < 0)
            goto done;
    result = t.keys == 2 ? PyTuple_Pack(3, hashes[0], hashes[1], counts)
                         : PyTuple_Pack(2, hashes[0], counts);
done:
    for (int h = 0; h < 2; h++) {
        Py_XDECREF(hashes[h]);
        PyMem_Free(t.th[h]);
    }
    Py_XDECREF(counts);
    release_buffers(3, views);
    return result;
}

PyDoc_STRVAR(window_hashes_doc,
"window_hashes(values, lengths, k, base, start) -> bytes\n\n"
"Shingler._chars_batch (shingle._window_hashes): the finished hashes (uint64) of the\n"
"k-windows of runs laid end to end in values (uint32, each below 2**61 - 1), run i\n"
"holding lengths[i] (int64) of them, under the keyed polynomial (base, start): a run\n"
"shorter than k has one window, the whole run; an empty one none.");

static PyObject *window_hashes(PyObject *self, PyObject *args)
{
    PyObject *values_obj, *lengths_obj;
    Py_ssize_t k;
    unsigned long long base, start;
    if (!PyArg_ParseTuple(args, "OOnKK", &values_obj, &lengths_obj, &k, &base, &start))
        return NULL;
    if (k < 1) {
        PyErr_SetString(PyExc_ValueError, "k must be at least 1");
        return NULL;
    }
    Py_buffer views[2];
    if (get_buffers(2, views, (PyObject *[]){values_obj, lengths_obj}, (Py_ssize_t[]){4, 8},
                    (const char *[]){"values", "lengths"}) < 0)
        return NULL;
    const uint32_t *values = views[0].buf;
    const int64_t *lengths = views[1].buf;
    Py_ssize_t n_values = views[0].len / 4, n_runs = views[1].len / 8, total = 0, windows = 0;
    PyObject *out = NULL;
    for (Py_ssize_t i = 0; i < n_runs; i++) {
        if (lengths[i] < 0 || lengths[i] > n_values - total) {
            PyErr_SetString(PyExc_ValueError, "lengths must add up to within values");
            goto done;
        }
        total += lengths[i];
        windows += lengths[i] >= k ? lengths[i] - k + 1 : lengths[i] > 0;
    }
    out = PyBytes_FromStringAndSize(NULL, windows * 8);
    uint64_t *digits = PyMem_Malloc((size_t)(total ? total : 1) * 8);
    if (out == NULL || digits == NULL) {
        Py_CLEAR(out);
        PyMem_Free(digits);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    Poly q;
    poly_init(&q, base, start);
    poly_window(&q, k);
    for (Py_ssize_t j = 0; j < total; j++)
        digits[j] = values[j];
    uint64_t *o = (uint64_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0, at = 0; i < n_runs; at += lengths[i], i++) {
        uint64_t *th = digits + at;
        emit_windows(&o, &q, &th, 1, lengths[i], k);
    }
    PyMem_Free(digits);
done:
    release_buffers(2, views);
    return out;
}

/* ----------------------------------------------------------------- signatures */

/* One signature row from a document's bin minima (at least one bin filled; `filled`,
 * the n_filled filled bins in ascending order): optimal densification, each empty bin
 * taking the minimum of the first filled bin on its probe sequence, or of the first
 * filled bin if the sequence visits none; the low 16 bits of each bin into sig.
 * `source` and `best` are K-long scratch space. */
static void densify(const uint32_t *minima, Py_ssize_t K, const Py_ssize_t *filled,
                    Py_ssize_t n_filled, const int64_t *probes, Py_ssize_t rounds,
                    const int32_t *ranks, int32_t *source, int32_t *best, uint16_t *sig)
{
    if (n_filled * n_filled < K) {
        /* Few filled bins (short documents): a probe walk would take about
           K / n_filled steps per empty bin, the rank table n_filled.  The bin a
           walk stops at is the filled one appearing first in the sequence, i.e.
           the one of least rank; none in the sequence: the first filled bin.
           ranks is stored by filled bin (ranks[c * K + b]: where c appears in b's
           sequence), so each filled bin is one sequential pass over all bins. */
        const int32_t *row = ranks + filled[0] * K;
        for (Py_ssize_t b = 0; b < K; b++) {
            best[b] = row[b];
            source[b] = (int32_t)filled[0];
        }
        for (Py_ssize_t f = 1; f < n_filled; f++) {
            const int32_t c = (int32_t)filled[f];
            row = ranks + c * K;
            /* branch-free, all 32-bit: the compiler makes it a vector loop */
            for (Py_ssize_t b = 0; b < K; b++) {
                const int32_t r = row[b], o = best[b];
                const int32_t less = -(int32_t)(r < o);
                best[b] = (r & less) | (o & ~less);
                source[b] = (c & less) | (source[b] & ~less);
            }
        }
        for (Py_ssize_t b = 0; b < K; b++) {
            uint32_t m = minima[b];
            sig[b] = (uint16_t)(m == EMPTY_BIN ? minima[source[b]] : m);
        }
        return;
    }
    for (Py_ssize_t b = 0; b < K; b++) {
        uint32_t m = minima[b];
        if (m == EMPTY_BIN) {
            const int64_t *probe = probes + b * rounds;
            Py_ssize_t src = -1;
            for (Py_ssize_t t = 0; t < rounds && src < 0; t++)
                if ((uint64_t)probe[t] < (uint64_t)K && minima[probe[t]] != EMPTY_BIN)
                    src = probe[t];
            for (Py_ssize_t c = 0; src < 0 && c < K; c++) /* astronomically rare */
                if (minima[c] != EMPTY_BIN)
                    src = c;
            m = minima[src];
        }
        sig[b] = (uint16_t)m;
    }
}

PyDoc_STRVAR(signatures_doc,
"signatures(values, offsets, num_perm, probes, ranks) -> bytes\n\n"
"signature.signatures: one-permutation MinHash with optimal densification over\n"
"sorted fingerprint sets (values uint32, offsets int64), as n x num_perm uint16\n"
"(the low 16 bits of each bin's minimum; rows of empty sets are zero).  probes is\n"
"signature.probe_table (int64, num_perm rows); ranks is signature.rank_table\n"
"(int32, num_perm x num_perm: ranks[c, b] is where bin c first appears in bin\n"
"b's probe sequence), the same answer as walking the probes when few bins are\n"
"filled.");

static PyObject *signatures(PyObject *self, PyObject *args)
{
    PyObject *values_obj, *offsets_obj, *probes_obj, *ranks_obj;
    Py_ssize_t K;
    if (!PyArg_ParseTuple(args, "OOnOO", &values_obj, &offsets_obj, &K, &probes_obj, &ranks_obj))
        return NULL;
    if (K < 1) {
        PyErr_SetString(PyExc_ValueError, "num_perm must be at least 1");
        return NULL;
    }
    Py_buffer views[4];
    if (get_buffers(4, views, (PyObject *[]){values_obj, offsets_obj, probes_obj, ranks_obj},
                    (Py_ssize_t[]){4, 8, 8, 4},
                    (const char *[]){"values", "offsets", "probes", "ranks"}) < 0)
        return NULL;
    const Py_buffer vb = views[0], ob = views[1], pb = views[2], rb = views[3];
    PyObject *out = NULL;
    uint32_t *minima = NULL;
    Py_ssize_t *filled = NULL;
    int32_t *source = NULL, *best = NULL;
    const uint32_t *values = vb.buf;
    const int64_t *offsets = ob.buf, *probes = pb.buf;
    const int32_t *ranks = rb.buf;
    Py_ssize_t n_docs = ob.len / 8 - 1, rounds = pb.len / 8 / K;
    if (!offsets_ok(offsets, n_docs, vb.len / 4, INT64_MAX) || pb.len / 8 != rounds * K ||
        rounds < 1 || rb.len / 4 != K * K) {
        PyErr_SetString(PyExc_ValueError, "inconsistent offsets, probe or rank table");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (n_docs > 0 ? n_docs : 0) * K * 2);
    minima = PyMem_Malloc(K * sizeof(uint32_t));
    filled = PyMem_Malloc(K * sizeof(Py_ssize_t));
    source = PyMem_Malloc(K * sizeof(int32_t));
    best = PyMem_Malloc(K * sizeof(int32_t));
    if (!out || !minima || !filled || !source || !best) {
        Py_CLEAR(out);
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    uint16_t *sig = (uint16_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t d = 0; d < n_docs; d++, sig += K) {
        if (offsets[d + 1] == offsets[d]) {
            memset(sig, 0, K * 2);
            continue;
        }
        for (Py_ssize_t b = 0; b < K; b++)
            minima[b] = EMPTY_BIN;
        Py_ssize_t n_filled = 0;
        for (int64_t j = offsets[d]; j < offsets[d + 1]; j++) {
            uint32_t v = values[j];
            Py_ssize_t b = (Py_ssize_t)(((uint64_t)v * (uint64_t)K) >> FINGERPRINT_BITS);
            if (minima[b] == EMPTY_BIN) { /* sorted: the first is the smallest */
                minima[b] = v;
                filled[n_filled++] = b; /* ascending: bins are monotone in v */
            }
        }
        densify(minima, K, filled, n_filled, probes, rounds, ranks, source, best, sig);
    }
    Py_END_ALLOW_THREADS
done:
    PyMem_Free(minima);
    PyMem_Free(filled);
    PyMem_Free(source);
    PyMem_Free(best);
    release_buffers(4, views);
    return out;
}

/* --------------------------------------------------------------- exact Jaccard */

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

/* ------------------------------------------------------------------ choosing */

/* J = m / (na + nb - m), in the double arithmetic of jaccard(). */
static inline double jaccard_of(Py_ssize_t m, Py_ssize_t na, Py_ssize_t nb)
{
    return (double)m / (double)(na + nb - m);
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

static double jaccard_at_least(const uint64_t *a, Py_ssize_t na, const uint64_t *b,
                               Py_ssize_t nb, const uint8_t *ca, const uint8_t *cb,
                               double floor)
{
    if (!na || !nb)
        return 0.0 >= floor ? 0.0 : -1.0;
    Py_ssize_t lo = na < nb ? na : nb;
    if (jaccard_of(lo, na, nb) < floor) /* the size filter: |A|/|B| too far from 1 */
        return -1.0;
    if (ca && cb) {
        /* The slice filter: the values two sets share within one slice of the hash
         * range are at most the fewer of the two sets' values there.  256 counts
         * compared in a few dozen instructions reject most template siblings below the
         * bar without touching the sets. */
        uint32_t bound = slice_bound(ca, cb);
        if ((Py_ssize_t)bound < lo)
            lo = bound;
        if (jaccard_of(lo, na, nb) < floor)
            return -1.0;
    }
    /* need: the least intersection whose J reaches floor (<= lo, by the line above) */
    Py_ssize_t need = (Py_ssize_t)(floor * (double)(na + nb) / (1.0 + floor));
    if (need < 0)
        need = 0;
    if (need > lo)
        need = lo;
    while (need > 0 && jaccard_of(need - 1, na, nb) >= floor)
        need--;
    while (need < lo && jaccard_of(need, na, nb) < floor)
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
    return jaccard_of(inter, na, nb);
}

/* ------------------------------------------------------------------ publishing */

/* Kafka's murmur2 (the Java client's Utils.murmur2), 32-bit arithmetic throughout. */
static uint32_t kafka_murmur2(const uint8_t *p, Py_ssize_t n)
{
    const uint32_t m = 0x5bd1e995U;
    uint32_t h = 0x9747b28cU ^ (uint32_t)n;
    Py_ssize_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t k = (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                     (uint32_t)p[i + 3] << 24;
        k *= m;
        k ^= k >> 24;
        k *= m;
        h = h * m ^ k;
    }
    switch (n - i) {
    case 3:
        h ^= (uint32_t)p[i + 2] << 16; /* fall through */
    case 2:
        h ^= (uint32_t)p[i + 1] << 8; /* fall through */
    case 1:
        h ^= p[i];
        h *= m;
    }
    h ^= h >> 13;
    h *= m;
    h ^= h >> 15;
    return h;
}

PyDoc_STRVAR(kafka_partitions_doc,
"kafka_partitions(keys, n) -> list[int]\n\n"
"kafka.partitioner.default: the partition kafka-python's default partitioner (and\n"
"the Java client's) gives each key (bytes) on a topic of n partitions,\n"
"(murmur2(key) & 0x7fffffff) % n.");

static PyObject *kafka_partitions(PyObject *self, PyObject *args)
{
    PyObject *keys;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &keys, &n))
        return NULL;
    if (n < 1) {
        PyErr_SetString(PyExc_ValueError, "a topic has at least one partition");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(keys);
    PyObject *out = PyList_New(count);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyBytes_Check(key)) {
            Py_DECREF(out);
            PyErr_SetString(PyExc_TypeError, "keys must be bytes");
            return NULL;
        }
        uint32_t h = kafka_murmur2((const uint8_t *)PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key));
        PyObject *part = PyLong_FromSsize_t((Py_ssize_t)(h & 0x7fffffffU) % n);
        if (part == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, part);
    }
    return out;
}


/* A docno (int) as a C integer, -1 with an exception set on error: an int of one
 * digit (below 2**30: every docno of an index below a billion documents) read in
 * place, any other through PyLong_AsLongLong.  The call and its checks were a third
 * of `gather`'s time on a template page's two thousand postings. */
/* Whether `o` is an int small enough for `docno_value` to read in place. */
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

/* candidates ahead whose table rows `choose_packed` asks the cache for */
#define PREFETCH_AHEAD 4

/* ================================================================== candidate search
 * (engine/verify.py, store/tables.py `candidates`): packed exact-set summaries, the
 * exact-check rule over them, and the gathering of a document's candidates. */

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

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

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
                      Py_ssize_t max_checks, const Table *table, Py_ssize_t *checks_io,
                      Py_ssize_t *best_io, double *best_sim_io)
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
                    if (jaccard_of(lo, na, nb) < floor)
                        continue;
                    uint32_t bound =
                        slice_bound(mine->counts, table->counts + (Py_ssize_t)r * SLICES);
                    if ((Py_ssize_t)bound < lo && jaccard_of(bound, na, nb) < floor)
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
                                      floor);
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
"summary.");

static PyObject *choose_packed(PyObject *self, PyObject *args)
{
    PyObject *mine_obj, *sets, *ranked, *est_obj;
    PyObject *table_objs[3] = {Py_None, Py_None, Py_None};
    double threshold, margin, best_sim;
    Py_ssize_t max_checks, checks, best;
    if (!PyArg_ParseTuple(args, "OO!O!Oddnnnd|OOO", &mine_obj, &PyTuple_Type, &sets,
                          &PyList_Type, &ranked, &est_obj, &threshold, &margin, &max_checks,
                          &checks, &best, &best_sim, &table_objs[0], &table_objs[1],
                          &table_objs[2]))
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
                            n_views ? &table : NULL, &checks, &best, &best_sim);
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
"checks[j]: the caller reads it and calls again from j), or len(mines).  `sets` and\n"
"the optional table as for choose_packed.");

static PyObject *choose_batch(PyObject *self, PyObject *args)
{
    PyObject *mines, *sets, *ranked_obj, *est_obj, *at_obj, *best_obj, *sim_obj, *checks_obj;
    PyObject *table_objs[3] = {Py_None, Py_None, Py_None};
    double threshold, margin;
    Py_ssize_t max_checks, first;
    if (!PyArg_ParseTuple(args, "O!O!OOOddnOOOn|OOO", &PyList_Type, &mines, &PyTuple_Type,
                          &sets, &ranked_obj, &est_obj, &at_obj, &threshold, &margin,
                          &max_checks, &best_obj, &sim_obj, &checks_obj, &first,
                          &table_objs[0], &table_objs[1], &table_objs[2]))
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
                                        max_checks, n_views ? &table : NULL, &c, &b,
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

/* ============================================================ prepare (s27) ====
 * The kernels of preparing a batch (engine/prepare.py): from shingle hashes to what
 * the index stores, in one pass per document. */

PyDoc_STRVAR(sketch_doc,
"sketch(hashes, offsets, num_perm, key, probes, ranks, bases, rows) -> (bytes, bytes)\n\n"
"signature.sketch_numpy, fused: the MinHash signatures of documents' shingle hashes\n"
"(hashes uint64, offsets int64: document d owns hashes[offsets[d]:offsets[d+1]],\n"
"repeats allowed) and their LSH band keys.  A document's fingerprints are the top 24\n"
"bits of fmix64(hash ^ key); each of num_perm bins keeps its least fingerprint, which\n"
"needs neither the sort nor the distinct that signature.fingerprint_sets makes;\n"
"empty bins are filled as signature.signatures fills them (probes, ranks).  Returns\n"
"the n x num_perm uint16 signatures (native order, rows of documents without\n"
"hashes zero) and the n x len(bases) band keys as big-endian uint64 (band j: the\n"
"hash chain from bases[j] over the signature's rows [j*rows, (j+1)*rows)).");

static inline uint64_t be64(uint64_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return v;
#else
    return __builtin_bswap64(v);
#endif
}

static PyObject *sketch(PyObject *self, PyObject *args)
{
    PyObject *hashes_obj, *offsets_obj, *probes_obj, *ranks_obj, *bases_obj;
    Py_ssize_t K, rows;
    unsigned long long key;
    if (!PyArg_ParseTuple(args, "OOnKOOOn", &hashes_obj, &offsets_obj, &K, &key, &probes_obj,
                          &ranks_obj, &bases_obj, &rows))
        return NULL;
    if (K < 1 || rows < 1) {
        PyErr_SetString(PyExc_ValueError, "num_perm and rows must be at least 1");
        return NULL;
    }
    Py_buffer views[5];
    if (get_buffers(5, views,
                    (PyObject *[]){hashes_obj, offsets_obj, probes_obj, ranks_obj, bases_obj},
                    (Py_ssize_t[]){8, 8, 8, 4, 8},
                    (const char *[]){"hashes", "offsets", "probes", "ranks", "bases"}) < 0)
        return NULL;
    const Py_buffer hb = views[0], ob = views[1], pb = views[2], rb = views[3], bb = views[4];
    PyObject *sigs = NULL, *keys = NULL, *result = NULL;
    uint32_t *minima = NULL;
    Py_ssize_t *filled = NULL;
    int32_t *source = NULL, *best = NULL;
    const uint64_t *hashes = hb.buf, *bases = bb.buf;
    const int64_t *offsets = ob.buf, *probes = pb.buf;
    const int32_t *ranks = rb.buf;
    Py_ssize_t n_docs = ob.len / 8 - 1, rounds = pb.len / 8 / K, bands = bb.len / 8;
    if (!offsets_ok(offsets, n_docs, hb.len / 8, INT64_MAX) || pb.len / 8 != rounds * K ||
        rounds < 1 || rb.len / 4 != K * K || bands * rows > K) {
        PyErr_SetString(PyExc_ValueError,
                        "inconsistent offsets, probe or rank table, or bands x rows > num_perm");
        goto done;
    }
    if (n_docs < 0)
        n_docs = 0;
    sigs = PyBytes_FromStringAndSize(NULL, n_docs * K * 2);
    keys = PyBytes_FromStringAndSize(NULL, n_docs * bands * 8);
    minima = PyMem_Malloc(K * sizeof(uint32_t));
    filled = PyMem_Malloc(K * sizeof(Py_ssize_t));
    source = PyMem_Malloc(K * sizeof(int32_t));
    best = PyMem_Malloc(K * sizeof(int32_t));
    if (!sigs || !keys || !minima || !filled || !source || !best) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    uint16_t *sig = (uint16_t *)PyBytes_AS_STRING(sigs);
    uint8_t *key_out = (uint8_t *)PyBytes_AS_STRING(keys);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t d = 0; d < n_docs; d++, sig += K) {
        if (offsets[d + 1] == offsets[d]) {
            memset(sig, 0, K * 2);
        } else {
            for (Py_ssize_t b = 0; b < K; b++)
                minima[b] = EMPTY_BIN;
            /* branch-free: whether a minimum changes is a coin toss early in a
               document (twice as fast as a branch on crawl pages, measured) */
            for (int64_t j = offsets[d]; j < offsets[d + 1]; j++) {
                uint32_t v = (uint32_t)(fmix64(hashes[j] ^ key) >> (64 - FINGERPRINT_BITS));
                Py_ssize_t b = (Py_ssize_t)(((uint64_t)v * (uint64_t)K) >> FINGERPRINT_BITS);
                uint32_t m = minima[b]; /* EMPTY_BIN is above every fingerprint */
                minima[b] = v < m ? v : m;
            }
            Py_ssize_t n_filled = 0;
            for (Py_ssize_t b = 0; b < K; b++)
                if (minima[b] != EMPTY_BIN)
                    filled[n_filled++] = b;
            densify(minima, K, filled, n_filled, probes, rounds, ranks, source, best, sig);
        }
        for (Py_ssize_t j = 0; j < bands; j++, key_out += 8) {
            uint64_t acc = bases[j];
            for (Py_ssize_t i = 0; i < rows; i++)
                acc = fmix64(acc ^ ((uint64_t)sig[j * rows + i] + ((uint64_t)i << 16)));
            acc = be64(acc);
            memcpy(key_out, &acc, 8);
        }
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_Pack(2, sigs, keys);
done:
    Py_XDECREF(sigs);
    Py_XDECREF(keys);
    PyMem_Free(minima);
    PyMem_Free(filled);
    PyMem_Free(source);
    PyMem_Free(best);
    release_buffers(5, views);
    return result;
}

/* ======================================================== end of prepare (s27) ==== */

/* ================================================================== postings
 * (store/postings.py, store/tables.py `batch_postings`): a batch's band keys sorted. */

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

/* ============================================================ search (s28) ====
 * The near-duplicate search of a whole batch (engine/search.py): every searching
 * document's candidates gathered in one call, all of them ranked in another. */

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

/* ======================================================== end of search (s28) ==== */

/* ------------------------------------------------------------------ module */

static PyMethodDef methods[] = {
    {"sketch", sketch, METH_VARARGS, sketch_doc}, /* prepare (s27) */
    {"word_shingles", word_shingles, METH_VARARGS, word_shingles_doc},
    {"window_hashes", window_hashes, METH_VARARGS, window_hashes_doc},
    {"signatures", signatures, METH_VARARGS, signatures_doc},
    {"jaccard", jaccard, METH_VARARGS, jaccard_doc},
    {"kafka_partitions", kafka_partitions, METH_VARARGS, kafka_partitions_doc},
    /* candidate search (the section above) */
    {"summarise", summarise, METH_VARARGS, summarise_doc},
    {"choose_packed", choose_packed, METH_VARARGS, choose_packed_doc},
    {"choose_batch", choose_batch, METH_VARARGS, choose_batch_doc},
    {"summarise_many", summarise_many, METH_VARARGS, summarise_many_doc},
    {"gather", gather, METH_VARARGS, gather_doc},
    {"rank", rank, METH_VARARGS, rank_doc},
    /* postings */
    {"sort_pairs", sort_pairs, METH_VARARGS, sort_pairs_doc},
    {"merge_runs", merge_runs, METH_VARARGS, merge_runs_doc},
    {"probe_runs", probe_runs, METH_VARARGS, probe_runs_doc},
    /* the search of a whole batch (s28) */
    {"gather_batch", gather_batch, METH_VARARGS, gather_batch_doc},
    {"rank_batch", rank_batch, METH_VARARGS, rank_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Compiled inner loops of shingling, signatures, exact Jaccard and partitioning (see _kernels.c).",
    -1,
    methods,
};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
