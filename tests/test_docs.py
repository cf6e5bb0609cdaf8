"""The README and docs/ cannot go stale: every `nngk-bench` command in their ```bash blocks runs
(or, in a block marked as not run, parses), their examples build, their links lead somewhere,
and the README stays a short entry point.

How a command runs. Every `nngk-bench ...` (or `torchrun ... -m bench.cli ...`) in a ```bash
block is taken out of it: `&&`, `;`, `&` and `|` separate commands, a trailing backslash
continues a line, `#` starts a comment, `for NAME in A B ...; do` binds `$NAME` to A and a
line `NAME=VALUE` binds it to VALUE. A
block whose line before it is `<!-- not run: REASON -->` (real data, weights, several processes,
a cluster, an hour) only has its commands parsed by the command line: the command exists and
every option and value is accepted. Every other command runs in this process (click's
CliRunner), offline, in one temporary folder that all of them share as their working directory,
with its arguments made small by fixed rules:

- run, suite, tune: a built-in data set (glyphs, glyphs:..., digits) or none becomes TINY,
  `folder:ANY` a generated image folder; `--epochs 1` (a step schedule, none in 1 epoch:
  `--schedule cosine`), `--dims 8`, `--seed 0` (tune: `--seeds 0 --trials 1 --final-epochs
  1`); run: `--batch-size 16`; `--results results`;
- report: `--results results`, and `--out` dropped (the report goes to results/report);
- visualize: a run folder `results/<data>-<loss>-d<N>-s<S>-*` becomes TINY's, at 8 dims and seed
  0 (the first finished match);
- linear: `--dims 8`, `--iterations 1000 --pairs 1000` (for nml and linear-ml);
- pretrain: a glyphs source or none becomes PRETRAIN_SOURCE, `--epochs 1`;
- check: `--results results`; losses, features, --help: as written.

A command that is the same as an earlier one after these rules is run once. Real data sets are
looked for in an empty folder ($NNGK_DATA), and no weights can be downloaded: a command that
needs them fails unless its block is marked.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from urllib.error import URLError

import click
import pytest
from click.testing import CliRunner

from bench.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TINY = "glyphs:classes=24,instances=10,size=12"  # 12 training classes of 8 + 2 images
TINY_NAME = re.sub(r"[:=,]", "-", TINY)  # its run folders' prefix
PRETRAIN_SOURCE = "glyphs:first=1000,classes=8,instances=6,size=12"  # classes 1000-1007
README_LINES = 150

FENCE = re.compile(
    r"(?:^<!--\s*(?P<mark>.*?)\s*-->\n)?^```(?P<lang>\S*)\n(?P<body>.*?)^```[ \t]*$", re.M | re.S
)
SEPARATORS = {";", "&&", "&", "|", "||"}


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    mark: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    return [
        Block(page, text.count("\n", 0, m.start("body")), m["lang"], m["mark"] or "", m["body"])
        for m in FENCE.finditer(text)
    ]


def split_segments(tokens: list[str]) -> list[list[str]]:
    segments, current = [], []
    for token in tokens:
        if token in SEPARATORS:
            segments.append(current)
            current = []
        else:
            current.append(token)
    return [s for s in [*segments, current] if s]


def cli_args(segment: list[str]) -> list[str] | None:
    """The arguments after `nngk-bench` (or `-m bench.cli`), or None for another program."""
    if segment[0] == "nngk-bench":
        return segment[1:]
    if segment[0] == "torchrun" and "bench.cli" in segment:
        return segment[segment.index("bench.cli") + 1 :]
    return None


def commands(body: str) -> list[list[str]]:
    """Each nngk-bench command of a bash block, as its argument list."""
    bound: dict[str, str] = {}
    found = []
    for line in body.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        for segment in split_segments(list(lexer)):
            while segment and segment[0] in ("do", "then", "else", "done"):
                segment = segment[1:]
            if len(segment) > 3 and segment[0] == "for" and segment[2] == "in":
                bound[segment[1]] = segment[3]
                continue
            if len(segment) == 1 and re.fullmatch(r"\w+=\S*", segment[0]):
                name, value = segment[0].split("=", 1)
                bound[name] = value
                continue
            args = cli_args(segment) if segment else None
            if args is not None:
                found.append([re.sub(r"\$\{?(\w+)\}?", lambda m: bound[m[1]], a) for a in args])
    return found


@dataclass(frozen=True)
class Command:
    block: Block
    args: tuple[str, ...]

    @property
    def runs(self) -> bool:
        return not self.block.mark.startswith("not run")

    def __str__(self) -> str:
        return f"{self.block.where} nngk-bench {shlex.join(self.args)}"


def all_commands() -> list[Command]:
    return [
        Command(block, tuple(args))
        for page in PAGES
        for block in blocks(page)
        if block.lang == "bash"
        for args in commands(block.body)
    ]


# --- the rules that make a command small --------------------------------------------------


def option(args: list[str], name: str) -> str | None:
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def without(args: list[str], name: str) -> list[str]:
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def setting(args: list[str], name: str, value: str) -> list[str]:
    return [*without(args, name), name, value]


def small_data(dataset: str | None, folder: Path) -> str | None:
    if dataset is None or dataset in ("glyphs", "digits") or dataset.startswith("glyphs:"):
        return TINY
    if dataset.startswith("folder:"):
        return f"folder:{folder}"
    return dataset  # features:PATH as written; a real data set fails, unmarked


def run_folder(path: str) -> str:
    """A run folder named in a command, as the rules renamed it: TINY's, 8 dims, seed 0."""
    name = Path(path).name
    name = re.sub(r"^(glyphs|digits)-", f"{TINY_NAME}-", name)
    name = re.sub(r"-d\d+-s\d+-", "-d8-s0-", name)
    matches = sorted(p for p in Path("results").glob(name) if (p / "metrics.json").is_file())
    assert matches, (
        f"no finished run folder matches {path} (as {name}); the commands run in the pages' "
        "order and share their results, so run the whole of this file"
    )
    return str(matches[0])


