"""The setup stated beside every table: what the runs of a table (or of one row) were trained
with, so that no number is read without its backbone, input, budget and optimiser."""

from __future__ import annotations

from collections.abc import Set

import pandas as pd

from bench.protocols import PROTOCOLS
from bench.report.runs import (
    DEFAULTS,
    column_or_nan,
    labelled_settings,
    read_config,
    trained_runs,
)
from bench.report.texts import UNUSED, setting_text
from bench.runs.config import declared, value_text

# Column of a run's record -> its name in the setup; `weights`: the label the run recorded of
# its weights ('random init', 'ImageNet', 'small_cnn pretrained on glyphs 1000-1999').
SETUP = {
    "backbone": "backbone",
    "weights": "weights",
    "input_size": "input",
    "epochs": "epochs",
    "batch_size": "batch",
    "sampler": "sampler",
    "optimizer": "optimizer",
    "lr": "lr",
    "precision": "precision",
}
# The recipe options (issue 45), stated only where some run set one, so that the setup of runs
# at their defaults reads as before.
RECIPE = declared("recipe")


def field_text(runs: pd.DataFrame, column: str, by: str | None, labelled: bool = False) -> str:
    """A setup field's value among these runs ('-' where none recorded it, as runs of earlier
    versions did not); where it differs, each value with the rows (`by`) that had it:
    'lr 0.001 (nngk, softmax) / 0.01 (contrastive)', or, where each row's label states it
    (`labelled`), the values alone and that the labels say which."""
    values = column_or_nan(runs, column)
    texts = values.dropna().map(value_text)
    if texts.nunique() <= 1 or by is None or by not in runs:
        return " / ".join(sorted(set(texts))) or "-"
    if labelled:
        return " / ".join(sorted(set(texts))) + " (as each row's label says)"
    rows = runs.loc[texts.index, by].astype(str)
    named = (
        f"{text} ({', '.join(sorted(set(rows[texts == text])))})" for text in sorted(set(texts))
    )
    return " / ".join(named)


def seeds_text(seeds: pd.Series) -> str:
    """'1 seed (0)', '3 seeds (0, 1, 2)', '10 seeds (0-9)'."""
    distinct = sorted(int(s) for s in seeds.dropna().unique())
    if not distinct:
        return "no seed recorded"
    consecutive = distinct == list(range(distinct[0], distinct[-1] + 1))
    which = (
        f"{distinct[0]}-{distinct[-1]}"
        if consecutive and len(distinct) > 3
        else ", ".join(map(str, distinct))
    )
    return f"{len(distinct)} seed{'s' if len(distinct) > 1 else ''} ({which})"


def setup_of(
    runs: pd.DataFrame, by: str | None = None, labelled: Set[str] = frozenset()
) -> dict[str, str]:
    """Each setup field's value among these runs, and their seeds; a field that differs names
    the rows (`by`, e.g. 'method') that had each value, unless their labels state it (a
    column in `labelled`)."""
    found = {
        name: field_text(runs, column, by, column in labelled) for column, name in SETUP.items()
    }
    found["seeds"] = seeds_text(runs["seed"])
    return found


def setup_line(part: pd.DataFrame) -> str:
    """'Setup: backbone small_cnn; weights random init; ...; 3 seeds (0, 1, 2).' for a
    table's trained runs (its baselines are not trained)."""
    trained = trained_runs(part)
    runs = (trained if len(trained) else part).reset_index(drop=True)  # rows matched by index
    if len(trained) and not column_or_nan(trained, "protocol").map(trains_network).any():
        return linear_setup_line(runs)
    labelled = labelled_settings(runs)
    fields = setup_of(runs, by="method", labelled=labelled)
    fields.pop("seeds")
    stated = [*data_text(runs), *(f"{name} {value}" for name, value in fields.items())]
    text = "; ".join([*stated, *recipe_texts(runs, labelled), *processes_text(runs)])
    return f"Setup: {text}; {rows_seeds_text(runs)}."


def data_text(runs: pd.DataFrame) -> list[str]:
    """'data /home/me/fold år' for runs of a folder or file (their resolved location), whose
    table is named by a short hash where its name reads like another's; none for the built-in
    sets, which their name says."""
    locations = column_or_nan(runs, "data_location", "").dropna().astype(str)
    found = sorted(set(locations[locations != ""]))
    return [f"data {' / '.join(found)}"] if found else []


def trains_network(protocol: object) -> bool:
    """Whether runs of this protocol train a network (a linear method's do not)."""
    return protocol not in PROTOCOLS.names() or PROTOCOLS.get_class(protocol).trains


