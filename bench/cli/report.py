"""`nngk-bench report`: the comparison tables and plots from the finished runs."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli.options import RESULTS, click_errors


@click.command()
@RESULTS
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder of the report (default: RESULTS/report); it overwrites and removes only files "
    "a report wrote there.",
)
@click.option(
    "--reference",
    default=None,
    help="The row every other row is tested against, e.g. nngk (default: each column's best).",
)
@click.option(
    "--tsne",
    is_flag=True,
    help="Also draw <table>-tsne.png, a yoked t-SNE of the losses' test embeddings (about a "
    "quarter of the main job's report time on 2 cores).",
)
def report(results, out, reference, tsne):
    """Write comparison tables (markdown, CSV) and plots (PNG) from the finished runs."""
    from bench.report.results_folder import check_results_exist
    from bench.util.progress import log

    out = out or Path(results) / "report"  # each results folder its own report
    # Before pandas and the plotting libraries are imported: a typo is refused at once.
    with click_errors(line=untouched):
        check_results_exist(results)
    log.info(f"report: reading the runs in {results}")  # before the plotting libraries load
    from bench.report.write import write_report

    with click_errors(line=untouched):  # an OSError: the group's line (`os_error_line`)
        written, problems, removed, incomplete = write_report(results, out, reference, tsne)
    for line in problems:
        click.echo(f"skipped {line}", err=True)
    for path in written:
        click.echo(str(path))
    for path in removed:
        click.echo(f"removed {path} (an earlier report's, not written now)")
    if incomplete:
        raise click.ClickException(incomplete_line(out, incomplete))


def untouched(err: Exception) -> str:
    """The line of a report refused before it wrote anything."""
    return f"{err}; nothing was written or removed"


def incomplete_line(out: Path, incomplete: list[str]) -> str:
    """Why the report in `out` is not whole, and what to do."""
    failed = [line for line in incomplete if not line.endswith(" not written")]
    todo = (
        "its earlier files were kept; the line above names the fault (a damaged file of a run, "
        "or nngk-bench's own, to report)"
        if failed
        else "move those files away (or give --out another folder) and report again"
    )
    return (
        f"the report in {out} is incomplete: {len(incomplete)} part(s) or file(s) not "
        f"written ({incomplete[0]}{', ...' if len(incomplete) > 1 else ''}); {todo}"
    )
