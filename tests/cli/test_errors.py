"""The five most common mistakes each give one line that says what happened and what
to do, with the exit status of errors.py: a wrong broker address (3), a missing topic
(2), a mistyped flag (2, with the subcommand's usage and the closest option), an index
opened with other parameters (2), an output path that cannot be written (4).  Also:
--help shows choices and an example per command; the Python API's errors name its
parameters, not flags; failed starts leave no index directory; replay's refusals and
exit statuses match dedup's."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import orjson
import pytest

from streamdedup.kafka.broker import free_port
from tests.support.cli import corpus, run


def error_line(stderr: bytes) -> str:
    """The one error line, `...: error: ...` or the worker's logged ERROR (and no
    traceback)."""
    text = stderr.decode()
    assert "Traceback" not in text, text
    errors = [line for line in text.splitlines() if "error:" in line or " ERROR " in line]
    assert len(errors) == 1, text
    return errors[0]


# ----------------------------------------------------------- 1. wrong broker address


def test_wrong_broker_address_says_what_to_check_and_creates_no_index(tmp_path: Path) -> None:
    started = time.monotonic()
    r = run(
        "worker",
        "--bootstrap-servers",
        f"127.0.0.1:{free_port()}",
        "--index",
        str(tmp_path / "idx"),
        "--connect-timeout",
        "1",
    )
    assert r.returncode == 3
    line = error_line(r.stderr)
    assert "no Kafka broker answered at 127.0.0.1:" in line
    assert "Connection refused" in line and "check --bootstrap-servers" in line
    assert not (tmp_path / "idx").exists()  # checked before the index is created
    assert time.monotonic() - started < 30


def test_an_unresolvable_broker_name_is_named(tmp_path: Path) -> None:
    r = run(
        "verdicts",
        "--bootstrap-servers",
        "no-such-host.invalid:9092",
        "--connect-timeout",
        "1",
    )
    assert r.returncode == 3
    line = error_line(r.stderr)
    assert "no-such-host.invalid: cannot resolve the name" in line
    assert "check --bootstrap-servers" in line


# ----------------------------------------------------------------- 2. missing topic


@pytest.mark.integration
def test_worker_on_a_missing_topic_says_how_to_create_it(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    missing = f"no-such-topic-{uuid.uuid4().hex[:8]}"
    r = run(
        "worker",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--input-topic",
        missing,
        "--index",
        str(tmp_path / "idx"),
    )
    assert r.returncode == 2
    line = error_line(r.stderr)
    assert f"topic '{missing}' (--input-topic) does not exist on {kafka_bootstrap}" in line
    assert "--create-topics" in line
    assert not (tmp_path / "idx").exists()
    # and asking did not create it (no auto-creation through a metadata request)
    r = run("verdicts", "--bootstrap-servers", kafka_bootstrap, "--topic", missing)
    assert r.returncode == 2
    assert f"topic '{missing}' does not exist" in error_line(r.stderr)


@pytest.mark.integration
def test_replay_of_a_missing_topic_creates_no_index(kafka_bootstrap: str, tmp_path: Path) -> None:
    r = run(
        "replay",
        "--bootstrap-servers",
        kafka_bootstrap,
        "--input-topic",
        f"gone-{uuid.uuid4().hex[:8]}",
        "--index",
        str(tmp_path / "rebuilt"),
        "--output",
        str(tmp_path / "out.jsonl"),
    )
    assert r.returncode == 2
    assert "does not exist" in error_line(r.stderr)
    assert not (tmp_path / "rebuilt").exists()


# --------------------------------------------------------------- 3. mistyped flag


@pytest.mark.parametrize(
    ("argv", "typo", "meant"),
    [
        (("dedup", "in.jsonl", "--treshold", "0.9"), "--treshold", "--threshold"),
        (("worker", "--bootstrap-sevrers", "b:9092"), "--bootstrap-sevrers", "--bootstrap-servers"),
        (("verdicts", "--folow"), "--folow", "--follow"),
    ],
)
def test_a_mistyped_flag_shows_the_subcommands_usage_and_the_closest_option(
    argv: tuple[str, ...], typo: str, meant: str
) -> None:
    r = run(*argv)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert err.startswith(f"usage: streamdedup {argv[0]} "), err
    line = error_line(r.stderr)
    assert line.startswith(f"streamdedup {argv[0]}: error: unrecognized arguments: {typo}")
    assert line.endswith(f"did you mean {meant}?")


def test_a_value_outside_the_choices_lists_them() -> None:
    r = run("dedup", "in.jsonl", "--verify", "fuzzy")
    assert r.returncode == 2
    assert error_line(r.stderr).endswith(
        "argument --verify: invalid choice: 'fuzzy' (choose from 'exact', 'signature')"
    )


def test_a_flag_nothing_resembles_points_at_help() -> None:
    r = run("tune", "--zzzzzz")
    assert r.returncode == 2
    assert error_line(r.stderr).endswith("see streamdedup tune --help")


# ------------------------------------------------ 4. index opened with other parameters


def test_an_index_opened_with_other_parameters(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    corpus(src, 5)
    idx = str(tmp_path / "idx")
    assert run("dedup", str(src), "--index", idx, "--output", str(tmp_path / "a")).returncode == 0
    r = run("dedup", str(src), "--index", idx, "--num-perm", "64", "--output", "-")
    assert r.returncode == 2
    line = error_line(r.stderr)
    assert "this index was built with --num-perm 128; this run asks for --num-perm 64" in line
    assert "another directory" in line


def test_the_python_api_names_its_parameters_not_flags(tmp_path: Path) -> None:
    from streamdedup import Deduplicator
    from streamdedup.errors import ConfigError, ParameterMismatchError

    with Deduplicator(tmp_path / "idx") as dd:
        dd.check("a", "one two three four five six")
    with pytest.raises(ParameterMismatchError) as caught:
        Deduplicator(tmp_path / "idx", num_perm=64)
    message = str(caught.value)
    assert "built with `num_perm` 128" in message and "--" not in message
    assert caught.value.for_command_line().startswith("this index was built with --num-perm")
    with pytest.raises(ConfigError) as bad:
        Deduplicator(tmp_path / "other", threshold=1.5)
    assert str(bad.value).startswith("`threshold` must be strictly between 0 and 1")
    assert Deduplicator.check.__doc__ and "command-line flags" in Deduplicator.check.__doc__


# ----------------------------------------------------- 5. output path not writable


def test_an_output_that_cannot_be_written(tmp_path: Path) -> None:
    src = tmp_path / "in.jsonl"
    corpus(src, 5)
    out = tmp_path / "no" / "such" / "dir" / "v.jsonl"
    r = run("dedup", str(src), "--index", str(tmp_path / "idx"), "--output", str(out))
    assert r.returncode == 4
    line = error_line(r.stderr)
    assert f"cannot write the verdicts to {out}: No such file or directory" in line
    assert "choose a path in an existing, writable directory" in line
    assert not (tmp_path / "idx").exists()
    # the same words from `verdicts`, before it even looks for a broker
    r = run("verdicts", "--bootstrap-servers", "127.0.0.1:1", "--output", str(out))
    assert r.returncode == 4
    assert f"cannot write the verdicts to {out}" in error_line(r.stderr)


# ------------------------------------------------------------------- --help


def test_help_shows_choices_and_an_example_for_every_command() -> None:
    from streamdedup.cli.main import _subparser, build_parser
    from streamdedup.cli.table import COMMANDS

    parser = build_parser()
    for name in COMMANDS:
        text = _subparser(parser, name).format_help()
        assert "example:\n  streamdedup " + name in text, name
        for hidden in ("--verify VERIFY", "--input-format INPUT_FORMAT", "--progress PROGRESS"):
            assert hidden not in text, name
    dedup = _subparser(parser, "dedup").format_help()
    assert "--verify {exact,signature}" in dedup
    assert "--input-format {json,msgpack,raw}" in _subparser(parser, "worker").format_help()


# ------------------------------------------------------------------- replay


def test_replay_refuses_a_dead_letter_topic_it_would_ignore(tmp_path: Path) -> None:
    r = run(
        "replay",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--index",
        str(tmp_path / "idx"),
        "--output",
        str(tmp_path / "out.jsonl"),
        "--dead-letter-topic",
        "dlq",
    )
    assert r.returncode == 2
    assert "--dead-letter-topic goes with --output-topic" in error_line(r.stderr)
    assert not (tmp_path / "idx").exists()


def _topic_with(bootstrap: str, values: list[bytes]) -> str:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    topic = f"replay-err-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.close()
    p = KafkaProducer(bootstrap_servers=bootstrap)
    for v in values:
        p.send(topic, v)
    p.flush()
    p.close()
    return topic


@pytest.mark.integration
def test_replay_exits_1_with_rejected_records_as_dedup_does(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    good = [orjson.dumps({"id": i, "text": f"document number {i} with words"}) for i in range(3)]
    topic = _topic_with(kafka_bootstrap, [*good, b"{not json"])
    common = ("--bootstrap-servers", kafka_bootstrap, "--input-topic", topic)
    out = tmp_path / "out.jsonl"
    r = run("replay", *common, "--index", str(tmp_path / "idx"), "--output", str(out))
    assert r.returncode == 1, r.stderr
    assert b"1 rejected" in r.stderr
    records = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert len(records) == 4 and "error" in records[-1]
    # --restart on that (rebuilt) index: refused with what to do, not "needs a fresh index"
    r = run("replay", *common, "--index", str(tmp_path / "idx"), "--output", str(out), "--restart")
    assert r.returncode == 2
    line = error_line(r.stderr)
    assert "--restart with --mode rebuild starts over from an empty index" in line
    assert "remove that directory" in line
