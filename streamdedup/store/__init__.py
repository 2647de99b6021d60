"""Store: the LMDB environment and its tables, the only code that touches LMDB.  It
keeps documents, their signatures and texts, the band-bucket postings, the
expiry order, and the ledger of input offsets applied and verdicts published, each
written in one transaction per batch.  `index` (the environment, transactions, map
growth, disk reserve), `tables` (the table layout and typed access in a transaction),
`keys` (key encodings and the names in `meta`), `postings` (the band buckets'
sorted runs), `batch` (a batch's postings buffered in memory)."""
