/* Verdict partitions (kafka/publisher.py): the partition Kafka's default partitioner
 * gives each verdict's key, so a batch is published partition by partition.
 *
 * In C because murmur2 is 32-bit arithmetic byte by byte, slow in Python for every
 * verdict of a batch; kafka-python's own partitioner stays the definition, and is used
 * where the kernels were not built.
 */
#include "_kernels.h"

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

PyMethodDef kernels_partitions_methods[] = {
    {"kafka_partitions", kafka_partitions, METH_VARARGS, kafka_partitions_doc},
    {NULL, NULL, 0, NULL},
};
