"""Detection behaviour on a real LMDB index."""

import random
import time
from typing import Any

import numpy as np
import pytest

from streamdedup.config import EngineOptions, IndexParams, ShingleSpec
from streamdedup.engine import prepare
from streamdedup.engine.clock import quorum
from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.engine.prepare import Preparer
from streamdedup.errors import ConfigError
from streamdedup.models import Document, Verdict
from streamdedup.ops.report import index_stats
from streamdedup.sketch.shingle import reference_shingles
from streamdedup.store.keys import MetaKey
from tests.support.truth import best_jaccard_earlier

VOCAB = [f"w{i}" for i in range(5000)]


def words(rnd: random.Random, n: int) -> list[str]:
    return [rnd.choice(VOCAB) for _ in range(n)]


def edit(rnd: random.Random, text: str, rate: float) -> str:
    out = []
    for w in text.split():
        r = rnd.random()
        if r < rate / 2:
            continue
        out.append(rnd.choice(VOCAB) if r < rate else w)
    return " ".join(out)


def replace_words(text: str, *positions: int) -> str:
    out = text.split()
    for p in positions:
        out[p] = "changed"
    return " ".join(out)


def test_verdict_fields_and_clusters(index_dir) -> None:
    rnd = random.Random(1)
    base = " ".join(words(rnd, 300))
    with Deduplicator(index_dir) as dd:
        a = dd.check("a", base)
        b = dd.check("b", replace_words(base, 10, 200))
        c = dd.check("c", replace_words(base, 100, 250))
        d = dd.check("d", base.upper())  # same normalised content
        e = dd.check("e", " ".join(words(rnd, 300)))
    assert a == Verdict("a", "unique", None, "a", None, False)
    assert b.verdict == "duplicate" and b.duplicate_of == "a" and b.cluster == "a"
    assert 0.8 <= b.similarity < 1.0 and not b.exact
    assert c.cluster == "a" and c.duplicate_of in {"a", "b"}
    assert d == Verdict("d", "duplicate", "a", "a", 1.0, True)
    assert e.verdict == "unique" and e.cluster == "e"
    assert b.to_dict() == {
        "id": "b",
        "verdict": "duplicate",
        "duplicate_of": "a",
        "cluster": "a",
        "similarity": b.similarity,
        "exact": False,
    }


def test_best_match_is_chosen(index_dir) -> None:
    rnd = random.Random(2)
    base = " ".join(words(rnd, 400))
    far = edit(rnd, base, 0.08)
    near = edit(rnd, base, 0.01)
    with Deduplicator(index_dir, threshold=0.5) as dd:
        dd.check_batch([("far", far), ("near", near)])
        v = dd.check("new", base)
    assert v.duplicate_of == "near"


def test_documents_see_earlier_ones_of_their_own_batch(index_dir) -> None:
    rnd = random.Random(3)
    base = " ".join(words(rnd, 200))
    with Deduplicator(index_dir) as dd:
        out = dd.check_batch([("x", base), ("y", edit(rnd, base, 0.01)), ("z", base)])
    assert [v.verdict for v in out] == ["unique", "duplicate", "duplicate"]
    assert out[2].exact and out[2].duplicate_of == "x"


def test_replays_are_idempotent_and_changed_content_is_rechecked(index_dir) -> None:
    rnd = random.Random(4)
    first, second = " ".join(words(rnd, 200)), " ".join(words(rnd, 200))
    with Deduplicator(index_dir) as dd:
        v1 = dd.check(1, first)
        v2 = dd.check(2, replace_words(first, 5, 50))
        assert v2.duplicate_of == 1
        again = dd.check(1, first)
        assert again == v1 and dd.counters.replayed == 1
        replaced = dd.check(1, second)  # same id, new content: checked afresh
        assert replaced.verdict == "unique"
        docs = dd.index.read(lambda t: t.count("docs"))
        assert docs == 2
        # the old content of id 1 is gone from the index: a copy of it now matches id 2
        v = dd.check(3, first)
        assert v.duplicate_of == 2 and not v.exact


