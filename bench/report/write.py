"""Comparison tables and plots, read only from finished run folders.

Per table (a data set under a protocol): the embedding results (`<table>.md/.csv/.png`), the
published numbers, and whichever of the papers' other tables and figures its runs have the data
for; across the classify-protocol tables, the classification comparison (seed 000 Tables 3-5).
A table or figure whose runs lack what it needs is left out; one that fails on a damaged file is
named among the problems, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from bench.report.categories import categories_files
from bench.report.classification import CLASSIFICATION, classification_files
from bench.report.embedding import embedding_files
from bench.report.galleries import gallery_files
from bench.report.health import health_files
from bench.report.html import index_html
from bench.report.index import index_text
from bench.report.manifest import ours, read_manifest, write_manifest
from bench.report.run_figures import (
    centres_figure,
    examples_figure,
    mprec_figure,
    neighbours_figure,
    pair_figures,
    tsne_figure,
)
from bench.report.runs import BASELINE_LOSS, load_runs
from bench.report.table_format import Files
from bench.report.train_test import train_test_files
from bench.report.tuning import TUNING, tuning_files
from bench.util.atomic import atomic_write_bytes

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
)


def _build(
    name: str, runs: pd.DataFrame, builders: Sequence[Callable], problems: list[str]
) -> Files:
    files: Files = {}
    for builder in builders:
        try:
            files.update(builder(runs, name))
        except Exception as err:  # a damaged run file never stops the report
            problems.append(f"{name}: {builder.__name__} left out ({type(err).__name__}: {err})")
    return files


def with_reference(builder: Callable, reference: str | None) -> Callable:
    if builder is not embedding_files or reference is None:
        return builder

    def embedding_files_against_reference(runs: pd.DataFrame, name: str) -> Files:
        return embedding_files(runs, name, reference)

    return embedding_files_against_reference


def write_report(
    results: Path, out: Path, reference: str | None = None
) -> tuple[list[Path], list[str]]:
    """Per table: the files of TABLE_BUILDERS; across classify tables: classification.md,
    .csv and -ablation.csv; README.md indexing them all, index.html showing them all.
    `reference`: the row (e.g. 'nngk') every other row of a main table is tested against,
    else each column's best."""
    df, problems = load_runs(results)
    out = Path(out)
    tables = sorted(df.loc[df["loss"] != BASELINE_LOSS, "table"].unique()) if len(df) else []
    parts = {t: df[df["table"] == t] for t in tables}  # a baseline alone makes no table
    builders = [with_reference(b, reference) for b in TABLE_BUILDERS]
    groups = {t: _build(t, p, builders, problems) for t, p in parts.items()}
    if len(df):
        groups[CLASSIFICATION] = _build(CLASSIFICATION, df, [classification_files], problems)
    tuned = tuning_files(results)
    if tuned:
        groups[TUNING] = tuned
    files = {name: data for group in groups.values() for name, data in group.items()}
    files["README.md"] = index_text(results, groups).encode()
    files["index.html"] = index_html(results, out, groups, df).encode()
    previous, written = read_manifest(out), {}
    for name, data in files.items():
        if not ours(out / name, previous):
            problems.append(
                f"{out / name}: not a file this report wrote, or changed since; left as it is"
            )
            continue
        atomic_write_bytes(out / name, data)
        written[name] = data
    write_manifest(out, written)
    return [out / name for name in written], problems
