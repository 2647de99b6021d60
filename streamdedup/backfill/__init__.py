"""`streamdedup backfill`: a whole archive checked on Spark with exactly the verdicts
one ordered `dedup` run gives (rules.py: why that can be done in parallel; job.py:
the stages; reading.py: the input)."""
