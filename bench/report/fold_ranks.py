"""The cross-validated final models ranked (`<table>-folds.md`'s last sections and
`<table>-folds-ranks.csv`): per compared metric, a row per loss and a column per start, size
and embedding (folds' mean, concatenated), best first by the first column. Each cell is set
against its column's best by Welch's t-test over the seeds' values: ▼ where below it with p <
0.05 and two seeds or more on each side; the best is bold where it is above the second so.
The folds' mean has no one set of test embeddings, so the query bootstrap of the main tables
does not apply; the seeds decide, as they do in `tuned-vs-default.md`."""

from __future__ import annotations

import pandas as pd

from bench.report.significance import ALPHA, per_seed_p_value, t_halfwidth
from bench.report.table_format import cell, column_label, csv_bytes, github_table

RANKED = ("map@r", "recall@1")
COLUMN_KEYS = ["weights", "dims", "folds", "embedding"]
ROW_KEYS = ["method", "tuned"]
SEPARATE, CONCATENATED = "folds' mean", "concatenated"  # the two embeddings of a seed's folds


def column_ranks(part: pd.DataFrame, metric: str) -> pd.DataFrame:
    """One column's rows: mean, interval, seeds, and each row's p against the column's best
    (NaN for the best itself), best first."""
    values = {key: g[metric].astype(float).dropna().to_numpy() for key, g in part.groupby(ROW_KEYS)}
    values = {key: v for key, v in values.items() if len(v)}
    order = sorted(values, key=lambda key: -values[key].mean())
    if not order:
        return pd.DataFrame()
    best = values[order[0]]
    rows = []
    for rank, key in enumerate(order, 1):
        v = values[key]
        p = float("nan") if rank == 1 else per_seed_p_value(v, best)
        halfwidth = t_halfwidth(pd.Series(v))
        rows.append([*key, rank, v.mean(), halfwidth, len(v), p])
    return pd.DataFrame(rows, columns=[*ROW_KEYS, "rank", "mean", "ci", "seeds", "p_vs_best"])


def fold_ranks(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Every compared metric's columns ranked (`column_ranks`), with `below`: p < ALPHA."""
    parts = []
    for metric in RANKED:
        if metric not in per_seed:
            continue
        for key, part in per_seed.groupby(COLUMN_KEYS, sort=True):
            ranks = column_ranks(part, metric)
            parts.append(ranks.assign(metric=metric, **dict(zip(COLUMN_KEYS, key, strict=True))))
    if not parts:
        return pd.DataFrame()
    ranks = pd.concat(parts, ignore_index=True)
    ranks["below"] = ranks["p_vs_best"] < ALPHA
    columns = ["metric", *COLUMN_KEYS, *ROW_KEYS, "rank", "mean", "ci", "seeds", "p_vs_best"]
    return ranks[[*columns, "below"]]


def column_title(key: tuple, varying: set[str]) -> str:
    weights, dims, folds, embedding = key
    text = f"{weights}: {embedding}" if "weights" in varying else str(embedding)
    if embedding == CONCATENATED:
        text += f" ({int(folds) * int(dims)} dims)"
    elif "dims" in varying:
        text += f" ({int(dims)} dims)"
    return text


def row_label(method: str, tuned: str) -> str:
    return f"{method} ({tuned})" if isinstance(tuned, str) and tuned else method


def ranked_text(ranks: pd.DataFrame, metric: str) -> str:
    """The markdown section of one metric: rows by the first column's mean."""
    part = ranks[ranks["metric"] == metric]
    columns = sorted(
        dict.fromkeys(map(tuple, part[COLUMN_KEYS].itertuples(index=False))),
        key=lambda c: (*c[:3], c[3] != SEPARATE),  # each start's folds' mean, then concatenated
    )
    varying = {k for k in COLUMN_KEYS if part[k].nunique() > 1}
    first = part[part[COLUMN_KEYS].apply(tuple, axis=1) == columns[0]]
    rows_order = list(dict.fromkeys(map(tuple, first.sort_values("rank")[ROW_KEYS].values)))
    rows_order += [k for k in map(tuple, part[ROW_KEYS].values) if k not in rows_order]
    cells = {(tuple(r[COLUMN_KEYS]), tuple(r[ROW_KEYS])): r for _, r in part.iterrows()}
    table = []
    for row in dict.fromkeys(rows_order):
        table.append([row_label(*row), *(ranked_cell(cells, col, row) for col in columns)])
    headers = ["loss", *(column_title(c, varying) for c in columns)]
    name = column_label(metric)
    return (
        f"## {name}, best first\n\n{name} x100, mean ± 95 % t interval over seeds; ▼: below "
        f"its column's best by Welch's t-test over the seeds (p < {ALPHA}); the best in bold "
        f"where it is above the second so. `-folds-ranks.csv` has each p.\n\n"
        + github_table(table, headers)
    )


def ranked_cell(cells: dict, column: tuple, row: tuple) -> str:
    r = cells.get((column, row))
    if r is None:
        return "-"
    text = cell(r["mean"], r["ci"])
    if r["rank"] == 1 and second_below(cells, column):
        return f"**{text}**"
    return f"{text} ▼" if r["below"] else text


def second_below(cells: dict, column: tuple) -> bool:
    second = [r for (col, _), r in cells.items() if col == column and r["rank"] == 2]
    return bool(second) and bool(second[0]["below"])


def ranked_files(per_seed: pd.DataFrame, table: str) -> tuple[str, dict[str, bytes]]:
    """The markdown sections for `<table>-folds.md` and `<table>-folds-ranks.csv`."""
    ranks = fold_ranks(per_seed)
    if ranks.empty:
        return "", {}
    text = "\n".join(ranked_text(ranks, m) for m in RANKED if m in set(ranks["metric"]))
    return text, {f"{table}-folds-ranks.csv": csv_bytes(ranks)}
