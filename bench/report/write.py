"""Comparison tables and plots, read only from finished run folders.

Per table (a data set under a protocol): the embedding results (`<table>.md/.csv/.png`), the
published numbers, and whichever of the papers' other tables and figures its runs have the data for;
across the classify-protocol tables, the classification comparison (Meyer et al. 2018 Tables 3-5). A
table or figure whose runs lack what it needs is left out; one that fails on a damaged file is named
among the problems, never a traceback."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TextIO

import pandas as pd
from tqdm import tqdm

from bench.data.names import FOLDER_PREFIX
from bench.data.sources.folder import check_outside_data
from bench.report.categories import categories_files
from bench.report.classification import CLASSIFICATION, classification_files
from bench.report.colours import method_colours
from bench.report.embedding import embedding_files
from bench.report.folds import folds_files
from bench.report.galleries import gallery_files
from bench.report.health import health_files
from bench.report.html import index_html
from bench.report.index import index_text
from bench.report.manifest import publish, read_manifest
from bench.report.results_folder import missing_results_line
from bench.report.run_figures import (
    centres_figure,
    examples_figure,
    mprec_figure,
    neighbours_figure,
    pair_figures,
    tsne_figure,
)
from bench.report.run_files import DamagedRun, PartUnavailable
from bench.report.runs import BASELINE_LOSS, read_runs
from bench.report.table_format import Files
from bench.report.train_test import train_test_files
from bench.report.tuned_default import TUNED_DEFAULT, tuned_default_files
from bench.report.tuning import TUNING, tuning_files
from bench.util.errors import did_you_mean
from bench.util.progress import log


@dataclass
class PartsLeftOut:
    """The tables and figures not built, a line each: those that cannot be drawn from what is
    at hand (`PartUnavailable`), and those that failed (the report is then incomplete)."""

    unavailable: list[str]
    failed: list[str]


TABLE_BUILDERS: tuple[Callable[[pd.DataFrame, str], Files], ...] = (
    embedding_files,
    train_test_files,
    categories_files,
    health_files,
    examples_figure,
    neighbours_figure,
    centres_figure,
    pair_figures,
    mprec_figure,
    tsne_figure,
    gallery_files,
    folds_files,
)


def _build(
    name: str, runs: pd.DataFrame, builders: Sequence[Callable], left: PartsLeftOut, bar: tqdm
) -> Files:
    """The builders' files of one table; one that cannot be drawn here, or fails, is named in
    `left`."""
    files: Files = {}
    names = runs["name"].dropna().unique() if "name" in runs else ()
    with method_colours(names):
        for builder in builders:
            bar.set_postfix_str(f"{name}: {builder.__name__}")  # the part now built
            try:
                files.update(builder(runs, name))
            except DamagedRun:
                raise  # the table is built again without that run
            except PartUnavailable as err:  # e.g. a gallery whose images are not on this machine
                left.unavailable.append(f"{name}: {builder.__name__} left out ({err})")
            except Exception as err:  # a file that no run can mend never stops the report
                why = f"{type(err).__name__}: {err}"
                left.failed.append(f"{name}: {builder.__name__} left out ({why})")
            bar.update()
    return files


def building_bar(parts: int, file: TextIO | None = None) -> tqdm:
    """A bar on stderr over the `parts` being built, naming the one under way. Drawn at once:
    a bar that waits (tqdm's `delay`) and closes before it is due also leaves the line it drew
    unfinished, and what is printed next joins it."""
    return tqdm(total=parts, desc="report", unit="parts", leave=False, mininterval=1.0, file=file)


def table_names(df: pd.DataFrame) -> list[str]:
    """The tables of the runs: a baseline alone makes no table."""
    return sorted(df.loc[df["loss"] != BASELINE_LOSS, "table"].unique())


def part_count(tables: Sequence[str], builders: Sequence[Callable]) -> int:
    """What `build_all` builds: each builder per table, classification, tuned-vs-default."""
    return len(tables) * len(builders) + 2


def with_reference(builder: Callable, reference: str | None) -> Callable:
    if builder is not embedding_files or reference is None:
        return builder

    def embedding_files_against_reference(runs: pd.DataFrame, name: str) -> Files:
        return embedding_files(runs, name, reference)

    return embedding_files_against_reference


def build_groups(
    df: pd.DataFrame,
    builders: Sequence[Callable],
    problems: list[str],
    left_out: dict[str, list[str]],
) -> tuple[dict[str, Files], PartsLeftOut]:
    """The files of each table, and across classify tables; a run with a damaged file is left
    out of every table it is in, named among the problems and under the table's title (with
    the runs already `left_out` by table), and the rest is built without it. With them, the
    parts left out: not drawable here, or failed."""
    tables = table_names(df)  # kept when a damaged run leaves a table its baselines alone
    left_out = {table: list(lines) for table, lines in left_out.items()}
    with building_bar(part_count(tables, builders)) as bar:
        while True:
            found = PartsLeftOut([], [])
            try:
                groups = build_all(df, builders, found, bar, tables)
            except DamagedRun as err:
                df = without_damaged(df, err, problems, left_out)
                continue
            return {name: noted(name, files, left_out) for name, files in groups.items()}, found


def build_all(
    df: pd.DataFrame,
    builders: Sequence[Callable],
    left: PartsLeftOut,
    bar: tqdm,
    tables: Sequence[str],
) -> dict[str, Files]:
    """One attempt of `build_groups` over these tables: a DamagedRun ends it."""
    parts = {t: df[df["table"] == t] for t in tables}
    bar.reset(total=part_count(tables, builders))  # from 0 after a damaged run left out
    groups = {t: _build(t, p, builders, left, bar) for t, p in parts.items()}
    groups[CLASSIFICATION] = _build(CLASSIFICATION, df, [classification_files], left, bar)
    groups[TUNED_DEFAULT] = _build(TUNED_DEFAULT, df, [tuned_default_files], left, bar)
    return groups


def without_damaged(
    df: pd.DataFrame, err: DamagedRun, problems: list[str], left_out: dict[str, list[str]]
) -> pd.DataFrame:
    """The runs less the damaged one, named among the problems and in `left_out` by table."""
    damaged = df["path"] == err.run_dir
    if not damaged.any():  # never loop: a file outside the runs is a plain fault
        raise RuntimeError(f"{err}, not a run of {df['path'].iloc[0]}'s folder") from None
    tables = sorted(df.loc[damaged, "table"].unique())
    problems.append(f"{err}; the run is left out of {', '.join(tables)}")
    for table in tables:
        left_out.setdefault(table, []).append(str(err))
    return df[~damaged]


def noted(table: str, files: Files, left_out: dict[str, list[str]]) -> Files:
    """The table's markdown with a line under its title for each run left out of it."""
    main = f"{table}.md"
    if table not in left_out or main not in files:
        return files
    title, _, rest = files[main].decode().partition("\n")
    lines = "".join(f"\n> Left out, damaged: {why}\n" for why in left_out[table])
    return {**files, main: f"{title}\n{lines}{rest}".encode()}


