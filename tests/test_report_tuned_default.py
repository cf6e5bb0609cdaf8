"""The report's tuned-vs-default table (issue 25): each tuned loss beside its shipped default on
the test split, cross-validated fold models averaged per seed, Welch's t-test over seeds."""

import pandas as pd
import pytest
from scipy import stats

from bench.report.tuned_default import tuned_default_files

LABEL = "small_cnn pretrained on glyphs 1000-1999"


def runs(table, weights, values, folds=0, loss="contrastive"):
    """Run rows as load_runs gives them: one per seed (and fold, where `folds`)."""
    rows = []
    for seed, per_fold in enumerate(values):
        for fold, value in enumerate(per_fold if folds else [per_fold]):
            split = f"classes:{fold}/{folds}" if folds else "images"
            rows.append(
                dict(
                    table=table, loss=loss, miner="", method=loss, name=f"{loss}, {weights}",
                    dims=64, weights=weights, backbone="small_cnn", embedding="fc", seed=seed,
                    val_split=split, path=f"{table}-{weights}-{seed}-{fold}",
                    **{"map@r": value, "recall@1": 2 * value},
                )
            )  # fmt: skip
    return rows


def test_each_tuned_start_meets_its_own_default_and_fold_models_are_averaged_per_seed():
    df = pd.DataFrame(
        runs("glyphs", "random init", [0.30, 0.32, 0.31])
        + runs("glyphs-tuned", "random init", [[0.40, 0.42], [0.44, 0.40], [0.43, 0.43]], 2)
        + runs("glyphs", LABEL, [0.50, 0.52, 0.51])
        + runs("glyphs-tuned", LABEL, [[0.30, 0.32], [0.30, 0.34], [0.33, 0.33]], 2)
        + runs("glyphs", "random init", [0.2], loss="nca")  # one seed
        + runs("glyphs-tuned", "random init", [[0.2, 0.3], [0.2, 0.3]], 2, loss="nca")
        + runs("glyphs", "random init", [0.2, 0.3], loss="npair")  # never tuned
    )
    files = tuned_default_files(df)
    table = pd.read_csv(pd.io.common.BytesIO(files["tuned-vs-default.csv"]))
    mapr = table[table["metric"] == "map@r"].set_index(["loss", "weights"])
    scratch = mapr.loc[("contrastive", "random init")]
    assert scratch["tuned_mean"] == pytest.approx(0.42)  # the seeds' fold means 0.41, 0.42, 0.43
    assert scratch["default_mean"] == pytest.approx(0.31)
    p = stats.ttest_ind([0.41, 0.42, 0.43], [0.30, 0.32, 0.31], equal_var=False).pvalue
    assert scratch["p"] == pytest.approx(p, abs=1e-6) and scratch["verdict"] == "above"
    pretrained = mapr.loc[("contrastive", LABEL)]
    assert pretrained["default_mean"] == pytest.approx(0.51)  # its own start's default only
    assert pretrained["verdict"] == "below" and pretrained["difference"] == pytest.approx(-0.19)
    assert mapr.loc[("nca", "random init"), "verdict"] == "- (one seed)"
    assert "npair" not in set(table["loss"])
    text = files["tuned-vs-default.md"].decode()
    # the defaults' setup and the tuned runs' apart, under each table's title (the tuned runs'
    # was left out: two copies of the defaults' read as the setup of both)
    assert text.count("\nSetup of the defaults: ") == len(set(table["table"]))
    assert text.count("\nSetup of the tuned runs: ") == len(set(table["table"]))
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines()]
    # t(2) 4.303 x 0.01 / sqrt(3) = 2.48
    assert ["contrastive", "64", "random init", "contrastive, random init", "MAP@R"] + [
        "31.00 ± 2.48 (3)", "42.00 ± 2.48 (3)", "+11.00", "0.00018", "above"
    ] in rows  # fmt: skip


def test_nothing_without_a_tuned_table():
    assert tuned_default_files(pd.DataFrame(runs("glyphs", "random init", [0.3, 0.4]))) == {}


def test_defaults_trained_as_fold_models_are_averaged_per_seed_too():
    # `run --val-split classes:F/K`: the default under the cross-validated study's protocol.
    df = pd.DataFrame(
        runs("glyphs", "random init", [[0.20, 0.30], [0.30, 0.40]], 2)
        + runs("glyphs", "random init", [0.10, 0.12])  # validated on a share of the images
        + runs("glyphs-tuned", "random init", [[0.40, 0.42], [0.44, 0.40]], 2)
    )
    table = pd.read_csv(pd.io.common.BytesIO(tuned_default_files(df)["tuned-vs-default.csv"]))
    mapr = table[table["metric"] == "map@r"].set_index("default")
    folds = mapr.loc["contrastive, the mean of 2 class folds' models"]
    assert folds["default_mean"] == pytest.approx(0.30) and folds["default_seeds"] == 2
    assert mapr.loc["contrastive, random init", "default_mean"] == pytest.approx(0.11)


def test_two_studies_of_one_loss_are_two_rows_never_one_mean():
    # Before: the runs of both studies' settings (lr 0.01 and 0.000258) made one "tuned" mean.
    first = runs("glyphs-tuned", "random init", [0.10, 0.11])
    second = runs("glyphs-tuned", "random init", [0.14, 0.15])
    for row in first:
        row["tuned"] = "glyphs-contrastive-d8-t1-e2-f1-s0-hyperband"
    for row in second:
        row["tuned"], row["path"] = "glyphs-contrastive-d8-t2-e2-f1-s0-hyperband", row["path"] + "b"
    df = pd.DataFrame(runs("glyphs", "random init", [0.12, 0.12]) + first + second)
    table = pd.read_csv(pd.io.common.BytesIO(tuned_default_files(df)["tuned-vs-default.csv"]))
    mapr = table[table["metric"] == "map@r"].set_index("study")
    assert mapr.loc["glyphs-contrastive-d8-t1-e2-f1-s0-hyperband", "tuned_mean"] == pytest.approx(
        0.105
    )
    assert mapr.loc["glyphs-contrastive-d8-t2-e2-f1-s0-hyperband", "tuned_mean"] == pytest.approx(
        0.145
    )
    assert set(mapr["method"]) == {f"contrastive (study {s})" for s in mapr.index}
    assert (mapr["tuned_seeds"] == 2).all()


def test_the_study_of_a_tuned_run_is_read_from_its_config(tmp_path):
    # Real tuned runs record their study in config.json only: the rows above were read with
    # no study at all, and two studies of one loss made one mean in every table.
    from bench.report.runs import load_runs
    from tests.test_report_tables import make_run

    studies = ("glyphs-nngk-d16-t2-e1-f2-s0", "glyphs-nngk-d16-t2-e1-f2-s0-sigma-0.5")
    for i, study in enumerate(studies):
        for seed in (0, 1):
            make_run(tmp_path, f"{i}-{seed}", loss="nngk", seed=seed, preset="tuned",
                     config={"tuned": study}, **{"map@r": 0.1 + i / 10})  # fmt: skip
    make_run(tmp_path, "plain", loss="nngk")
    df = load_runs(tmp_path)[0].set_index("run")
    assert df.loc["1-0", "tuned"] == studies[1] and df.loc["plain", "tuned"] == ""
    table = pd.read_csv(pd.io.common.BytesIO(tuned_default_files(df)["tuned-vs-default.csv"]))
    mapr = table[table["metric"] == "map@r"].set_index("study")["tuned_mean"]
    assert mapr.to_dict() == pytest.approx({studies[0]: 0.1, studies[1]: 0.2})
