import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from click.testing import CliRunner

import losses
from bench.cli import main
from bench.cli.loss_sets import PAPER
from bench.data.datasets import load_dataset
from bench.evaluation.metrics import METRIC_KEYS, evaluate

FAST = ["--dataset", "digits", "--epochs", "2", "--dims", "16"]


def cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def finished_runs(results: Path, loss: str) -> list[Path]:
    return sorted(p for p in results.glob(f"digits-{loss}*") if (p / "metrics.json").is_file())


@pytest.fixture(scope="module")
def nngk_run(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    out = cli("run", "--loss", "nngk", *FAST, "--results", results)
    assert out.exit_code == 0, out.output
    (run_dir,) = finished_runs(results, "nngk")
    return results, run_dir


def test_run_writes_a_complete_run_folder(nngk_run):
    results, run_dir = nngk_run
    config = json.loads((run_dir / "config.json").read_text())
    assert config["loss"] == "nngk" and config["dims"] == 16 and config["seed"] == 0
    assert config["resolved_loss_params"]["k"] == 100
    assert "torch" in config["versions"]
    history = pd.read_csv(run_dir / "history.csv")
    assert history["epoch"].tolist() == [1, 2]
    assert {"train_loss", "val_map@r", "val_recall@1", "seconds"} <= set(history.columns)
    assert {"mean_centre_distance", "mean_kernel_value"} <= set(history.columns)  # Fig. 4b, 4c
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(METRIC_KEYS) <= set(metrics)
    assert metrics["dataset"] == "digits" and metrics["loss"] == "nngk" and metrics["dims"] == 16
    assert (run_dir / "checkpoint.pt").is_file()
    train = np.load(run_dir / "train_embeddings.npz")
    assert train["embeddings"].shape == (len(train["labels"]), 16) and set(train["labels"]) == {
        0,
        1,
        2,
        3,
        4,
    }
    raw, network = sorted(finished_runs(results, "untrained"), key=lambda p: "d1024" in p.name)
    raw_metrics = json.loads((raw / "metrics.json").read_text())
    assert raw_metrics["features"] == "raw inputs" and raw_metrics["dims"] == 64
    pixels = load_dataset("digits").test.inputs()
    labels = np.asarray(load_dataset("digits").test.labels)
    expected = evaluate(
        pixels / np.linalg.norm(pixels, axis=1, keepdims=True), labels, seed=0
    ).metrics
    assert raw_metrics["map@r"] == pytest.approx(expected["map@r"])
    assert raw_metrics["map@r"] == pytest.approx(0.6056, abs=1e-4)  # 0.6110 before L2
    net_metrics = json.loads((network / "metrics.json").read_text())
    assert net_metrics["features"] == "untrained small_cnn (random init)"
    assert net_metrics["dims"] == 1024 and net_metrics["backbone"] == "small_cnn"


def test_metrics_are_what_the_saved_embeddings_give(nngk_run):
    _, run_dir = nngk_run
    saved = np.load(run_dir / "test_embeddings.npz")
    assert saved["embeddings"].shape == (len(saved["labels"]), 16)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    recomputed = evaluate(saved["embeddings"], saved["labels"], seed=0).metrics
    for key in METRIC_KEYS:
        assert metrics[key] == pytest.approx(recomputed[key], abs=1e-9), key


def test_same_command_skips_a_finished_run_and_force_redoes_it(nngk_run):
    results, run_dir = nngk_run
    before = (run_dir / "metrics.json").stat().st_mtime_ns
    out = cli("run", "--loss", "nngk", *FAST, "--results", results)
    assert "skipped" in out.output
    assert (run_dir / "metrics.json").stat().st_mtime_ns == before
    out = cli("run", "--loss", "nngk", *FAST, "--results", results, "--force")
    assert out.exit_code == 0
    assert (run_dir / "metrics.json").stat().st_mtime_ns != before


def test_a_forced_rerun_that_fails_keeps_the_finished_run(tmp_path, monkeypatch):
    from bench.report.runs import load_runs
    from bench.train.trainer import Trainer

    args = ["run", "--loss", "softmax", *FAST, "--results", tmp_path]
    assert cli(*args).exit_code == 0
    (run_dir,) = finished_runs(tmp_path, "softmax")
    kept = (run_dir / "metrics.json").read_text()
    real_epoch = Trainer.train_epoch

    def crash_in_epoch_two(self, epoch):
        if epoch == 1:
            raise KeyboardInterrupt
        return real_epoch(self, epoch)

    monkeypatch.setattr(Trainer, "train_epoch", crash_in_epoch_two)
    out = CliRunner().invoke(main, [str(a) for a in (*args, "--force")])
    assert out.exit_code == 130 and (run_dir / "metrics.json").read_text() == kept
    staged = tmp_path / f".{run_dir.name}.forced"
    assert (staged / "checkpoint.pt").is_file()  # the rerun so far, to resume
    df, problems = load_runs(tmp_path)
    assert problems == [] and df["run"].tolist().count(run_dir.name) == 1  # the old one, whole
    (staged / ".checkpoint.pt.x1y2.tmp").write_bytes(b"a write killed part-way")
    out = cli(*args)  # without --force: skipped, saying the rerun waits in its folder
    assert f"its --force rerun stopped part-way in {staged}" in out.output
    assert not (staged / ".checkpoint.pt.x1y2.tmp").exists()
    monkeypatch.undo()
    assert cli(*args, "--force").exit_code == 0  # resumes the rerun, then swaps it in
    assert sorted(p.name for p in tmp_path.iterdir() if "softmax" in p.name) == [run_dir.name]
    config = json.loads((run_dir / "config.json").read_text())
    assert config["run_id"] == run_dir.name and (run_dir / "metrics.json").is_file()


def test_a_second_process_on_the_same_run_waits_for_the_first(tmp_path):
    # Before: two `run --force` at once both trained it, and one removed what the other wrote:
    # the finished run lost its config.json and history, and both exited 0.
    import threading

    from bench.cli.training import train_one
    from bench.runs import store

    run_dir, trained = tmp_path / "r", []

    class Trainer:
        def __init__(self, cfg, target, device):
            self.target = target

        def fit(self):
            from tests.test_report_tables import make_run

            trained.append(self.target)
            make_run(self.target.parent, self.target.name, loss="nngk")  # a whole record
            return {"map@r": 0.5}

    cfg = type("Config", (), {"pretrained": "none"})()
    second = threading.Thread(target=train_one, args=(cfg, run_dir, False, "cpu", Trainer))
    from bench.data.image_cache import cache_folder

    with store.run_lock(run_dir, cache_folder() / "locks", say=lambda line: None):  # the first
        second.start()
        second.join(timeout=1.0)
        assert second.is_alive() and trained == []  # waiting
        Trainer(None, run_dir, "cpu").fit()  # the first one's run, finished
    second.join(timeout=10)
    assert not second.is_alive() and trained == [run_dir]  # then found it finished: skipped


def as_text(path: Path, key: str) -> None:
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, key: str(record[key])}))


