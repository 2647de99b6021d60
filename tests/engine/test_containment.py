"""Containment (`--metric containment`, engine/containment.py) on real LMDB indexes:
every duplicate lies inside the earlier item it names at the exact containment
reported, against brute force over everything before it; recall at least 0.99 for
earlier items up to 8 times the new one's size (what the default plan promises);
the batch path equals the one-by-one path; texts and sets, the command, the API and
a changelog restore; options it cannot take are refused."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.config import Fields, ShingleSpec
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError
from streamdedup.inputs.items import set_item
from streamdedup.models import Document
from streamdedup.sketch.shingle import reference_shingles
from tests.support.bulk import batch_and_one_by_one
from tests.support.changelog import restore_from_changes
from tests.support.cli import run
from tests.support.truth import shared_with_earlier

SPEC = ShingleSpec.parse("word:3")


def pages(n: int, seed: int) -> list[str]:
    """Pages of 20 to 600 words, then excerpts of earlier ones (a run of a tenth to
    all of a page, a word or two changed), pages grown from an earlier one, and new
    pages, mixed."""
    rnd = random.Random(seed)
    words = [f"w{k}" for k in range(4000)]
    out = [" ".join(rnd.choices(words, k=rnd.randrange(20, 600))) for _ in range(n // 4)]
    while len(out) < n:
        base = out[rnd.randrange(len(out))].split()
        kind = rnd.random()
        if kind < 0.6:
            size = rnd.randrange(max(3, len(base) // 10), len(base) + 1)
            at = rnd.randrange(len(base) - size + 1)
            t = base[at : at + size]
            for _ in range(rnd.randrange(3)):
                t[rnd.randrange(len(t))] = rnd.choice(words)
        elif kind < 0.8:
            t = base + rnd.choices(words, k=rnd.randrange(1, 1 + len(base) // 3))
        else:
            t = rnd.choices(words, k=rnd.randrange(20, 600))
        out.append(" ".join(t))
    return out


def check_against_truth(
    sets: list[frozenset[Any]], verdicts: list[dict[str, Any]], t: float
) -> tuple[int, int]:
    """Precision 1 at the exact containment (to the 4 decimals reported); returns
    (duplicates missed whose earlier item is under 8 times the size, all missed)."""
    near = missed = 0
    for k, (v, shared) in enumerate(zip(verdicts, shared_with_earlier(sets), strict=True)):
        mine = sets[k]
        if v["verdict"] == "duplicate":
            theirs = sets[int(v["duplicate_of"])]
            c = len(mine & theirs) / len(mine)
            assert int(v["duplicate_of"]) < k and c >= t and v["similarity"] == round(c, 4), v
            continue
        inside = [sets[j] for j, n in shared.items() if n >= t * len(mine)]
        missed += bool(inside)
        near += any(len(s) < 8 * len(mine) for s in inside)
    return near, missed


def test_duplicates_lie_inside_what_they_name(tmp_path: Path) -> None:
    docs = pages(1000, seed=1)
    with Deduplicator(tmp_path / "idx", metric="containment", shingle="word:3") as dd:
        got = [v.to_dict() for v in dd.check_batch([(str(i), t) for i, t in enumerate(docs)])]
        assert (dd.params.metric, dd.params.item, dd.params.threshold) == (
            "containment",
            "text",
            0.8,
        )
    sets = [frozenset(reference_shingles(t, SPEC)) for t in docs]
    dups = sum(v["verdict"] == "duplicate" for v in got)
    near, _ = check_against_truth(sets, got, 0.8)
    assert dups > 400 and near <= dups // 100


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40))
def test_the_batch_path_equals_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, seed: int, batch: int
) -> None:
    docs = [(str(i), t) for i, t in enumerate(pages(120, seed))]
    bulk, one_by_one = batch_and_one_by_one(
        tmp_path_factory.mktemp, docs, batch, metric="containment", shingle="word:3", seed=seed
    )
    assert bulk == one_by_one


def baskets(n: int, seed: int) -> list[list[int]]:
    """Baskets of 4 to 200 products, then parts of earlier ones (a product or two
    swapped) and new ones."""
    rnd = random.Random(seed)
    out = [rnd.sample(range(5000), rnd.randrange(4, 200)) for _ in range(n // 3)]
    while len(out) < n:
        base = out[rnd.randrange(len(out))]
        part = rnd.sample(base, rnd.randrange(1, len(base) + 1))
        if rnd.random() < 0.3:
            part[rnd.randrange(len(part))] = rnd.randrange(5000)
        out.append(part if rnd.random() < 0.8 else rnd.sample(range(5000), len(part)))
    return out


def test_the_command_on_sets(tmp_path: Path) -> None:
    """`dedup --metric containment --item set` with a bad set among them: each
    duplicate inside what it names; `stats` and `inspect` name the family."""
    sets = baskets(600, seed=3)
    src = tmp_path / "in.jsonl"
    lines = [orjson.dumps({"id": str(i), "set": s}) for i, s in enumerate(sets)]
    src.write_bytes(b"\n".join([*lines, b'{"id": "mixed", "set": ["a", 1]}']) + b"\n")
    out, idx = tmp_path / "out.jsonl", str(tmp_path / "idx")
    family = ("--metric", "containment", "--item", "set", "--threshold", "0.7")
    r = run("dedup", str(src), "--index", idx, "--output", str(out), *family)
    assert r.returncode == 1, r.stderr.decode()
    got = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert got[-1]["error"] == "mixed_set"
    frozen = [frozenset(s) for s in sets]
    dups = sum(v["verdict"] == "duplicate" for v in got[:-1])
    near, _ = check_against_truth(frozen, got[:-1], 0.7)
    assert dups > 200 and near <= dups // 100
    assert b"metric containment, threshold 0.7, sets" in run("stats", "--index", idx).stdout
    dup = next(g for g in got if g.get("verdict") == "duplicate" and not g["exact"])
    shown = run("inspect", "--index", idx, dup["id"]).stdout.decode()
    assert "exact containment" in shown and f"exact {dup['similarity']:.4f}" in shown, shown


def test_a_changelog_restore_rebuilds_the_same_index(tmp_path: Path) -> None:
    fields = Fields(item="set")
    docs = [
        Document(str(i), "", None, set_item(s, fields, "set"))
        for i, s in enumerate(baskets(300, seed=9))
    ]
    _, params, restored = restore_from_changes(tmp_path, docs, metric="containment", item="set")
    assert restored == params and params.metric == "containment"


def test_the_python_api(tmp_path: Path) -> None:
    page = " ".join(f"w{k}" for k in range(200))
    with Deduplicator(tmp_path / "idx", metric="containment", shingle="word:3") as dd:
        assert dd.check("page", page).verdict == "unique"
        v = dd.check("excerpt", " ".join(f"w{k}" for k in range(50, 90)))
        assert (v.verdict, v.duplicate_of, v.similarity) == ("duplicate", "page", 1.0)
        assert dd.check("larger", page + " more words here").verdict == "duplicate"
    with Deduplicator(tmp_path / "sets", metric="containment", item="set", threshold=0.5) as dd:
        dd.check("a", {"x", "y", "z", "w"})
        v = dd.check("b", ["x", "y", "q"])
        assert (v.verdict, v.similarity) == ("duplicate", round(2 / 3, 4))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bands": 10, "rows": 2}, "leave `bands` and `rows` out"),
        ({"verify": "signature"}, "exact check only"),
        ({"threshold": 1.5}, "must be in \\(0, 1\\]"),
        ({"num_perm": 4}, "too few positions"),
        ({"item": "vector", "dim": 4}, "compares items of kind text or set"),
        ({"max_distance": 3.0}, "applies to `metric` hamming or euclidean"),
    ],
)
def test_options_it_cannot_take_are_refused(
    tmp_path: Path, options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Deduplicator(tmp_path / "idx", metric="containment", **options)
