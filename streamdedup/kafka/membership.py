"""One index per consumer group, checked when the group forms.

Every document must be checked against everything the index holds, so all the
members of a worker's consumer group must share ONE index (processes on one host, on
one index directory).  A member started on another index would be handed some of the
partitions, and duplicates across the two halves would never be found.

Each index gets a random id the first time a worker binds it to its group (kept in the
index, so processes sharing the directory share it), with the time of that binding.
A backup keeps the id, and a restore gives the copy an id of its own (remembering the
ids it descends from, `restored_from`, for the committed offsets' check).  The id says
which index; it cannot say which copy: a backup, a restore of an older version, or a
directory copied by hand may carry the id of an index that still runs.  So each member
also names where its index lives (`location`: this host, and the directory's device
and inode), and one index served from two places counts as two.

Workers join the group with `IndexAssignor`, which puts the id, the binding's time and
the location in the member metadata of the JoinGroup request.  The group's leader,
whichever member it is, sees every member's: if they name more than one index (or one
id in more than one place), the one the leader last saw serving the group keeps it (a
newcomer cannot displace a running worker; the leader is normally the group's oldest
member), else the index bound to the group earliest; the members on any other index or
copy are assigned no partitions and an error in their assignment's user data.  They
stop (`UnsafeToContinueError`, exit 7) before they process anything.  Indexes bound
before ids existed count as bound at time 0.

A member alone in the group cannot be compared with anyone; the worker's second check
is the committed offsets' metadata (`offsets_metadata`, see `PositionCheck` in kafka/positions.py).
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from kafka.coordinator.assignors.abstract import (
    AbstractPartitionAssignor,
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from kafka.coordinator.assignors.range import RangePartitionAssignor

from streamdedup.errors import BrokerUnavailableError
from streamdedup.store.keys import MetaKey
from streamdedup.store.tables import Tables

log = logging.getLogger("streamdedup.kafka.worker")

# committed offsets carry this prefix and the index id as their metadata
OFFSETS_PREFIX = "streamdedup-index:"


def identity(t: Tables, fresh: bool) -> dict[str, Any]:
    """The index's id and the time it was bound to its group, created on the first
    bind (`fresh`: the binding is being created now; else it predates ids: time 0)."""
    have: dict[str, Any] | None = t.meta(MetaKey.IDENTITY)
    if have is None:
        have = {"id": uuid.uuid4().hex, "bound_at": time.time() if fresh else 0.0}
        t.set_meta(MetaKey.IDENTITY, have)
    return have


def restored_identity(have: dict[str, Any] | None) -> dict[str, Any] | None:
    """The identity of a restored copy of an index whose identity is `have`: a new id,
    bound now, descending from `have`'s id and its ancestors.  A copy that kept the id
    would be taken for the index itself wherever the two are compared.  None: the
    index was never bound to a group (its first worker gives it an id)."""
    if have is None:
        return None
    ancestors = [str(have["id"]), *map(str, have.get("restored_from") or [])]
    return {"id": uuid.uuid4().hex, "bound_at": time.time(), "restored_from": ancestors}


def location(path: Path) -> str:
    """Where an index directory lives: this machine (its boot id, shared by the
    containers of one host; its hostname where there is none) and the directory's
    device and inode.  Processes on one directory (also through a symlink or a bind
    mount) agree on it; a copy of the directory, here or on another host, does not."""
    try:
        machine = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        machine = socket.gethostname()
    st = path.stat()
    return f"{machine}/{st.st_dev}/{st.st_ino}"


def offsets_metadata(index_id: str | None) -> str:
    return "" if index_id is None else OFFSETS_PREFIX + index_id


def index_of_offsets(metadata: str | None) -> str | None:
    """The index id committed offsets were published from, if a worker wrote them."""
    if metadata and metadata.startswith(OFFSETS_PREFIX):
        return metadata[len(OFFSETS_PREFIX) :]
    return None


def describe(member: dict[str, Any]) -> str:
    bound = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(member.get("bound_at", 0))))
    return (
        f"index {member.get('path', '?')} on host {member.get('host', '?')} "
        f"(id {member.get('index', '?')}, bound to the group {bound})"
    )


def refusal_message(group: str, mine: dict[str, Any], kept: dict[str, Any]) -> str:
    if mine.get("index") == kept.get("index"):
        other = (
            f"a copy of it in another place (a backup, or a directory copied by hand), "
            f"{describe(mine)}. Two copies of an index in one group would each hold half "
            "of what follows"
        )
    else:
        other = (
            f"another one, {describe(mine)}. Two indexes in one group would split the "
            "input partitions between them"
        )
    return (
        f"consumer group {group!r} is served by {describe(kept)}; this worker runs on "
        f"{other}, and duplicates across the two halves would never be found. Nothing "
        "was processed. Run every worker of the group on the same --index directory "
        "(processes on one host), or give this index its own --group-id (it then reads "
        "the whole topic)."
    )


def _seniority(member: dict[str, Any]) -> tuple[float, str, str]:
    """Bound to the group earliest first; ties (copies of one index) broken the same
    way by every leader."""
    return float(member.get("bound_at", 0)), str(member["index"]), str(member.get("location"))


def _instance(member: dict[str, Any]) -> tuple[str, str | None]:
    """One index in one place: its id and its `location`."""
    return str(member["index"]), member.get("location")


def _decode(data: bytes | None) -> dict[str, Any] | None:
    try:
        value = orjson.loads(data or b"")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class IndexAssignor(AbstractPartitionAssignor):  # type: ignore[misc]
    """Range assignment among the members on the group's index (that id, in that
    place); none for the others.  kafka-python calls `assign` and `on_assignment` on
    its I/O thread: `refusal` is only set there, and the worker's loop reads it after
    each poll."""

    name = "streamdedup-index"
    version = 0

    def __init__(self, group: str, index_id: str, bound_at: float, path: Path) -> None:
        self.group = group
        self.mine = {
            "index": index_id,
            "bound_at": bound_at,
            "path": str(path.resolve()),
            "host": socket.gethostname(),
            "location": location(path),
        }
        self.refusal: str | None = None
        # the index (id and location) last seen holding the group
        self.serving: tuple[str, str | None] | None = None

    def metadata(self, topics: Any) -> Any:
        return ConsumerProtocolSubscription(self.version, list(topics), orjson.dumps(self.mine))

    def assign(self, cluster: Any, members: Any) -> dict[str, Any]:
        info = {m.member_id: _decode(m.metadata.user_data) for m in members}
        known = [i for i in info.values() if i is not None and "index" in i]
        if not known:  # no member says (none of ours): nothing to compare
            return dict(RangePartitionAssignor.assign(cluster, members))
        serving = [i for i in known if _instance(i) == self.serving]
        kept = serving[0] if serving else min(known, key=_seniority)
        place = _instance(kept)
        ours = [
            m
            for m in members
            if (i := info[m.member_id]) is not None and "index" in i and _instance(i) == place
        ]
        out: dict[str, Any] = dict(RangePartitionAssignor.assign(cluster, ours))
        for m in members:
            if m.member_id in out:
                continue
            other = info[m.member_id] or {}
            log.error(
                "a member of consumer group %r runs on another index, or on a copy of this one "
                "in another place: refused. %s",
                self.group,
                refusal_message(self.group, other, kept),
            )
            out[m.member_id] = ConsumerProtocolAssignment(
                self.version, [], orjson.dumps({"refused": True, "kept": kept, "member": other})
            )
        return out

    def on_assignment(self, assignment: Any, generation: int) -> None:
        info = _decode(assignment.user_data)
        if info is not None and info.get("refused"):
            self.refusal = refusal_message(self.group, self.mine, info.get("kept") or {})
        else:
            self.serving = _instance(self.mine)


class JoinWatch:
    """How long a worker has waited for its consumer group's first assignment.

    A healthy join takes up to the group's rebalance timeout (the coordinator holds it
    while the other members rejoin) plus a session timeout (to drop a member that died).
    A worker that waits longer says so every `NOTE_EVERY_S`, so the operator sees why
    nothing moves; a long-lived worker waits on.  A run with `--idle-exit` (the demo,
    scripts, tests) is meant to end on its own, so past that bound plus a margin it
    stops with `BrokerUnavailableError` rather than hang: it has processed nothing."""

    NOTE_EVERY_S = 30.0
    MARGIN_S = 30.0

    def __init__(self, clock: Any = time.monotonic) -> None:
        self._clock = clock
        self._since = clock()
        self._next_note = self._since + self.NOTE_EVERY_S
        self._rebalance_s = 0.0
        self._bound_s = self.MARGIN_S
        self._joined = False

    def start(self, consumer_config: dict[str, Any]) -> None:
        self._since = self._clock()
        self._next_note = self._since + self.NOTE_EVERY_S
        self._rebalance_s = consumer_config["max_poll_interval_ms"] / 1000
        session_s = consumer_config["session_timeout_ms"] / 1000
        self._bound_s = self._rebalance_s + session_s + self.MARGIN_S

    def joined(self) -> None:
        """Called by the rebalance listener (on kafka-python's I/O thread)."""
        self._joined = True

    def check(self, group: str, *, bounded: bool) -> None:
        if self._joined:
            return
        now = self._clock()
        waited = now - self._since
        if bounded and waited >= self._bound_s:
            raise BrokerUnavailableError(
                f"consumer group {group!r} assigned this worker no partitions in "
                f"{waited:.0f} s (a join takes at most the rebalance timeout, "
                "max_poll_interval_ms, and a session timeout): the broker's group "
                "coordinator did not complete the join. Nothing was processed; start "
                "the worker again. (Without --idle-exit the worker waits on.)"
            )
        if now >= self._next_note:
            self._next_note = now + self.NOTE_EVERY_S
            log.warning(
                "still waiting for consumer group %r to assign partitions (%.0f s so "
                "far; a join can take the rebalance timeout, %.0f s, while the other "
                "members rejoin)",
                group,
                waited,
                self._rebalance_s,
            )
