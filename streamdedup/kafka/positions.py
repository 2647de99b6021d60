"""Where the consumer stands against the index, checked once per assignment of a
partition before any of its messages is processed: an index behind the group's
committed offsets (restored from a backup) is caught up without publishing again;
a group rewound below what the index has published is warned about and skipped;
an input topic deleted and recreated (or truncated) since, or offsets committed by
a worker on another index, stop the worker before it processes anything.  These
are the safety checks of the worker's startup and rebalances, apart from the loop
so the loop reads as consume, apply, publish.
"""

from __future__ import annotations

import logging
from typing import Any

from streamdedup.errors import UnsafeToContinueError
from streamdedup.kafka.ledger import Progress
from streamdedup.kafka.membership import index_of_offsets
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables
from streamdedup.worker_config import WorkerConfig

log = logging.getLogger("streamdedup.kafka.worker")


class PositionCheck:
    """Checks each newly assigned partition once (`check`, with each poll's records).

    `checked`: the partitions whose first batch since assignment was compared with
    the index (the rebalance listener discards partitions that move);
    `silent_until`: per partition, the offset below which messages are applied
    again without publishing their verdicts (the index was behind).  `by_group`:
    the consumer group assigns the partitions (the worker); `replay` positions
    itself, and only the catch-up applies to it."""

    def __init__(
        self, cfg: WorkerConfig, index: Index, progress: Progress, *, by_group: bool
    ) -> None:
        self.cfg = cfg
        self.index = index
        self.progress = progress
        self.by_group = by_group
        self.checked: set[int] = set()
        self.silent_until: dict[int, int] = {}
        # the ids of the indexes this one was restored from (`membership.restored_identity`):
        # offsets they committed are this index's own history, not another index's
        self.ancestors: frozenset[str] = frozenset()

    def check(
        self,
        consumer: Any,
        records: dict[Any, list[Any]],
        unrecorded: dict[int, int],
        index_id: str | None,
    ) -> set[int]:
        """Once per assignment: if the index is behind a partition's committed position
        (it was restored from a backup), rewind to where the index stands; that range
        is applied again without publishing its verdicts a second time.

        The worker (not `replay`, which positions itself) also refuses an input topic
        that is not the one the index processed (`_check_topic`), and says loudly when
        the group's position is below what the index has published: the group's
        offsets were rewound, by hand or by a tool.  Those messages are skipped, not
        checked again, and the worker goes on rather than stopping: each of them was
        checked and its verdict committed before (checking it again would make it a
        duplicate of itself), so skipping drops nothing, while stopping would turn an
        offset reset into a crash loop with no way forward but a new index.  What the
        operator may have wanted -- their verdicts again -- is what `replay` gives, and
        the warning says how."""
        applied: dict[int, int] | None = None
        published: dict[int, int] = {}
        rewound: set[int] = set()
        fresh = [tp for tp in consumer.assignment() if tp.partition not in self.checked]
        if self.by_group:
            # checked once a fetch answered for them (it brings the partition's end, see
            # _check_topic); until then none of their messages can be processed
            fresh = [tp for tp in fresh if records.get(tp) or consumer.highwater(tp) is not None]
        if fresh and self.by_group:
            applied, published = self.index.read(
                lambda t: (
                    Progress.read(t, self.progress.applied),
                    Progress.read(t, self.progress.published),
                )
            )
            published = Progress.past(published, unrecorded)
            self._check_topic(consumer, fresh, applied)
            self._check_committer(consumer, fresh, applied, index_id)
        for tp in fresh:
            p = tp.partition
            if applied is None:
                applied = self.index.read(lambda t: Progress.read(t, self.progress.applied))
            position = records[tp][0].offset if records.get(tp) else consumer.position(tp)
            if position is not None and position < published.get(p, 0):
                self._warn_rewound(p, position, published[p])
            self.checked.add(p)
            self.silent_until.pop(p, None)
            if p in applied and position is not None and applied[p] < position:
                log.info(
                    "index is behind partition %d's committed position (%d < %d): "
                    "applying that range again without publishing its verdicts again",
                    p,
                    applied[p],
                    position,
                )
                self.silent_until[p] = position
                consumer.seek(tp, applied[p])
                rewound.add(p)
        return rewound

    def _warn_rewound(self, p: int, position: int, published: int) -> None:
        """The group's position on partition `p` is below what the index has published:
        its offsets were rewound (see `check`)."""
        log.warning(
            "consumer group %r is at offset %d of partition %d of %s, below what "
            "index %s has already checked and published (up to offset %d): the "
            "group's offsets were rewound. Messages %d to %d are SKIPPED, not checked "
            "again (their verdicts went out before; checked again, each would be a "
            "duplicate of itself). To get their verdicts again: streamdedup replay "
            "--mode reverdict --index %s --input-topic %s --group-id "
            "%s-reverdict --from-offsets %d:%d --output FILE. To check them afresh: "
            "streamdedup replay --mode rebuild --index NEW_DIR --input-topic %s.",
            self.cfg.group_id,
            position,
            p,
            self.cfg.input_topic,
            self.index.path,
            published,
            position,
            published - 1,
            self.index.path,
            self.cfg.input_topic,
            self.cfg.group_id,
            p,
            position,
            self.cfg.input_topic,
        )

    def _check_committer(
        self, consumer: Any, fresh: list[Any], applied: dict[int, int], index_id: str | None
    ) -> None:
        """The group's offsets of a partition this index never processed were committed
        by a worker on another index: this one is a second index in the group, alone in
        it for now (the join-time check needs two members to compare).  Refuse before
        processing anything.  An index restored from the changelog has the offsets as
        its progress, so it is not refused; nor are offsets committed from an index this
        one was restored from (`ancestors`).  Brokers that do not keep offsets' metadata
        (the embedded Tansu 0.6) leave only a warning here."""
        from kafka.errors import KafkaError

        unknown: dict[int, int] = {}
        for tp in fresh:
            if tp.partition in applied:
                continue
            try:
                committed = consumer.committed(tp, metadata=True)
            except KafkaError as exc:  # a second line of defence: the join-time check holds
                log.warning(
                    "could not read the group's committed offset of partition %d to check "
                    "which index committed it (%s); going on with the join-time check only",
                    tp.partition,
                    exc,
                )
                continue
            if committed is None:
                continue
            other = index_of_offsets(getattr(committed, "metadata", None))
            if other is None:
                unknown[tp.partition] = committed.offset
            elif other != index_id and other not in self.ancestors:
                raise UnsafeToContinueError(
                    f"consumer group {self.cfg.group_id!r} has offsets on partition "
                    f"{tp.partition} of {self.cfg.input_topic!r} committed by a worker on "
                    f"another index (id {other}); this worker's index "
                    f"{self.index.path} (id {index_id}) never processed it. Two "
                    "indexes in one group would split the input partitions between them, "
                    "and duplicates across the two halves would never be found. Nothing "
                    "was processed. Run every worker of the group on the same --index "
                    "directory (processes on one host), or give this index its own "
                    "--group-id (it then reads the whole topic)."
                )
        if unknown:
            log.warning(
                "index %s has never processed partitions %s of %s, but consumer group %r "
                "has offsets committed there (%s): the messages before them are not in "
                "this index, and their duplicates will not be found. If another worker on "
                "another index serves this group, stop this one: one group, one index.",
                self.index.path,
                sorted(unknown),
                self.cfg.input_topic,
                self.cfg.group_id,
                unknown,
            )

    def _check_topic(self, consumer: Any, fresh: list[Any], applied: dict[int, int]) -> None:
        """Refuse an input topic that was deleted and recreated (or truncated) since
        the index processed it: the index records, per partition, the next offset it
        applied, and everything below is skipped as done.  On a recreated topic that
        would drop every new message below those offsets -- no verdict, no log line,
        lag 0.  Two signs: the topic's id (Kafka 2.8+ brokers report one; the first
        seen is kept in the index) changed, or a partition now ends below the offset
        the index applied.  Nothing is processed before these checks.  The end is the
        high watermark of the last fetch response: Tansu 0.6 answers an end-offset
        query with the last record batch's base offset + 1 (measured), below the end
        whenever that batch holds more than one record."""
        topic, ns = self.cfg.input_topic, self.progress.ns
        key = MetaKey.TOPIC_ID + ns
        cluster = getattr(getattr(consumer, "_client", None), "cluster", None)
        found = cluster.topic_id(topic) if cluster is not None else None
        now = None if found is None else str(found)

        def keep(t: Tables) -> str | None:
            have: str | None = t.meta(key)
            if now is not None and (have is None or not applied):
                t.set_meta(key, now)  # nothing applied yet: nothing to mistake
                return None
            return have

        before = self.index.write(keep)
        where = (
            f"index {self.index.path} has processed input topic {topic!r} for consumer "
            f"group {self.cfg.group_id!r} up to offsets {dict(sorted(applied.items()))}"
        )
        todo = (
            "Nothing was processed: going on would skip every new message below those "
            "offsets as if already processed. To process the new topic from its start, "
            "run the worker with a new, empty --index directory and a new --group-id. "
            "To check its messages against what this index holds instead, run "
            f"`streamdedup replay --mode reverdict --index {self.index.path} "
            f"--input-topic {topic} --group-id NEW_GROUP --output-topic VERDICTS --follow`."
        )
        if before is not None and now is not None and before != now:
            raise UnsafeToContinueError(
                f"{where}, but the topic was deleted and recreated since (its topic id "
                f"was {before}, it is now {now}). {todo}"
            )
        ours = [tp for tp in fresh if tp.partition in applied]
        if not ours:
            return
        ends = {tp: consumer.highwater(tp) for tp in ours}
        short = {
            tp.partition: end
            for tp, end in ends.items()
            if end is not None and end < applied[tp.partition]
        }
        if short:
            raise UnsafeToContinueError(
                f"{where}, but the topic now ends at offsets {short}: it was deleted and "
                f"recreated, or truncated. {todo}"
            )
