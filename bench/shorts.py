"""Short documents: one line of 1-15 words each (titles, product names, log lines).

The stream of issue 22's item 5: what a crawler's title feed, a shop's catalogue or a
log pipeline sends.  Every word is real (from the same prose as `corpus.py`); a title
is up to 15 consecutive words, a product name a few capitalised words and a model
suffix, a log line a level, a component and a message with a request id.  30% of the
lines re-emit an earlier one: unchanged, only re-cased or re-spaced (the same after
normalisation), one word replaced, one added or one dropped.  With fewer than five
words a line is one shingle (the shingling definition), so most near copies are
either identical after normalisation or not similar at all: the stream measures the
per-document cost, not the LSH.  Ground truth is `corpus.ground_truth`, as for the
other streams.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Iterator

from corpus import Doc, paragraphs, write_stream

MAX_WORDS = 15
REEMIT = 0.3
LEVELS = ("INFO", "WARN", "ERROR", "DEBUG")
SUFFIXES = ("", " Pro", " XL", " Mini")


def generate(n_docs: int, seed: int = 13) -> Iterator[Doc]:
    rnd = random.Random(seed)
    flat = [p for g in paragraphs() for p in g]
    words = [w for p in flat[:20000] for w in p.split()]
    alpha = [s for s in (w.strip(".,;:()`'\"") for w in words) if s.isalpha()]

    def title() -> str:
        k = rnd.randrange(len(words) - MAX_WORDS)
        return " ".join(words[k : k + rnd.randint(1, MAX_WORDS)])

    def product() -> str:
        name = " ".join(rnd.choice(alpha).capitalize() for _ in range(rnd.randint(1, 6)))
        number = f" {rnd.randint(1, 999)}"
        version = f" v{rnd.randint(1, 9)}.{rnd.randint(0, 20)}"
        return name + rnd.choice((*SUFFIXES, number, version))

    def log_line() -> str:
        k = rnd.randrange(len(alpha) - 10)
        message = " ".join(alpha[k : k + rnd.randint(2, 10)])
        component = rnd.choice(alpha[:3000])
        return f"{rnd.choice(LEVELS)} {component}: {message} id={rnd.randint(1, 10**6)}"

    kinds: tuple[Callable[[], str], ...] = (title, title, product, log_line)
    emitted: list[str] = []
    for i in range(n_docs):
        if emitted and rnd.random() < REEMIT:
            j = rnd.randrange(len(emitted))
            text, kind = _edit(emitted[j], rnd, alpha)
            source: str | None = f"short-{j:07d}"
        else:
            text, kind, source = rnd.choice(kinds)(), "original", None
        text = " ".join(text.split()[:MAX_WORDS]) if len(text.split()) > MAX_WORDS else text
        emitted.append(text)
        yield Doc(f"short-{i:07d}", text, source, kind)


def _edit(text: str, rnd: random.Random, alpha: list[str]) -> tuple[str, str]:
    words, r = text.split(), rnd.random()
    if r < 0.4:
        return text, "exact"
    if r < 0.55:
        return (text.upper() if rnd.random() < 0.3 else f"  {text} "), "normalised"
    if len(words) > 1 and r < 0.8:
        words[rnd.randrange(len(words))] = rnd.choice(alpha)
        return " ".join(words), "replace"
    if r < 0.9:
        return " ".join([*words, rnd.choice(alpha)]), "add"
    return (" ".join(words[:-1]) if len(words) > 1 else text + "s"), "drop"


def main() -> int:
    return write_stream(generate, 13, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
