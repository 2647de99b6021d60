"""The layout's rules, checked on every run: the layer contracts in pyproject.toml
(`lint-imports`), the public API's surface, and the size of the rooms (a module a
reader can hold in mind, a function that fits on a screen)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import streamdedup

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_hold() -> None:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("import-linter is not installed (it is a test dependency)")
    done = subprocess.run(
        [exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert ", 0 broken." in done.stdout


def test_public_api_is_pinned() -> None:
    assert sorted(streamdedup.__all__) == [
        "ConfigError",
        "Deduplicator",
        "Document",
        "IndexOpenError",
        "ParameterMismatchError",
        "Rejected",
        "StreamDedupError",
        "Verdict",
        "__version__",
        "page_text",
        "read_warc",
    ]
    for name in streamdedup.__all__:
        assert hasattr(streamdedup, name), name


MODULE_LINES = 500  # a module a newcomer can read in one sitting
FUNCTION_LINES = 80  # a function that fits on a screen


def oversized(root: Path, module_lines: int, function_lines: int) -> list[str]:
    """Modules of `root` over `module_lines` lines, and functions (from `def` to their
    last line, decorators not counted) over `function_lines`."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(root.parent).as_posix()
        if (n := source.count("\n")) > module_lines:
            found.append(f"{name}: {n} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > function_lines:
                    found.append(f"{name}:{node.lineno} {node.name}(): {length} lines")
    return found


def test_modules_and_functions_stay_small() -> None:
    assert oversized(ROOT / "streamdedup", MODULE_LINES, FUNCTION_LINES) == []


def test_the_size_rule_sees_what_it_must(tmp_path: Path) -> None:
    """The scan itself: a long module and a long method are found, a short one not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(5))
    (pkg / "short.py").write_text(f"def f():\n{body}\n")
    method = body.replace("    ", "        ")
    (pkg / "long.py").write_text(f"class C:\n    def g(self):\n{method}\n" + "\n" * 20)
    assert oversized(pkg, 10, 100) == ["pkg/long.py: 27 lines"]
    assert oversized(pkg, 100, 5) == ["pkg/long.py:2 g(): 6 lines", "pkg/short.py:1 f(): 6 lines"]
