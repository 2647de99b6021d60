"""The generated streams most tests run on: random words, 40% of documents an earlier
one with one word edited (a near-duplicate at about 0.95-0.99 Jaccard)."""

from __future__ import annotations

import random
from typing import Any

VOCAB = [f"w{i}" for i in range(3000)]


def edited_stream(n: int, seed: int, words: tuple[int, int] = (40, 200)) -> list[dict[str, Any]]:
    """`n` documents {"id": "d<i>", "text": ...}, the same for the same seed."""
    rnd = random.Random(seed)
    docs: list[dict[str, Any]] = []
    for i in range(n):
        if docs and rnd.random() < 0.4:
            picked = str(rnd.choice(docs)["text"]).split()
            picked[rnd.randrange(len(picked))] = "edited"
            text = " ".join(picked)
        else:
            text = " ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(*words)))
        docs.append({"id": f"d{i}", "text": text})
    return docs
