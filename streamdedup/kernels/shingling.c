/* Shingling and hashing (sketch/shingle.py, sketch/hashing.py): a batch's text cut
 * into word or character shingles and hashed under the keyed polynomials.
 *
 * In C because it is the first pass over every byte of every document: numpy pays a
 * pass over memory and an allocation per operation, and a regex split per document;
 * this reads the batch's UTF-8 once, 64 bytes at a time, classifying ASCII with SSE2
 * and hashing each token as it ends.  `Shingler._words` and `_window_hashes` stay the
 * definition and the fallback; tests/sketch holds the two to the same hashes.
 */
#include "_kernels.h"

#define P61 0x1FFFFFFFFFFFFFFFULL /* 2**61 - 1: the field of the keyed shingle hash */
#define SPREAD 0x9E3779B97F4A7C15ULL /* hashing.finish: a field value spread over 64 bits */

/* Up to 8 bytes at p as a little-endian integer (bytes past n count as zero). */
static inline uint64_t load_le(const uint8_t *p, Py_ssize_t n)
{
    uint64_t v = 0;
    for (Py_ssize_t i = (n < 8 ? n : 8) - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint32_t le32(uint32_t v)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap32(v);
#else
    return v;
#endif
}

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

PyMethodDef kernels_shingling_methods[] = {
    {"word_shingles", word_shingles, METH_VARARGS, word_shingles_doc},
    {"window_hashes", window_hashes, METH_VARARGS, window_hashes_doc},
    {NULL, NULL, 0, NULL},
};
