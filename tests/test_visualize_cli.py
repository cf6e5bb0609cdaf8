"""`nngk-bench visualize`: an unfinished run is refused at once, in one line (issue 22), and a
finished one's figures are each announced before they are drawn, a long one every few seconds
while it is drawn, from the command's first second."""

import logging
import select
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.data.datasets import load_dataset
from bench.report import tsne
from bench.report import visualize as report_visualize
from bench.runs.config import RunConfig
from bench.util.atomic import atomic_save_npz, atomic_write_json


def write_run(run, finished: bool, train_labels=None, test_labels=None, epochs_done: int = 2):
    """A run folder of digits with random embeddings; metrics.json only if `finished`."""
    rng = np.random.default_rng(0)
    labels = {"train": train_labels, "test": test_labels}
    for split, name in (("train", "train_embeddings.npz"), ("test", "test_embeddings.npz")):
        y = labels[split] if labels[split] is not None else np.repeat(np.arange(5), 12)
        emb = rng.normal(size=(len(y), 4)).astype(np.float32)
        atomic_save_npz(run / name, embeddings=emb, labels=np.asarray(y))
    atomic_write_json(run / "config.json", RunConfig(dataset="digits", dims=4, epochs=5).to_dict())
    rows = "".join(f"{e},{1 / e:.3f}\n" for e in range(1, epochs_done + 1))
    (run / "history.csv").write_text("epoch,train_loss\n" + rows)
    if finished:
        atomic_write_json(run / "metrics.json", {"map@r": 0.5})
    return run


def test_an_unfinished_run_is_refused_at_once_in_one_line(tmp_path):
    run = write_run(tmp_path / "run", finished=False)
    visualize = ["visualize", str(run), "--out", str(tmp_path), "--no-gallery"]
    command = [sys.executable, "-m", "bench.cli", *visualize]
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    seconds = time.monotonic() - start
    assert done.returncode == 1 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"Error: {run} is an unfinished run (no metrics.json; 2 of 5 epoch(s)")
    assert "run the command that started it again (it resumes)" in line
    assert not list(tmp_path.glob("*.png"))
    # "At once": a loaded machine's interpreter and torch start take some seconds of it.
    assert seconds < 30, f"{seconds:.1f} s: refused only after loading what it draws"


def test_an_unfinished_run_to_compare_with_is_refused_too(tmp_path):
    run = write_run(tmp_path / "run", finished=True)
    other = write_run(tmp_path / "other", finished=False, epochs_done=0)
    (other / "history.csv").unlink()  # stopped in its first epoch
    out = CliRunner().invoke(main, ["visualize", str(run), "--compare", str(other)])
    assert out.exit_code == 1
    assert f"Error: {other} is an unfinished run (no metrics.json; 0 of 5 epoch(s)" in out.output
    assert not list(run.glob("*.png"))


def test_a_run_compared_with_itself_is_refused(tmp_path):
    run = write_run(tmp_path / "run", finished=True)
    out = CliRunner().invoke(main, ["visualize", str(run), "--compare", str(tmp_path / "run")])
    assert out.exit_code == 2 and f"--compare names the run itself ({run})" in out.output
    assert not list(run.glob("*.png"))


def test_a_baseline_row_is_refused_naming_how_to_see_it_beside_a_run(tmp_path):
    # Issue 43: "train_embeddings.npz not found; visualize needs a finished run of this version".
    base = tmp_path / "base"
    base.mkdir()
    config = RunConfig(dataset="digits", dims=64, epochs=0, loss="untrained").to_dict()
    atomic_write_json(base / "config.json", {**config, "features": "raw inputs"})
    atomic_write_json(base / "metrics.json", {"map@r": 0.3})
    labels = np.repeat(np.arange(5), 4)
    atomic_save_npz(base / "test_embeddings.npz", embeddings=np.eye(20, 64), labels=labels)
    out = CliRunner().invoke(main, ["visualize", str(base)])
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output
    assert out.output.startswith(f"Error: {base} is a baseline row (raw inputs), not a trained")
    assert out.output.strip().endswith(f"nngk-bench visualize TRAINED_RUN --compare {base}")
    assert not list(base.glob("*.png"))


def test_the_first_line_comes_before_anything_slow(tmp_path):
    run = write_run(tmp_path / "run", finished=True)
    command = [sys.executable, "-m", "bench.cli", "visualize", str(run), "--no-gallery"]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        # 20 s: its imports take 2-3 s on a quiet machine; one run of the suite, on a machine
        # loaded by other work too, took over 5 s. What comes after the line takes minutes.
        ready, _, _ = select.select([proc.stderr], [], [], 20.0)
        assert ready, "nothing said in its first 20 s"
        assert proc.stderr.readline().startswith(f"visualize {run}: loading its embeddings")
    finally:
        proc.kill()
        proc.wait()


