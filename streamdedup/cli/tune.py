"""`streamdedup tune`: the LSH bands x rows for a threshold and signature length
(tuned, or the `--bands`/`--rows` given), with its error areas and S-curve, as text or
JSON.  It reads no index and writes nothing but stdout."""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from streamdedup.config import check_bands_rows, check_threshold
from streamdedup.engine.family_params import family_params
from streamdedup.errors import EXIT_OK, ConfigError
from streamdedup.sketch.lsh import banding, s_curve, s_curve_table, tune


def cmd_tune(args: argparse.Namespace, values: dict[str, Any]) -> int:
    check_bands_rows(values["bands"], values["rows"])
    if values["metric"] == "hamming":
        return _tune_hamming(values)
    if values["bits"] is not None or values["max_distance"] is not None:
        raise ConfigError("--bits and --max-distance apply to --metric hamming")
    t = 0.8 if values["threshold"] is None else values["threshold"]
    k = 128 if values["num_perm"] is None else values["num_perm"]
    check_threshold(t)
    if values["bands"] is not None and values["rows"] is not None:
        b = banding(t, k, values["bands"], values["rows"])
    else:
        b = tune(t, k, values["fp_weight"], values["fn_weight"])
    table = s_curve_table(b)
    if values["json"]:
        print(
            orjson.dumps(
                {
                    "threshold": t,
                    "num_perm": k,
                    "bands": b.bands,
                    "rows": b.rows,
                    "approx_threshold": b.approx_threshold,
                    "false_positive_area": b.false_positive_area,
                    "false_negative_area": b.false_negative_area,
                    "s_curve": [{"similarity": s, "p_candidate": p} for s, p in table],
                }
            ).decode()
        )
        return EXIT_OK
    print(
        f"threshold {t}, K = {k}: b = {b.bands} bands x r = {b.rows} rows "
        f"({b.bands * b.rows} of {k} hash values)"
    )
    print(f"approximate threshold (1/b)^(1/r) = {b.approx_threshold:.4f}")
    print(
        f"false-positive area {b.false_positive_area:.5f}   "
        f"false-negative area {b.false_negative_area:.5f}"
    )
    print()
    print("   s   P(candidate) = 1-(1-s^r)^b")
    for s, p in table:
        marker = "  <- threshold" if abs(s - t) < 1e-9 else ""
        print(f"  {s:.1f}  {p:.6f}{marker}")
    return EXIT_OK


def _tune_hamming(values: dict[str, Any]) -> int:
    """Bit sampling's curve: a pair at distance d shares a bucket with probability
    1 - (1 - (1 - d/N)**r)**b; b x r as a new index would get them (99% at the bar by
    default, `tune_for_recall`), at distances from 0 to N/2 (unrelated strings)."""
    p = family_params(
        "hamming",
        None,
        values["bits"],
        values["max_distance"],
        values["threshold"],
        values["num_perm"],
        values["bands"],
        values["rows"],
        None,
        1,
    )
    n, bar = p.bits, int(p.max_distance or 0)
    distances = sorted({0, *range(1, 2 * bar + 2), n // 8, n // 4, 3 * n // 8, n // 2})
    curve = [(d, 1.0 - d / n, float(s_curve(1.0 - d / n, p.bands, p.rows))) for d in distances]
    at_bar = next(c for d, _, c in curve if d == bar)
    if values["json"]:
        rows = [{"distance": d, "row_probability": q, "p_candidate": c} for d, q, c in curve]
        record = {"metric": "hamming", "bits": n, "max_distance": bar}
        record |= {"bands": p.bands, "rows": p.rows, "p_candidate_at_bar": at_bar, "curve": rows}
        print(orjson.dumps(record).decode())
        return EXIT_OK
    print(
        f"hamming on {n}-bit strings, max distance {bar}: b = {p.bands} bands x r = {p.rows} "
        f"sampled bits; a pair at the bar shares a bucket with P = {at_bar:.4f}"
    )
    print()
    print("     d   1-d/N   P(candidate) = 1-(1-(1-d/N)^r)^b")
    for d, q, c in curve:
        marker = "  <- max distance" if d == bar else ""
        print(f"  {d:4d}  {q:.4f}  {c:.6g}{marker}")
    return EXIT_OK
