"""Draw the S-curves of docs/parameters.md: for each signature length K, the banding that
`streamdedup tune` picks for the common thresholds, and the other families' curves
with their default banding, as PNGs in docs/img/.

Why a script: the pictures must show what the package's own tuner chooses today, not what
it chose when someone last drew them by hand.  It calls `streamdedup.sketch.lsh.tune` and
`s_curve` (the functions behind `streamdedup tune` and every new index), and prints the
table of chosen b x r that docs/parameters.md quotes (tests/test_docs.py holds that table
to the tuner).

    .venv/bin/pip install -e '.[docs]'
    .venv/bin/python docs/scripts/scurves.py          # writes docs/img/scurves-*.png
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display needed (CI, a server)

import matplotlib.pyplot as plt
import numpy as np

from streamdedup.engine.family_params import family_params
from streamdedup.sketch.containment import containment_jaccard, plan
from streamdedup.sketch.lsh import Banding, s_curve, tune
from streamdedup.sketch.projections import hyperplane_probability, pstable_probability

THRESHOLDS = (0.5, 0.7, 0.8, 0.9)
NUM_PERMS = (64, 128, 256)
IMG = Path(__file__).resolve().parents[1] / "img"


def tuned() -> dict[tuple[int, float], Banding]:
    """The banding `tune` picks (default weights) for every K and threshold drawn."""
    return {(k, t): tune(t, k) for k in NUM_PERMS for t in THRESHOLDS}


def draw(num_perm: int, bandings: dict[float, Banding], out: Path) -> None:
    """One figure per K: P(candidate) against Jaccard similarity, one curve per
    threshold, with the threshold marked where the curve should rise."""
    s = np.linspace(0.0, 1.0, 401)
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for t, b in bandings.items():
        (line,) = ax.plot(
            s, s_curve(s, b.bands, b.rows), label=f"t = {t}: b = {b.bands}, r = {b.rows}"
        )
        ax.axvline(t, color=line.get_color(), linestyle=":", linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("Jaccard similarity s of a pair")
    ax.set_ylabel("P(pair becomes a candidate)")
    ax.set_title(f"K = {num_perm}: 1 - (1 - s^r)^b for the tuned b x r")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    # no timestamp or version in the file, so a re-run that changes nothing changes no byte
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)


def draw_families(out: Path) -> None:
    """One figure, a panel per family other than Jaccard on texts: P(candidate)
    against the family's own measure, 1 - (1 - q^r)^b with q its row probability and
    b x r what a new index gets by default (`family_params`), the bar dotted."""
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.4), dpi=100)
    panels = [
        ("hamming", {"bits": 64, "max_distance": 3.0}, np.linspace(0, 24, 241)),
        ("cosine", {"dim": 1, "threshold": 0.9}, np.linspace(0.0, 1.0, 401)),
        ("euclidean", {"dim": 1, "max_distance": 1.0}, np.linspace(0.0, 6.0, 401)),
    ]
    for ax, (metric, given, x) in zip(axes[:3], panels, strict=True):
        p = family_params(
            metric,
            item=None,
            bits=given.get("bits"),  # type: ignore[arg-type]
            dim=given.get("dim"),  # type: ignore[arg-type]
            max_distance=given.get("max_distance"),
            bucket_width=None,
            threshold=given.get("threshold"),
            num_perm=None,
            bands=None,
            rows=None,
            verify=None,
            seed=1,
        )
        if metric == "hamming":
            q, label = 1.0 - x / p.bits, "Hamming distance d (64-bit strings)"
        elif metric == "cosine":
            q, label = hyperplane_probability(x), "cosine of a pair"
        else:
            q, label = pstable_probability(x, p.bucket_width or 4.0), "L2 distance / R"
        ax.plot(x, s_curve(q, p.bands, p.rows))
        ax.axvline(p.bar_value, linestyle=":", color="grey")
        ax.set_title(f"{metric}: b = {p.bands}, r = {p.rows}", fontsize="medium")
        ax.set_xlabel(label)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    _containment_panel(axes[3])
    axes[0].set_ylabel("P(pair becomes a candidate)")
    fig.tight_layout()
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)


def _containment_panel(ax: Any) -> None:
    """Containment's curves, one per pair of size classes of the default plan (T = 0.8,
    K = 128), each at the worst sizes of its pair (the new item at the bottom of its
    class, the earlier at the top of its own: up to 2^(D + 1) times as large)."""
    c = np.linspace(0.0, 1.0, 401)
    for pair in plan(0.8, 128):
        ratio = 2.0 ** (pair.offset + 1)
        q = containment_jaccard(c, 1.0, ratio)
        label = f"up to {ratio:g}x: {pair.bands} x {pair.rows}"
        ax.plot(c, s_curve(q, pair.bands, pair.rows), label=label)
    ax.axvline(0.8, linestyle=":", color="grey")
    ax.set_title("containment: b x r per size ratio", fontsize="medium")
    ax.set_xlabel("containment of the new item")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", loc="upper left")


def table(bands: dict[tuple[int, float], Banding]) -> str:
    """The Markdown table docs/parameters.md carries (same rows, same order)."""
    rows = [
        "| K | threshold | bands b | rows r | (1/b)^(1/r) | P(candidate) at the threshold | "
        "false-positive area | false-negative area |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for (k, t), b in bands.items():
        rows.append(
            f"| {k} | {t} | {b.bands} | {b.rows} | {b.approx_threshold:.3f} | "
            f"{float(s_curve(t, b.bands, b.rows)):.3f} | "
            f"{b.false_positive_area:.4f} | {b.false_negative_area:.5f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=IMG, help="directory for the PNGs")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bands = tuned()
    for k in NUM_PERMS:
        draw(k, {t: bands[(k, t)] for t in THRESHOLDS}, args.out / f"scurves-k{k}.png")
    draw_families(args.out / "scurves-families.png")
    print(table(bands))


if __name__ == "__main__":
    main()
