"""`streamdedup tune --sample FILE`: the duplicates each threshold would call among
the first documents of a file, with example pairs near each threshold, as text or
JSON (and a plot with `--plot`).  The measuring is `ops.sampling`'s."""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from streamdedup.config import Fields
from streamdedup.errors import EXIT_OK, ConfigError
from streamdedup.filemode.streams import read_lines, stdin_or_file
from streamdedup.ops.sampling import Sample, measure, plot, shared_passage

GRID = tuple(round(0.5 + 0.05 * k, 2) for k in range(11))  # 0.5, 0.55, ..., 1.0
SIMILARITIES = ("jaccard", "containment", "cosine")  # (measured on texts or sets)
EXAMPLES = 2  # pairs shown near each threshold


def tune_sample(values: dict[str, Any]) -> int:
    metric, item = values["metric"], values["item"]
    if metric not in SIMILARITIES or (metric == "cosine" and item != "text"):
        raise ConfigError(
            "--sample measures texts or sets by jaccard or containment, or texts by cosine; "
            f"not {item}s by {metric}",
            params=("sample", "metric"),
        )
    chosen = values["threshold"]
    grid = sorted({*GRID, *([chosen] if chosen is not None else [])})
    lowest = grid[0]
    if not 0.0 < lowest <= 1.0:
        raise ConfigError(f"a threshold is in (0, 1], got {lowest}", params=("threshold",))
    engine: dict[str, Any] = {"metric": metric, "item": item, "num_perm": values["num_perm"]}
    if item == "text":
        engine["shingle"] = values["shingle"]
    fields = Fields(item=item)
    if values["sample_size"] < 2:
        raise ConfigError("--sample-size must be at least 2", params=("sample_size",))
    source = stdin_or_file(values["sample"])
    try:  # (its first lines, as `dedup` reads lines: a pipe's batches may come short)
        n = values["sample_size"]
        lines = list(itertools.islice(itertools.chain.from_iterable(read_lines(source, n)), n))
    finally:
        if values["sample"] != "-":
            source.close()
    sample = measure(lines, fields, grid, **engine)
    rows = sample.rows(grid)
    if values["plot"]:
        plot(sample, rows, chosen, values["plot"])
    examples = {r["threshold"]: sample.near(r["threshold"], 0.025, EXAMPLES) for r in rows}
    if values["json"]:
        print(orjson.dumps(_record(sample, rows, examples, values)).decode())
        return EXIT_OK
    print(_text(sample, rows, examples, values))
    return EXIT_OK


def _record(
    sample: Sample, rows: list[dict[str, Any]], examples: dict[float, Any], values: dict[str, Any]
) -> dict[str, Any]:
    return {
        "metric": values["metric"],
        "sample": values["sample"],
        "documents": sample.documents,
        "rejected": sample.rejected,
        "thresholds": [
            r
            | {
                "examples": [
                    {"id": m.doc_id, "closest": m.earlier, "similarity": m.similarity}
                    for m in examples[r["threshold"]]
                ]
            }
            for r in rows
        ],
    }


def _text(
    sample: Sample, rows: list[dict[str, Any]], examples: dict[float, Any], values: dict[str, Any]
) -> str:
    what = "sets" if values["item"] == "set" else f"{values['shingle'] or 'word:5'} shingles"
    rejected = f" ({sample.rejected:,} rejected lines left out)" if sample.rejected else ""
    lines = [
        f"sample: the first {sample.documents:,} documents of {values['sample']}{rejected}; "
        f"{values['metric']} of {what}",
        "",
        "  threshold  duplicates   share  exact copies",
    ]
    for r in rows:
        mark = "  <- --threshold" if r["threshold"] == values["threshold"] else ""
        lines.append(
            f"  {r['threshold']:9.2f}  {r['duplicates']:10,}  {r['share']:6.1%}  "
            f"{r['exact_copies']:12,}{mark}"
        )
    lines += [
        "",
        "near each threshold (a document, the earlier one closest to it, a passage they share):",
    ]
    for t, pairs in examples.items():
        for m in pairs:
            shared = shared_passage(sample.text(m.doc_id), sample.text(m.earlier))
            passage = f'  "{shared}"' if shared else ""
            lines.append(f"  {t:.2f}  {m.doc_id!r} ~ {m.earlier!r}  {m.similarity:.4f}{passage}")
    return "\n".join(lines)
