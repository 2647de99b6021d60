"""Jaccard on sets (`--item set`, engine/jaccard_sets.py) on real LMDB indexes: every
duplicate meets the threshold at its exact Jaccard, against brute force over
everything before it, with recall at least 0.99 by default; equal sets in any order
are exact copies; the batch path equals the one-by-one path; a changelog restore
rebuilds the same index; bad sets get their reasons."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.config import Fields
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError
from streamdedup.inputs.items import set_item
from streamdedup.models import Document
from tests.support.bulk import batch_and_one_by_one
from tests.support.changelog import restore_from_changes
from tests.support.cli import run
from tests.support.truth import best_jaccard_earlier

_FIELDS = Fields(item="set")


def baskets(n: int, seed: int, bases: int = 80) -> list[list[str]]:
    """`n` sets of product names: `bases` random ones of 5-40 products, then copies of
    them with a few products swapped, added or dropped, and shuffled."""
    rnd = random.Random(seed)
    catalogue = [f"product-{k}" for k in range(3000)]
    out = [rnd.sample(catalogue, rnd.randrange(5, 40)) for _ in range(bases)]
    while len(out) < n:
        s = list(out[rnd.randrange(len(out))])
        for _ in range(rnd.randrange(4)):
            if len(s) > 1 and rnd.random() < 0.5:
                s.pop(rnd.randrange(len(s)))
            s.append(rnd.choice(catalogue))
        rnd.shuffle(s)
        out.append(s)
    return out[:n]


def jaccard(a: list[Any], b: list[Any]) -> float:
    x, y = set(a), set(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def check_against_truth(sets: list[list[str]], verdicts: list[dict[str, Any]], t: float) -> int:
    """Precision 1 at the exact Jaccard (to the 4 decimals reported); returns the
    duplicates LSH missed."""
    missed = 0
    frozen = [frozenset(s) for s in sets]
    bests = best_jaccard_earlier(frozen)
    for k, v in enumerate(verdicts):
        if v["verdict"] == "duplicate":
            j = jaccard(sets[k], sets[int(v["duplicate_of"])])
            assert int(v["duplicate_of"]) < k and j >= t and v["similarity"] == round(j, 4), v
            assert v["exact"] == (set(sets[k]) == set(sets[int(v["duplicate_of"])]))
        else:
            missed += bests[k] >= t
    return missed


def test_duplicates_meet_the_threshold_at_their_exact_jaccard(tmp_path: Path) -> None:
    sets = baskets(1200, seed=1)
    with Deduplicator(tmp_path / "idx", item="set", threshold=0.7) as dd:
        got = [v.to_dict() for v in dd.check_batch([(str(i), s) for i, s in enumerate(sets)])]
        assert (dd.params.metric, dd.params.item) == ("jaccard", "set")
    dups = sum(v["verdict"] == "duplicate" for v in got)
    assert dups > 300 and check_against_truth(sets, got, 0.7) <= dups // 100


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40))
def test_the_batch_path_equals_one_by_one(
    tmp_path_factory: pytest.TempPathFactory, seed: int, batch: int
) -> None:
    # 125 sets (250 took 0.4 s an example, nearly all of it the one-document
    # transactions): copies of 30 bases within and across 4 to 125 batches; the pool
    # of repeated ids shrunk with them (55 for 230), so an example has as many
    # replaced ids as before on average (about 0.3)
    sets = baskets(125, seed, bases=30)
    rnd = random.Random(seed)
    docs = [
        (f"d{rnd.randrange(55)}" if rnd.random() < 0.05 else str(i), s) for i, s in enumerate(sets)
    ]
    bulk, one_by_one = batch_and_one_by_one(
        tmp_path_factory.mktemp, docs, batch, item="set", seed=seed
    )
    assert bulk == one_by_one


@given(st.lists(st.text(max_size=6), max_size=12), st.randoms())
def test_equal_sets_have_equal_canonical_bytes(values: list[str], rnd: random.Random) -> None:
    """Any order, any repeats: the same bytes (the content identity of exact copies);
    strings and the integers they spell are different elements."""
    shuffled = values + values[: len(values) // 2]
    rnd.shuffle(shuffled)
    assert set_item(values, _FIELDS, "s") == set_item(shuffled, _FIELDS, "s")
    assert set_item(["1"], _FIELDS, "s") != set_item([1], _FIELDS, "s")


def test_the_command_with_bad_sets(tmp_path: Path) -> None:
    """`dedup --item set`: one verdict or error record a line, each bad set with its
    reason, an empty set `unique` with reason `empty`; `stats` names the family."""
    sets = baskets(300, seed=3)
    lines = [orjson.dumps({"id": str(i), "set": s}) for i, s in enumerate(sets)]
    bad = [
        b'{"id": "mixed", "set": ["a", 1]}',
        b'{"id": "float", "set": [1.5]}',
        b'{"id": "nested", "set": [["a"]]}',
        b'{"id": "text", "set": "a b c"}',
        b'{"id": "none"}',
        b'{"id": "empty", "set": []}',
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines + bad) + b"\n")
    out, idx = tmp_path / "out.jsonl", str(tmp_path / "idx")
    r = run(
        "dedup",
        str(src),
        "--index",
        idx,
        "--output",
        str(out),
        "--item",
        "set",
        "--threshold",
        "0.7",
    )
    assert r.returncode == 1, r.stderr.decode()
    got = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert check_against_truth(sets, got[:300], 0.7) <= 3
    assert [g.get("error") for g in got[300:305]] == [
        "mixed_set",
        "bad_item_value",
        "bad_item_value",
        "bad_item_type",
        "missing_item",
    ]
    assert (got[305]["verdict"], got[305]["reason"]) == ("unique", "empty")
    stats = run("stats", "--index", idx)
    assert b"threshold 0.7, sets" in stats.stdout
    dup = next(g for g in got if g.get("verdict") == "duplicate" and not g["exact"])
    shown = run("inspect", "--index", idx, dup["id"]).stdout.decode()
    assert "elements    " in shown and f"exact {dup['similarity']:.4f}" in shown, shown


def test_a_changelog_restore_rebuilds_the_same_index(tmp_path: Path) -> None:
    sets = baskets(400, seed=9)
    docs = [Document(i, "", None, set_item(s, _FIELDS, "set")) for i, s in enumerate(sets)]  # type: ignore[arg-type]
    _, params, restored = restore_from_changes(tmp_path, docs, item="set", threshold=0.7)
    assert restored == params and params.item == "set"


def test_the_python_api_takes_sets_lists_and_tuples(tmp_path: Path) -> None:
    with Deduplicator(tmp_path / "idx", item="set", threshold=0.5) as dd:
        assert dd.check("a", {"x", "y", "z"}).verdict == "unique"
        v = dd.check("b", ("x", "y", "w"))
        assert (v.verdict, v.duplicate_of, v.similarity) == ("duplicate", "a", 0.5)
        assert dd.check("c", ["z", "y", "x", "x"]).exact
        with pytest.raises(ConfigError, match="mixed_set"):
            dd.check("d", ["x", 1])
