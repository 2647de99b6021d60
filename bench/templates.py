"""A template-heavy stream of web pages, from real text: what crawls of a few sites
look like, where every page of a site carries the same navigation, banners and legal
footer (hundreds of words) around a short body.

Eight sites.  Each site's template is 300-700 real words (consecutive prose
paragraphs, cut into a header of about a third and a footer of the rest); each page
is that template around a body of 60-250 real words, with a short per-page
breadcrumb (the page's first body words) in the header.  Pages of one site are
0.5-0.8 similar through the template alone: below a threshold of 0.8, yet sharing
many band buckets.  30% of the pages are edited re-emissions of an earlier page (of
any site): word edits of the body at a rate of 0-30%, sometimes a body cut short or
a sentence added.  Ground truth is `corpus.ground_truth` (exact, brute force, on
the reference shingler's shingle strings).

    python bench/templates.py --docs 20000 --out templates.jsonl
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator

from corpus import Doc, _mutate_words, paragraphs, write_stream

SITES = 8
TEMPLATE_WORDS = (300, 700)
BODY_WORDS = (60, 250)
REEMIT = 0.3
EDIT_RATE = (0.0, 0.3)


def _words_from(flat: list[str], rnd: random.Random, count: int) -> list[str]:
    """`count` words of real prose: consecutive paragraphs from a random start."""
    out: list[str] = []
    k = rnd.randrange(len(flat))
    while len(out) < count:
        out.extend(flat[k % len(flat)].split())
        k += 1
    return out[:count]


def generate(n_docs: int, seed: int = 11) -> Iterator[Doc]:
    rnd = random.Random(seed)
    flat = [p for g in paragraphs() for p in g]
    vocab = sorted({w for p in flat[:5000] for w in p.split() if w.isalpha()})
    templates = []
    for _ in range(SITES):
        words = _words_from(flat, rnd, rnd.randint(*TEMPLATE_WORDS))
        cut = len(words) // 3
        templates.append((" ".join(words[:cut]), " ".join(words[cut:])))
    emitted: list[tuple[int, str]] = []  # (site, body) of every page so far
    for i in range(n_docs):
        doc_id = f"page-{i:07d}"
        if emitted and rnd.random() < REEMIT:
            j = rnd.randrange(len(emitted))
            site, body = emitted[j]
            body, kind = _edit(body, rnd, vocab, flat)
            source: str | None = f"page-{j:07d}"
        else:
            site = rnd.randrange(SITES)
            body = " ".join(_words_from(flat, rnd, rnd.randint(*BODY_WORDS)))
            source, kind = None, "original"
        emitted.append((site, body))
        head, foot = templates[site]
        crumb = " > ".join(["Home", *body.split()[:4]])
        yield Doc(doc_id, f"{head}\n{crumb}\n{body}\n{foot}", source, kind)


def _edit(body: str, rnd: random.Random, vocab: list[str], flat: list[str]) -> tuple[str, str]:
    kind = rnd.choices(["edit", "cut", "add"], weights=[6, 2, 2])[0]
    if kind == "cut":
        words = body.split()
        return " ".join(words[: max(1, int(len(words) * rnd.uniform(0.7, 1.0)))]), kind
    if kind == "add":
        return body + " " + " ".join(rnd.choice(flat).split()[:40]), kind
    return _mutate_words(body, rnd.uniform(*EDIT_RATE), rnd, vocab), kind


def main() -> int:
    return write_stream(generate, 11, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