class ReportFiles(NamedTuple):
    written: list[Path]
    problems: list[str]  # a line each: a run skipped, a part that failed, a file left as it is
    removed: list[Path]  # an earlier report's files that this one does not write
    incomplete: list[str]  # why the report is not whole: a part failed, a file was left


def drawn_builders(tsne: bool = False) -> list[Callable]:
    """TABLE_BUILDERS less the yoked t-SNE unless it is asked for (`report --tsne`): 1,000
    iterations over 4 losses' embeddings, the largest part of the main job's report (about a
    quarter of its seconds, docs/speed.md), and no table reads it."""
    return [b for b in TABLE_BUILDERS if tsne or b is not tsne_figure]


def write_report(
    results: Path, out: Path, reference: str | None = None, tsne: bool = False
) -> ReportFiles:
    """Per table: the files of TABLE_BUILDERS (the t-SNE only with `tsne`: `drawn_builders`);
    across classify tables: classification.md,
    .csv and -ablation.csv; README.md indexing them all, index.html showing them all.
    `reference`: the row (e.g. 'nngk') every other row of a main table is tested against,
    else each column's best. Where a part failed, the earlier report's files stay. A
    ValueError, with nothing written or removed, where `results` holds no finished run and
    no finished study."""
    df, problems, left_out = read_runs(results)
    tuned = tuning_files(results)  # a `tune --no-retrain` alone: its studies, no table
    tables = len(df) and table_names(df)
    if not tables and not tuned:
        raise ValueError(no_runs_line(Path(results), problems, len(df)))
    check_reference(df, reference)
    check_outside_data(out, data_folders(df), "--out")  # as run --results, visualize --out
    out = Path(out)
    groups, parts = {}, PartsLeftOut([], [])
    if tables:
        log.info(f"report: {len(df)} runs read; building the tables and figures for {out}")
        builders = [with_reference(b, reference) for b in drawn_builders(tsne)]
        groups, parts = build_groups(df, builders, problems, left_out)
    problems += parts.unavailable + parts.failed
    failed = parts.failed
    if tuned:
        groups[TUNING] = tuned
    files = {name: data for group in groups.values() for name, data in group.items()}
    files["README.md"] = index_text(results, groups).encode()
    files["index.html"] = index_html(results, out, groups, df).encode()
    written, removed = publish(out, files, read_manifest(out), remove_stale=not failed)
    left = [out / name for name in sorted(set(files) - set(written))]
    problems += [
        f"{p}: not a file this report wrote, or changed since; left as it is" for p in left
    ]
    incomplete = [line.partition(" (")[0] for line in failed] + [f"{p} not written" for p in left]
    return ReportFiles([out / n for n in written], problems, [out / n for n in removed], incomplete)


