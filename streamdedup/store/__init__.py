"""Store: the LMDB environment and its tables, the only code that touches LMDB.  It
keeps documents, their signatures, sets and texts, the band-bucket postings, the
expiry order, and the ledger of input offsets applied and verdicts published, each
written in one transaction per batch."""
