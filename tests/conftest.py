"""What the tests share: the command line called in this process, a run that trains in seconds,
and the built-in glyphs set's baselines evaluated once for the whole session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bench.cli import main

# A run that trains in seconds: the digits set (8 x 8 images), 2 epochs, a 16-d embedding.
FAST = ["--dataset", "digits", "--epochs", "2", "--dims", "16"]


def cli(*args, catch_exceptions: bool = False) -> Result:
    """`nngk-bench ARGS` in this process, through click's test runner (arguments as strings;
    an exception other than SystemExit reaches the test unless `catch_exceptions`)."""
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=catch_exceptions)


def copy_baselines(source: Path, results: Path) -> None:
    """The finished baselines (`*-untrained-*`) of `source` into `results`: a run there finds
    its data set's baselines finished and skips evaluating them again."""
    results.mkdir(parents=True, exist_ok=True)
    for baseline in Path(source).glob("*-untrained-*"):
        shutil.copytree(baseline, results / baseline.name)


@pytest.fixture(scope="session")
def glyphs_baselines(tmp_path_factory) -> Path:
    """A results folder holding only the built-in glyphs set's two baselines (raw inputs, the
    small CNN untrained), as every run with the glyphs preset's network and seed 0 writes them
    first: tests that train such runs copy them in (copy_baselines) instead of evaluating them
    once each."""
    from bench.train.baseline import run_baseline
    from bench.train.presets import make_configs

    results = tmp_path_factory.mktemp("glyphs-baselines")
    (cfg,) = make_configs("glyphs", "contrastive", (16,), {}, seed=0)
    run_baseline(cfg, results)
    return results
