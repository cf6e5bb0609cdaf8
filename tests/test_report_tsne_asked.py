"""The report draws the yoked t-SNE only when asked (`report --tsne`): it was about a quarter of
the main job's report time on 2 cores, and no table or answer reads it (docs/speed.md)."""

import numpy as np
import pytest

from bench.runs import store
from tests.conftest import cli
from tests.test_report_tables import make_run


@pytest.fixture
def two_losses(tmp_path):
    """Two finished runs of two losses with the same test points' embeddings."""
    results = tmp_path / "results"
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 10)
    for loss in ("nngk", "contrastive"):
        emb = rng.normal(size=(len(labels), 8)).astype(np.float32)
        make_run(results, loss, loss=loss, arrays={store.EMBEDDINGS: (emb, labels)})
    return results


@pytest.mark.parametrize("asked", [False, True])
def test_the_tsne_is_drawn_only_when_asked(two_losses, tmp_path, asked):
    out = tmp_path / "report"
    args = ["report", "--results", str(two_losses), "--out", str(out)]
    result = cli(*args, *(["--tsne"] if asked else []))
    assert result.exit_code == 0, result.output
    assert (out / "digits-tsne.png").is_file() == asked
    assert (out / "digits.md").is_file()  # the tables either way
    assert ("digits-tsne.png" in (out / "index.html").read_text()) == asked
