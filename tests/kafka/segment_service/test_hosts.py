"""Segment servers on other hosts: each in its own network namespace (tests/support/
netns.py), reaching the broker over its own veth link, so probes and answers cross a
real network boundary.  Skipped, with the reason, where namespaces cannot be made."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import netns
from tests.support.kafka import file_mode
from tests.support.segments import Servers, assert_same_verdicts, crafted_stream, dedup_in_slices

pytestmark = pytest.mark.integration

WHY_NOT = netns.unavailable()
needs_netns = pytest.mark.skipif(WHY_NOT is not None, reason=f"no network namespaces: {WHY_NOT}")

# Inside a namespace: connect to the broker, say from which address, send a record with
# kafka-python and read it back (metadata, produce and fetch all go to the advertised
# address, which must therefore be reachable from there too).
_CLIENT = """
import socket, sys
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
host, port, topic, payload = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4].encode()
s = socket.create_connection((host, port), timeout=5)
print(s.getsockname()[0])
s.close()
p = KafkaProducer(bootstrap_servers=f"{host}:{port}")
p.send(topic, payload).get(timeout=20)
p.close()
c = KafkaConsumer(bootstrap_servers=f"{host}:{port}", enable_auto_commit=False)
tp = TopicPartition(topic, 0)
c.assign([tp])
c.seek_to_beginning(tp)
seen = []
for _ in range(50):
    seen += [m.value for b in c.poll(timeout_ms=200).values() for m in b]
    if payload in seen:
        break
print(payload in seen)
"""


_CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2).close()
except ConnectionRefusedError:
    sys.exit(3)
"""


@needs_netns
def test_the_namespaces_reach_the_broker_only_over_their_links() -> None:
    """The infrastructure itself: a Kafka client in each namespace produces to and
    fetches from the broker on the host side, from its own address; the host's
    loopback (where the other tests' broker listens) is not reachable from there."""
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    made = netns.Hosts(2)
    with made as hosts, netns.AddressedBroker(hosts[0].gateway) as bootstrap:
        topic = "ping"
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        admin.create_topics([NewTopic(topic, 1, 1)])
        admin.close()
        host, port = bootstrap.rsplit(":", 1)
        here = socket.create_server(("127.0.0.1", 0))
        loop_port = str(here.getsockname()[1])
        assert subprocess.run([sys.executable, "-c", _CONNECT, loop_port]).returncode == 0
        for h in hosts:
            r = subprocess.run(
                h.run([sys.executable, "-c", _CLIENT, host, port, topic, h.name]),
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 0, r.stderr[-3000:]
            assert r.stdout.split() == [h.address, "True"], r.stdout
            # a port listening on this host's loopback is not there from inside
            assert (
                subprocess.run(
                    h.run([sys.executable, "-c", _CONNECT, loop_port]),
                    capture_output=True,
                    timeout=30,
                ).returncode
                == 3
            )
        here.close()
        c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        seen: list[bytes] = []
        for _ in range(50):
            seen += [m.value for b in c.poll(timeout_ms=200).values() for m in b]
            if len(seen) >= 2:
                break
        c.close()
        assert sorted(seen) == sorted(h.name.encode() for h in hosts)
    assert netns.left_over(made.tag) == []


@needs_netns
def test_the_namespaces_are_removed_when_the_test_fails() -> None:
    made = netns.Hosts(2)
    with pytest.raises(ZeroDivisionError), made as hosts:
        assert len(netns.left_over(made.tag)) >= 4  # two namespaces, two links
        assert hosts[0].address != hosts[1].address
        1 / 0  # noqa: B018 - the failure under test
    assert netns.left_over(made.tag) == []


@needs_netns
def test_segment_servers_on_other_hosts_give_the_single_index_verdicts(tmp_path: Path) -> None:
    """Three sealed segments, each moved to a directory of its host and served there
    by a `segment-server` in that host's namespace (the third shares the first's: two
    hosts), the writer (`dedup`) here: probes and answers cross the veth links, and
    the verdicts are the single index's."""
    c = crafted_stream()
    ref = file_mode(tmp_path, c.docs)
    made = netns.Hosts(2)
    with (
        made as hosts,
        netns.AddressedBroker(hosts[0].gateway) as bootstrap,
        Servers(bootstrap) as servers,
    ):

        def serve(segment: Path, _: object) -> None:
            # moved to the host that serves it: the writer never opens it again
            host = hosts[len(servers.procs) % 2]
            there = tmp_path / host.name / segment.name
            there.parent.mkdir(exist_ok=True)
            shutil.move(segment, there)
            servers.start(there, wrap=host.run)

        run = dedup_in_slices(
            c.docs,
            tmp_path / "remote",
            c.cuts,
            "--bootstrap-servers",
            bootstrap,
            "--batch-size",
            "5",
            seal_args=("--remote",),
            between=serve,
        )
        servers.alive()
        host, port = bootstrap.rsplit(":", 1)
        for h in hosts:  # the servers' connections to the broker, seen from inside
            conns = subprocess.run(
                h.run(["ss", "-Htn", "state", "established"]),
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            assert f"{h.address}:" in conns and f"{host}:{port}" in conns, conns
    assert netns.left_over(made.tag) == []
    assert_same_verdicts(run.verdicts, ref)
