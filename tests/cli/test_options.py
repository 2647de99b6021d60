import argparse

import pytest

from streamdedup.cli.options import Opt, OptionGroup, add_options, resolve
from streamdedup.errors import ConfigError

GROUPS = (
    OptionGroup(
        "g",
        (
            Opt("threshold", "t", float, 0.8),
            Opt("num-perm", "k", int, 128),
            Opt("verify", "v", str, "exact", choices=("exact", "signature")),
            Opt("json", "j", flag=True),
            Opt("consumer-option", "c", str, repeat=True),
        ),
    ),
)


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_options(p, GROUPS)
    return p.parse_args(argv)


def test_precedence_cli_env_file_default() -> None:
    args = _parse(["--threshold", "0.7"])
    env = {"STREAMDEDUP_THRESHOLD": "0.6", "STREAMDEDUP_NUM_PERM": "64"}
    config = {"threshold": 0.5, "num-perm": 32, "verify": "signature"}
    v = resolve(args, GROUPS, "dedup", config, env)
    assert (v["threshold"], v["num_perm"], v["verify"], v["json"]) == (0.7, 64, "signature", None)
    assert v["_explicit"] == {"threshold", "num_perm", "verify"}


def test_command_table_overrides_top_level() -> None:
    v = resolve(_parse([]), GROUPS, "dedup", {"num_perm": 32, "dedup": {"num_perm": 16}}, {})
    assert v["num_perm"] == 16


def test_unknown_config_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown option 'treshold'"):
        resolve(_parse([]), GROUPS, "dedup", {"treshold": 0.5}, {})


def test_bad_values_name_their_source() -> None:
    with pytest.raises(ConfigError, match="environment STREAMDEDUP_NUM_PERM"):
        resolve(_parse([]), GROUPS, "dedup", None, {"STREAMDEDUP_NUM_PERM": "many"})
    with pytest.raises(ConfigError, match="must be one of exact, signature"):
        # (on the command line argparse refuses it first: tests/cli/test_errors.py)
        resolve(_parse([]), GROUPS, "dedup", None, {"STREAMDEDUP_VERIFY": "fuzzy"})


def test_flags_and_repeatable_options() -> None:
    v = resolve(
        _parse(["--consumer-option", "a=1", "--consumer-option", "b=2"]),
        GROUPS,
        "x",
        None,
        {"STREAMDEDUP_JSON": "yes"},
    )
    assert v["json"] is True and v["consumer_option"] == ["a=1", "b=2"]
    v = resolve(_parse([]), GROUPS, "x", {"consumer-option": ["c=3"]}, {})
    assert v["consumer_option"] == ["c=3"]


def test_max_clock_skew_reaches_the_engine(tmp_path, monkeypatch) -> None:
    from streamdedup.cli.main import parse
    from streamdedup.cli.settings import open_engine

    monkeypatch.delenv("STREAMDEDUP_MAX_CLOCK_SKEW", raising=False)
    base = ["--input-topic", "t", "--output-topic", "o", "--index"]

    def skew(*extra: str) -> int | None:
        _, _, values = parse(["worker", *base, str(tmp_path / "i"), *extra])
        with open_engine(values) as dd:
            return dd.options.max_clock_skew_ms

    assert skew() == 3_600_000
    assert skew("--max-clock-skew", "30m") == 1_800_000
    assert skew("--max-clock-skew", "off") is None
    monkeypatch.setenv("STREAMDEDUP_MAX_CLOCK_SKEW", "2h")
    assert skew() == 7_200_000
    with pytest.raises(ConfigError):
        skew("--max-clock-skew", "soon")
    # file mode has no time window; the engine keeps its default bound
    _, _, values = parse(["dedup", "-", "--output", "-", "--index", str(tmp_path / "j")])
    with open_engine(values) as dd:
        assert dd.options.max_clock_skew_ms == 3_600_000


@pytest.mark.parametrize("command", ["dedup", "backfill"])
@pytest.mark.parametrize("toml", ['ttl = "1h"\n', '[dedup]\nttl = "1h"\n[backfill]\nttl = "1h"\n'])
def test_a_ttl_in_the_config_is_refused_by_file_mode_not_ignored(
    tmp_path, monkeypatch, command: str, toml: str
) -> None:
    """File input carries no timestamps: a `ttl` given to `dedup` (or `backfill`)
    would expire nothing.  At the top level it was left to the Kafka commands, so
    the run went on without a window and said nothing (issue 35)."""
    from streamdedup.cli.main import parse

    monkeypatch.delenv("STREAMDEDUP_CONFIG", raising=False)
    config = tmp_path / "streamdedup.toml"
    config.write_text(toml)
    argv = [command, "in.jsonl", "--output", str(tmp_path / "out.jsonl"), "--config", str(config)]
    with pytest.raises(ConfigError, match=f"'ttl' does not apply to '{command}'") as err:
        parse(argv)
    assert "carry no timestamps" in str(err.value) and "[worker]" in str(err.value)


def test_a_ttl_in_a_shared_config_still_reaches_the_kafka_commands(tmp_path, monkeypatch) -> None:
    from streamdedup.cli.main import parse

    monkeypatch.delenv("STREAMDEDUP_CONFIG", raising=False)
    monkeypatch.delenv("STREAMDEDUP_TTL", raising=False)
    config = tmp_path / "streamdedup.toml"
    config.write_text('ttl = "1h"\n')
    base = ["--input-topic", "t", "--output-topic", "o", "--index", str(tmp_path / "i")]
    _, _, values = parse(["worker", *base, "--config", str(config)])
    assert values["ttl"] == "1h"
