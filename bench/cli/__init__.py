"""The `nngk-bench` command line: one module per command, gathered into one click group."""

from __future__ import annotations

import os
import sys

import click

from bench.cli import (
    check,
    features,
    linear,
    losses,
    report,
    run,
    speed,
    suite,
    tune,
    visualize,
)
from bench.cli.options import os_error_line
from bench.util.progress import show_progress


class OneLineErrors(click.Group):
    """A bad option value is one line, "Error: ...", without click's usage preamble; so is a
    file operation that fails (a full disk, a read-only folder) in any command."""

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


@click.group(cls=OneLineErrors)
def main() -> None:
    """nngk-bench: compare deep metric learning losses with one trainer and one evaluator."""
    show_progress()


# The modules, not their commands: a command named like its module would hide the module.
for command in (
    run.run,
    report.report,
    speed.speed,
    check.check,
    visualize.visualize,
    losses.list_losses,
    features.features,
    linear.linear,
    suite.suite,
    tune.tune,
):
    main.add_command(command)
