import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture
def results_dir(tmp_path):
    """A results folder of the test's own (run files + history DB)."""
    out = tmp_path / "results"
    out.mkdir()
    return out