def test_empty_documents(index_dir) -> None:
    with Deduplicator(index_dir) as dd:
        a = dd.check("a", "")
        b = dd.check("b", " ... !!! ")
        c = dd.check("c", "")
    for v, doc_id in ((a, "a"), (b, "b"), (c, "c")):
        assert v == Verdict(doc_id, "unique", None, doc_id, None, False, reason="empty")
    assert a.to_dict()["reason"] == "empty"


def _ground_truth(texts: list[str], threshold: float) -> list[bool]:
    """Whether each text has an earlier one at Jaccard >= `threshold` on the shingle
    sets of the definition."""
    spec = ShingleSpec()
    sets = [reference_shingles(t, spec) for t in texts]
    return [best >= threshold for best in best_jaccard_earlier(sets)]


def _stream(seed: int, n: int) -> list[str]:
    rnd = random.Random(seed)
    texts: list[str] = []
    for _ in range(n):
        if texts and rnd.random() < 0.5:
            src = rnd.choice(texts)
            kind = rnd.random()
            if kind < 0.6:
                texts.append(edit(rnd, src, rnd.uniform(0.0, 0.3)))
            else:
                cut = src.split()
                texts.append(" ".join(cut[: int(len(cut) * rnd.uniform(0.5, 1.0))]))
        else:
            texts.append(" ".join(words(rnd, rnd.randint(50, 400))))
    return texts


@pytest.mark.parametrize("threshold", [0.5, 0.8])
def test_exact_verification_has_perfect_precision_and_high_recall(index_dir, threshold) -> None:
    texts = _stream(int(threshold * 10), 600)
    truth = _ground_truth(texts, threshold)
    with Deduplicator(index_dir, threshold=threshold) as dd:
        verdicts = dd.check_batch([(i, t) for i, t in enumerate(texts)])
    pred = [v.is_duplicate for v in verdicts]
    tp = sum(p and t for p, t in zip(pred, truth, strict=True))
    assert sum(truth) > 60
    assert tp == sum(pred)  # precision 1.0
    assert tp / sum(truth) >= 0.97


def test_signature_verification_mode(index_dir) -> None:
    texts = _stream(9, 300)
    truth = _ground_truth(texts, 0.8)
    with Deduplicator(index_dir, verify="signature") as dd:
        verdicts = dd.check_batch([(i, t) for i, t in enumerate(texts)])
        assert dd.index.read(lambda t: t.count("texts")) == 0  # no texts stored
    pred = [v.is_duplicate for v in verdicts]
    tp = sum(p and t for p, t in zip(pred, truth, strict=True))
    assert tp / sum(truth) >= 0.85 and tp / sum(pred) >= 0.85


@pytest.mark.slow
def test_hot_buckets_stay_bounded_with_40k_documents_sharing_a_template(index_dir) -> None:
    """40,000 pages share one long template (two thirds of every page, J ~ 0.5
    between any two), so the all-template band values put thousands of documents in
    single LSH buckets.  Every 50th page is a light
    edit of an earlier one; those must still be found, and what one query reads must
    stay within the per-bucket cap."""
    rnd = random.Random(5)
    # the bodies' words drawn by numpy: `words` (random.choice, a word at a time) spent
    # 1.5 of this test's 5 s of CPU drawing the 7.8 million of them
    rng = np.random.default_rng(5)
    template = " ".join(words(rnd, 400))
    cap = 50
    with Deduplicator(index_dir, options=_opts(cap)) as dd:
        bodies: list[str] = []
        expected: dict[int, int] = {}
        for start in range(0, 40_000, 2000):
            batch = []
            drawn = rng.integers(len(VOCAB), size=(2000, 200)).tolist()
            for i in range(start, start + 2000):
                if i % 50 == 49:
                    src = rnd.randrange(len(bodies))
                    body = edit(rnd, bodies[src], 0.01)
                    expected[i] = src
                else:
                    body = " ".join(map(VOCAB.__getitem__, drawn[i - start]))
                bodies.append(body)
                batch.append(Document(i, template + " " + body))
            for v in dd.check_batch(batch):
                doc = int(v.id)
                if doc in expected:
                    assert v.verdict == "duplicate", v
                    assert v.duplicate_of == expected[doc] or v.similarity >= 0.8
                else:
                    assert v.verdict == "unique", v
        bands = dd.params.bands
        assert dd.counters.most_candidates <= bands * cap
    stats = index_stats(str(index_dir))
    assert stats["bucket_sizes"]["largest"][0] > 20 * cap, stats  # the buckets really are hot