@pytest.mark.parametrize(
    "damage, fault",
    [
        (lambda r: (r / "config.json").unlink(), "it has no config.json"),
        (lambda r: (r / "test_embeddings.npz").write_bytes(b"PK"), "test_embeddings.npz is dam"),
        (lambda r: (r / "metrics.json").write_text("[]"), "metrics.json is not a JSON object"),
        (lambda r: as_text(r / "metrics.json", "map@r"), "its metrics.json has map@r = '0."),
    ],
)
def test_a_damaged_finished_run_is_not_skipped_as_finished(nngk_run, tmp_path, damage, fault):
    # Before: `run` skipped it as finished while `report` left it out, saying to run the same
    # command again, which skipped it again.
    results, run_dir = nngk_run
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    damage(copy / run_dir.name)
    out = CliRunner().invoke(main, ["run", "--loss", "nngk", *FAST, "--results", str(copy)])
    assert out.exit_code == 1, out.output
    line = out.output.strip().splitlines()[-1]
    assert f"{run_dir.name}: finished, but" in line and fault in line, line
    assert "--force retrains it" in line


def test_a_run_rerun_from_its_config_is_the_same_run_with_the_same_metrics(nngk_run, tmp_path):
    # As the same command twice would (test_determinism: to the bit, across processes).
    _, run_dir = nngk_run
    out = cli("run", "--config", run_dir / "config.json", "--results", tmp_path)
    assert out.exit_code == 0, out.output
    (again,) = finished_runs(tmp_path, "nngk")
    assert again.name == run_dir.name
    first = json.loads((run_dir / "metrics.json").read_text())
    second = json.loads((again / "metrics.json").read_text())
    assert {k: first[k] for k in METRIC_KEYS} == {k: second[k] for k in METRIC_KEYS}


