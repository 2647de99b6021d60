"""Store: the LMDB environment and its tables, the only code that touches LMDB (an
import-linter contract forbids `lmdb` everywhere else).  It keeps documents, their
signatures and texts, the band-bucket postings, the expiry order, and the ledger of
input offsets applied and verdicts published, each written in one transaction per
batch.  `index` (the environment, transactions, map growth, disk reserve),
`tables` (typed access in a transaction), `rows` (the rows a document leaves in
the tables), `keys` (key encodings and the names in `meta`), `postings` (the band
buckets' sorted runs), `batch_postings` (a batch's postings buffered in memory),
`buckets` (a segment's newest postings, postings rebuilt from signatures),
`integrity` (`stats --check`), `segment/` (sealed segments)."""