def _opts(cap: int):
    from streamdedup.config import EngineOptions

    return EngineOptions(max_bucket_candidates=cap)


def test_replacing_a_document_within_one_batch_leaves_no_stale_postings(index_dir) -> None:
    rnd = random.Random(6)
    old, new = " ".join(words(rnd, 200)), " ".join(words(rnd, 200))
    with Deduplicator(index_dir) as dd:
        first = dd.check_batch([("a", old), ("a", new)])
        assert [v.verdict for v in first] == ["unique", "unique"]
        assert dd.index.read(lambda t: t.count("docs")) == 1
        # nothing indexed holds the old text any more
        assert dd.check("b", replace_words(old, 3)).verdict == "unique"
        assert dd.check("c", replace_words(new, 3)).duplicate_of == "a"
        postings = dd.index.read(lambda t: sum(t.bucket_sizes()))
        assert postings == 3 * dd.params.bands  # a, b and c, each once per band


def stream_with_replacements(seed: int, n: int) -> list[Document]:
    """Near-duplicate families sharing a template (hot buckets), exact copies, and ids
    sent again with changed content -- soon after (often in the same batch) or later."""
    rnd = random.Random(seed)
    template = " ".join(words(rnd, 60))
    texts: list[str] = []
    docs: list[Document] = []
    for i in range(n):
        r = rnd.random()
        if texts and r < 0.35:
            text = edit(rnd, rnd.choice(texts), 0.01)
        elif texts and r < 0.4:
            text = rnd.choice(texts)
        elif r < 0.6:
            text = template + " " + " ".join(words(rnd, 15))
        else:
            text = " ".join(words(rnd, 80))
        texts.append(text)
        if docs and rnd.random() < 0.1:  # an id seen before, new content
            doc_id = docs[max(0, len(docs) - rnd.choice([1, 2, 3, 50]))].id
        else:
            doc_id = f"d{i}"
        docs.append(Document(doc_id, text))
    return docs


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_verdicts_and_postings_do_not_depend_on_batching(tmp_path, seed: int) -> None:
    """A batch reads its buckets ahead and buffers its postings (Tables.batch_postings);
    one document per transaction does neither in effect.  Both must agree, also with
    a candidate cap small enough that which postings count as "newest" matters."""
    docs = stream_with_replacements(seed, 400)
    runs, postings = [], []
    for size in (1, 9, 400):
        opts = EngineOptions(max_bucket_candidates=3)
        with Deduplicator(tmp_path / f"b{size}", options=opts) as dd:
            out: list[Verdict] = []
            for i in range(0, len(docs), size):
                out += dd.check_batch(docs[i : i + size])
            runs.append(out)

            def read(t):
                return t.postings.live()

            postings.append(dd.index.read(read))
    assert runs[0] == runs[1] == runs[2]
    assert postings[0] == postings[1] == postings[2]
    assert 50 < sum(v.is_duplicate for v in runs[0]) < 350


def test_preparation_does_not_depend_on_sub_batches(monkeypatch) -> None:
    rnd = random.Random(4)
    docs = [Document(i, " ".join(words(rnd, rnd.randint(0, 300)))) for i in range(60)]
    docs[7] = Document(7, "")
    preparer = Preparer(IndexParams())
    whole = preparer.prepare(docs)
    monkeypatch.setattr(prepare, "SUB_BATCH_CHARS", 2000)  # a few documents each
    parts = preparer.prepare(docs)
    assert whole.shingles == parts.shingles and 0 in whole.shingles
    assert whole.sig_bytes == parts.sig_bytes and whole.band_keys == parts.band_keys
    assert whole.texts == parts.texts
    assert whole.hashes is not None and parts.hashes is not None
    assert all(whole.hashes.of(i).tolist() == parts.hashes.of(i).tolist() for i in range(len(docs)))


