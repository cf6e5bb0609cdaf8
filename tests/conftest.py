"""What the tests share: the command line called in this process, a run that trains in seconds,
the built-in glyphs set's baselines evaluated once for the whole session, and a study's storage
(SQLite, or a PostgreSQL server of the session's own)."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from bench.cli import main

# The tests assert what a CPU computes (a killed run resumes bit-equal; cuDNN is not
# deterministic), so on a machine with a GPU they run on its CPU, as CI does, their subprocesses
# too; NNGK_TEST_CUDA=1 lets them see the GPU.
if os.environ.get("NNGK_TEST_CUDA") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""

# Each test process computes with one thread where pytest-xdist runs a process per core: more
# threads than cores (torch's and faiss's OpenMP pools in every process) made the suite about a
# fifth slower on CI's 2 cores (measured on four of its heaviest files: 203 s against 160 s).
# Set before torch is first imported, and inherited by the subprocesses the tests start.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # faiss too: it runs on the machine's cores whatever OMP_NUM_THREADS says (bench.util.knn),
    # and its two threads in each of two processes waited for one another at every k-means
    # step: NMI's k-means took 2.5-3x as long beside one busy process, 141 s of the suite's
    # 1,246 CPU seconds (py-spy). Every test process and subprocess gets the same setting, so
    # what the tests compare between processes still agrees to the bit.
    os.environ.setdefault("NNGK_FAISS_THREADS", "1")

# Nothing a test writes lands outside its temporary folders: the glyphs and image caches go to a
# folder of this test process's own (a test may set one of its own), never to the user's
# ~/.cache/nngk-bench. Set here, at import, so that the subprocesses the tests start inherit it.
TEST_CACHE = Path(tempfile.mkdtemp(prefix="nngk-test-cache-"))
os.environ["NNGK_CACHE"] = str(TEST_CACHE)
atexit.register(shutil.rmtree, TEST_CACHE, ignore_errors=True)

# A run that trains in seconds: the digits set (8 x 8 images), 2 epochs, a 16-d embedding.
FAST = ["--dataset", "digits", "--epochs", "2", "--dims", "16"]


# The heaviest test files first (by their seconds in one run of the suite on 2 workers,
# 2026-11-28: 128, 125, 90, 78, 50 and 36 s of its 1,075). pytest-xdist's `--dist loadfile`
# hands out files in this order, one at a time as workers free up. It would put files with the
# most tests first, and these have few: handed out last, they kept one worker busy while the
# other idled.
HEAVY_FIRST = (
    "test_tune.py",
    "test_training_health.py",
    "test_cli.py",
    "test_dispatch.py",
    "test_distributed.py",
    "test_regression_check.py",
)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's files by their tests' count
        config.option.loadscopereorder = False
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the process whose output is shown
        config.pluginmanager.register(FileProgress(config), "nngk-file-progress")


class FileProgress:
    """A line as each test file finishes (and as each of the heaviest starts), with the time
    since the start: under `-q`, pytest prints a dot per finished test only, and the heaviest
    files, run first, left the suite silent for its first minutes (issue 69, item 10). Under
    pytest-xdist the workers' reports reach this hook in the controller, whose output is shown;
    a worker's file has finished when its next file's first report comes."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.start = config, time.monotonic()
        self.running: dict[object, tuple[str, float, Counter]] = {}  # by worker: its file

    def say(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            minutes, seconds = divmod(int(time.monotonic() - self.start), 60)
            if reporter._tw.width_of_current_line:  # after -q's dots (ensure_newline misses them)
                reporter.write("\n")
            reporter.write_line(f"[{minutes:3d}:{seconds:02d}] {text}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        worker, name = getattr(report, "node", None), report.location[0]
        if worker not in self.running or self.running[worker][0] != name:
            self.finished(worker)
            self.running[worker] = (name, time.monotonic(), Counter())
            if Path(name).name in HEAVY_FIRST:
                self.say(f"{name} started (one of the slowest files: minutes)")
        if report.when == "call" or report.outcome != "passed":  # a test's outcome, once
            self.running[worker][2][report.outcome] += 1

    def finished(self, worker: object) -> None:
        if worker not in self.running:
            return
        name, started, counts = self.running.pop(worker)
        outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))
        self.say(f"{name} done: {outcomes or 'nothing run'} in {time.monotonic() - started:.0f} s")

    def pytest_sessionfinish(self) -> None:
        for worker in list(self.running):
            self.finished(worker)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    first = {name: n for n, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: first.get(item.path.name, len(first)))  # stable: the rest as found


@pytest.fixture(autouse=True)
def torch_threads_kept():
    """torch's thread count as it was before each test: `speed` sets it for the process, and a
    test after it in the same process computed with other threads than its subprocesses (a
    killed run's resumed metrics then differed in the last digits: tests/test_cli.py)."""
    import torch

    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


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
    once each. Evaluated once for the whole session: the first pytest-xdist worker to ask
    writes them into the folder its workers share, the others wait for it (13 s each)."""
    from filelock import FileLock  # torch's own dependency

    from bench.train.baseline import run_baseline
    from bench.train.compute import Compute
    from bench.train.presets import make_configs

    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # this session's folder, above each worker's own
    results, done = shared / "glyphs-baselines", shared / "glyphs-baselines.done"
    with FileLock(shared / "glyphs-baselines.lock"):
        if not done.is_file():
            shutil.rmtree(results, ignore_errors=True)
            results.mkdir()
            (cfg,) = make_configs("glyphs", "contrastive", (16,), {}, seed=0)
            run_baseline(cfg, results, Compute.resolve("cpu"))
            done.touch()
    return results


@pytest.fixture(scope="session")
def postgresql_server():
    """A PostgreSQL server for the session (tests/fixtures/postgresql.py), stopped at its end.
    Where none can start, the tests that need it are skipped naming what is missing, or fail
    where NNGK_REQUIRE_POSTGRESQL is set (CI), so that they cannot pass unrun."""
    from tests.fixtures.postgresql import REQUIRE, Unavailable, start_server

    try:
        server = start_server()
    except Unavailable as why:
        if os.environ.get(REQUIRE):
            pytest.fail(f"no PostgreSQL server for the tests ({REQUIRE} is set): {why}")
        pytest.skip(f"no PostgreSQL server for the tests: {why}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def storage(request, tmp_path) -> str:
    """A study's storage URL: the default SQLite file under tmp_path, or a new database on the
    session's PostgreSQL server (workers on several machines share one such server)."""
    if request.param == "sqlite":
        from bench.tune.study import default_storage

        return default_storage(tmp_path)
    return request.getfixturevalue("postgresql_server").new_database()
