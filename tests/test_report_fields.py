"""Nonsense read from a run's files or a baseline (issue 69, item 17): every field the report
reads is checked as the metrics are, and a run that holds nonsense is left out, named with the
file, the field and what is allowed."""

import math

import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.report.runs import load_runs
from tests.test_check import check, make_results
from tests.test_report_tables import make_run

# Each was read into a table as it stood (dims -8, 8.5 and seed -1 were refused).
BAD_METRICS = [
    ("dims", 0, "an integer from 1 to 2147483647"),
    ("dims", 10**12, "an integer from 1 to 2147483647"),
    ("dims", True, "an integer from 1 to 2147483647"),
    ("loss", "", "a name (text, not empty)"),
    ("protocol", 5, "a name (text, not empty)"),
    ("epochs", -3, "an integer from 0 to 2147483647"),
    ("batch_size", "64", "an integer from 1 to 2147483647"),
    ("lr", math.nan, "a number >= 0"),
    ("freeze_backbone", "no", "true or false"),
    ("preset", 3, "text or null"),
    ("miner", 4, "text or null"),
    ("warnings", 5, "a list of text or null"),
    ("loss_params", [1], "a JSON object or null"),
    ("health_pca_dims", -4, "a number >= 0, NaN or null"),
]


@pytest.mark.parametrize("key, value, allowed", BAD_METRICS)
def test_a_metrics_field_holding_nonsense_leaves_the_run_out_naming_it(
    tmp_path, key, value, allowed
):
    r = tmp_path / "r"
    make_run(r, "ok", loss="nngk")
    make_run(r, "bad", **{"loss": "nngk", "seed": 1, key: value})
    df, problems = load_runs(r)
    assert df["run"].tolist() == ["ok"]
    assert problems == [
        f"bad: metrics.json has {key} = {value!r}, not {allowed}; the run is left out"
    ]


def test_a_config_setting_holding_nonsense_is_named_where_metrics_lack_it(tmp_path):
    r = tmp_path / "r"
    make_run(r, "ok", loss="nngk", config={"epochs": 5, "crop_mode": "aspect"})
    make_run(r, "bad", loss="nngk", seed=1, config={"epochs": -3})
    make_run(r, "read", loss="nngk", seed=2, epochs=5, config={"epochs": -3})  # metrics' is read
    df, problems = load_runs(r)
    assert sorted(df["run"]) == ["ok", "read"]
    allowed = "an integer from 0 to 2147483647"
    assert problems == [f"bad: config.json has epochs = -3, not {allowed}; the run is left out"]


def test_the_report_names_the_run_and_keeps_the_rest_of_the_table(tmp_path):
    r = tmp_path / "r"
    for seed in range(2):
        make_run(r, f"c{seed}", loss="contrastive", seed=seed)
    make_run(r, "zero", loss="contrastive", seed=2, dims=0)
    cli = CliRunner().invoke(main, ["report", "--results", str(r), "--out", str(tmp_path / "o")])
    assert cli.exit_code == 0, cli.output
    (skipped,) = [x for x in cli.output.splitlines() if x.startswith("skipped")]
    assert skipped == (
        "skipped zero: metrics.json has dims = 0, not an integer from 1 to 2147483647; "
        "the run is left out"
    )
    table = pd.read_csv(tmp_path / "o" / "digits.csv")
    assert table["dims"].tolist() == [16] and table["runs"].tolist() == [2]


@pytest.mark.parametrize(
    "line, reason",
    [
        # Before: "no regression", exit 0: no mean can fall below -5.
        ("digits,nngk,64,recall@1,-5,2", "the value -5 is outside 0 to 1"),
        ("digits,nngk,64,recall@1,1.5,2", "the value 1.5 is outside 0 to 1"),
        # Before: "no regression" for -2; 0.5 runs could never be met.
        ("digits,nngk,64,recall@1,0.5,-2", "runs -2 is not a positive integer"),
        ("digits,nngk,64,recall@1,0.5,0.5", "runs 0.5 is not a positive integer"),
        (",nngk,64,recall@1,0.5,2", "no table; each line names the table"),
        ("digits,,64,recall@1,0.5,2", "no method; each line names the table"),
        ("digits,nngk,1e12,recall@1,0.5,2", "dims 1000000000000.0 is not a positive integer"),
    ],
)
def test_a_baseline_value_outside_what_a_run_records_is_refused(tmp_path, line, reason):
    results = make_results(tmp_path)
    baseline = tmp_path / "baseline.csv"
    baseline.write_text("table,method,dims,metric,value,runs\n" + line + "\n")
    out = check("--baseline", baseline, "--results", results)
    assert out.exit_code == 1 and "no regression" not in out.output
    (printed,) = out.output.strip().splitlines()
    assert printed.startswith(f"Error: baseline {baseline}, line 2: {reason}"), printed


def test_a_baseline_without_runs_or_with_them_empty_is_still_read(tmp_path):
    results = make_results(tmp_path)
    baseline = tmp_path / "baseline.csv"
    baseline.write_text("table,method,dims,metric,value\ndigits,nngk,64,map@r,0.75\n")
    assert check("--baseline", baseline, "--results", results).exit_code == 0
    baseline.write_text("table,method,dims,metric,value,runs\ndigits,nngk,64,map@r,0.75,\n")
    assert check("--baseline", baseline, "--results", results).exit_code == 0
