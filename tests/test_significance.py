"""Confidence intervals and significance marks of the main table, against plain references."""

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from bench.evaluation.metrics import evaluate
from bench.evaluation.retrieval import query_scores
from bench.report.significance import LEVEL, bootstrap_difference, t_halfwidth
from bench.report.write import write_report
from tests.test_report_tables import make_run


def test_t_interval_matches_a_hand_computation():
    # mean 0.75, s = 0.0707, t(0.975, 1) = 12.706: half-width 12.706 * 0.0707 / sqrt(2)
    assert t_halfwidth(pd.Series([0.7, 0.8])) == pytest.approx(0.6353, abs=1e-4)
    values = np.array([0.3, 0.35, 0.32, 0.4])
    low, high = stats.t.interval(0.95, 3, loc=values.mean(), scale=stats.sem(values))
    assert t_halfwidth(pd.Series(values)) == pytest.approx((high - low) / 2)
    assert np.isnan(t_halfwidth(pd.Series([0.5])))
    assert t_halfwidth(pd.Series([0.5, np.nan, 0.7])) == pytest.approx(t_halfwidth([0.5, 0.7]))


def plain_bootstrap(a, b, replicates, rng):
    """The same hierarchical bootstrap as a plain loop: queries jointly, seeds per row."""
    diffs = []
    for _ in range(replicates):
        q = rng.integers(0, a.shape[1], a.shape[1])
        sa = rng.integers(0, len(a), len(a))
        sb = rng.integers(0, len(b), len(b))
        diffs.append(a[sa][:, q].mean() - b[sb][:, q].mean())
    return np.percentile(diffs, [2.5, 97.5])


def test_bootstrap_interval_matches_a_plain_loop():
    rng = np.random.default_rng(1)
    a = (rng.random((3, 400)) < 0.6).astype(float)
    b = (rng.random((2, 400)) < 0.5).astype(float)
    d = bootstrap_difference(a, b, replicates=4000)
    low, high = plain_bootstrap(a, b, 4000, np.random.default_rng(2))
    assert d.diff == pytest.approx(a.mean() - b.mean())
    assert d.low == pytest.approx(low, abs=0.01) and d.high == pytest.approx(high, abs=0.01)
    assert d.significant


def one_draw_per_comparison(a, b, replicates, seed=0):
    """The bootstrap as it was before its draws were kept: drawn afresh for each comparison."""
    keep = ~(np.isnan(a).any(axis=0) | np.isnan(b).any(axis=0))
    a, b = a[:, keep], b[:, keep]
    rng, n, diffs = np.random.default_rng(seed), a.shape[1], []
    for start in range(0, replicates, 250):
        reps = min(250, replicates - start)
        weights = rng.multinomial(n, np.full(n, 1 / n), size=reps).T / n
        pick_a = rng.integers(0, len(a), size=(len(a), reps))
        pick_b = rng.integers(0, len(b), size=(len(b), reps))
        cols = np.arange(reps)
        diffs.append((a @ weights)[pick_a, cols].mean(0) - (b @ weights)[pick_b, cols].mean(0))
    level = [50 * (1 - LEVEL), 50 * (1 + LEVEL)]  # 2.5 and 97.5 as the report rounds them
    low, high = np.percentile(np.concatenate(diffs), level)
    return float(a.mean() - b.mean()), float(low), float(high)


@pytest.mark.parametrize("kept", [True, False])
def test_kept_draws_give_the_intervals_of_fresh_ones_to_the_bit(kept, monkeypatch):
    from bench.report import significance

    if not kept:
        monkeypatch.setattr(significance, "KEPT_CELLS", 0)
    significance._kept_draws.cache_clear()
    rng = np.random.default_rng(5)
    for seeds_a, seeds_b, queries, replicates in [(3, 2, 120, 2000), (1, 4, 90, 1001)]:
        a, b = rng.random((seeds_a, queries)), rng.random((seeds_b, queries))
        a[0, 7] = np.nan  # one query fewer, as MAP@R leaves out a class of one
        for _ in range(2):  # the second from the kept draws
            d = bootstrap_difference(a, b, replicates=replicates)
            assert (d.diff, d.low, d.high) == one_draw_per_comparison(a, b, replicates)
    assert significance._kept_draws.cache_info().hits == (2 if kept else 0)


