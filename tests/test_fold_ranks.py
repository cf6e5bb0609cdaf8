"""The cross-validated models ranked: each column best first, set against its best by
Welch's t-test over the seeds' values (scipy's, computed here by hand)."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.report.fold_ranks import CONCATENATED, SEPARATE, fold_ranks, ranked_files

SEEDS = {  # MAP@R per seed, folds' mean, random init
    "best": [0.30, 0.31, 0.29],
    "tied": [0.295, 0.305, 0.29],
    "worse": [0.20, 0.21, 0.19],
    "one-seed": [0.10],
}


def per_seed(values: dict[str, list[float]], weights: str = "random init") -> pd.DataFrame:
    rows = []
    for method, seeds in values.items():
        for seed, v in enumerate(seeds):
            for embedding, shift in ((SEPARATE, 0.0), (CONCATENATED, 0.05)):
                key = dict(method=method, weights=weights, dims=8, folds=2, tuned="", seed=seed)
                rows.append({**key, "embedding": embedding, "map@r": v + shift, "recall@1": v})
    return pd.DataFrame(rows)


def welch(a, b) -> float:
    return stats.ttest_ind(a, b, equal_var=False).pvalue


def test_each_row_is_set_against_its_columns_best_by_welch_over_seeds():
    ranks = fold_ranks(per_seed(SEEDS))
    col = ranks[(ranks.metric == "map@r") & (ranks.embedding == SEPARATE)].set_index("method")
    assert list(col.sort_values("rank").index) == ["best", "tied", "worse", "one-seed"]
    assert col.loc["worse", "p_vs_best"] == pytest.approx(welch(SEEDS["worse"], SEEDS["best"]))
    assert col.loc["tied", "p_vs_best"] == pytest.approx(welch(SEEDS["tied"], SEEDS["best"]))
    assert col.loc["worse", "below"] and not col.loc["tied", "below"]
    assert np.isnan(col.loc["one-seed", "p_vs_best"]) and not col.loc["one-seed", "below"]
    assert np.isnan(col.loc["best", "p_vs_best"])
    assert col.loc["best", "mean"] == pytest.approx(np.mean(SEEDS["best"]))
    assert col.loc["best", "ci"] == pytest.approx(
        stats.t.ppf(0.975, 2) * np.std(SEEDS["best"], ddof=1) / np.sqrt(3)
    )


def table_rows(text: str, title: str) -> list[list[str]]:
    section = text.split(f"## {title}")[1].split("## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.split("|")[1:-1]] for line in lines]


def test_the_table_has_a_column_per_start_and_embedding_best_first():
    both = pd.concat([per_seed(SEEDS), per_seed({"best": [0.4, 0.41, 0.39]}, "pretrained")])
    text, files = ranked_files(both, "digits-tuned")
    rows = table_rows(text, "MAP@R, best first")
    assert rows[0] == [
        "loss",
        "pretrained: folds' mean",
        "pretrained: concatenated (16 dims)",
        "random init: folds' mean",
        "random init: concatenated (16 dims)",
    ]
    # Rows by the first column (pretrained: one loss), then as the others come.
    assert [r[0] for r in rows[2:]] == ["best", "tied", "worse", "one-seed"]
    worse = next(r for r in rows if r[0] == "worse")
    assert worse[1] == "-" and worse[3].endswith("▼") and worse[4].endswith("▼")
    tied = next(r for r in rows if r[0] == "tied")
    assert "▼" not in tied[3] and "**" not in rows[2][3]  # best not above "tied": no bold
    ranks = pd.read_csv(__import__("io").BytesIO(files["digits-tuned-folds-ranks.csv"]))
    assert set(ranks.metric) == {"map@r", "recall@1"}


def test_the_best_is_bold_where_it_is_above_the_second():
    text, _ = ranked_files(per_seed({k: SEEDS[k] for k in ("best", "worse")}), "t")
    rows = table_rows(text, "R@1, best first")
    assert rows[2][0] == "best" and rows[2][1] == "**30.00 ± 2.48**"
    assert rows[3][1] == "20.00 ± 2.48 ▼"