def untrained_fields(runs: pd.DataFrame) -> dict[str, str]:
    """'-' for the network's fields of runs that train none (a linear method's: their record
    has no backbone, epochs or optimizer, which would read as the defaults)."""
    if "protocol" not in runs or runs["protocol"].map(trains_network).any():
        return {}
    return dict.fromkeys(SETUP.values(), "-")


def linear_setup_line(runs: pd.DataFrame) -> str:
    """The setup of `nngk-bench linear`'s runs, which train no network (their records hold no
    backbone, epochs or optimizer): what they were fitted on, each method's parameters as its
    config.json recorded them, and the seeds."""
    configs = [read_config(path) for path in runs["path"]]
    fitted = sorted({f"{c['feature_dims']}-d" for c in configs if "feature_dims" in c})
    items = sorted({str(c["fit_size"]) for c in configs if "fit_size" in c})
    methods = {}
    for method, config in zip(runs["method"], configs, strict=True):
        params = config.get("params") if isinstance(config.get("params"), dict) else {}
        methods.setdefault(method, set()).add(
            ", ".join(f"{k} {value_text(v)}" for k, v in sorted(params.items())) or "none"
        )
    stated = "; ".join(f"{m}: {' / '.join(sorted(p))}" for m, p in sorted(methods.items()))
    return (
        f"Setup: linear methods (Sharma et al. 2015), no network trained, fitted on the "
        f"inputs as given ({' / '.join(fitted) or '-'}, {' / '.join(items) or '-'} training "
        f"items); parameters: {stated}; {rows_seeds_text(runs)}."
    )


def rows_seeds_text(runs: pd.DataFrame) -> str:
    """The seeds of a table's runs (`seeds_text`); where its rows ran different seeds, those
    most rows ran, then each other set with its rows: '3 seeds (0, 1, 2); 1 seed (0) for
    softmax', so that no row's single seed reads as three."""
    row = next((c for c in ("name", "method") if c in runs), None)  # a row's label
    if row is None:
        return seeds_text(runs["seed"])
    keys = [row, "dims"] if "dims" in runs and runs["dims"].nunique() > 1 else [row]
    sets = runs.groupby(keys)["seed"].agg(lambda s: tuple(sorted({int(v) for v in s.dropna()})))
    if sets.nunique() <= 1:
        return seeds_text(runs["seed"])
    counts = sorted(sets.value_counts().items(), key=lambda item: (-item[1], item[0]))
    texts = [seeds_text(pd.Series(counts[0][0], dtype=float))]
    for seeds, _ in counts[1:]:
        rows = [row_name(key) for key in sets.index[sets.map(seeds.__eq__)]]
        texts.append(f"{seeds_text(pd.Series(seeds, dtype=float))} for {' / '.join(rows)}")
    return "; ".join(texts)


def row_name(key: object) -> str:
    """'softmax' for a row keyed by method, 'softmax 64-d' by method and size."""
    return f"{key[0]} {key[1]}-d" if isinstance(key, tuple) else str(key)


def processes_text(runs: pd.DataFrame) -> list[str]:
    """'processes 2', with the rows of each count where they differ, where some run trained
    on several (`run --nproc`); none for one process (or a run that did not record it), so
    that the setup of one-process runs reads as before."""
    counts = column_or_nan(runs, "processes")
    if not (pd.to_numeric(counts, errors="coerce") > 1).any():
        return []
    return [f"processes {field_text(runs, 'processes', 'method')}"]


def recipe_texts(runs: pd.DataFrame, labelled: Set[str]) -> list[str]:
    """The recipe options some run set, as their labels read ('frozen BN', 'avg+max
    pooling'), each with the rows that had it where they differ (`field_text`); the embedding
    layer's learning rate is in the optimizer's text."""
    texts = []
    for column in RECIPE:
        default = getattr(DEFAULTS, column)
        values = column_or_nan(runs, column, default)
        used = values.ne(UNUSED)  # a crop area on glyphs: no part of what the run did
        if values[used].eq(default).all():
            continue
        shown = runs[used].assign(
            **{column: values[used].map(lambda v, c=column: setting_text(c, v))}
        )
        texts.append(field_text(shown, column, "method", column in labelled))
    return texts


def setup_columns(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """setup_of per group of `keys` (e.g. a table's method and size), one column per field."""
    rows = [
        {**dict(zip(keys, key, strict=True)), **setup_of(g), **untrained_fields(g)}
        for key, g in df.groupby(keys)
    ]
    return pd.DataFrame(rows, columns=[*keys, *SETUP.values(), "seeds"])
