"""`streamdedup tune`: the LSH bands x rows for a threshold and signature length
(tuned, or the `--bands`/`--rows` given), with its error areas and S-curve, as text or
JSON.  It reads no index and writes nothing but stdout."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import orjson

from streamdedup.config import IndexParams, check_bands_rows, check_threshold
from streamdedup.engine.family_params import family_params
from streamdedup.errors import EXIT_OK, ConfigError
from streamdedup.sketch.containment import containment_jaccard, plan
from streamdedup.sketch.lsh import banding, s_curve, s_curve_table, tune
from streamdedup.sketch.projections import hyperplane_probability, pstable_probability


def cmd_tune(args: argparse.Namespace, values: dict[str, Any]) -> int:
    check_bands_rows(values["bands"], values["rows"])
    if values["sample"]:
        from streamdedup.cli.tune_sample import tune_sample

        return tune_sample(values)
    if values["metric"] != "jaccard":
        return _tune_family(values)
    for name in ("bits", "max_distance", "bucket_width"):
        if values[name] is not None:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(f"{flag} applies to another --metric than jaccard")
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


def _tune_family(values: dict[str, Any]) -> int:
    """Another family's curve: a pair whose row probability is q (Hamming at distance
    d: 1 - d/N; cosine c: 1 - arccos(c)/pi; Euclidean at distance c: the p-stable
    formula) shares a bucket with probability 1 - (1 - q**r)**b; b x r as a new index
    would get them (99% at the bar by default, `tune_for_recall`), from identical
    items to unrelated ones."""
    metric = values["metric"]
    if metric == "containment":
        return _tune_containment(values)
    p = _new_params(metric, values)
    points, name, head = _points(p)
    curve = [(x, q, float(s_curve(q, p.bands, p.rows))) for x, q in points]
    bar = p.bar_value
    at_bar = next(c for x, _, c in curve if x == bar)
    if values["json"]:
        rows = [{name: x, "row_probability": q, "p_candidate": c} for x, q, c in curve]
        record: dict[str, object] = {"metric": metric, "bar": bar, "num_perm": p.num_perm}
        if metric == "hamming":
            record |= {"bits": p.bits, "max_distance": bar}
        if metric == "euclidean":
            record |= {"max_distance": bar, "bucket_width": p.bucket_width}
        record |= {"bands": p.bands, "rows": p.rows, "p_candidate_at_bar": at_bar, "curve": rows}
        print(orjson.dumps(record).decode())
        return EXIT_OK
    print(
        f"{head}: b = {p.bands} bands x r = {p.rows} rows; a pair at the bar shares a "
        f"bucket with P = {at_bar:.4f}"
    )
    print()
    print(f"  {name:>8}  row P   P(candidate) = 1-(1-q^r)^b")
    for x, q, c in curve:
        marker = "  <- the bar" if x == bar else ""
        print(f"  {x:8.4g}  {q:.4f}  {c:.6g}{marker}")
    return EXIT_OK


def _new_params(metric: str, values: dict[str, Any]) -> IndexParams:
    """The parameters a new index of `metric` would get from these options (the
    curves need no vector length: D = 1 stands in)."""
    return family_params(
        metric,
        item=None,
        bits=values["bits"],
        dim=1 if metric in ("cosine", "euclidean") else None,
        max_distance=values["max_distance"],
        bucket_width=values["bucket_width"],
        threshold=values["threshold"],
        num_perm=values["num_perm"],
        bands=values["bands"],
        rows=values["rows"],
        verify=None,
        seed=1,
    )


CONTAINMENTS = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.3, 0.1)


def _tune_containment(values: dict[str, Any]) -> int:
    """Containment's plan: for each offset between the size classes of the new item
    and the earlier one, the least Jaccard of a pair at the bar (the containment-to-
    Jaccard bound: the new item at the bottom of its class, the earlier at the top of
    its own), the b x r the plan gives it, and the chance that a pair of those sizes
    shares a bucket at each containment."""
    p = _new_params("containment", values)
    t = p.threshold
    found = []
    for pair in plan(t, p.num_perm):
        ratio = 2.0 ** (pair.offset + 1)  # (the earlier item's size over the new one's, at most)
        cs = sorted({*CONTAINMENTS, t}, reverse=True)
        js = containment_jaccard(np.asarray(cs), 1.0, ratio)
        curve = [
            (c, j, float(s_curve(j, pair.bands, pair.rows)))
            for c, j in zip(cs, js.tolist(), strict=True)
        ]
        found.append((pair, ratio, curve))
    if values["json"]:
        offsets = [
            {
                "offset": pair.offset,
                "size_ratio_at_most": ratio,
                "least_jaccard": pair.jaccard,
                "bands": pair.bands,
                "rows": pair.rows,
                "p_candidate_at_bar": pair.recall,
                "curve": [{"containment": c, "jaccard": j, "p_candidate": q} for c, j, q in curve],
            }
            for pair, ratio, curve in found
        ]
        record = {"metric": "containment", "bar": t, "num_perm": p.num_perm, "keys": p.bands}
        print(orjson.dumps(record | {"offsets": offsets}).decode())
        return EXIT_OK
    print(
        f"containment >= {t} by K = {p.num_perm} MinHash positions, banded per size class "
        f"(classes [2^c, 2^(c+1))): {p.bands} bucket keys an item"
    )
    for pair, ratio, curve in found:
        print()
        print(
            f"earlier item {pair.offset:+d} classes from the new one (up to {ratio:g} times "
            f"its size): least Jaccard at the bar {pair.jaccard:.4f}, b = {pair.bands} x "
            f"r = {pair.rows}, P at the bar {pair.recall:.4f}"
        )
        print("  containment  jaccard  P(candidate)")
        for c, j, q in curve:
            marker = "  <- the bar" if c == t else ""
            print(f"  {c:11.4g}  {j:7.4f}  {q:.6g}{marker}")
    return EXIT_OK


def _points(p: IndexParams) -> tuple[list[tuple[float, float]], str, str]:
    """(measure, row probability) from identical items to unrelated ones around the
    bar, the measure's name, and the curve's heading."""
    bar = p.bar_value
    if p.metric == "hamming":
        n = p.bits
        ds = sorted({0, *range(1, 2 * int(bar) + 2), n // 8, n // 4, 3 * n // 8, n // 2})
        head = f"hamming on {n}-bit strings, max distance {int(bar)} (sampled bits)"
        return [(float(d), 1.0 - d / n) for d in ds], "distance", head
    if p.metric == "cosine":
        cs = sorted({1.0, 0.99, 0.95, 0.9, 0.85, 0.8, 0.7, 0.5, 0.3, 0.0, bar}, reverse=True)
        probability = hyperplane_probability(np.asarray(cs))
        head = f"cosine >= {bar} by K = {p.num_perm} random hyperplanes"
        return list(zip(cs, probability.tolist(), strict=True)), "cosine", head
    width = float(p.bucket_width or 0.0)
    ds = [bar * m for m in (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0)]
    probability = pstable_probability(np.asarray(ds), width)
    head = f"euclidean <= {bar} by K = {p.num_perm} projections in buckets of {width:g}"
    return list(zip(ds, probability.tolist(), strict=True)), "distance", head
