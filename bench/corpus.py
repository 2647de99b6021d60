"""A crawl-like corpus of real prose with mutated re-emissions, and its exact ground truth.

Prose: the docstrings of the Python standard library installed here (read with `ast`,
nothing is imported), split into paragraphs.  Originals are 1-5 KB documents built
from consecutive paragraphs of one source file, or (once those run out) from random
paragraphs.  About 40% of the stream are re-emissions of an earlier document, mutated
across the whole similarity range: word edits, inserted paragraphs, boilerplate
headers and footers, truncation, and some verbatim copies.

Ground truth is computed by brute force with an inverted index (scipy sparse product)
over the shingle *strings* of the reference shingler, hashed with Python's own string
hash -- independent of streamdedup's hashing.

    python bench/corpus.py --docs 20000 --out corpus.jsonl
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import os
import random
import sys
import sysconfig
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

BOILERPLATE = [
    "We use cookies to improve your experience on our site. By continuing to browse you "
    "agree to our use of cookies. Read our privacy policy to learn more. Accept all cookies.",
    "Copyright (c) 2001-2026 the authors. All rights reserved. This page is licensed under "
    "the terms of the documentation licence; redistribution requires attribution.",
    "Subscribe to our newsletter and never miss an update. Share this page on social media. "
    "Related articles: getting started, tutorials, reference, frequently asked questions.",
    "Home | Products | Documentation | Community | Blog | Contact | Sign in | Register",
]


CACHE = Path(__file__).parent / "cache"


def paragraphs() -> list[list[str]]:
    """Prose paragraphs grouped by source, cached per Python version.

    Reading the stdlib takes ~10 s of CPU: under a lock, so that of the processes that
    start at once on a fresh checkout (the test suite's workers, benches side by side)
    one reads it and the others wait for its file, which appears whole or not at all."""
    cache = CACHE / f"paragraphs-{sys.version_info.major}.{sys.version_info.minor}.json"
    if not cache.exists():
        CACHE.mkdir(exist_ok=True)
        with open(cache.with_suffix(".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not cache.exists():
                part = cache.with_suffix(f".{os.getpid()}.part")
                part.write_bytes(orjson.dumps(_collect()))
                os.replace(part, cache)
    return orjson.loads(cache.read_bytes())  # type: ignore[no-any-return]


def _collect() -> list[list[str]]:
    """Docstring paragraphs of the stdlib by source file, then the language reference
    (pydoc_data.topics) by topic; deduplicated, at least 80 characters each."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: set[str] = set()
    out: list[list[str]] = []
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts)
    for path in files:
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        group: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc:
                    group.extend(_new_paragraphs(doc, seen))
        if group:
            out.append(group)
    from pydoc_data.topics import topics

    for _, body in sorted(topics.items()):
        group = _new_paragraphs(body, seen)
        if group:
            out.append(group)
    return out


def _new_paragraphs(text: str, seen: set[str]) -> list[str]:
    """Whitespace-collapsed paragraphs of 80+ characters not seen before."""
    out = []
    for para in text.split("\n\n"):
        para = " ".join(para.split())
        if len(para) >= 80 and para not in seen:
            seen.add(para)
            out.append(para)
    return out


@dataclass
class Doc:
    id: str
    text: str
    source: str | None  # id of the document it re-emits, if any
    mutation: str

    def jsonl(self) -> bytes:
        """The input line `streamdedup dedup` reads."""
        return orjson.dumps({"id": self.id, "text": self.text}) + b"\n"


def _mutate_words(text: str, rate: float, rnd: random.Random, vocab: list[str]) -> str:
    words = text.split()
    out: list[str] = []
    for w in words:
        r = rnd.random()
        if r < rate / 3:
            continue  # delete
        if r < 2 * rate / 3:
            out.append(rnd.choice(vocab))  # substitute
            continue
        out.append(w)
        if r < rate:
            out.append(rnd.choice(vocab))  # insert
    return " ".join(out)


