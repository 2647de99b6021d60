import lmdb
import pytest

from streamdedup.engine.deduplicator import Deduplicator
from streamdedup.engine.run import BatchRun
from streamdedup.errors import IndexOpenError, ParameterMismatchError
from streamdedup.models import Document, Record
from streamdedup.store.index import Index
from streamdedup.store.keys import MetaKey, id_key
from streamdedup.store.tables import Tables


def test_parameters_are_stored_and_mismatches_refused(index_dir) -> None:
    with Deduplicator(index_dir, threshold=0.7, num_perm=64, shingle="char:4") as dd:
        assert (dd.params.threshold, dd.params.num_perm, str(dd.params.shingle)) == (
            0.7,
            64,
            "char:4",
        )
    with Deduplicator(index_dir) as dd:  # nothing asked: the stored parameters apply
        assert dd.params.num_perm == 64 and dd.params.threshold == 0.7
    with pytest.raises(ParameterMismatchError) as err:
        Deduplicator(index_dir, num_perm=128)
    assert "`num_perm` 64" in str(err.value) and "`num_perm` 128" in str(err.value)
    with pytest.raises(ParameterMismatchError, match="`shingle` word:5"):
        Deduplicator(index_dir, shingle="word:5")


def test_an_index_of_another_format_is_refused_with_a_way_out(index_dir) -> None:
    with Deduplicator(index_dir) as dd:
        dd.check("a", "some words to index here and there")

        def downgrade(t: Tables) -> None:
            params = t.meta(MetaKey.PARAMS)
            del params["format"]  # as written before formats were recorded
            t.set_meta(MetaKey.PARAMS, params)

        dd.index.write(downgrade)
    with pytest.raises(IndexOpenError, match=r"format 1.*[Rr]ebuild"):
        Deduplicator(index_dir)


def test_map_grows_by_itself(index_dir) -> None:
    from streamdedup.config import EngineOptions

    small = EngineOptions(map_size=256 * 1024)
    with Deduplicator(index_dir, options=small) as dd:
        docs = [
            Document(i, f"document number {i} " + "padding words here " * 50) for i in range(600)
        ]
        for start in range(0, 600, 200):
            dd.check_batch(docs[start : start + 200])
        assert dd.index.env.info()["map_size"] > 256 * 1024
        assert dd.index.read(lambda t: t.count("docs")) == 600


def test_map_grows_before_a_batch_rather_than_redoing_it(tmp_path) -> None:
    from streamdedup.store.index import MAP_FILL, Index

    index = Index(tmp_path / "idx", map_size=1 << 20)

    def used_share() -> float:
        info = index.env.info()
        return (info["last_pgno"] + 1) * index.env.stat()["psize"] / info["map_size"]

    n = 0
    while used_share() <= MAP_FILL:
        index.write(lambda t, n=n: t.set_meta(f"filler{n}", bytes(20_000)))
        n += 1
    size = index.env.info()["map_size"]
    runs: list[int] = []
    index.write(lambda t: runs.append(1))
    assert index.env.info()["map_size"] == 2 * size
    assert runs == [1]  # the batch ran once
    index.close()


def test_failed_batch_leaves_no_trace(index_dir, monkeypatch) -> None:
    with Deduplicator(index_dir) as dd:
        dd.check("a", "the first document of the index, long enough to matter")
        dd.bulk = False  # every document one by one: fail at the third
        calls = {"n": 0}
        real = BatchRun._check_one

        def failing(self, *args):
            calls["n"] += 1
            if calls["n"] == 3:
                raise RuntimeError("crash in the middle of a batch")
            return real(self, *args)

        monkeypatch.setattr(BatchRun, "_check_one", failing)
        with pytest.raises(RuntimeError):
            dd.check_batch([("b", "second document text here"), ("c", "third one"), ("d", "x y z")])
        assert dd.index.read(lambda t: t.count("docs")) == 1
        assert dd.index.read(lambda t: t.docno_for_id(id_key("b"))) is None


