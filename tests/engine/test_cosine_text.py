"""Cosine on texts (`--metric cosine --item text`, engine/cosine_text.py): the
weighted shingles of the seeds (a shingle said twice weighs twice), signed by SimHash.
Every duplicate meets the threshold at the cosine of the two shingle-count vectors,
computed here from the shingling definition, with recall at least 0.99; SimHash's
bits agree with probability 1 - theta/pi; the batch path equals the one-by-one path."""

from __future__ import annotations

import math
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.config import ShingleSpec
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError
from streamdedup.sketch.shingle import _WORD, ShingleBatch, normalise, offsets_of
from streamdedup.sketch.simhash import SimHash
from tests.support.bulk import batch_and_one_by_one


def counts(text: str, k: int = 3) -> Counter[str]:
    """The word k-shingle counts of a text, straight from the definition."""
    tokens = _WORD.findall(normalise(text))
    if len(tokens) < k:
        return Counter([" ".join(tokens)] if tokens else [])
    return Counter(" ".join(tokens[i : i + k]) for i in range(len(tokens) - k + 1))


def cosine(a: Counter[str], b: Counter[str]) -> float:
    dot = sum(a[s] * b[s] for s in a.keys() & b.keys())
    norms = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norms if norms else 0.0


def best_earlier(vectors: list[Counter[str]]) -> list[float]:
    """Each vector's greatest `cosine` with an earlier one (0.0 if none): the dot
    products summed over the shingles two vectors share, found through an inverted
    index (a pair sharing none is at 0), then `cosine`'s own division, so the same
    floats; `cosine` with every earlier vector took 2.5 s of CPU on 1,200 texts."""
    holders: dict[str, list[tuple[int, int]]] = {}
    squares = [sum(v * v for v in a.values()) for a in vectors]
    out = []
    for k, a in enumerate(vectors):
        dots: Counter[int] = Counter()
        for s, c in a.items():
            for j, d in holders.get(s, ()):
                dots[j] += c * d
            holders.setdefault(s, []).append((k, c))
        out.append(
            max((dot / math.sqrt(squares[k] * squares[j]) for j, dot in dots.items()), default=0.0)
        )
    return out


def texts(n: int, seed: int) -> list[str]:
    """Sentences of a small vocabulary (so shingles repeat within a text), then
    copies with words changed, dropped or a sentence said twice."""
    rnd = random.Random(seed)
    words = [f"w{k}" for k in range(60)]
    out = [" ".join(rnd.choices(words, k=rnd.randrange(8, 60))) for _ in range(n // 4)]
    while len(out) < n:
        t = out[rnd.randrange(len(out))].split()
        for _ in range(rnd.randrange(4)):
            t[rnd.randrange(len(t))] = rnd.choice(words)
        if rnd.random() < 0.2:
            t = t + t[: len(t) // 2]
        out.append(" ".join(t))
    return out


def test_duplicates_meet_the_threshold_at_their_exact_cosine(tmp_path: Path) -> None:
    docs = texts(1200, seed=1)
    vectors = [counts(t) for t in docs]
    with Deduplicator(
        tmp_path / "idx", metric="cosine", item="text", shingle="word:3", threshold=0.8
    ) as dd:
        got = [v.to_dict() for v in dd.check_batch([(str(i), t) for i, t in enumerate(docs)])]
    missed = dups = 0
    for k, (v, best) in enumerate(zip(got, best_earlier(vectors), strict=True)):
        if v["verdict"] == "duplicate":
            dups += 1
            c = cosine(vectors[k], vectors[int(v["duplicate_of"])])
            assert c >= 0.8 and (v["exact"] or v["similarity"] == pytest.approx(c, abs=1e-12)), v
        else:
            missed += best >= 0.8
    assert dups > 300 and missed <= dups // 100


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40))
def test_the_batch_path_equals_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, seed: int, batch: int
) -> None:
    # 100 texts (200 took 0.3 s an example, nearly all of it the one-document
    # transactions): 25 of them copied 75 times, within and across 3 to 100 batches
    docs = [(str(i), t) for i, t in enumerate(texts(100, seed))]
    bulk, one_by_one = batch_and_one_by_one(
        tmp_path_factory.mktemp,
        docs,
        batch,
        metric="cosine",
        item="text",
        shingle="word:3",
        seed=seed,
    )
    assert bulk == one_by_one


@pytest.mark.parametrize(("shared", "own"), [(4, 1), (4, 2), (4, 4), (0, 4)])
def test_simhash_bits_agree_with_probability_one_minus_theta_over_pi(shared: int, own: int) -> None:
    """Pairs of count vectors at a known cosine: 200 shingles both texts say `shared`
    times, and 200 of each text's own said `own` times (cosine s^2 / (s^2 + o^2)); the
    share of agreeing bits over many pairs is 1 - theta/pi within five sigmas."""
    rng = np.random.default_rng(shared * 10 + own)
    f = SimHash(0, 512, 32, 16, 3)
    agree = total = 0
    for _ in range(30):
        common, mine, theirs = (rng.integers(0, 2**63, 200, dtype=np.uint64) for _ in range(3))
        a = np.concatenate([np.repeat(common, shared), np.repeat(mine, own)])
        b = np.concatenate([np.repeat(common, shared), np.repeat(theirs, own)])
        sigs = f.signatures(
            ShingleBatch(np.concatenate([a, b]), offsets_of(np.array([len(a), len(b)])))
        )
        agree += int((sigs[0] == sigs[1]).sum())
        total += sigs.shape[1]
    p = 1 - math.acos(shared**2 / (shared**2 + own**2)) / math.pi
    assert abs(agree / total - p) <= 5 * math.sqrt(p * (1 - p) / total)


def test_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="shingle counts"):
        Deduplicator(tmp_path / "a", metric="cosine", item="text", dim=8)
    with pytest.raises(ConfigError, match="multiple of 64"):
        Deduplicator(tmp_path / "b", metric="cosine", item="text", num_perm=100)
    with Deduplicator(tmp_path / "c", metric="cosine", item="text", shingle="char:4") as dd:
        assert dd.params.shingle == ShingleSpec("char", 4) and dd.params.dim == 0
        a, b = dd.check("a", "Hello, world: hello!"), dd.check("b", "Hello, world: hello?")
        assert (a.verdict, b.verdict, b.duplicate_of) == ("unique", "duplicate", "a")
    with Deduplicator(tmp_path / "c") as dd:  # the stored family
        v: Any = dd.check("c", "HELLO, WORLD: HELLO!")
        assert v.exact and v.duplicate_of == "a"
