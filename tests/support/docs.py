"""The generated streams most tests run on: random words, 40% of documents an earlier
one with one word edited (a near-duplicate at about 0.95-0.99 Jaccard)."""

from __future__ import annotations

import random
from typing import Any

from streamdedup.models import Document

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


def hostile_stream(n: int, seed: int, *, timestamps: bool = False) -> list[Document]:
    """Near duplicates, exact copies, ids replaced with other text or sent again, a
    shared template that fills a few buckets; times moving forward with jitter."""
    rnd = random.Random(seed)
    template = " ".join(rnd.choice(VOCAB) for _ in range(30))
    docs: list[Document] = []
    ts = 1_700_000_000_000
    for i in range(n):
        roll = rnd.random()
        doc_id: str = f"d{i}"
        if docs and roll < 0.25:
            words = rnd.choice(docs).text.split()
            words[rnd.randrange(len(words))] = rnd.choice(VOCAB)
            text = " ".join(words)
        elif docs and roll < 0.35:
            text = rnd.choice(docs).text  # an exact copy
        elif docs and roll < 0.45:
            earlier = rnd.choice(docs)
            doc_id = str(earlier.id)  # the same id: sent again, or replaced
            text = earlier.text if rnd.random() < 0.5 else template + " " + str(i)
        elif roll < 0.6:
            text = template + " " + " ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(3, 12)))
        else:
            text = " ".join(rnd.choice(VOCAB) for _ in range(rnd.randint(5, 60)))
        ts += rnd.randint(0, 400)
        docs.append(Document(doc_id, text, ts if timestamps else None))
    return docs
