"""Hamming distance on bit strings (`--metric hamming --item bits`, engine/hamming_bits.py)
on real LMDB indexes: every duplicate is within the bar, at the distance it reports,
against brute force over everything before it; the batch path equals the one-by-one
path; a reopen keeps the family; and the options a family does not take are refused."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.errors import ConfigError, ParameterMismatchError
from streamdedup.models import Document
from tests.support.bulk import batch_and_one_by_one
from tests.support.changelog import restore_from_changes
from tests.support.cli import run


def fingerprints(n: int, seed: int, bits: int = 64, bases: int = 60) -> list[int]:
    """`n` bit strings: `bases` random ones, then copies of them with 0-7 bits flipped
    (so pairs lie at, just inside and just outside a bar of 3)."""
    rnd = random.Random(seed)
    out = [rnd.getrandbits(bits) for _ in range(bases)]
    while len(out) < n:
        v = out[rnd.randrange(bases)]
        for _ in range(rnd.randrange(8)):
            v ^= 1 << rnd.randrange(bits)
        out.append(v)
    return out[:n]


def hex_of(v: int, bits: int = 64) -> str:
    return f"{v:0{bits // 4}x}"


def brute_force(values: list[int], bar: int) -> list[int | None]:
    """Each string's least distance to an earlier one, if within `bar`: every pair
    measured, the strings cut into 64-bit words whose differing bits numpy counts
    (`bin(v ^ w).count("1")` pair by pair took 1.5 s of CPU on 3,000 strings)."""
    n = max(1, -(-max((v.bit_length() for v in values), default=0) // 64))
    words = np.array(
        [[(v >> (64 * j)) & (2**64 - 1) for j in range(n)] for v in values], dtype=np.uint64
    ).reshape(len(values), n)
    out: list[int | None] = []
    for k in range(len(values)):
        if k == 0:
            out.append(None)
            continue
        best = int(np.bitwise_count(words[:k] ^ words[k]).sum(axis=1, dtype=np.int64).min())
        out.append(best if best <= bar else None)
    return out


def check_against_truth(values: list[int], verdicts: list[dict], bar: int, bits: int = 64) -> int:
    """Precision 1 with exact distances; returns the duplicates LSH missed."""
    by_id = {i: v for i, v in enumerate(values)}
    truth = brute_force(values, bar)
    missed = 0
    for k, v in enumerate(verdicts):
        if v["verdict"] == "duplicate":
            d = bin(values[k] ^ by_id[v["duplicate_of"]]).count("1")
            assert v["distance"] == d <= bar and truth[k] is not None, v
            assert v["similarity"] == pytest.approx(1 - d / bits, abs=1e-12)
            assert v["exact"] == (d == 0 and values[k] == by_id[v["duplicate_of"]])
        else:
            assert v["distance"] is None and v["similarity"] is None
            missed += truth[k] is not None
    return missed


def test_duplicates_are_within_the_bar_at_their_exact_distance(tmp_path: Path) -> None:
    values = fingerprints(3000, seed=1)
    with Deduplicator(tmp_path / "idx", metric="hamming", bits=64, max_distance=3) as dd:
        got = [v.to_dict() for v in dd.check_batch([(i, hex_of(v)) for i, v in enumerate(values)])]
        assert dd.params.metric == "hamming" and dd.params.max_distance == 3
        assert dd.params.threshold == 1 - 3 / 64
    missed = check_against_truth(values, got, 3)
    dups = sum(v["verdict"] == "duplicate" for v in got)
    assert dups > 1000 and missed <= dups // 100  # recall at least 0.99 with the defaults


# 10 examples (was 15), as the other families' batch tests: 0.25 s an example, nearly
# all of it the one-document transactions of the loop
@settings(max_examples=10, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 40), st.sampled_from([64, 128]))
def test_the_batch_path_equals_one_by_one(
    tmp_path_factory, seed: int, batch: int, bits: int
) -> None:
    """In batches of `batch` (searched at once) and one document at a time, every
    verdict the same, exact copies and replaced ids included."""
    # 150 strings (300 took 0.5 s an example, most of it the 300 one-document
    # transactions): still 4 to 150 batches, copies of 25 bases inside and across
    # them; the pool of repeated ids shrunk with them (70 for 280), so an example has
    # as many replaced ids as before on average (about 0.37).
    values = fingerprints(150, seed, bits=bits, bases=25)
    rnd = random.Random(seed)
    docs = [
        (f"d{rnd.randrange(70)}" if rnd.random() < 0.05 else i, hex_of(v, bits))
        for i, v in enumerate(values)
    ]
    bulk, one_by_one = batch_and_one_by_one(
        tmp_path_factory.mktemp,
        docs,
        batch,
        metric="hamming",
        bits=bits,
        max_distance=bits // 16,
        seed=seed,
    )
    assert bulk == one_by_one


def test_a_reopened_index_keeps_its_family(tmp_path: Path) -> None:
    with Deduplicator(tmp_path / "idx", metric="hamming", bits=64) as dd:
        assert dd.params.max_distance == 3  # 5% of 64 bits, rounded down
        dd.check("a", "00000000000000ff")
    with Deduplicator(tmp_path / "idx") as dd:  # the stored family
        v = dd.check("b", bytes.fromhex("00000000000000fe"))
        assert (v.verdict, v.duplicate_of, v.to_dict()["distance"]) == ("duplicate", "a", 1.0)
        with pytest.raises(ConfigError, match="not hexadecimal"):
            dd.check("c", "zz000000000000fe")
        with pytest.raises(ConfigError, match="bad_item_length"):
            dd.check("c", "fe")
    with pytest.raises(ParameterMismatchError, match=r"`max_distance` 3\.0"):
        Deduplicator(tmp_path / "idx", max_distance=4)
    with pytest.raises(ParameterMismatchError, match="`metric` hamming"):
        Deduplicator(tmp_path / "idx", metric="jaccard")


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"metric": "hamming"}, "needs `bits`"),
        ({"metric": "hamming", "bits": 60}, "multiple of 8"),
        ({"metric": "hamming", "bits": 64, "max_distance": 64}, "from 0 to 63"),
        ({"metric": "hamming", "bits": 64, "max_distance": 2.5}, "whole number"),
        ({"metric": "hamming", "bits": 64, "item": "text"}, "not text"),
        ({"metric": "hamming", "bits": 64, "max_distance": 3, "threshold": 0.9}, "not both"),
        ({"bits": 64}, "applies to `metric` hamming"),
        ({"item": "bits"}, "needs another `metric`"),
        ({"metric": "overlap"}, "unknown `metric`"),
    ],
)
def test_options_a_family_does_not_take_are_refused(
    tmp_path: Path, options: dict, words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        Deduplicator(tmp_path / "idx", **options)


def test_a_threshold_is_the_similarity_of_the_bar(tmp_path: Path) -> None:
    """`threshold` T stands for the largest d with 1 - d/N >= T."""
    with Deduplicator(tmp_path / "idx", metric="hamming", bits=256, threshold=0.95) as dd:
        assert dd.params.max_distance == 12 and dd.params.threshold == 1 - 12 / 256


def test_the_command_with_bad_items(tmp_path: Path) -> None:
    """`dedup --metric hamming`: one verdict or error record a line, each bad item
    with its own reason, and a second run on the index needs no family options."""
    values = fingerprints(200, seed=3)
    lines = [orjson.dumps({"id": i, "bits": hex_of(v)}) for i, v in enumerate(values)]
    bad = [
        {"id": "short", "bits": "00ff"},
        {"id": "letters", "bits": "zz00000000000000"},
        {"id": "number", "bits": 5},
        {"id": "none"},
        {"id": "other-field", "fingerprint": hex_of(1)},
    ]
    src = tmp_path / "in.jsonl"
    src.write_bytes(b"\n".join(lines + [orjson.dumps(b) for b in bad]) + b"\n")
    out = tmp_path / "out.jsonl"
    r = run(
        "dedup",
        str(src),
        "--index",
        str(tmp_path / "idx"),
        "--output",
        str(out),
        "--metric",
        "hamming",
        "--bits",
        "64",
        "--max-distance",
        "3",
    )
    assert r.returncode == 1, r.stderr.decode()  # (rejected records: exit 1)
    got = [orjson.loads(x) for x in out.read_bytes().splitlines()]
    assert check_against_truth(values, got[:200], 3) <= 2
    reasons = [g.get("error") for g in got[200:]]
    assert reasons == [
        "bad_item_length",
        "bad_item_value",
        "bad_item_type",
        "missing_item",
        "missing_item",
    ]
    assert b"rejected 5" in r.stderr
    again = tmp_path / "again.jsonl"
    src.write_bytes(
        b"".join(
            orjson.dumps({"id": f"x{i}", "fingerprint": hex_of(v)}) + b"\n"
            for i, v in enumerate(values[:50])
        )
    )
    r = run(
        "dedup",
        str(src),
        "--index",
        str(tmp_path / "idx"),
        "--output",
        str(again),
        "--item-field",
        "fingerprint",
    )
    assert r.returncode == 0, r.stderr.decode()
    assert all(orjson.loads(x)["verdict"] == "duplicate" for x in again.read_bytes().splitlines())


def test_a_changelog_restore_rebuilds_the_same_index(tmp_path: Path) -> None:
    """The records a worker mirrors to its changelog, restored into a new index: every
    table the same as the original's, postings included (rebuilt from the stored
    signatures with bit sampling's bands, `sketch.families.lsh_of`)."""
    values = fingerprints(600, seed=9)
    docs = [Document(i, "", None, v.to_bytes(8, "big")) for i, v in enumerate(values)]
    _, params, restored = restore_from_changes(
        tmp_path, docs, metric="hamming", bits=64, max_distance=3
    )
    assert restored == params and params.metric == "hamming"


def test_signatures_read_together_equal_those_read_one_by_one(tmp_path: Path) -> None:
    """`Tables.signatures` (one `getmulti` for a search's candidates): each docno's
    stored signature or none, in the order asked, repeats and unknown ones included."""
    values = fingerprints(300, seed=12)
    with Deduplicator(tmp_path / "idx", metric="hamming", bits=64) as dd:
        dd.check_batch([(i, hex_of(v)) for i, v in enumerate(values)])

        def both(t: Any) -> None:
            for asked in ([5, 3, 3, 800, 0, 299], list(range(0, 300, 7)), [], [900, 901]):
                docnos = np.array(asked, dtype=np.int64)
                found, sigs = t.signatures(docnos)
                for j, d in enumerate(asked):
                    one = t.signature(d)
                    assert bool(found[j]) == (one is not None)
                    if one is not None:
                        assert sigs[j].tobytes() == one

        dd.read(both)