def small(args: tuple[str, ...], folder: Path) -> list[str]:
    command, rest = args[0], list(args[1:])
    if command in ("run", "suite", "tune"):
        rest = setting(rest, "--dataset", small_data(option(rest, "--dataset"), folder))
        rest = setting(rest, "--epochs", "1")
        if (option(rest, "--schedule") or "").startswith("step:"):  # no step in 1 epoch
            rest = setting(rest, "--schedule", "cosine")
        rest = setting(rest, "--dims", "8")
        rest = setting(rest, "--results", "results")
        if command == "tune":
            for name, value in (("--seeds", "0"), ("--trials", "1"), ("--final-epochs", "1")):
                rest = setting(rest, name, value)
        else:
            rest = setting(rest, "--seed", "0")
        if command == "run":
            rest = setting(rest, "--batch-size", "16")
    elif command == "report":
        rest = setting(without(rest, "--out"), "--results", "results")
    elif command == "visualize":
        rest = [run_folder(a) if a.startswith("results/") else a for a in rest]
    elif command == "linear":
        rest = setting(setting(rest, "--dims", "8"), "--results", "results")
        methods = option(rest, "--method") or "nml,linear-ml"
        if {"nml", "linear-ml"} & set(methods.split(",")):
            rest = setting(setting(rest, "--iterations", "1000"), "--pairs", "1000")
    elif command == "pretrain":
        source = option(rest, "--dataset") or "glyphs"
        if source == "glyphs" or source.startswith("glyphs:"):
            rest = setting(rest, "--dataset", PRETRAIN_SOURCE)
        rest = setting(rest, "--epochs", "1")
    elif command == "check":
        rest = setting(rest, "--results", "results")
    return [command, *rest]


def parses(args: tuple[str, ...] | list[str]) -> tuple:
    """The command exists and accepts every option and value (nothing runs); what it was
    given, in a form that is the same for the same options in another order."""
    if not args or args[0].startswith("-"):
        return tuple(args)
    parent = click.Context(main, info_name="nngk-bench")
    command = main.get_command(parent, args[0])
    assert command is not None, f"no command {args[0]!r}"
    with command.make_context(args[0], list(args[1:]), parent=parent) as ctx:
        return (args[0], *sorted((name, repr(value)) for name, value in ctx.params.items()))


# --- running them -------------------------------------------------------------------------

