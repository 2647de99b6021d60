/* Signatures (sketch/signature.py, engine/prepare.py): one-permutation MinHash with
 * optimal densification, from fingerprint sets (`signatures`) or fused with the
 * fingerprints and the LSH band keys from shingle hashes (`sketch`).
 *
 * In C because a signature is a minimum per bin over every shingle of a document:
 * numpy needs a sort, a distinct and a scatter per batch where this makes one pass per
 * document over bins that stay in the L1 cache.  `signature.signatures` and
 * `signature.sketch_numpy` stay the definition and the fallback.
 */
#include "_kernels.h"

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

PyMethodDef kernels_signatures_methods[] = {
    {"signatures", signatures, METH_VARARGS, signatures_doc},
    {"sketch", sketch, METH_VARARGS, sketch_doc},
    {NULL, NULL, 0, NULL},
};
