"""A segment server for the transport tests, whose answers the tests can check
without a sealed segment: the answer to a probe is `fake_answer(payload)` (a digest
of the probe, then the answering process's pid, then the probe reversed, so that an
answer is as large as its probe), and a probe starting with b"bad" fails as a probe
the engine cannot read would.  Run as a process of its own:

    python -m tests.support.segment_transport BOOTSTRAP PREFIX SEGMENT_ID [IDLE_EXIT]
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

from tests.support.kafka import FAST_GROUP

ROOT = Path(__file__).resolve().parents[2]
# the consumer options of FAST_GROUP, as a dict (short group joins on the embedded broker)
FAST_OPTIONS = {
    k: int(v) for k, _, v in (a.partition("=") for a in FAST_GROUP if a != "--consumer-option")
}


def fake_answer(payload: bytes, pid: int | None = None) -> bytes:
    if payload.startswith(b"bad"):
        raise ValueError("not a probe: it starts with b'bad'")
    pid = os.getpid() if pid is None else pid
    return (
        hashlib.blake2b(payload, digest_size=16).digest() + pid.to_bytes(4, "big") + payload[::-1]
    )


def check_answer(payload: bytes, answer: bytes) -> int:
    """The pid of the process that answered `payload` with `answer`; fails if the
    answer is not `payload`'s."""
    pid = int.from_bytes(answer[16:20], "big")
    assert answer == fake_answer(payload, pid)
    return pid


def spawn(
    log: Path, bootstrap: str, prefix: str, segment_id: str, *extra: str
) -> subprocess.Popen[bytes]:
    """A server process, its log (stderr) in the file `log` (never a pipe: a full one
    would stall it)."""
    argv = [bootstrap, prefix, segment_id, *extra]
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.segment_transport", *argv],
            cwd=ROOT,
            stderr=out,
        )


def main(argv: list[str]) -> int:
    from streamdedup.kafka.segment_service.server import SegmentServer
    from streamdedup.kafka.segment_service.wire import SegmentLink
    from streamdedup.kafka.settings import install_signal_handlers
    from streamdedup.ops.logs import setup_logging

    setup_logging("info")
    bootstrap, prefix, segment_id = argv[:3]
    idle = float(argv[3]) if len(argv) > 3 else None
    link = SegmentLink(bootstrap, prefix, consumer_options=FAST_OPTIONS)
    server = SegmentServer(
        link, segment_id, fake_answer, name=f"test segment {segment_id}", idle_exit_s=idle
    )
    install_signal_handlers(server.stop_event)
    stats = server.run()
    print(f"answered {stats.probes} skipped {stats.skipped}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