COMMANDS = all_commands()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The shared working directory: offline, no data root, no weights, a generated folder."""
    import torch
    import torchvision.models._api as weights_api

    from tests.fixtures.folder import make_folder

    home = tmp_path_factory.mktemp("docs")
    (home / "data").mkdir()

    def offline(*args, **kwargs):
        raise URLError("no network in the docs test")

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(home)
        patch.setenv("NNGK_CACHE", str(home / "cache"))
        patch.setenv("NNGK_DATA", str(home / "data"))
        patch.setattr(torch.hub, "get_dir", lambda: str(home / "hub"))
        patch.setattr(weights_api, "load_state_dict_from_url", offline)
        patch.setattr(torch.hub, "download_url_to_file", offline)  # BN-Inception's weights
        # One thread each for torch and faiss: on a loaded machine their OpenMP threads wait
        # for one another spinning, which made this test four times as slow.
        patch.setenv("NNGK_FAISS_THREADS", "1")
        torch.set_num_threads(1)
        try:
            yield {"folder": make_folder(home, classes=4, per_class=12), "done": {}}
        finally:
            torch.set_num_threads(threads)


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_command(command: Command, workspace):
    if not command.runs:
        parses(command.args)
        return
    args = list(command.args)
    if args and not args[0].startswith("-"):
        args = small(command.args, workspace["folder"])
    key = parses(args)
    if key not in workspace["done"]:
        result = CliRunner().invoke(main, args)
        workspace["done"][key] = (result.exit_code, result.output)
    code, output = workspace["done"][key]
    assert code == 0, (
        f"{command}\nran as: nngk-bench {shlex.join(args)}\n{output[-3000:]}\n"
        "(a command that cannot run here needs `<!-- not run: REASON -->` before its block)"
    )
    if option(args, "--dataset") == f"folder:{workspace['folder']}":
        assert list(Path("results").glob("folder-*-d8-s0-*/metrics.json")), "no folder run"


def test_commands_take_their_variables_from_loops_and_assignments():
    body = (
        "L=nngk,nca\nnngk-bench tune --loss $L && echo x\n"
        "for d in 64 512; do nngk-bench run --dims $d; done"
    )
    assert commands(body) == [["tune", "--loss", "nngk,nca"], ["run", "--dims", "64"]]


# --- what the pages must say, and must not ------------------------------------------------


def readme_block_lines() -> list[str]:
    runnable = [b for b in blocks(README) if b.lang == "bash" and not b.mark]
    return [line for block in runnable for line in block.body.split("\n")]


def test_the_readme_is_short_and_keeps_its_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_LINES
    lines = readme_block_lines()
    main_job = (
        "nngk-bench run --loss nngk,contrastive,triplet,proxy-anchor --dataset glyphs --dims 64 "
        "--epochs 3 --seed 0,1,2 && nngk-bench report"
    )
    assert any(x.startswith("python3 -m venv .venv") and x.endswith(main_job) for x in lines)
    own = "nngk-bench run --loss paper --dataset folder:my-images --backbone small_cnn "
    assert any(x.startswith(own + "--pretrained none --resize 64 --crop 56") for x in lines)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    ci_test = ci[ci.index("# The README's test command:") + 1]
    assert any(x.startswith("python3 -m venv .venv") and x.endswith(ci_test) for x in lines), (
        "the README's test command and CI's (.ci/run) differ"
    )


def prose(page: Path) -> str:
    """A page without its code: fenced blocks and inline code, where names are literal."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_papers_are_named_by_their_authors(page):
    text = prose(page)
    assert not re.findall(r"seed ?\d{3}", text, re.I), "name a paper by its authors and year"
    assert "../shared" not in page.read_text(encoding="utf-8")
    assert not re.search(r"^ {4}nngk-bench", page.read_text(encoding="utf-8"), re.M), (
        "commands go in ```bash blocks, where this test runs them"
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_lead_to_files(page):
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        assert (page.parent / target.split("#")[0]).exists(), f"{page.name}: {target}"


def marked_block(page: Path, mark: str) -> Block:
    (block,) = [b for b in blocks(page) if b.mark == mark]
    return block


def test_the_example_loss_builds_and_trains():
    import torch

    from losses import LOSSES, build_loss, loss_defaults

    code = marked_block(ROOT / "docs" / "extending.md", "example loss").body
    before = dict(LOSSES)
    try:
        exec(compile(code, "docs/extending.md", "exec"), {"__name__": "docs_example"})
        assert loss_defaults("cosine-margin") == {"margin": 0.5}
        loss = build_loss("cosine-margin", {"margin": 0.3}, num_train=40, num_classes=4, dims=8)
        embeddings = torch.randn(16, 8, requires_grad=True)
        value = loss(embeddings, torch.arange(4).repeat_interleave(4))
        value.backward()
        assert value.ndim == 0 and torch.isfinite(value) and embeddings.grad.abs().sum() > 0
    finally:
        LOSSES.clear()
        LOSSES.update(before)


def test_the_quoted_loss_is_the_file():
    block = marked_block(ROOT / "docs" / "extending.md", "file: losses/contrastive.py")
    assert block.body == (ROOT / "losses" / "contrastive.py").read_text(encoding="utf-8")
