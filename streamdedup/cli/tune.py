"""`streamdedup tune`: the LSH bands x rows for a threshold and signature length
(tuned, or the `--bands`/`--rows` given), with its error areas and S-curve, as text or
JSON.  It reads no index and writes nothing but stdout."""

from __future__ import annotations

import argparse
from typing import Any

import orjson

from streamdedup.config import check_bands_rows
from streamdedup.errors import EXIT_OK
from streamdedup.sketch.lsh import banding, s_curve_table, tune


def cmd_tune(args: argparse.Namespace, values: dict[str, Any]) -> int:
    t, k = values["threshold"], values["num_perm"]
    check_bands_rows(values["bands"], values["rows"])
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