def test_a_document_prepared_again_is_seen_by_the_rest_of_its_batch(tmp_path) -> None:
    rnd = random.Random(12)
    a, c = " ".join(words(rnd, 120)), " ".join(words(rnd, 120))
    with Deduplicator(tmp_path / "i") as dd:
        dd.check("x", a)
        batch = [Document("x", a), Document("z", replace_words(a, 5))]
        prepared = dd.preparer.prepare(batch, known=dd.known)
        assert prepared.resent == {0}
        dd.check("x", c)  # another writer changes "x" before the batch applies
        again_x, z = dd.apply(prepared)
    # "x" is checked again with its batch text, outside the batch's read-ahead; the
    # document after it in the same batch still finds it
    assert again_x.verdict == "unique"
    assert z.duplicate_of == "x"


# ---------------------------------------------------------------- time window (--ttl)

HOUR = 3_600_000
T0 = 1_750_000_000_000  # 2025-06-15: timestamps of 0 or below count as none


def timeline(seed: int, rounds: int, per_round: int) -> list[Document]:
    """Rounds an hour apart; each round re-emits edited copies of the previous
    round's documents (as a crawler revisiting pages) and some new ones."""
    rnd = random.Random(seed)
    docs: list[Document] = []
    previous: list[str] = []
    for r in range(rounds):
        current = []
        for j in range(per_round):
            if previous and rnd.random() < 0.5:
                text = edit(rnd, rnd.choice(previous), 0.01)
            else:
                text = " ".join(words(rnd, 150))
            current.append(text)
            docs.append(Document(f"r{r}-{j}", text, T0 + r * HOUR))
        previous = current
    return docs


def test_ttl_forgets_old_documents(tmp_path) -> None:
    rnd = random.Random(5)
    base = " ".join(words(rnd, 200))
    opts = EngineOptions(ttl_ms=2 * HOUR, clock_window=1)  # each message moves the clock
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        first = dd.check("a", base, timestamp_ms=T0)
        near = dd.check("b", replace_words(base, 5), timestamp_ms=T0 + HOUR)
        same_text = dd.check("c", base, timestamp_ms=T0 + HOUR + 1)
        later = dd.check("d", replace_words(base, 50), timestamp_ms=T0 + 4 * HOUR)
        again = dd.check("a", base, timestamp_ms=T0 + 4 * HOUR + 1)
        count = dd.index.read(lambda t: t.count("docs"))
    assert first.verdict == "unique"
    assert near.duplicate_of == "a" and same_text.exact
    # everything before 2h is gone: a near copy of it is unique again
    assert later.verdict == "unique" and later.cluster == "d"
    # the same id with the same content, expired: checked again, now a copy of d
    assert again.duplicate_of == "d" and not again.exact
    assert count == 2
    assert dd.counters.expired == 3


def test_ttl_bounds_the_index_over_a_long_timeline(tmp_path) -> None:
    docs = timeline(7, rounds=24, per_round=150)
    opts = EngineOptions(ttl_ms=3 * HOUR)
    sizes = []
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        verdicts = []
        for r in range(24):
            verdicts += dd.check_batch(docs[r * 150 : (r + 1) * 150])
            sizes.append(
                dd.index.read(
                    lambda t: (t.count("docs"), sum(t.bucket_sizes()), t.postings.stored())
                )
            )
    stats = index_stats(str(tmp_path / "i"))
    # a window of 3 hours holds the current round and the three before it
    assert max(n for n, _, _ in sizes) <= 4 * 150
    assert sizes[-1][0] == 4 * 150
    assert sizes[-1][1] <= 4 * 150 * dd.params.bands
    # expired postings are purged from the runs, not only hidden: the disk stays bounded
    assert max(stored for _, _, stored in sizes) <= 2 * 4 * 150 * dd.params.bands
    assert stats["documents"] == 4 * 150
    # revisits of the previous round are still caught inside the window
    dups = sum(v.is_duplicate for v in verdicts[150:])
    assert dups > 0.35 * len(verdicts[150:])


