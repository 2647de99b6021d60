"""Sketch: the maths, pure and vectorised.  Text is normalised and cut into shingles,
the shingles hashed and fingerprinted, fingerprint sets turned into MinHash signatures
and LSH band keys, and the exact Jaccard of two pages' 64-bit shingle sets measured.
`family` names what every similarity family's maths provides (`LshFamily`, and its
threshold rule `Bar`); `minhash` is MinHash / Jaccard as the first such family.
The compiled inner loops live below, in `streamdedup.kernels`; the numpy code here is
their definition and fallback.  Nothing here opens a file, an index or a connection."""
