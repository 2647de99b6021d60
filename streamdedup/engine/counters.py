"""The engine's work tallies (`Counters`): what a batch did (its candidates, exact
checks, caps, replays, expiries, bulk decisions), kept apart from the decision so
that tests, benchmarks and the worker's metrics read one plain record, and a batch's
tally joins the engine's total only once the batch is committed."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Counters:
    """Work done since the engine was opened (for tests, benchmarks and metrics)."""

    documents: int = 0
    candidates: int = 0  # distinct candidate documents read from buckets
    most_candidates: int = 0  # the most any one document read
    exact_checks: int = 0
    # documents whose search a cap cut short: a bucket held more postings than
    # --max-bucket-candidates, or candidates near enough were left unchecked at
    # --max-exact-checks (a true near duplicate may have been missed)
    bucket_capped: int = 0
    exact_capped: int = 0
    replayed: int = 0  # ids seen before with the same content
    expired: int = 0  # forgotten by the time window
    clock_outliers: int = 0  # timestamps too far ahead of the wall clock (not trusted)
    # decided and stored in bulk (`_classify`): new ids, plain, exact copies or searched
    bulk: int = 0
    searched: int = 0  # of those, searched in one search of their batch (engine/search.py)

    def merge(self, other: Counters) -> None:
        self.documents += other.documents
        self.candidates += other.candidates
        self.most_candidates = max(self.most_candidates, other.most_candidates)
        self.exact_checks += other.exact_checks
        self.bucket_capped += other.bucket_capped
        self.exact_capped += other.exact_capped
        self.replayed += other.replayed
        self.expired += other.expired
        self.clock_outliers += other.clock_outliers
        self.bulk += other.bulk
        self.searched += other.searched


__all__ = ["Counters"]
