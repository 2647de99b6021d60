import pytest

from streamdedup.errors import ConfigError
from streamdedup.kafka.replay import StartAt


def test_start_positions() -> None:
    assert StartAt.parse(None, None) == StartAt()
    assert StartAt.parse("2023-11-14T22:13:20Z", None).timestamp_ms == 1_700_000_000_000
    # no zone: UTC
    assert StartAt.parse("2023-11-14T22:13:20", None).timestamp_ms == 1_700_000_000_000
    assert StartAt.parse(None, "0:5, 2:7").offsets == {0: 5, 2: 7}


@pytest.mark.parametrize(
    ("ts", "offsets"), [("yesterday", None), (None, "0=5"), (None, "a:1"), ("2023-01-01", "0:1")]
)
def test_bad_start_positions(ts, offsets) -> None:
    with pytest.raises(ConfigError):
        StartAt.parse(ts, offsets)


@pytest.mark.parametrize(("ts", "offsets"), [("2023-01-01", None), (None, "0:1")])
def test_from_beginning_excludes_the_other_starts(ts, offsets) -> None:
    assert StartAt.parse(None, None, beginning=True) == StartAt()
    with pytest.raises(ConfigError, match="give one of"):
        StartAt.parse(ts, offsets, beginning=True)
