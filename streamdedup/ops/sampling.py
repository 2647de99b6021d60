"""`tune --sample FILE`: a threshold chosen from one's own data.  The analytic
S-curve says how LSH treats a pair of a given similarity; it cannot say how many of
a user's documents sit at each similarity.  This measures it: the first documents of
the file go through the engine once, into a throwaway index, at the lowest threshold
of interest; each verdict names the earlier document its document is closest to,
with their exact similarity.  A document is a duplicate at threshold T exactly when
that best similarity reaches T, so one run answers for every threshold above the
lowest: how many duplicates each would call, and example pairs near each.  (The
run's banding is tuned for the lowest threshold, so its recall at the higher ones
is at least the 99% it has there.)  Containment is the exception: its plan at a
lower threshold promises smaller size ratios (4 times at 0.5, 8 at 0.8), so it does
not cover a higher threshold's pairs, and each threshold gets a run of its own."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError
from streamdedup.inputs.decode import decode_json_lines
from streamdedup.models import Document, Verdict
from streamdedup.store.keys import id_key

BATCH = 2000


@dataclass(frozen=True)
class Match:
    """A sampled document and the earlier one it is closest to, at or above the
    run's lowest threshold."""

    doc_id: Any
    earlier: Any
    similarity: float
    exact: bool


@dataclass(frozen=True)
class Sample:
    """What one run over the sample measured: its documents, their best matches,
    and the texts (for example pairs)."""

    documents: int
    rejected: int
    runs: dict[float, list[Match]]  # by the threshold of the run: one, or one a threshold
    texts: dict[bytes, str]

    def matches(self, t: float) -> list[Match]:
        """The best matches a run at or below `t` found (the highest such run)."""
        below = [r for r in self.runs if r <= t + 1e-12]
        return self.runs[max(below)] if below else []

    def rows(self, thresholds: Sequence[float]) -> list[dict[str, Any]]:
        """At each threshold: the duplicates it would call, their share of the
        sample, and how many of them are exact copies."""
        out = []
        for t in thresholds:
            hits = [m for m in self.matches(t) if m.similarity >= t - 1e-12]
            out.append(
                {
                    "threshold": t,
                    "duplicates": len(hits),
                    "share": len(hits) / max(self.documents, 1),
                    "exact_copies": sum(m.exact for m in hits),
                }
            )
        return out

    def near(self, t: float, width: float, count: int) -> list[Match]:
        """Up to `count` pairs within `width` of `t` (not exact copies), nearest first."""
        close = [m for m in self.matches(t) if not m.exact and abs(m.similarity - t) <= width]
        return sorted(close, key=lambda m: (abs(m.similarity - t), str(m.doc_id)))[:count]

    def text(self, doc_id: Any) -> str:
        return self.texts.get(id_key(doc_id), "")


def measure(
    lines: list[bytes], fields: Fields, thresholds: Sequence[float], **engine: Any
) -> Sample:
    """The sample's lines (without their line ends) through a throwaway index at the
    lowest of `thresholds` (containment: at each) (`engine`: the family's options, as
    `Deduplicator` takes them)."""
    decoded = decode_json_lines(lines, fields)
    docs = [d for d in decoded if isinstance(d, Document)]
    if not docs:
        raise ConfigError("the sample holds no document to measure (every line was rejected)")
    each = engine.get("metric") == "containment"
    runs = {t: _run(docs, t, engine) for t in (thresholds if each else [min(thresholds)])}
    texts = {id_key(d.id): d.text for d in docs} if fields.item == "text" else {}
    return Sample(len(docs), len(decoded) - len(docs), runs, texts)


def _run(docs: list[Document], threshold: float, engine: dict[str, Any]) -> list[Match]:
    """Every document's best match at or above `threshold`, in one throwaway index."""
    matches: list[Match] = []
    with (
        tempfile.TemporaryDirectory(prefix="streamdedup-sample-") as where,
        Deduplicator(Path(where) / "index", threshold=threshold, **engine) as dd,
    ):
        for k in range(0, len(docs), BATCH):
            matches += _matches(dd.check_batch(docs[k : k + BATCH]))
    return matches


def _matches(verdicts: list[Verdict]) -> Iterator[Match]:
    for v in verdicts:
        if v.verdict == "duplicate" and v.similarity is not None:
            yield Match(v.id, v.duplicate_of, float(v.similarity), v.exact)


_WORDS = re.compile(r"\w+")


def shared_passage(a: str, b: str, words: int = 12) -> str:
    """A passage the two texts share: the start of their longest common run of words
    (found by their runs of eight words), `words` words of it -- the body two pages
    share rather than a banner they both carry, and what makes them a pair where
    their openings may differ."""
    aw, bw = _WORDS.findall(a.lower()), _WORDS.findall(b.lower())
    grams = {tuple(bw[i : i + 8]) for i in range(max(len(bw) - 7, 0))}
    best, run, start = (0, 0), 0, 0
    for i in range(max(len(aw) - 7, 0)):
        if tuple(aw[i : i + 8]) in grams:
            start, run = (start, run + 1) if run else (i, 1)
            best = max(best, (run, -start))
        else:
            run = 0
    if not best[0]:
        return " ".join(aw[:words])
    return " ".join(aw[-best[1] : -best[1] + words])


def plot(sample: Sample, rows: list[dict[str, Any]], marked: float | None, path: str) -> None:
    """Duplicates called against the threshold, the chosen threshold dotted, to `path`."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConfigError(
            "--plot draws with matplotlib, which is not installed: pip install matplotlib "
            "(or streamdedup[docs])"
        ) from exc
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    ax.plot([r["threshold"] for r in rows], [r["duplicates"] for r in rows], marker="o")
    ax.plot([r["threshold"] for r in rows], [r["exact_copies"] for r in rows], linestyle="--")
    if marked is not None:
        ax.axvline(marked, linestyle=":", color="grey")
    ax.set_xlabel("threshold")
    ax.set_ylabel(f"duplicates of {sample.documents:,} documents")
    ax.legend(["duplicates", "of which exact copies"], fontsize="small")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        fig.savefig(path, metadata={"Software": None})
    except OSError as exc:
        raise ConfigError(f"cannot write the plot to {path}: {exc.strerror or exc}") from exc
    finally:
        plt.close(fig)


__all__ = ["Match", "Sample", "measure", "plot", "shared_passage"]
