"""`backup` of an index with sealed segments copies the open index and names the
segments it leaves out; `restore` of that copy gives the same verdicts on the rest
of a stream as the original index (the segments found where the registry says)."""

from __future__ import annotations

from pathlib import Path

from tests.support.cli import corpus, lines, run


def test_backup_names_the_sealed_segments_and_restores_to_the_same_verdicts(
    tmp_path: Path,
) -> None:
    docs = corpus(tmp_path / "all.jsonl", 600, seed=4)
    (tmp_path / "a.jsonl").write_bytes(
        b"".join(ln + b"\n" for ln in (tmp_path / "all.jsonl").read_bytes().splitlines()[:400])
    )
    (tmp_path / "b.jsonl").write_bytes(
        b"".join(ln + b"\n" for ln in (tmp_path / "all.jsonl").read_bytes().splitlines()[400:])
    )
    index, seg = tmp_path / "idx", tmp_path / "seg"
    assert (
        run(
            "dedup",
            str(tmp_path / "a.jsonl"),
            "--index",
            str(index),
            "--output",
            str(tmp_path / "a.out"),
        ).returncode
        == 0
    )
    assert run("seal", "--index", str(index), str(seg)).returncode == 0

    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("mine")
    r = run("backup", "--index", str(index), str(tmp_path / "full"))  # a usage error, as seal's
    assert r.returncode == 2 and b"is not empty; give a new or empty directory" in r.stderr
    r = run("backup", "--index", str(index), str(tmp_path / "copy"))
    assert r.returncode == 0, r.stderr.decode()
    text = r.stdout.decode()
    assert text.startswith("backup: 400 documents")
    assert "not in the copy: 1 sealed segment (" in text and str(seg) in text

    outs = []
    for where in (index, tmp_path / "copy"):
        out = tmp_path / f"{where.name}.out"
        r = run("dedup", str(tmp_path / "b.jsonl"), "--index", str(where), "--output", str(out))
        assert r.returncode == 0, r.stderr.decode()
        outs.append(lines(out))
    assert len(outs[0]) == len(docs) - 400 and outs[1] == outs[0]
    assert any(v["verdict"] == "duplicate" for v in outs[0])