def test_failed_batch_after_its_bulk_writes_leaves_no_trace(index_dir, monkeypatch) -> None:
    """The documents decided in bulk are written, then the batch fails: none stays."""
    with Deduplicator(index_dir) as dd:
        dd.check("a", "the first document of the index, long enough to matter")
        real = BatchRun._store_bulk

        def failing(*args):
            real(*args)
            raise RuntimeError("crash after the bulk writes")

        monkeypatch.setattr(BatchRun, "_store_bulk", failing)
        with pytest.raises(RuntimeError):
            dd.check_batch([("b", "second document text here"), ("c", "third one"), ("d", "x y z")])
        assert dd.index.read(lambda t: t.count("docs")) == 1
        assert dd.index.read(lambda t: t.docno_for_id(id_key("b"))) is None
        assert dd.counters.bulk == 1  # only "a"'s batch counted


def test_missing_index_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(IndexOpenError, match="no index"):
        Index(tmp_path / "nothing", readonly=True)


def test_ids_keep_their_type_and_long_ids_fit(index_dir) -> None:
    assert id_key(1) != id_key("1")
    long_id = "https://example.com/" + "a" * 2000
    assert len(id_key(long_id)) < 511
    with Deduplicator(index_dir) as dd:
        v = dd.check(long_id, "some text for a very long id")
        assert v.id == long_id
        assert dd.check(long_id, "some text for a very long id") == v


def test_lmdb_is_a_real_environment_on_disk(index_dir) -> None:
    with Deduplicator(index_dir) as dd:
        dd.check("x", "hello world")
    env = lmdb.open(str(index_dir), readonly=True, max_dbs=10)
    with env.begin() as txn:
        names = {k for k, _ in txn.cursor()}
    env.close()
    assert {b"postings", b"docs", b"ids", b"meta", b"sigs"} <= names


def test_full_durability_syncs_every_commit(index_dir) -> None:
    from streamdedup.config import EngineOptions

    with Deduplicator(index_dir, options=EngineOptions(durability="full")) as dd:
        dd.check("a", "durable words in a durable document")
        flags = dd.index.env.flags()
        assert flags["sync"] and flags["writemap"]
    with Deduplicator(index_dir) as dd:
        assert not dd.index.env.flags()["sync"]
        assert dd.check("a", "durable words in a durable document").verdict == "unique"
        assert dd.counters.replayed == 1


def _record(docno: int) -> Record:
    return Record(f"d{docno}", 0, None, f"d{docno}", None, False, b"%016d" % docno, None, None, 1)


def test_batch_postings_answer_like_the_stored_buckets(tmp_path) -> None:
    """Inside a batch, postings are read ahead and buffered (Tables.batch_postings);
    every query must still see the `cap` newest postings of each bucket as if each
    document had been written at once, removals included."""
    hot, cold, other = b"H" * 8, b"C" * 8, b"O" * 8
    index = Index(tmp_path / "i")

    def put(t: Tables, docno: int, keys: list[bytes]) -> None:
        t.put_document(docno, b"s%d" % docno, _record(docno), b"sig", keys, True)

    def stored(t: Tables) -> None:
        for d in range(5):
            put(t, d, [hot])
        put(t, 5, [cold])

    index.write(stored)

    row, cold_row = [hot, other], [cold, other]

    def batch(t: Tables) -> list[set[int]]:
        seen = []
        # the rows of the batch's documents: 6, 7, one that only queries, another
        t.batch_postings([b"".join(r) for r in (row, row, row, cold_row)], cap=3)
        seen.append(set(t.candidates(row, 3)))  # read ahead: the stored newest
        put(t, 6, row)
        put(t, 7, row)
        seen.append(set(t.candidates(row, 3)))  # buffered ones are the newest
        t.remove_document(7, b"s7", row)  # a buffered document goes
        t.remove_document(4, b"s4", [hot])  # and a stored one: read that bucket again
        seen.append(set(t.candidates(row, 3)))
        seen.append(set(t.candidates(cold_row, 3)))
        put(t, 8, [b"X" * 8, cold])  # keys outside the read-ahead (prepared again)
        seen.append(set(t.candidates(cold_row, 3)))
        t.flush_postings()
        seen.append(set(t.candidates([hot], 10)))  # written: plain reads again
        return seen

    assert index.write(batch) == [
        {2, 3, 4},
        {4, 6, 7},
        {2, 3, 6},
        {5, 6},
        {5, 6, 8},
        {0, 1, 2, 3, 6},
    ]
    index.close()
