"""Every command that talks to Kafka takes the worker's connection settings, and a
setting that would be ignored is refused (issue 35, item 12): `dedup` once reached
remote segments in plain text only, `STREAMDEDUP_SECURITY_PROTOCOL` silently
ignored, while the answers carry candidates' stored texts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from streamdedup.errors import ConfigError
from streamdedup.kafka.broker import free_port
from streamdedup.worker_config import connection_settings
from tests.support import tls
from tests.support.kafka import file_mode
from tests.support.segments import (
    Servers,
    assert_same_verdicts,
    cli,
    cli_args,
    dedup,
    mixed_stream,
    ok,
    read_jsonl,
    seal,
    write_jsonl,
)

EXIT_USAGE = 2  # streamdedup.errors.ConfigError


@pytest.mark.integration
def test_remote_segments_and_produce_over_tls(tmp_path: Path) -> None:
    """A broker reachable over TLS only.  The segment server (flags) and `dedup`
    (environment variables, as a deployment sets them) reach the remote segment over
    TLS with the verdicts of one index; `produce` sends over TLS too."""
    if (why := tls.unavailable()) is not None:
        pytest.skip(why)
    docs = mixed_stream(400, seed=41)
    ref = file_mode(tmp_path, docs)
    with tls.tls_broker(tmp_path) as broker:
        index = tmp_path / "index"
        dedup(write_jsonl(tmp_path / "a.jsonl", docs[:200]), index, tmp_path / "a.out")
        segment = tmp_path / "segment-1"
        ok(seal(index, segment, "--remote"))
        with Servers(broker.bootstrap, *broker.flags()) as servers:
            servers.start(segment)
            r = subprocess.run(
                [
                    *cli_args("dedup", str(write_jsonl(tmp_path / "b.jsonl", docs[200:]))),
                    *("--index", str(index), "--output", str(tmp_path / "b.out")),
                    *("--bootstrap-servers", broker.bootstrap, "--batch-size", "50"),
                    *("--connect-timeout", "20", "--progress", "never"),
                ],
                env={**os.environ, **broker.env()},
                capture_output=True,
                timeout=200,
            )
            assert r.returncode == 0, r.stderr.decode()[-3000:]
            servers.alive()
        got = read_jsonl(tmp_path / "a.out") + read_jsonl(tmp_path / "b.out")
        assert_same_verdicts(got, ref)
        handshakes = broker.proxy.handshakes
        sent = cli(
            "produce",
            str(write_jsonl(tmp_path / "c.jsonl", docs[:50])),
            *("--topic", "over-tls", "--bootstrap-servers", broker.bootstrap),
            *broker.flags(),
        )
        assert sent.returncode == 0, sent.stderr.decode()
        assert "sent 50 messages to over-tls" in sent.stderr.decode()
        assert broker.proxy.handshakes > handshakes


def test_a_connection_setting_for_a_run_without_kafka_is_refused(tmp_path: Path) -> None:
    """`dedup` connects only with --bootstrap-servers: a security setting for a run
    without it (here from the environment) would be ignored: exit 2, saying so."""
    src = write_jsonl(tmp_path / "in.jsonl", [{"id": 1, "text": "a few words of text"}])
    r = cli(
        "dedup",
        str(src),
        *("--index", str(tmp_path / "index"), "--output", str(tmp_path / "out.jsonl")),
        env={"STREAMDEDUP_SECURITY_PROTOCOL": "SASL_SSL", "STREAMDEDUP_SASL_MECHANISM": "PLAIN"},
    )
    assert r.returncode == EXIT_USAGE, r.stderr.decode()
    err = r.stderr.decode()
    assert "--security-protocol, --sasl-mechanism given" in err
    assert "does not connect to Kafka" in err
    assert not (tmp_path / "index").exists()
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["verdicts", "--topic", "v"],
        ["produce", "-", "--topic", "t"],
        ["segment-server", "SEGMENT"],
        ["dedup", "-", "--index", "IDX"],
    ],
)
def test_a_setting_the_protocol_would_ignore_is_refused(tmp_path: Path, command: list[str]) -> None:
    """A TLS file without TLS, SASL settings without SASL: refused before anything
    connects (nothing listens at the address), on every command that talks to Kafka."""
    command = [
        c.replace("SEGMENT", str(tmp_path)).replace("IDX", str(tmp_path / "i")) for c in command
    ]
    args = [*command, "--bootstrap-servers", f"127.0.0.1:{free_port()}"]
    r = cli(*args, "--ssl-cafile", str(tmp_path / "ca.pem"), "--connect-timeout", "0.5")
    assert r.returncode == EXIT_USAGE, r.stderr.decode()
    assert "--ssl-cafile would be ignored with --security-protocol PLAINTEXT" in r.stderr.decode()
    r = cli(*args, "--security-protocol", "SSL", "--sasl-username", "u", "--connect-timeout", "0.5")
    assert r.returncode == EXIT_USAGE, r.stderr.decode()
    assert "--sasl-username would be ignored with --security-protocol SSL" in r.stderr.decode()


def test_connection_settings_map_and_refuse() -> None:
    got = connection_settings(
        {
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_username": "u",
            "sasl_password": "p",
            "ssl_cafile": "ca.pem",
        }
    )
    assert got == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "u",
        "sasl_plain_password": "p",
        "ssl_cafile": "ca.pem",
    }
    with pytest.raises(ConfigError, match="--sasl-password would be ignored"):
        connection_settings({"security_protocol": "SSL", "sasl_password": "p"})
    with pytest.raises(ConfigError, match="--ssl-certfile, --ssl-keyfile would be ignored"):
        connection_settings(
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_mechanism": "PLAIN",
                "ssl_certfile": "c",
                "ssl_keyfile": "k",
            }
        )