def data_folders(df: pd.DataFrame) -> list[str]:
    """The runs' `folder:` data sets, each by the folder it resolved to when it ran (its
    `data_location`; 'folder:imgs' was relative to where it ran), else as it was given."""
    if not len(df):
        return []
    located = df["data_location"] if "data_location" in df else pd.Series("", index=df.index)
    return [
        FOLDER_PREFIX + location if isinstance(location, str) and location else dataset
        for dataset, location in zip(df["dataset"], located, strict=True)
        if dataset.startswith(FOLDER_PREFIX)
    ]


def check_reference(df: pd.DataFrame, reference: str | None) -> None:
    """A ValueError naming the trained rows, the nearest first, for a --reference that is
    none of them (it would otherwise be ignored and each column's best used)."""
    if reference is None:
        return
    names = sorted(set(df.loc[df["loss"] != BASELINE_LOSS, "name"])) if len(df) else []
    if reference in names:
        return
    if not names:
        raise ValueError(f"--reference {reference!r}: these results hold no trained run")
    raise ValueError(
        f"--reference {reference!r} is no row of these runs{did_you_mean(reference, names)}; "
        f"the rows: {', '.join(names)}"
    )


def no_runs_line(results: Path, problems: list[str], baselines: int = 0) -> str:
    """Why there is nothing to report (no run, or only `baselines` of the data sets), and
    what to do."""
    if not results.is_dir():
        return missing_results_line(results)
    if baselines:
        # each named, with why: a damaged record is not finished by running it again
        which = f": {'; '.join(problems[:3])}{'; ...' if len(problems) > 3 else ''}"
        return (
            f"no finished trained run in {results}, only {baselines} baseline(s) "
            f"({len(problems)} folder(s) unfinished or damaged{which if problems else ''}); "
            "train some first, finish an unfinished one (run the same command again), or "
            "retrain a damaged one (the same command with --force)"
        )
    if problems:
        return (
            f"no finished run in {results} ({len(problems)} folder(s) unfinished or damaged, "
            f"e.g. {problems[0]}); finish them (run the same command again) first"
        )
    return f"no run folder in {results}; train some first (`nngk-bench run` or `suite`)"
