"""File mode: `streamdedup dedup` over files and stdin, beside `kafka/` (the worker) and
`backfill/` (Spark), all three driving the same engine.  `run` is the pipeline (read a
batch, decide it, commit, write its verdicts); `streams` the input and output ends;
`summary` the closing line; `pool` prepares batches in other processes and `pages`
extracts WARC pages in them."""
