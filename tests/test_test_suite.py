"""What running the tests promises beyond the tests: a line as each file finishes (the README's
`-q` prints a dot per test only, and the heaviest files run first), and a passed test's
temporary folder removed (issue 69, item 10). Each runs pytest on a file of two quick tests,
with this project's settings and tests/conftest.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TINY = """
def test_writes(tmp_path):
    (tmp_path / "written").write_text("x")

def test_nothing():
    pass
"""


def pytest_of(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_tiny.py").write_text(TINY)
    # A session of its own: not a worker of this one's pytest-xdist (whose variables would tell
    # its conftest it is a worker, whose output is not shown).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    settings = ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "-p", "tests.conftest"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *settings, *args,
         str(tmp_path / "test_tiny.py"), "--basetemp", str(tmp_path / "t")],
        cwd=ROOT, text=True, capture_output=True, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("workers", [[], ["-n", "1", "--dist", "loadfile"]])
def test_each_file_says_when_it_is_done(tmp_path, workers):
    out = pytest_of(tmp_path, *workers)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "test_tiny.py done: 2 passed in " in out.stdout, out.stdout


def test_a_passed_tests_temporary_folder_is_removed(tmp_path):
    out = pytest_of(tmp_path)
    assert out.returncode == 0, out.stdout[-2000:]
    assert list((tmp_path / "t").iterdir()) == []
