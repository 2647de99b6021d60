"""The typed settings the commands build from their option values, and the one
check per rule (cli/settings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamdedup.cli.main import parse
from streamdedup.cli.settings import Detection, engine_settings, require_index
from streamdedup.config import EngineOptions, ShingleSpec, check_bands_rows, check_threshold
from streamdedup.errors import ConfigError


def _values(*argv: str) -> dict[str, object]:
    return parse(list(argv))[2]


def test_dedup_settings_are_typed(tmp_path: Path) -> None:
    idx = str(tmp_path / "i")
    s = engine_settings(
        _values("dedup", "-", "--index", idx, "--shingle", "char:4", "--threshold", "0.7")
    )
    assert s.index == idx and s.changelog is None
    assert s.detection == Detection(threshold=0.7, shingle=ShingleSpec("char", 4))
    assert s.options == EngineOptions()


def test_worker_settings_carry_the_time_window(tmp_path: Path) -> None:
    values = _values(
        "worker", "--index", str(tmp_path / "i"), "--ttl", "2h", "--max-clock-skew", "off"
    )
    s = engine_settings(values)
    assert s.options.ttl_ms == 7_200_000 and s.options.max_clock_skew_ms is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "--index DIR is required"),
        (("--index", "i", "--batch-size", "0"), "--batch-size must be at least 1"),
        (("--index", "i", "--max-exact-checks", "0"), "--max-exact-checks must be at least 1"),
        (("--index", "i", "--shingle", "word"), "invalid shingle spec"),
        (("--index", "i", "--bands", "3"), "`bands` and `rows` go together"),
        (("--index", "i", "--threshold", "1"), "strictly between 0 and 1"),
    ],
)
def test_each_rule_is_checked_before_anything_is_opened(
    argv: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        engine_settings(_values("dedup", "missing.jsonl", *argv))


def test_rules_on_their_own() -> None:
    check_bands_rows(None, None)
    check_bands_rows(2, 3)
    with pytest.raises(ConfigError, match="give both or neither"):
        check_bands_rows(None, 3)
    check_threshold(None)
    check_threshold(0.5)
    for bad in (0.0, 1.0, -1.0, 7.0):
        with pytest.raises(ConfigError, match="strictly between"):
            check_threshold(bad)
    with pytest.raises(ConfigError, match="STREAMDEDUP_INDEX"):
        require_index({"index": ""})
    assert require_index({"index": "x"}) == "x"


def test_tune_names_the_same_pairing_rule(capsys: pytest.CaptureFixture[str]) -> None:
    from streamdedup.cli.main import main

    assert main(["tune", "--bands", "3"]) == 2
    assert "--bands and --rows go together: give both or neither" in capsys.readouterr().err