# The paper set's losses, triplet with each miner; nngk's run is `nngk_run`'s.
PAPER_RUNS = [(loss, params) for loss, params in PAPER if loss != "nngk"]


@pytest.mark.parametrize(
    "loss, params",
    PAPER_RUNS,
    ids=["-".join([loss, *params.values()]) for loss, params in PAPER_RUNS],
)
def test_every_loss_runs_end_to_end(loss, params, tmp_path):
    given = [a for name, value in params.items() for a in ("--loss-param", f"{name}={value}")]
    args = ["--loss", loss, *given, "--dataset", "digits", "--epochs", "1", "--dims", "8"]
    out = cli("run", *args, "--results", tmp_path)
    assert out.exit_code == 0, out.output
    (run_dir,) = finished_runs(tmp_path, loss)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert all(0.0 <= metrics[k] <= 1.0 for k in METRIC_KEYS)
    assert metrics["miner"] == params.get("miner")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--loss", "hinge"], "unknown loss 'hinge'; expected a loss (angular, arcface, bce-pair"),
        (["--loss", "triplet", "--miner", "hardest"], "unknown miner 'hardest'; expected one of"),
        (["--dataset", "mnist"], "unknown data set 'mnist'; expected one of: digits"),
        (["--dims", "64,abc"], "bad --dims '64,abc'; expected comma-separated positive integers"),
        (["--dims", "0"], "bad --dims '0'; expected comma-separated positive integers, e.g. 64,"),
        (
            ["--seed", "-1"],
            "bad --seed '-1'; expected comma-separated non-negative integers up to 2,147,483,647",
        ),
        # Issue 43: faiss's k-means took it, an OverflowError, a baseline left half-written.
        (["--seed", "0,2147483648"], "bad --seed '0,2147483648'; expected comma-separated"),
        (["--loss", "softmax", "--sigma", "3"], "loss 'softmax' does not take --sigma"),
        (["--backbone", "vit"], "unknown backbone 'vit'; expected one of: small_cnn"),
        (["--embedding", "gap", "--dims", "32"], "the GAP embedding of small_cnn has 64 dims"),
        (["--k", "0"], "Invalid value for '--k': 0 is not in the range x>=1"),
        (["--sigma", "0"], "Invalid value for '--sigma': 0.0 is not in the range x>0"),
        (["--lr", "-1"], "Invalid value for '--lr': -1.0 is not in the range x>=0"),
        (["--epochs", "-2"], "Invalid value for '--epochs': -2 is not in the range x>=1"),
        (["--batch-size", "0"], "Invalid value for '--batch-size': 0 is not in the range x>=2"),
    ],
)
def test_bad_input_is_a_one_line_error_and_writes_nothing(args, message, tmp_path):
    out = CliRunner().invoke(main, ["run", *args, "--results", str(tmp_path)])
    assert out.exit_code != 0
    lines = out.output.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], out.output
    assert out.exception is None or isinstance(out.exception, SystemExit)
    assert not any(tmp_path.iterdir())


def test_bad_input_from_the_shell_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "bench.cli", "run", "--loss", "nope", "--results", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines() == [
        f"Error: unknown loss 'nope'; expected a loss ({', '.join(sorted(losses.loss_names()))}),"
        " pml:ClassName (pytorch-metric-learning's) or a set (paper, realitycheck, all)"
    ]


def test_losses_command_lists_losses_and_miners():
    import miners

    out = cli("losses")
    headings = {line for line in out.output.splitlines() if line and not line.startswith(" ")}
    missing = {*losses.loss_names(), *miners.miner_names()} - headings
    assert missing == set(), missing  # each under its own name
    assert "sigma=10.0" in out.output and "update_interval=10" in out.output
    assert "balanced pairs. (contrastive-centroid's own, which refreshes it; --miner refuses" in (
        out.output
    )


def test_every_default_of_every_loss_names_its_source():
    from losses import get_loss_class, loss_defaults, loss_names

    out = cli("losses").output
    for name in loss_names():
        cls = get_loss_class(name)
        for param, value in loss_defaults(name).items():
            source = cls.sources.get(param, "")
            assert source, f"{name}.{param} has no source"
            assert f"    {param}={value}: {source}" in out.splitlines()  # whole, not cut off
    assert "needs: class-balanced batches: N classes x 2" in out  # npair


