"""The closing line of a file-mode run (`dedup`, `produce`): what was read, decided,
rejected and skipped, and how fast."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from streamdedup.models import Rejected, Verdict


@dataclass
class Summary:
    """Counts for the closing line; `unit` and `rejected_as` name what was read and
    where rejects went (lines and error records in files, messages and the dead-letter
    topic on Kafka)."""

    lines: int = 0
    unique: int = 0
    duplicates: int = 0
    exact: int = 0
    empty: int = 0
    rejected: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    unit: str = "lines"
    rejected_as: str = "rejected"
    # WARC records that are not pages to check (no output line): reason -> count
    skipped: dict[str, int] = field(default_factory=dict)
    kept: int = 0  # input lines written to `dedup --keep`
    keeping: bool = False  # whether this run keeps them (the closing line says so)

    @property
    def rate(self) -> float:
        return self.lines / self.seconds if self.seconds > 0 else 0.0

    def add(self, item: Verdict | Rejected) -> None:
        self.lines += 1
        if isinstance(item, Rejected):
            self.rejected += 1
            self.reasons[item.reason] = self.reasons.get(item.reason, 0) + 1
        else:
            self._count(item.kinds(), 1)

    def add_verdicts(self, verdicts: list[Verdict]) -> None:
        """`add` of each verdict, counted by their few distinct `kinds` first."""
        self.lines += len(verdicts)
        for kinds, n in Counter([v.kinds() for v in verdicts]).items():
            self._count(kinds, n)

    def _count(self, kinds: tuple[str, ...], n: int) -> None:
        for kind in kinds:
            name = "duplicates" if kind == "duplicate" else kind
            setattr(self, name, getattr(self, name) + n)

    def text(self) -> str:
        parts = [
            f"{self.lines} {self.unit} in {self.seconds:.1f}s ({self.rate:,.0f} docs/s)",
            f"unique {self.unique} (empty {self.empty})",
            f"duplicate {self.duplicates} (exact {self.exact})",
            f"{self.rejected_as} {self.rejected}",
        ]
        if self.reasons:
            parts[-1] += " (" + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())) + ")"
        if self.skipped:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items()))
            parts.append(f"skipped {sum(self.skipped.values())} ({kinds})")
        if self.keeping:
            parts.append(f"kept {self.kept} input lines")
        return "; ".join(parts)