def test_ttl_verdicts_do_not_depend_on_batching_or_expiry_budget(tmp_path) -> None:
    docs = timeline(11, rounds=10, per_round=60)
    runs = []
    for name, budget, size in (("one", 100_000, 600), ("small", 1, 7), ("mid", 5, 100)):
        opts = EngineOptions(ttl_ms=2 * HOUR, max_expire_per_batch=budget)
        with Deduplicator(tmp_path / name, options=opts) as dd:
            out = []
            for i in range(0, len(docs), size):
                out += dd.check_batch(docs[i : i + size])
            runs.append(out)
    assert runs[0] == runs[1] == runs[2]
    assert sum(v.is_duplicate for v in runs[0]) > 100


YEAR_2100 = 4_102_444_800_000


def test_ttl_one_far_future_timestamp_does_not_wipe_the_window(tmp_path) -> None:
    """300 documents, one dated 2100, then exact copies of the 300: the copies are
    duplicates (the outlier moved no clock), and the outlier itself is stored as of
    the stream time, so it expires with its neighbours."""
    rnd = random.Random(21)
    base = int(time.time() * 1000) - 5 * HOUR  # in the past: a replay, or a lagging consumer
    texts = [" ".join(words(rnd, 60)) for _ in range(300)]
    with Deduplicator(tmp_path / "i", options=EngineOptions(ttl_ms=HOUR)) as dd:
        dd.check_batch([Document(f"a{j}", t, base + j) for j, t in enumerate(texts)])
        outlier = dd.check("future", " ".join(words(rnd, 60)), timestamp_ms=YEAR_2100)
        copies = dd.check_batch(
            [Document(f"b{j}", t, base + 1000 + j) for j, t in enumerate(texts)]
        )
        assert outlier.verdict == "unique"
        stored = dd.index.read(lambda t: t.record(300))
        assert stored is not None and stored.doc_id == "future"
        assert stored.timestamp_ms == base + 299 - (quorum(31) - 1)  # the stream time then
        assert all(v.exact and v.duplicate_of == f"a{j}" for j, v in enumerate(copies))
        assert dd.counters.clock_outliers == 1
        assert dd.last_batch.clock_outliers == 0
        clock = dd.index.read(lambda t: t.meta(MetaKey.CLOCK))
        assert clock == base + 1299 - (quorum(31) - 1)  # a majority of the last 31
        assert dd.index.read(lambda t: t.count("docs")) == 601
        # an hour of stream time later, the outlier has gone with the first 300
        later = [
            Document(f"later{j}", " ".join(words(rnd, 60)), base + 2 * HOUR)
            for j in range(quorum(31))
        ]
        dd.check_batch(later)
        ids = dd.index.read(lambda t: {t.record(n).doc_id for n in range(620) if t.record(n)})
    assert ids == {d.id for d in later}


