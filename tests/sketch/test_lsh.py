import pytest

from streamdedup.errors import ConfigError
from streamdedup.sketch.lsh import banding, error_areas, s_curve, s_curve_table, tune


def test_s_curve_matches_the_lecture_table() -> None:
    """001_72fe...: b = 20, r = 5."""
    expected = {0.2: 0.006, 0.3: 0.047, 0.4: 0.186, 0.5: 0.470, 0.6: 0.802, 0.7: 0.975, 0.8: 0.9996}
    for s, p in expected.items():
        assert float(s_curve(s, 20, 5)) == pytest.approx(p, abs=6e-4)


@pytest.mark.parametrize("threshold", [0.5, 0.8, 0.9])
@pytest.mark.parametrize("num_perm", [64, 128, 256])
def test_tune_uses_at_most_k_and_is_optimal(threshold: float, num_perm: int) -> None:
    best = tune(threshold, num_perm, 0.02, 0.98)
    assert best.bands * best.rows <= num_perm
    cost = 0.02 * best.false_positive_area + 0.98 * best.false_negative_area
    for rows in range(1, num_perm + 1):
        fp, fn = error_areas(threshold, num_perm // rows, rows)
        assert cost <= 0.02 * fp + 0.98 * fn + 1e-12


def test_recall_weighting_moves_the_curve_left() -> None:
    balanced = tune(0.8, 128, 0.5, 0.5)
    recall = tune(0.8, 128, 0.02, 0.98)
    assert recall.approx_threshold < balanced.approx_threshold
    assert recall.false_negative_area < balanced.false_negative_area
    assert float(s_curve(0.8, recall.bands, recall.rows)) > 0.98


def test_given_banding_is_checked_against_k() -> None:
    assert banding(0.8, 128, 16, 8).approx_threshold == pytest.approx((1 / 16) ** (1 / 8))
    with pytest.raises(ConfigError, match="needs 130 hash values"):
        banding(0.8, 128, 13, 10)


def test_bad_threshold() -> None:
    with pytest.raises(ConfigError, match="threshold"):
        tune(1.0, 128)


def test_table_has_ten_rows() -> None:
    table = s_curve_table(tune(0.8, 128))
    assert [s for s, _ in table] == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0]
    assert table[-1][1] == 1.0