def test_each_figure_is_announced_and_a_long_one_keeps_saying_so(tmp_path, monkeypatch, caplog):
    digits = load_dataset("digits")
    train_y, test_y = np.asarray(digits.train.labels), np.asarray(digits.test.labels)
    run = write_run(tmp_path / "run", finished=True, train_labels=train_y, test_labels=test_y)
    seen_before_tsne = []

    def slow_tsne(*args):  # a t-SNE that takes a while, and no real one (not tested here)
        seen_before_tsne.extend(r.getMessage() for r in caplog.records)
        time.sleep(0.5)
        return b"t-SNE"

    monkeypatch.setattr(tsne, "joint_tsne", slow_tsne)
    monkeypatch.setattr(report_visualize, "HEARTBEAT_S", 0.1)
    caplog.set_level(logging.INFO, logger="nngk-bench")
    out = CliRunner().invoke(main, ["visualize", str(run), "--out", str(tmp_path / "out")])
    assert out.exit_code == 0, out.output
    said = [r.getMessage() for r in caplog.records]
    assert said[0] == f"visualize {run}: loading its embeddings; the figures go to {tmp_path}/out"
    tsne_line = f"drawing tsne.png: one t-SNE of {len(train_y)} training and {len(test_y)} test"
    assert seen_before_tsne[-1].startswith(tsne_line)
    assert sum(m.startswith("still drawing tsne.png (") for m in said) >= 2
    assert said.index(seen_before_tsne[-1]) < said.index(next(m for m in said if "similarity" in m))
    assert any(m.startswith("drawing gallery-fixed.png, gallery-worst.png: digits") for m in said)
    drawn = {p.name for p in (tmp_path / "out").iterdir()}
    assert drawn == {"tsne.png", "similarity.png", "gallery-fixed.png", "gallery-worst.png"}


def test_a_quick_figure_says_nothing_more(caplog):
    caplog.set_level(logging.INFO, logger="nngk-bench")
    start = time.monotonic()
    with report_visualize.drawing("x.png", "a quick one"):
        pass
    assert [r.getMessage() for r in caplog.records] == ["drawing x.png: a quick one"]
    assert time.monotonic() - start < 1  # the heartbeat thread does not hold it up


def test_several_runs_are_each_drawn_into_a_folder_of_their_name(tmp_path):
    runs = [write_run(tmp_path / name, finished=True) for name in ("glyphs-a-1", "glyphs-a-2")]
    args = ["visualize", *map(str, runs), "--no-gallery", "--max-points", "30"]
    out = CliRunner().invoke(main, [*args, "--out", str(tmp_path / "figs")])
    assert out.exit_code == 0, out.output
    for run in runs:
        assert (tmp_path / "figs" / run.name / "tsne.png").stat().st_size > 0
        assert str(tmp_path / "figs" / run.name / "similarity.png") in out.output
    # Without --out each run's figures go into its own folder.
    assert CliRunner().invoke(main, args).exit_code == 0
    assert all((run / "tsne.png").is_file() for run in runs)


def test_compare_with_several_runs_is_a_one_line_error_naming_them(tmp_path):
    runs = [write_run(tmp_path / name, finished=True) for name in ("r1", "r2")]
    other = write_run(tmp_path / "other", finished=True)
    out = CliRunner().invoke(main, ["visualize", *map(str, runs), "--compare", str(other)])
    (line,) = out.output.strip().splitlines()
    assert out.exit_code == 2 and "--compare sets one run beside another, but 2 runs" in line
    assert "(r1, r2)" in line and not list(tmp_path.rglob("*.png"))


@pytest.mark.parametrize(
    "args, bound",
    [
        (["--queries", "5000"], "1<=x<=50"),  # issue 43: 23 GB, then killed
        (["--k", "1000"], "1<=x<=20"),
        (["--max-points", "0"], "x>=10"),
        (["--max-points", "-1"], "x>=10"),
    ],
)
def test_a_gallery_or_a_t_sne_out_of_bounds_is_refused_before_anything_loads(tmp_path, args, bound):
    run = write_run(tmp_path / "run", finished=True)
    out = CliRunner().invoke(main, ["visualize", str(run), *args])
    (line,) = out.output.strip().splitlines()
    assert out.exit_code == 2 and bound in line and not list(run.glob("*.png"))


@pytest.mark.parametrize("damage", ["truncated", "no embeddings array"])
def test_a_damaged_embeddings_file_is_one_line(tmp_path, damage):
    # Before: zipfile's BadZipFile or numpy's KeyError traceback.
    run = write_run(tmp_path / "run", finished=True)
    path = run / "test_embeddings.npz"
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    else:
        atomic_save_npz(path, labels=np.arange(3))
    out = CliRunner().invoke(
        main, ["visualize", str(run), "--out", str(tmp_path / "v"), "--no-gallery"]
    )
    assert out.exit_code == 1 and "Traceback" not in out.output
    (line,) = [x for x in out.output.splitlines() if x.startswith("Error")]
    assert line.startswith("Error: run: test_embeddings.npz is damaged ("), line
    assert out.output.strip().endswith(line) and not (tmp_path / "v").exists()
