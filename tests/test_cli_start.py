"""Fast start: the command list needs no command's module, and no command's help needs a
heavy package (torch, scikit-learn, pandas, ...: their import takes seconds), so `--help` is
quick; and the list says what each command's own help says."""

import json
import os
import subprocess
import sys
from importlib.metadata import version

import click
import pytest
from click.testing import CliRunner
from packaging.version import Version

from bench.cli import COMMANDS, first_sentence, main, short_help

HEAVY = ("torch", "torchvision", "sklearn", "pandas", "faiss", "optuna", "scipy")

# In one fresh interpreter (one start, not one a command): `nngk-bench --help` and the heavy
# packages then loaded, then each command's module and help in turn and the heavy packages each
# brought in; a package any of them imports is found at the first that does.
HELPS = f"""
import contextlib, importlib, io, json, sys
from bench.cli import COMMANDS, main

def heavy():
    return {{m for m in {HEAVY!r} if m in sys.modules}}

def help_of(args, **kwargs):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        try:
            main(args, **kwargs)
        except SystemExit:
            pass
    return text.getvalue()

found = {{}}
found["--help"] = dict(help=help_of(["--help"]), heavy=sorted(heavy()))  # bench.cli too
for name in sorted(COMMANDS):
    before = heavy()
    importlib.import_module(COMMANDS[name].split(":")[0])
    text = help_of([name, "--help"], prog_name="nngk-bench")
    found[name] = dict(help=text, heavy=sorted(heavy() - before))
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def helps() -> dict[str, dict]:
    """Each help's text and the heavy packages it imported, by command ("--help": the list)."""
    out = subprocess.run([sys.executable, "-c", HELPS], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_help_imports_no_heavy_package(helps):
    assert "Commands:" in helps["--help"]["help"] and "tune " in helps["--help"]["help"]
    assert helps["--help"]["heavy"] == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_commands_help_imports_no_heavy_package(helps, name):
    assert f"Usage: nngk-bench {name} [OPTIONS]" in helps[name]["help"], helps[name]["help"]
    assert helps[name]["heavy"] == []


def test_the_list_shows_each_commands_own_short_help():
    listing = CliRunner().invoke(main, ["--help"]).output
    for name, target in COMMANDS.items():
        command = main.get_command(None, name)
        assert command.name == name
        assert short_help(target) == command.get_short_help_str()
        assert f"{name}  " in listing and short_help(target) in listing
        # A citation's "et al." ends the short form as a sentence would: none may begin so.
        assert not short_help(target).endswith("al."), (name, short_help(target))


def test_an_unknown_command_is_one_line():
    out = CliRunner().invoke(main, ["trian"])
    assert out.exit_code == 2 and "No such command 'trian'" in out.output


SHORT_HELPS = [
    ("Train and evaluate LOSS on DATASET, one run per embedding size and seed.",
     "Train and evaluate LOSS on DATASET, one..."),
    ("Compare runs.\n\nA second paragraph.", "Compare runs."),
    ("Compare the runs' metrics with a baseline;\nexit non-zero.  More here.",
     "Compare the runs' metrics with a baseline;..."),
    ("Short.  Then a second sentence.", "Short."),
    ("Plot the same- vs. different-class scatter.", "Plot the same- vs. different-class scatter."),
    ("One e.g. two. Three.", "One e.g. two."),
    ("Ends without a period", "Ends without a period"),
    ("A well-known-hyphenated-word-that-runs-past-the-width-of-the-list here",
     "A..."),
    ("\b\nNo rewrap marker first.", "No rewrap marker first."),
    ("", ""),
    ("   \n  ", ""),
]  # fmt: skip


# Click ends no sentence at a period before a lowercase word ("e.g. this") from 8.5.1 on; an
# older click cuts those help texts shorter than its newest does (and than we do).
CLICK_RULE = Version(version("click")) >= Version("8.5.1")


@pytest.mark.parametrize("text, short", SHORT_HELPS)
def test_a_short_help_is_the_first_sentence_cut_as_click_cuts_it(text, short):
    assert first_sentence(text) == short and len(short) <= 45
    if not CLICK_RULE:
        return
    # click's own short help of a command with this help (what `nngk-bench CMD` would list)
    assert click.Command("x", help=text).get_short_help_str() == short
    limited = click.Command("x", help=text).get_short_help_str(limit=10)
    assert first_sentence(text, width=10) == limited


# A typo'd loss or data set is refused before any heavy package is imported (issue 42: it took
# 7-20 s of imports), in a fresh interpreter, with the nearest names.
REFUSED = f"""
import json, sys
from bench.cli import main
try:
    main(sys.argv[1:], prog_name="nngk-bench")
except SystemExit as stop:
    code = stop.code
print(json.dumps(dict(code=code, heavy=[m for m in {HEAVY!r} if m in sys.modules])))
"""


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--loss", "ngk"], "unknown loss 'ngk' (did you mean nngk?)"),
        (["run", "--loss", "nngk,contrastve"], "(did you mean contrastive or "),
        (["suite", "--losses", "papr"], "unknown loss 'papr' (did you mean paper"),
        (["run", "--dataset", "cub200"], "unknown data set 'cub200' (did you mean cub?)"),
        (["tune", "--loss", "ngk"], "unknown loss 'ngk' (did you mean nngk?)"),
    ],
)
def test_a_typo_is_refused_before_torch_is_imported(args, message):
    out = subprocess.run([sys.executable, "-c", REFUSED, *args], capture_output=True, text=True)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == dict(code=1, heavy=[]), out.stderr
    assert out.stderr.count("\n") == 1 and message in out.stderr, out.stderr


# Inputs that are not there are refused before torch (and scikit-learn, faiss, ...) is
# imported, as typos are (issue 69, item 9: 17-20 s of imports first on a loaded machine);
# pandas and scipy only where a reader of the data set's layout says what is missing.
SLOW = ("torch", "torchvision", "sklearn", "faiss", "optuna")


@pytest.mark.parametrize(
    "args, message, readers",
    [
        (["run", "--dataset", "folder:{tmp}/none"], "folder: {tmp}/none not found", True),
        (["run", "--dataset", "cub"], "CUB-200-2011: {tmp}/CUB_200_2011/images.txt not", True),
        (["run", "--dataset", "features:{tmp}/f.npz"], "{tmp}/f.npz: no such file", False),
        (["run", "--dataset", "emoji"], "the emoji sets twemoji, noto, noto-v1,", False),
        (["run", "--results", "{tmp}/file/runs"], "{tmp}/file is a file, not a folder", False),
        (["report", "--results", "{tmp}/none"], "results folder {tmp}/none does not exist", False),
    ],
)
def test_what_is_not_there_is_refused_before_torch_is_imported(tmp_path, args, message, readers):
    (tmp_path / "file").write_text("")
    args = [a.format(tmp=tmp_path) for a in args]
    env = {**os.environ, "NNGK_DATA": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", REFUSED, *args], capture_output=True, text=True, env=env
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["code"] == 1, out.stderr
    assert not set(found["heavy"]) & set(SLOW if readers else HEAVY), found
    assert out.stderr.count("\n") == 1 and message.format(tmp=tmp_path) in out.stderr, out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing written