def test_clock_skew_bound_is_on_the_future_side_only(tmp_path) -> None:
    rnd = random.Random(22)
    now = int(time.time() * 1000)
    opts = EngineOptions(ttl_ms=HOUR, max_clock_skew_ms=HOUR, clock_window=1)
    with Deduplicator(tmp_path / "i", options=opts) as dd:
        dd.check("old", " ".join(words(rnd, 60)), timestamp_ms=T0)  # long past: trusted
        dd.check("ahead", " ".join(words(rnd, 60)), timestamp_ms=now + HOUR // 2)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == now + HOUR // 2
        dd.check("far", " ".join(words(rnd, 60)), timestamp_ms=now + 2 * HOUR)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == now + HOUR // 2
        assert dd.outliers == [(0, now + 2 * HOUR)]
        assert dd.counters.clock_outliers == 1
    # without a bound, the clock follows any timestamp (the behaviour asked for by "off")
    opts = EngineOptions(ttl_ms=HOUR, max_clock_skew_ms=None, clock_window=1)
    with Deduplicator(tmp_path / "j", options=opts) as dd:
        dd.check("far", " ".join(words(rnd, 60)), timestamp_ms=YEAR_2100)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == YEAR_2100
        assert dd.counters.clock_outliers == 0


def test_a_clock_moved_by_an_outlier_before_the_bound_is_repaired(tmp_path) -> None:
    """An index whose clock an outlier moved (without the bound, as before it existed)
    takes its clock back from the newest stored timestamp within the bound, instead of
    expiring every new document at once until 2100."""
    rnd = random.Random(24)
    now = int(time.time() * 1000)
    unbounded = EngineOptions(ttl_ms=HOUR, max_clock_skew_ms=None, clock_window=1)
    with Deduplicator(tmp_path / "i", options=unbounded) as dd:
        dd.check("a", " ".join(words(rnd, 60)), timestamp_ms=now - 10)
        dd.check("future", " ".join(words(rnd, 60)), timestamp_ms=YEAR_2100)
        dd.check("b", " ".join(words(rnd, 60)), timestamp_ms=now - 5)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == YEAR_2100
    texts = [" ".join(words(rnd, 60)) for _ in range(50)]
    with Deduplicator(tmp_path / "i", options=EngineOptions(ttl_ms=HOUR)) as dd:
        dd.check_batch([Document(f"c{j}", t, now + j) for j, t in enumerate(texts)])
        copies = dd.check_batch([Document(f"d{j}", t, now + 100 + j) for j, t in enumerate(texts)])
        clock = dd.index.read(lambda t: t.meta(MetaKey.CLOCK))
    assert all(v.exact and v.duplicate_of == f"c{j}" for j, v in enumerate(copies))
    assert clock == now + 149 - (quorum(31) - 1)  # the 2100 timestamp was forgotten too


def test_a_window_of_timestamps_moved_by_outliers_before_the_bound_is_repaired(tmp_path) -> None:
    """As above, with a majority of the window dated 2100 (no bound, so trusted): the
    repair forgets those recent timestamps too, also when the first batch after it
    carries no timestamps, so the next timed batch does not take the clock back to
    2100."""
    rnd = random.Random(28)
    now = int(time.time() * 1000)
    unbounded = EngineOptions(ttl_ms=HOUR, max_clock_skew_ms=None)
    with Deduplicator(tmp_path / "i", options=unbounded) as dd:
        future = [Document(f"f{j}", " ".join(words(rnd, 60)), YEAR_2100) for j in range(quorum(31))]
        dd.check_batch(future)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == YEAR_2100
    texts = [" ".join(words(rnd, 60)) for _ in range(50)]
    with Deduplicator(tmp_path / "i", options=EngineOptions(ttl_ms=HOUR)) as dd:
        dd.check("untimed", " ".join(words(rnd, 60)))
        dd.check_batch([Document(f"c{j}", t, now + j) for j, t in enumerate(texts)])
        copies = dd.check_batch([Document(f"d{j}", t, now + 100 + j) for j, t in enumerate(texts)])
        clock = dd.index.read(lambda t: t.meta(MetaKey.CLOCK))
    assert all(v.exact and v.duplicate_of == f"c{j}" for j, v in enumerate(copies))
    assert clock == now + 149 - (quorum(31) - 1)


MINUTE = 60_000


@pytest.mark.parametrize(
    ("ttl", "stored_before", "ahead", "burst"),
    [
        (HOUR, 10 * MINUTE, 55 * MINUTE, 1),  # issue 35: inside the default skew bound
        (HOUR, 10 * MINUTE, 55 * MINUTE, quorum(31) - 1),  # a burst short of a majority
        (MINUTE, 10_000, 30 * MINUTE, 1),  # a TTL shorter than the skew bound
    ],
)
def test_messages_ahead_of_the_bulk_do_not_wipe_the_window(
    tmp_path, ttl: int, stored_before: int, ahead: int, burst: int
) -> None:
    """200 documents, then `burst` messages dated `ahead` of them (inside
    --max-clock-skew, so not outliers), then exact copies of the 200: the copies are
    duplicates.  On d62e5e5 the newest timestamp was stream time: one message dated
    +55 min expired everything stored 10 minutes before, and every copy was unique."""
    rnd = random.Random(25)
    now = int(time.time() * 1000)
    texts = [" ".join(words(rnd, 60)) for _ in range(200)]
    originals = [Document(f"a{j}", t, now - stored_before + j) for j, t in enumerate(texts)]
    early = [Document(f"early{j}", " ".join(words(rnd, 60)), now + ahead) for j in range(burst)]
    copies = [Document(f"b{j}", t, now + j) for j, t in enumerate(texts)]
    with Deduplicator(tmp_path / "i", options=EngineOptions(ttl_ms=ttl)) as dd:
        dd.check_batch(originals)
        dd.check_batch(early)
        verdicts = dd.check_batch(copies)
        clock = dd.index.read(lambda t: t.meta(MetaKey.CLOCK))
        stored = dd.index.read(lambda t: t.record(200))
    assert all(v.exact and v.duplicate_of == f"a{j}" for j, v in enumerate(verdicts))
    assert dd.counters.expired == 0 and dd.counters.clock_outliers == 0
    assert clock < now + 200  # the bulk's time, not the early messages'
    assert stored is not None and stored.timestamp_ms == now + ahead  # kept as dated


def test_a_majority_of_the_stream_moves_stream_time(tmp_path) -> None:
    """When the bulk of the stream is ahead (a quorum of the last 31 timestamps), it
    is the stream's time: what is older than the window expires."""
    rnd = random.Random(26)
    now = int(time.time() * 1000)
    texts = [" ".join(words(rnd, 60)) for _ in range(40)]
    with Deduplicator(tmp_path / "i", options=EngineOptions(ttl_ms=HOUR)) as dd:
        dd.check_batch([Document(f"a{j}", t, now - 2 * HOUR + j) for j, t in enumerate(texts)])
        moved = [Document(f"m{j}", " ".join(words(rnd, 60)), now + j) for j in range(quorum(31))]
        dd.check_batch(moved)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == now
        again = dd.check_batch([Document(f"b{j}", t, now + 100) for j, t in enumerate(texts)])
    assert all(v.verdict == "unique" for v in again)
    assert dd.counters.expired == 40


def test_stream_time_is_the_same_whatever_the_batching_and_restarts(tmp_path) -> None:
    """The rule reads the timestamps in order and keeps its state in the index: one
    batch, batches of 7, and batches of one with the engine closed and opened again
    every 50 documents (a worker restarted after a crash) give the same verdicts,
    stored timestamps and stream time, with messages ahead of the rest sprinkled in."""
    rnd = random.Random(27)
    now = int(time.time() * 1000)
    pool = [" ".join(words(rnd, 50)) for _ in range(80)]
    docs = []
    for i in range(600):
        ts = now - 3 * HOUR + i * 10_000
        if rnd.random() < 0.1:  # a producer 40 minutes ahead, now and then
            ts += 40 * MINUTE
        text = rnd.choice(pool) if rnd.random() < 0.6 else " ".join(words(rnd, 50))
        docs.append(Document(f"d{i}", text, ts))
    opts = EngineOptions(ttl_ms=HOUR, max_expire_per_batch=5)

    def state(dd: Deduplicator) -> Any:
        return dd.index.read(lambda t: (t.meta(MetaKey.CLOCK), t.meta(MetaKey.RECENT)))

    runs = []
    for name, size, reopen in (("one", 600, 600), ("seven", 7, 600), ("single", 1, 50)):
        out: list[Verdict] = []
        for start in range(0, len(docs), reopen):
            with Deduplicator(tmp_path / name, options=opts) as dd:
                for i in range(start, min(start + reopen, len(docs)), size):
                    out += dd.check_batch(docs[i : min(i + size, start + reopen)])
        with Deduplicator(tmp_path / name, options=opts) as dd:
            runs.append((out, state(dd)))
    assert runs[0] == runs[1] == runs[2]
    verdicts, (clock, recent) = runs[0]
    assert sum(v.is_duplicate for v in verdicts) > 100
    # the early producer never moved it past the others
    assert len(recent) == 31 and clock <= now - 3 * HOUR + 599 * 10_000


def test_clock_window_one_is_the_newest_timestamp(tmp_path) -> None:
    with Deduplicator(tmp_path / "i", options=EngineOptions(clock_window=1)) as dd:
        dd.check("a", "some text here", T0)
        dd.check("b", "other text there", T0 + HOUR)
        assert dd.index.read(lambda t: t.meta(MetaKey.CLOCK)) == T0 + HOUR
    with pytest.raises(ConfigError, match="`clock_window` must be at least 1"):
        Deduplicator(tmp_path / "j", options=EngineOptions(clock_window=0))


@pytest.mark.parametrize("missing", [None, 0, -1])
def test_ttl_documents_without_a_timestamp_never_expire(tmp_path, missing) -> None:
    """Kafka's "no timestamp" is -1 (some clients send 0): such documents never
    expire, as those without any timestamp."""
    rnd = random.Random(23)
    texts = [" ".join(words(rnd, 60)) for _ in range(20)]
    with Deduplicator(tmp_path / "i", options=EngineOptions(ttl_ms=HOUR)) as dd:
        dd.check_batch([Document(f"a{j}", t, missing) for j, t in enumerate(texts)])
        dd.check("x", " ".join(words(rnd, 60)), timestamp_ms=T0)
        copies = dd.check_batch([Document(f"b{j}", t, T0 + 10 * HOUR) for j, t in enumerate(texts)])
        stored = dd.index.read(lambda t: [t.record(n).timestamp_ms for n in range(20)])
        clock = dd.index.read(lambda t: t.meta(MetaKey.CLOCK))
    assert all(v.exact and v.duplicate_of == f"a{j}" for j, v in enumerate(copies))
    assert stored == [None] * 20
    assert clock == T0 + 10 * HOUR
    assert dd.counters.expired == 1  # "x" only


def test_known_documents_skip_preparation_and_survive_a_race(tmp_path) -> None:
    rnd = random.Random(9)
    a, b = " ".join(words(rnd, 120)), " ".join(words(rnd, 120))
    with Deduplicator(tmp_path / "i") as dd:
        first = dd.check("x", a)
        dd.check("y", b)
        prepared = dd.preparer.prepare([Document("x", a), Document("y", b)], known=dd.known)
        assert prepared.resent == {0, 1}
        assert prepared.shingles == [0, 0]  # nothing computed for them
        # meanwhile another writer replaces "y" with a copy of "x"
        dd.check("y", replace_words(a, 3))
        again_x, again_y = dd.apply(prepared)
    assert again_x == first
    # "y" changed under the prepared batch: it was prepared again and checked afresh
    assert again_y.verdict == "unique" and again_y.cluster == "y"


def test_the_collector_is_paused_only_for_the_transaction(tmp_path) -> None:
    """`apply` pauses Python's cyclic garbage collector while the batch's transaction
    runs (a fifth of its time was the collector's walks), and leaves it as it was:
    running after the batch, also when the batch fails; paused if the caller paused it."""
    import gc

    seen: list[bool] = []
    with Deduplicator(tmp_path / "i") as dd:
        docs = [Document(f"d{i}", f"text number {i} of the batch") for i in range(5)]
        assert gc.isenabled()
        dd.apply(
            dd.preparer.prepare(docs[:2]), in_transaction=lambda t, v: seen.append(gc.isenabled())
        )
        assert seen == [False] and gc.isenabled()

        def fail(t, v) -> None:
            raise RuntimeError("the caller's own state could not be recorded")

        with pytest.raises(RuntimeError):
            dd.apply(dd.preparer.prepare(docs[2:3]), in_transaction=fail)
        assert gc.isenabled()
        gc.disable()
        try:
            dd.apply(dd.preparer.prepare(docs[3:]))
            assert not gc.isenabled()
        finally:
            gc.enable()