def generate(
    n_docs: int, seed: int = 7, dup_fraction: float = 0.4, memory: int | None = None
) -> Iterator[Doc]:
    """The stream; re-emissions pick any earlier document, or only the `memory` most
    recent ones (to bound the generator's own memory on very long streams)."""
    rnd = random.Random(seed)
    groups = paragraphs()
    flat = [p for g in groups for p in g]
    vocab = sorted({w for p in flat[:5000] for w in p.split() if w.isalpha()})
    group_order = list(range(len(groups)))
    rnd.shuffle(group_order)
    cursor = 0  # next unused file group for "natural" originals
    emitted: list[Doc] = []
    for i in range(n_docs):
        doc_id = f"doc-{i:07d}"
        if emitted and rnd.random() < dup_fraction:
            src = emitted[rnd.randrange(len(emitted))]
            text, kind = _reemit(src.text, rnd, vocab, flat)
            doc = Doc(doc_id, text, src.id, kind)
        else:
            target = rnd.randint(1000, 5000)
            parts: list[str] = []
            if cursor < len(group_order):
                g = groups[group_order[cursor]]
                cursor += 1
                parts = list(g)
            size = 0
            chosen: list[str] = []
            for p in parts:
                if size >= target:
                    break
                chosen.append(p)
                size += len(p) + 1
            while size < target:
                p = rnd.choice(flat)
                chosen.append(p)
                size += len(p) + 1
            text = "\n".join(chosen)[: max(target, 1000)]
            doc = Doc(doc_id, text, None, "original")
        if memory is not None and len(emitted) >= memory:
            emitted[i % memory] = doc
        else:
            emitted.append(doc)
        yield doc


def _reemit(text: str, rnd: random.Random, vocab: list[str], flat: list[str]) -> tuple[str, str]:
    kind = rnd.choices(
        ["copy", "edit", "insert", "boilerplate", "truncate", "mixed"],
        weights=[1, 3, 2, 2, 2, 2],
    )[0]
    if kind == "copy":
        return text, kind
    if kind == "edit":
        return _mutate_words(text, rnd.uniform(0.0, 0.35), rnd, vocab), kind
    if kind == "insert":
        paras = text.split("\n")
        for _ in range(rnd.randint(1, 4)):
            paras.insert(rnd.randint(0, len(paras)), rnd.choice(flat))
        return "\n".join(paras), kind
    if kind == "boilerplate":
        head = rnd.choice(BOILERPLATE) if rnd.random() < 0.6 else ""
        foot = rnd.choice(BOILERPLATE)
        return "\n".join(x for x in (head, text, foot) if x), kind
    if kind == "truncate":
        keep = rnd.uniform(0.3, 1.0)
        return text[: max(1, int(len(text) * keep))], kind
    text = _mutate_words(text, rnd.uniform(0.0, 0.15), rnd, vocab)
    keep = rnd.uniform(0.6, 1.0)
    return rnd.choice(BOILERPLATE) + "\n" + text[: int(len(text) * keep)], kind


def ground_truth(
    texts: list[str], threshold: float, spec: str = "word:5", block: int = 2000
) -> list[bool]:
    """truth[i]: some earlier document has exact Jaccard >= threshold with document i."""
    import numpy as np
    from scipy import sparse

    from streamdedup.config import ShingleSpec
    from streamdedup.sketch.shingle import reference_shingles

    s = ShingleSpec.parse(spec)
    ids: dict[int, int] = {}
    indptr = [0]
    indices: list[int] = []
    for t in texts:
        row = {ids.setdefault(hash(x), len(ids)) for x in reference_shingles(t, s)}
        indices.extend(sorted(row))
        indptr.append(len(indices))
    n = len(texts)
    a = sparse.csr_matrix(
        (np.ones(len(indices), dtype=np.float32), np.array(indices), np.array(indptr)),
        shape=(n, len(ids)),
    )
    sizes = np.diff(a.indptr).astype(np.float64)
    at = a.T.tocsc()
    truth = np.zeros(n, dtype=bool)
    # Blocks of rows against the earlier documents only: a template-heavy stream makes
    # the whole product dense within each site (memory), and half of it is not needed.
    for start in range(0, n, block):
        stop = min(n, start + block)
        inter = (a[start:stop] @ at[:, :stop]).tocoo()
        r, c = inter.row + start, inter.col
        keep = c < r  # earlier documents only
        r, c, v = r[keep], c[keep], inter.data[keep].astype(np.float64)
        jac = v / (sizes[r] + sizes[c] - v)
        truth[r[jac >= threshold - 1e-12]] = True
    return truth.tolist()


def write_stream(generate: Callable[[int, int], Iterator[Doc]], seed: int, description: str) -> int:
    """The command line of a stream generator (this one, `templates.py`): `--docs N
    --seed S --out FILE` (stdout by default), one JSON line per document."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--docs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=seed)
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    target = sys.stdout.fileno() if args.out == "-" else args.out
    with open(target, "wb", closefd=args.out != "-") as sink:
        for d in generate(args.docs, args.seed):
            sink.write(d.jsonl())
    return 0


def main() -> int:
    return write_stream(generate, 7, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())