def test_a_tables_comparisons_share_each_block_of_draws_and_equal_one_at_a_time(monkeypatch):
    from bench.report import significance

    monkeypatch.setattr(significance, "KEPT_CELLS", 0)  # draws made afresh, as at 60k queries
    made = []
    draws = significance._draws
    monkeypatch.setattr(significance, "_draws", lambda *a: made.append(a) or draws(*a))
    rng = np.random.default_rng(7)
    rows = [rng.random((3, 150)) for _ in range(4)] + [rng.random((2, 150))]
    gap = rng.random((3, 150))
    gap[:, 9] = np.nan  # another set of kept queries: draws of its own
    pairs = [(rows[0], rows[1]), *[(r, rows[0]) for r in rows], (rows[4], rows[2])]
    pairs += [(gap, rows[1]), (rows[3], gap)]
    together = significance.bootstrap_differences(pairs, replicates=600)
    assert len(made) == 3  # 3 x 3 seeds on all queries, 2 x 3 seeds, and 3 x 3 without query 9
    for (a, b), d in zip(pairs, together, strict=True):
        assert d == bootstrap_difference(a, b, replicates=600)  # to the bit


def test_no_difference_is_not_significant_and_nan_queries_are_left_out():
    rng = np.random.default_rng(0)
    a = rng.random((3, 300))
    b = a[::-1] + rng.normal(0, 0.01, a.shape)  # the same row, its seeds in another order
    a[:, 5] = np.nan  # a query without an AP@R (its class has one item)
    d = bootstrap_difference(a, b)
    assert not d.significant and d.low < 0 < d.high and np.isfinite(d.diff)


def test_per_query_scores_average_to_the_evaluator_metrics():
    rng = np.random.default_rng(3)
    labels = np.repeat(np.arange(6), 5)
    emb = rng.normal(size=(30, 8)) + labels[:, None] * 0.5
    scores, metrics = query_scores(emb, labels), evaluate(emb, labels).metrics
    for key in ("recall@1", "recall@4", "map@r"):
        assert np.nanmean(scores[key]) == pytest.approx(metrics[key])


def embedded_run(results, name, loss, seed, noise):
    """A finished run whose saved test embeddings are class centres plus `noise`."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(10), 20)
    centres = np.random.default_rng(99).normal(size=(10, 16))
    emb = (centres[labels] + rng.normal(0, noise, (200, 16))).astype(np.float32)
    metrics = evaluate(emb, labels).metrics
    arrays = {"test_embeddings.npz": (emb, labels)}
    return make_run(results, name, arrays=arrays, loss=loss, seed=seed, **metrics)


def column(markdown: str, header: str) -> dict[str, str]:
    """The cells of one column of a markdown table, by the row's first cell."""
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in markdown.splitlines()
        if line.startswith("| ")
    ]
    at = rows[0].index(header)
    return {row[0]: row[at] for row in rows[1:]}


def test_report_marks_significant_differences_and_bolds_a_clear_winner(tmp_path):
    r = tmp_path / "r"
    for seed in range(3):
        embedded_run(r, f"good{seed}", "contrastive", seed, noise=0.6)
        embedded_run(r, f"same{seed}", "npair", seed + 10, noise=0.6)
        embedded_run(r, f"bad{seed}", "lifted", seed + 20, noise=1.6)
    written, problems, _, _ = write_report(r, tmp_path / "rep")
    assert problems == [] and tmp_path / "rep" / "digits-differences.csv" in written
    text = (tmp_path / "rep" / "digits.md").read_text()
    map_cell = column(text, "MAP@R")
    assert "▼" in map_cell["lifted"]  # far below the best
    assert "▼" not in map_cell["npair"] and "▼" not in map_cell["contrastive"]  # a tie
    assert not any(c.startswith("**") for c in map_cell.values())  # the best does not win clearly
    differences = pd.read_csv(tmp_path / "rep" / "digits-differences.csv")
    lifted = differences[(differences["name"] == "lifted") & (differences["metric"] == "map@r")]
    assert lifted["significant"].item() and lifted["high"].item() < 0


def test_a_clear_winner_is_bold(tmp_path):
    r = tmp_path / "r"
    for seed in range(2):
        embedded_run(r, f"good{seed}", "contrastive", seed, noise=0.4)
        embedded_run(r, f"bad{seed}", "lifted", seed + 20, noise=1.6)
    write_report(r, tmp_path / "rep")
    text = (tmp_path / "rep" / "digits.md").read_text()
    assert column(text, "MAP@R")["contrastive"].startswith("**")


def test_a_reference_row_is_tested_against_and_its_betters_marked_up(tmp_path):
    r = tmp_path / "r"
    for seed in range(3):
        embedded_run(r, f"good{seed}", "contrastive", seed, noise=0.6)
        embedded_run(r, f"bad{seed}", "lifted", seed + 20, noise=1.6)
    write_report(r, tmp_path / "rep", reference="lifted")
    cells = column((tmp_path / "rep" / "digits.md").read_text(), "MAP@R")
    assert "▲" in cells["contrastive"] and "▼" not in cells["lifted"]
    differences = pd.read_csv(tmp_path / "rep" / "digits-differences.csv")
    assert set(differences["reference"]) == {"lifted"}


