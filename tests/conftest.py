"""Shared fixtures.  Hypothesis runs more examples in CI (HYPOTHESIS_PROFILE=ci)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "index"
