"""The `nngk-bench` command line: one module per command, gathered into one click group.

A command's module (and torch, torchvision, scikit-learn behind it) is imported only when that
command runs or shows its help: `nngk-bench --help` reads the commands' docstrings from their
source instead (issue 15, fast start)."""

from __future__ import annotations

import ast
import importlib
import os
import sys
import textwrap
from importlib.util import find_spec
from pathlib import Path

import click

from bench.cli.options import click_errors, os_error_line
from bench.util.environ import cache_setting
from bench.util.progress import show_progress

INTERRUPTED_ANYWHERE = "interrupted; nothing finished was lost: run the same command again"


def first_process() -> bool:
    """Whether this is the command's first (or only) process: under torchrun the first says
    what stopped them all, once."""
    return os.environ.get("RANK", "0") == "0"


class OneLineErrors(click.Group):
    """A bad option value is one line, "Error: ...", without click's usage preamble; so is a
    file operation that fails (a full disk, a read-only folder) in any command; a Ctrl-C that
    no command caught (e.g. while it loads its data) is one line and exit 130, not click's
    "Aborted!" and exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except click.UsageError as err:
            error = click.ClickException(err.format_message())
            error.exit_code = err.exit_code
            raise error from None
        except BrokenPipeError:  # the output's reader quit (e.g. `| head`): stop quietly
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python's advice for SIGPIPE)
            sys.exit(1)
        except OSError as err:
            raise click.ClickException(os_error_line(err)) from None
        except KeyboardInterrupt:  # files are written atomically: nothing is half-written
            if first_process():
                click.echo(INTERRUPTED_ANYWHERE, err=True)
            sys.exit(130)


# name -> module:function
COMMANDS = {
    "run": "bench.cli.run:run",
    "report": "bench.cli.report:report",
    "speed": "bench.cli.speed:speed",
    "check": "bench.cli.check:check",
    "visualize": "bench.cli.visualize:visualize",
    "losses": "bench.cli.losses:list_losses",
    "features": "bench.cli.features:features",
    "linear": "bench.cli.linear:linear",
    "suite": "bench.cli.suite:suite",
    "tune": "bench.cli.tune:tune",
    "pretrain": "bench.cli.pretrain:pretrain",
}


SHORT_HELP_WIDTH = 45  # click's width of a command's line in its group's list


def first_sentence(text: str, width: int = SHORT_HELP_WIDTH) -> str:
    """A help text's short form, as click shortens a command's help for its group's list: the
    first paragraph's first sentence (a period before a lowercase word, as in "e.g. this", ends
    none), whitespace collapsed, cut at a word to at most `width` characters ending in "...".
    (Our own: click's make_default_short_help is deprecated, and gone in Click 9.)"""
    words = text.partition("\n\n")[0].split()
    if words[:1] == ["\b"]:  # click's no-rewrap marker
        words = words[1:]
    for i, word in enumerate(words):
        if word.endswith(".") and (i == len(words) - 1 or not words[i + 1][0].islower()):
            words = words[: i + 1]
            break
    text = " ".join(words)
    if len(text) <= width:
        return text
    if width < len("..."):
        return "..."
    return textwrap.shorten(text, width, placeholder="...", break_on_hyphens=False)


def short_help(target: str) -> str:
    """The first sentence of a command function's docstring, read from its module's source."""
    module, function = target.split(":")
    tree = ast.parse(Path(find_spec(module).origin).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function]
    return first_sentence(ast.get_docstring(node) or "")


class LazyCommands(OneLineErrors):
    """The commands of `COMMANDS`, each module imported when its command is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, function = COMMANDS[name].split(":")
        return getattr(importlib.import_module(module), function)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, short_help(COMMANDS[name])) for name in sorted(COMMANDS)])


@click.group(cls=LazyCommands)
def main() -> None:
    """nngk-bench: compare deep metric learning losses with one trainer and one evaluator."""
    show_progress()
    # before any command writes: a cache setting that cannot work is refused first
    with click_errors():
        cache_setting()
