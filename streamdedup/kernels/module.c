/* The module `streamdedup.kernels._kernels`: the compiled inner loops of streamdedup,
 * gathered from their source files, one file per part of the package they serve
 * (shingling.c, signatures.c, jaccard.c, candidates.c, postings.c, partitions.c; the
 * helpers they share in _kernels.h).
 *
 * Each function computes bit for bit what a numpy function of the package computes
 * (named in its docstring; for the partitioner, kafka-python's own), which stays the
 * definition, the fallback where this module could not be built, and what the tests
 * compare it with.  numpy pays a pass over memory and an allocation per operation;
 * these loops make one pass each, over data that stays in the CPU cache.
 */
#include "_kernels.h"

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_kernels",
    "Compiled inner loops of shingling, signatures, exact Jaccard, candidate search, postings "
    "and partitioning (the C sources in streamdedup/kernels/).",
    -1,
    NULL,
};

PyMODINIT_FUNC PyInit__kernels(void)
{
    PyMethodDef *groups[] = {
        kernels_shingling_methods,  kernels_signatures_methods, kernels_jaccard_methods,
        kernels_candidates_methods, kernels_postings_methods,   kernels_partitions_methods,
    };
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
        if (PyModule_AddFunctions(m, groups[i]) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
