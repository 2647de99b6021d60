"""Sealed segments of every similarity family (DESIGN.md "Items and similarity
families": the family travels with segments): an index sealed along the way gives
the verdicts of one index over the same stream -- sealed locally through the Python
API for each family, and for vectors served by `segment-server` processes over the
real broker (a probe asks for the candidates near the family's bar, read on
MinHash's scale: `sealing.probe_cut`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from streamdedup.engine.deduplicator import Deduplicator
from tests.engine.sealed.test_equality import remote_run, single_index
from tests.engine.test_containment import pages
from tests.engine.test_cosine_text import texts
from tests.engine.test_hamming import fingerprints, hex_of
from tests.engine.test_sets import baskets
from tests.engine.test_vectors import clustered
from tests.support.segments import assert_same_verdicts


def items(family: str) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A family's options and a stream of 600 items with many near duplicates."""
    if family == "hamming":
        return {"metric": "hamming", "bits": 64, "max_distance": 3}, [
            (str(i), hex_of(v)) for i, v in enumerate(fingerprints(600, seed=2))
        ]
    if family == "set":
        return {"item": "set", "threshold": 0.7}, [
            (str(i), s) for i, s in enumerate(baskets(600, seed=2))
        ]
    if family == "containment":
        return {"metric": "containment", "shingle": "word:3"}, [
            (str(i), t) for i, t in enumerate(pages(600, seed=2))
        ]
    if family == "cosine-text":
        return {"metric": "cosine", "item": "text", "shingle": "word:3"}, [
            (str(i), t) for i, t in enumerate(texts(600, seed=2))
        ]
    rows = clustered(600, seed=2, dim=16)
    bar = {"threshold": 0.9} if family == "cosine" else {"max_distance": 1.5}
    return {"metric": family, "dim": 16, **bar}, [(str(i), r) for i, r in enumerate(rows)]


def verdicts(
    path: Path, options: dict[str, Any], stream: list[tuple[str, Any]], seals: set[int]
) -> list[dict[str, Any]]:
    out = []
    with Deduplicator(path, **options) as dd:
        for k in range(0, len(stream), 50):
            if k in seals:
                dd.seal()
            out += [v.to_dict() for v in dd.check_batch(stream[k : k + 50])]
    return out


@pytest.mark.parametrize(
    "family", ["hamming", "cosine", "euclidean", "set", "cosine-text", "containment"]
)
def test_every_family_sealed_locally_gives_the_verdicts_of_one_index(
    tmp_path: Path, family: str
) -> None:
    options, stream = items(family)
    one = verdicts(tmp_path / "one", options, stream, set())
    sealed = verdicts(tmp_path / "sealed", options, stream, {150, 300, 450})
    assert sum(v["verdict"] == "duplicate" for v in one) > 100
    assert sealed == one


@pytest.mark.integration
def test_vectors_on_remote_segments(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`dedup --metric cosine` over slices with `seal --remote` between them, each
    segment answered by a `segment-server` process: one index's verdicts."""
    rows = clustered(900, seed=6, dim=16)
    docs = [{"id": str(i), "vector": r.tolist()} for i, r in enumerate(rows)]
    family = ("--metric", "cosine", "--dim", "16", "--threshold", "0.9", "--batch-size", "100")
    ref = single_index(docs, tmp_path / "one", *family)
    got, _ = remote_run(docs, tmp_path / "remote", [300, 600], kafka_bootstrap, *family)
    assert sum(v["verdict"] == "duplicate" for v in ref) > 300
    assert_same_verdicts(got, ref)
    assert orjson.dumps(got) == orjson.dumps(ref)  # (the cosines to the last bit)
