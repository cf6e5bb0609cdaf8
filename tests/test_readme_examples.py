"""The README's command for a user's own image folder runs as written, offline."""

import re
import shlex
from pathlib import Path
from urllib.error import URLError

import torch
import torchvision.models._api as weights_api
from click.testing import CliRunner

from bench.cli import main
from tests.fixtures.folder import make_folder

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_command(pattern: str) -> list[str]:
    (line,) = [x.strip() for x in README.read_text().splitlines() if re.search(pattern, x)]
    words = shlex.split(line)
    assert words[0] == "nngk-bench", line
    return words[1:]


def test_the_own_folder_example_trains_offline(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise URLError("no network")

    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))  # no weights
    monkeypatch.setattr(weights_api, "load_state_dict_from_url", offline)
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    images = make_folder(tmp_path, classes=4, per_class=8)
    args = readme_command(r"^\s+nngk-bench run .*--dataset folder:my-images")
    args = [a.replace("folder:my-images", f"folder:{images}") for a in args]
    fast = ["--epochs", "1", "--batch-size", "8", "--dims", "8", "--results", str(tmp_path / "r")]
    out = CliRunner().invoke(main, [*args, *fast])
    assert out.exit_code == 0, out.output
    finished = list((tmp_path / "r").glob("folder-*-nngk-d8-s0-*/metrics.json"))
    assert len(finished) == 1