def test_a_diverged_run_is_counted_in_its_row(tmp_path):
    r = tmp_path / "r"
    embedded_run(r, "ok", "contrastive", 0, noise=0.6)
    run = embedded_run(r, "nan", "contrastive", 1, noise=0.6)
    metrics = json.loads((run / "metrics.json").read_text())
    metrics["diverged"] = "epoch 2, step 3 (loss nan)"
    (run / "metrics.json").write_text(json.dumps(metrics))
    write_report(r, tmp_path / "rep")
    header = "runs that diverged (best epoch before it)"
    assert column((tmp_path / "rep" / "digits.md").read_text(), header)["contrastive"] == "1"


def test_few_seeds_need_welchs_test_to_agree_with_the_bootstrap():
    from bench.report.significance import judged, seeds_p_value

    rng = np.random.default_rng(0)
    a = np.array([0.70, 0.74, 0.78])[:, None] + rng.normal(0, 0.01, (3, 2000))
    b = np.array([0.62, 0.66, 0.70])[:, None] + rng.normal(0, 0.01, (3, 2000))
    p = seeds_p_value(a, b)
    assert p == pytest.approx(stats.ttest_ind(a.mean(1), b.mean(1), equal_var=False).pvalue)
    d, _, significant = judged(bootstrap_difference(a, b), a, b)
    assert d.significant and 0.05 < p < 0.1 and not significant  # three seeds: not enough
    assert np.isnan(seeds_p_value(a[:1], b))  # one seed: the bootstrap alone decides
    far = a + 0.2  # a gap well beyond the seeds' spread
    assert judged(bootstrap_difference(far, b), far, b)[2]


def test_a_row_of_one_seed_is_never_marked_however_far_apart(tmp_path):
    from bench.report.significance import judged

    rng = np.random.default_rng(0)
    one, many = rng.normal(0.9, 0.01, (1, 2000)), rng.normal(0.2, 0.01, (3, 2000))
    d, _, significant = judged(bootstrap_difference(one, many), one, many)
    assert d.significant and not significant  # the bootstrap over queries alone: not enough
    r = tmp_path / "r"
    embedded_run(r, "good0", "contrastive", 0, noise=0.4)  # one seed, far better
    for seed in range(3):
        embedded_run(r, f"bad{seed}", "lifted", seed + 20, noise=1.6)
    write_report(r, tmp_path / "rep")
    text = (tmp_path / "rep" / "digits.md").read_text()
    cells = column(text, "MAP@R")
    assert not any("▲" in c or "▼" in c or c.startswith("**") for c in cells.values())
    assert "a row of one seed is never marked" in text
    differences = pd.read_csv(tmp_path / "rep" / "digits-differences.csv")
    assert not differences["significant"].any()
    assert dict(zip(differences["name"], differences["seeds"], strict=False)) == {
        "contrastive": 1,
        "lifted": 3,
    }


def test_a_row_without_saved_embeddings_is_named_and_the_others_still_compared(tmp_path):
    r = tmp_path / "r"
    for seed in range(3):
        embedded_run(r, f"good{seed}", "contrastive", seed, noise=0.6)
        embedded_run(r, f"same{seed}", "npair", seed + 10, noise=0.6)
        embedded_run(r, f"bad{seed}", "lifted", seed + 20, noise=1.6)
    (r / "same1" / "test_embeddings.npz").unlink()
    written, problems, _, _ = write_report(r, tmp_path / "rep")
    text = (tmp_path / "rep" / "digits.md").read_text()
    assert "Not tested for significance, no marks: npair 16-d (a run of the row, or of" in text
    assert "▼" in column(text, "MAP@R")["lifted"] and "▼" not in column(text, "MAP@R")["npair"]
    differences = pd.read_csv(tmp_path / "rep" / "digits-differences.csv")
    assert set(differences["name"]) == {"contrastive", "lifted"}


def test_a_row_alone_at_its_size_is_not_said_to_lack_its_embeddings(tmp_path):
    # One loss over seeds (the plainest use): nothing to compare it with, and its embeddings
    # are whole; the note blamed them.
    r = tmp_path / "r"
    for seed in range(2):
        embedded_run(r, f"c{seed}", "contrastive", seed, noise=0.6)
    write_report(r, tmp_path / "rep")
    text = (tmp_path / "rep" / "digits.md").read_text()
    assert "| contrastive " in text and "Not tested for significance" not in text