def test_killed_run_resumes_to_the_same_metrics(tmp_path):
    args = ["run", "--loss", "nngk", "--dataset", "digits", "--epochs", "6", "--dims", "16"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.cli", *args, "--results", str(killed)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    deadline = time.time() + 120
    history = None
    while time.time() < deadline and proc.poll() is None:
        found = list(killed.glob("digits-nngk*/history.csv"))
        if found and len(pd.read_csv(found[0])) >= 3:
            history = found[0]
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL and history is not None, "run was not killed midway"
    run_dir = history.parent
    assert not (run_dir / "metrics.json").exists()
    assert cli(*args, "--results", killed).exit_code == 0
    assert len(pd.read_csv(history)) == 6

    clean = tmp_path / "clean"
    assert cli(*args, "--results", clean).exit_code == 0
    resumed = json.loads((run_dir / "metrics.json").read_text())
    (clean_dir,) = finished_runs(clean, "nngk")
    uninterrupted = json.loads((clean_dir / "metrics.json").read_text())
    assert {k: resumed[k] for k in METRIC_KEYS} == {k: uninterrupted[k] for k in METRIC_KEYS}


def test_gap_embedding_is_the_pooled_feature_map(tmp_path):
    out = cli(
        "run",
        "--dataset",
        "digits",
        "--loss",
        "softmax",
        "--embedding",
        "gap",
        "--dims",
        "64",
        "--epochs",
        "1",
        "--results",
        tmp_path,
    )
    assert out.exit_code == 0, out.output
    (run_dir,) = finished_runs(tmp_path, "softmax")
    config = json.loads((run_dir / "config.json").read_text())
    assert config["embedding"] == "gap"
    saved = np.load(run_dir / "test_embeddings.npz")["embeddings"]
    assert saved.shape[1] == 64 and (saved >= 0).all()  # averages of ReLU maps


def test_a_loader_benchmark_of_one_batch_is_refused_before_any_benchmark_runs():
    out = cli("speed", "--loader", "synthetic", "--images", "15", "--batch", "8")
    assert out.exit_code == 1 and "NNGK step" not in out.output
    assert "--images 15 is less than 2 batches of --batch 8" in out.output
    out = cli("speed", "--loader", "synthetic", "--images", "16", "--batch", "8", "--workers", "2")
    assert out.exit_code == 1 and "--images 16 is less than 3 batches of --batch 8" in out.output


def test_a_loader_benchmark_takes_the_images_its_batches_need_by_default():
    args = "speed --only start --loader synthetic --batch 4 --resize 24 --crop 20"
    out = cli(*args.split(), "--backbone", "small_cnn")
    assert out.exit_code == 0, out.output
    assert re.search(r"\| images +\| 40 ", out.output)  # 10 batches of 4


def test_speed_benchmark_prints_ratios():
    args = "speed --batch 8 --loader synthetic --images 16 --resize 24 --crop 20 --eval-sizes 300"
    tiny = ["--refresh-images", "40", "--ann-size", "600", "--scale-sizes", "300"]
    tiny += ["--crossover-items", "300", "--report-runs", "4"]
    out = cli(*args.split(), "--backbone", "small_cnn", *tiny)
    assert out.exit_code == 0, out.output
    for row in (
        "faiss ",
        "NNGK refresh vs one inference pass",
        "refresh / inference",
        "approximate (IVF) vs exact bank search",
        "recall@k",
        "loop / nngk",
        "nngk / softmax",
        "pml / ours",
        "nngk-bench --help",
        "speed-up",
        "cached: first batch s",
        "cached img/s",
        "decoded img/s",
        "small_cnn train img/s",
        "cache speed-up",
        "cached / model",
        "evaluator at scale",
        "large-class ranking",
        "report over generated runs",
        "report / metrics.json",
    ):
        assert row in out.output


def test_triplet_nca_form_runs_as_its_own_loss(tmp_path):
    out = cli(
        "run",
        "--dataset",
        "digits",
        "--loss",
        "triplet",
        "--triplet-form",
        "nca",
        "--miner",
        "easy-positive",
        "--epochs",
        "1",
        "--dims",
        "8",
        "--results",
        tmp_path,
    )
    assert out.exit_code == 0, out.output
    (run_dir,) = finished_runs(tmp_path, "triplet-nca")
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["loss"] == "triplet-nca" and metrics["miner"] == "easy-positive"
    out = CliRunner().invoke(main, ["run", "--loss", "nngk", "--triplet-form", "nca"])
    assert out.exit_code != 0 and "applies to --loss triplet only" in out.output


def test_visualize_draws_a_runs_tsne_similarity_and_centre_statistics(nngk_run, tmp_path):
    _, run_dir = nngk_run
    out = cli("visualize", run_dir, "--out", tmp_path, "--max-points", "150")
    assert out.exit_code == 0, out.output
    for name in ("tsne.png", "similarity.png", "centres.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (tmp_path / "empty").mkdir()
    out = CliRunner().invoke(main, ["visualize", str(tmp_path / "empty")])
    assert out.exit_code == 1 and "train_embeddings.npz not found" in out.output


def test_suite_plans_every_core_loss_and_passes_its_options(monkeypatch):
    planned = []
    monkeypatch.setattr("bench.cli.training.run_all", lambda configs, *_: planned.extend(configs))
    monkeypatch.setattr("bench.data.presence.check_data_present", lambda *_: None)  # no cub here
    assert cli("suite").exit_code == 0
    assert len(planned) == 9 * 2 * 3  # losses (triplet with 3 miners), dims 64 and 512, seeds
    assert {(c.dataset, c.backbone, c.val_split) for c in planned} == {
        ("glyphs", "small_cnn", "images")
    }
    # The glyphs preset's learning rates, chosen per loss on validation.
    assert {(c.loss, c.lr) for c in planned if c.lr != 0.01} == {("nngk", 1e-3), ("npair", 1e-3)}
    planned.clear()
    assert cli("suite", "--dataset", "digits").exit_code == 0
    assert {(c.dataset, c.lr) for c in planned} == {("digits", 1e-3)}
    planned.clear()
    assert cli("suite", "--dataset", "cub").exit_code == 0  # the metric preset: GoogLeNet
    assert {(c.dataset, c.backbone, c.dims) for c in planned} == {("cub", "googlenet", 64)}
    planned.clear()
    args = "suite --backbone small_cnn_gn --lr 0 --val-split classes --dims 16 --seed 0"
    assert cli(*args.split()).exit_code == 0
    assert len(planned) == 9
    assert {(c.backbone, c.lr, c.val_split, c.dims) for c in planned} == {
        ("small_cnn_gn", 0.0, "classes", 16)
    }


def test_a_device_torch_does_not_know_or_cannot_use_is_a_one_line_error(tmp_path):
    for name in ("foo", "mps"):  # mps: torch knows it, the harness does not run on it
        unknown = cli("run", "--device", name, "--results", tmp_path)
        assert unknown.exit_code == 1 and unknown.output.strip() == (
            f"Error: unknown --device '{name}'; expected cpu, cuda or cuda:N"
        )
    if not torch.cuda.is_available():
        cuda = cli("run", "--device", "cuda", "--results", tmp_path)
        assert cuda.exit_code == 1 and "CUDA is not available on this machine" in cuda.output
    assert not any(tmp_path.iterdir())


def test_a_run_records_each_splits_images_and_classes(nngk_run):
    # What a folder's left-out files or merged classes would change, seen after the run.
    _, run_dir = nngk_run
    counts = json.loads((run_dir / "metrics.json").read_text())["split_counts"]
    test = np.load(run_dir / "test_embeddings.npz")["labels"]
    assert counts["test"] == {"images": len(test), "classes": 5}  # digits 5-9
    train = np.load(run_dir / "train_embeddings.npz")["labels"]
    assert counts["train"]["classes"] == 5 and counts["val"]["classes"] == 5  # 0-4, images apart
    assert counts["train"]["images"] + counts["val"]["images"] >= len(train)


def test_losses_command_lists_the_sets_and_their_members():
    from bench.cli.loss_sets import PAPER, REALITY_CHECK

    out = cli("losses").output
    sets = out.split("sets (--loss NAME, suite --losses NAME):\n")[1].split("\n\n")[0]
    members = " ".join(sets.split())
    assert "paper (9 runs a seed) nngk, softmax, contrastive, triplet (miner=semihard)," in members
    assert "realitycheck (14 runs a seed) contrastive, triplet (miner=semihard), ntxent," in members
    assert f"all ({len(losses.loss_names()) + 2} runs a seed) nngk," in members
    for loss, _ in (*PAPER, *REALITY_CHECK):
        assert loss in members
