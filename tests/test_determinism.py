"""Runs are bit-identical across processes (issue 22): every loss, and the triplet loss with
every miner, trained on tiny glyphs in two separate Python processes at once (each its own
hash seed, so that no set or dict order can differ unseen), writes the same history.csv losses
and the same test embeddings to the bit; so does NNGK at 512-d, the reported case's size.

Each process runs all the runs one after the other through the command line (`bench.cli`'s
main, as `nngk-bench run` does), which keeps the file to two interpreter starts. The two
processes share the machine's threads: their timing differs, their results must not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

TINY = "glyphs:classes=16,instances=10,size=12"  # 8 training classes of 8 + 2 validation images
COMMON = ["--dataset", TINY, "--epochs", "1", "--batch-size", "16"]
# name -> (loss, miner, dims)
RUNS = {
    "bce-pair": ("bce-pair", None, 8),
    "contrastive": ("contrastive", None, 8),
    "contrastive-centroid": ("contrastive-centroid", None, 8),
    "contrastive-squared": ("contrastive-squared", None, 8),
    "lifted": ("lifted", None, 8),
    "nca": ("nca", None, 8),
    "nngk": ("nngk", None, 8),
    "nngk-d512": ("nngk", None, 512),
    "npair": ("npair", None, 8),
    "softmax": ("softmax", None, 8),
    "triplet-all": ("triplet", "all", 8),
    "triplet-easy-positive": ("triplet", "easy-positive", 8),
    "triplet-semihard": ("triplet", "semihard", 8),
    "triplet-nca": ("triplet-nca", None, 8),
}
DRIVER = """
import json, sys
from bench.cli import main
for args in json.loads(sys.argv[1]):
    main(["run", *args], standalone_mode=False)
"""


def run_args(loss: str, miner: str | None, dims: int) -> list[str]:
    return [*COMMON, "--loss", loss, "--dims", str(dims), *(["--miner", miner] if miner else [])]


def start(results: Path, hash_seed: str, cache: Path) -> subprocess.Popen:
    """Every run of RUNS, one after the other in one new process, into `results`."""
    plan = [[*run_args(*run), "--results", str(results)] for run in RUNS.values()]
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "NNGK_CACHE": str(cache)}
    with open(results.with_suffix(".log"), "w") as log:  # the process keeps its own copy
        return subprocess.Popen(
            [sys.executable, "-c", DRIVER, json.dumps(plan)], stdout=log, stderr=log, env=env
        )


@pytest.fixture(scope="module")
def twin_runs(tmp_path_factory) -> tuple[dict[str, Path], dict[str, Path]]:
    """The run folders of each name of RUNS, from each of two processes run at once."""
    root = tmp_path_factory.mktemp("determinism")
    folders = (root / "a", root / "b")
    procs = [start(root / "a", "1", root / "cache"), start(root / "b", "2", root / "cache")]
    for proc, results in zip(procs, folders, strict=True):
        assert proc.wait(timeout=600) == 0, results.with_suffix(".log").read_text()[-3000:]
    return tuple(runs_by_name(results) for results in folders)


def runs_by_name(results: Path) -> dict[str, Path]:
    """Each trained run's folder under the name of RUNS its config.json matches."""
    names = {run: name for name, run in RUNS.items()}
    found = {}
    for config in results.glob("*/config.json"):
        record = json.loads(config.read_text())
        key = (record["loss"], record["loss_params"].get("miner"), record["dims"])
        if key in names:
            found[names[key]] = config.parent
    return found


@pytest.mark.parametrize("name", sorted(RUNS))
def test_two_processes_train_the_same_run_to_the_bit(twin_runs, name):
    a, b = (runs[name] for runs in twin_runs)
    assert a.name == b.name
    history_a, history_b = (pd.read_csv(run / "history.csv") for run in (a, b))
    assert len(history_a) == 1
    assert history_a["train_loss"].tolist() == history_b["train_loss"].tolist()
    metrics = [c for c in history_a if c.startswith(("val_", "mean_"))]
    assert history_a[metrics].equals(history_b[metrics])
    with np.load(a / "test_embeddings.npz") as ea, np.load(b / "test_embeddings.npz") as eb:
        assert ea["embeddings"].tobytes() == eb["embeddings"].tobytes()
        assert np.array_equal(ea["labels"], eb["labels"])
