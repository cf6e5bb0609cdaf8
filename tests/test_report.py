import io
import json
import re
import shutil

import pandas as pd
import pytest
from click.testing import CliRunner

from bench.cli import main
from bench.report.embedding import summarise
from bench.report.runs import load_runs
from bench.report.write import building_bar, write_report
from bench.util.atomic import atomic_write_json

KEYS = ("recall@1", "recall@2", "recall@4", "recall@8", "nmi", "map@r")


def fake_run(results, name, loss, dims, seed, value, miner=None):
    metrics = {k: value for k in KEYS}
    metrics["nmi_best_of_5"] = value
    metrics.update(dataset="digits", loss=loss, miner=miner, dims=dims, seed=seed)
    if loss != "untrained":
        metrics["untrained_network"] = {k: value / 2 for k in KEYS}
    else:  # the raw inputs, as a baseline recorded them before it named itself
        metrics["backbone"] = "none"
    finished_run(results / name, metrics)


def finished_run(run_dir, metrics):
    """A run folder as every version finished one: its config.json, then its metrics.json."""
    atomic_write_json(run_dir / "config.json", {})
    atomic_write_json(run_dir / "metrics.json", metrics)


@pytest.fixture
def results(tmp_path):
    r = tmp_path / "results"
    fake_run(r, "base", "untrained", 64, 0, 0.61)
    fake_run(r, "n64s0", "nngk", 64, 0, 0.70)
    fake_run(r, "n64s1", "nngk", 64, 1, 0.80)
    fake_run(r, "n512", "nngk", 512, 0, 0.90)
    fake_run(r, "t64", "triplet", 64, 0, 0.50, miner="semihard")
    (r / "half").mkdir()
    (r / "half" / "config.json").write_text("{}")
    (r / "corrupt").mkdir()
    (r / "corrupt" / "metrics.json").write_text('{"recall@1": 0.')
    return r


def test_summary_is_mean_and_std_over_seeds_with_baseline_first(results):
    df, problems = load_runs(results)
    assert sorted(p.split(":")[0] for p in problems) == ["corrupt", "half"]
    table = summarise(df)
    assert table["method"].tolist()[0] == "raw inputs"
    row = table[(table["method"] == "nngk") & (table["dims"] == 64)].iloc[0]
    assert row["runs"] == 2
    assert row["map@r_mean"] == pytest.approx(0.75)
    assert row["map@r_std"] == pytest.approx(pd.Series([0.7, 0.8]).std())
    assert "triplet (semihard)" in table["method"].tolist()


def test_copies_of_a_seed_are_one_run_and_nan_metrics_are_left_out_and_counted(results, tmp_path):
    fake_run(results, "n64s1-copy", "nngk", 64, 1, 0.90)  # seed 1 again: one run, mean 0.85
    fake_run(results, "n64s2", "nngk", 64, 2, float("nan"))  # diverged: not averaged in
    table = summarise(load_runs(results)[0])
    row = table[(table["method"] == "nngk") & (table["dims"] == 64)].iloc[0]
    assert row["runs"] == 3 and row["nan_runs"] == 1
    assert row["map@r_mean"] == pytest.approx((0.70 + 0.85) / 2)
    assert row["map@r_std"] == pytest.approx(pd.Series([0.70, 0.85]).std())
    write_report(results, tmp_path / "rep")
    text = (tmp_path / "rep" / "digits.md").read_text()
    assert "runs with NaN (left out)" in text
    (line,) = [x for x in text.splitlines() if x.startswith("| nngk ") and "| 64 " in x]
    assert [c.strip() for c in line.split("|")][-3:-1] == ["3", "1"]  # runs, runs with NaN


def test_report_writes_table_csv_plot_and_index(results, tmp_path):
    out = tmp_path / "reports"
    written, problems, _, _ = write_report(results, out)
    assert {p.name for p in written} == {
        "digits.md",
        "digits.csv",
        "digits.png",
        "digits-recall-at-k.png",
        "README.md",
        "index.html",
    }
    md = (out / "digits.md").read_text()
    lines = [line for line in md.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].split("|")[1:-1]]
    assert header == [
        "loss",
        "dims",
        "R@1",
        "R@2",
        "R@4",
        "R@8",
        "NMI",
        "MAP@R",
        "NMI (best of 5)",
        "MAP@R at init",
        "runs",
    ]
    assert "raw inputs" in lines[2]
    nngk64 = next(line for line in lines if line.startswith("| nngk ") and " 64 " in line)
    # 95 % t interval of (0.70, 0.80): t(0.975, 1) = 12.706 times s / sqrt(2) = 0.05
    assert "75.00 ± 63.53" in nngk64 and nngk64.rstrip("| ").endswith("2")
    assert "37.50 ± 31.77" in nngk64  # the networks before training
    assert lines[2].split("|")[10].strip() == "-"  # raw inputs have no network
    assert (out / "digits.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    csv = pd.read_csv(out / "digits.csv")
    assert len(csv) == 4
    assert "digits.md" in (out / "README.md").read_text()


def test_report_twice_gives_the_same_files(results, tmp_path):
    out = tmp_path / "reports"
    write_report(results, out)
    first = {p.name: p.read_bytes() for p in out.iterdir()}
    write_report(results, out)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == first


def test_report_command_names_skipped_folders(results, tmp_path):
    out = CliRunner().invoke(
        main, ["report", "--results", str(results), "--out", str(tmp_path / "rep")]
    )
    assert out.exit_code == 0
    assert "skipped corrupt" in out.output and "skipped half: unfinished" in out.output


def test_report_removes_what_an_earlier_report_wrote_and_this_one_did_not(results, tmp_path):
    out = tmp_path / "rep"
    fake_run(results, "cars", "nngk", 64, 0, 0.5)
    atomic_write_json(
        results / "cars" / "metrics.json",
        {**json.loads((results / "cars" / "metrics.json").read_text()), "dataset": "cars196"},
    )
    report = ["report", "--results", str(results), "--out", str(out)]
    assert CliRunner().invoke(main, report).exit_code == 0
    assert (out / "cars196.md").is_file() and (out / "digits.md").is_file()
    (out / "notes.txt").write_text("mine")  # never written by a report: left alone
    shutil.rmtree(results / "cars")
    again = CliRunner().invoke(main, report)
    assert again.exit_code == 0
    assert f"removed {out / 'cars196.md'}" in again.output
    names = {p.name for p in out.iterdir()}
    assert not any(n.startswith("cars196") for n in names)
    assert {"digits.md", "notes.txt", "README.md"} <= names
    assert "cars196" not in (out / "README.md").read_text()


def test_a_readme_that_is_not_a_report_removes_nothing(results, tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "README.md").write_text("# My notes\n\n[keep](keep.md)\n")
    (out / "keep.md").write_text("mine")
    out_text = CliRunner().invoke(main, ["report", "--results", str(results), "--out", str(out)])
    assert "removed" not in out_text.output and (out / "keep.md").read_text() == "mine"
    # Its own README (the index) could not be written: not a success, and it says what to do.
    assert out_text.exit_code == 1 and out_text.output.strip().splitlines()[-1] == (
        f"Error: the report in {out} is incomplete: 1 part(s) or file(s) not written "
        f"({out / 'README.md'} not written); move those files away (or give --out another "
        "folder) and report again"
    )


def test_a_results_folder_with_no_runs_is_an_error_that_removes_nothing(results, tmp_path):
    out = tmp_path / "rep"
    report = ["report", "--results", str(results), "--out", str(out)]
    assert CliRunner().invoke(main, report).exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert len(before) >= 6
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "half").mkdir()
    (tmp_path / "empty" / "half" / "config.json").write_text("{}")  # unfinished only
    cases = {
        tmp_path / "typo": "does not exist; give --results the folder",
        tmp_path / "empty": "no finished run in",
        tmp_path / "nothing": "no run folder in",
    }
    (tmp_path / "nothing").mkdir()
    for folder, reason in cases.items():
        bad = CliRunner().invoke(main, ["report", "--results", str(folder), "--out", str(out)])
        assert bad.exit_code == 1, bad.output
        *progress, line = bad.output.strip().splitlines()  # what it read, then why not
        assert all(p.startswith("report: reading the runs in ") for p in progress), bad.output
        assert len(progress) == (folder.name != "typo"), bad.output
        assert line.startswith("Error: ") and reason in line, line
        assert line.endswith("nothing was written or removed")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_the_report_shows_its_progress_from_its_first_line(results, tmp_path):
    out = CliRunner().invoke(main, ["report", "--results", str(results), "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    lines = out.output.replace("\r", "\n").splitlines()
    # Before the plotting libraries load, then once the runs are read.
    assert lines[0] == f"report: reading the runs in {results}"
    assert f"report: 5 runs read; building the tables and figures for {tmp_path}" in lines
    # A bar over the parts (the digits table's 11, the t-SNE only with --tsne; classification,
    # tuned-vs-default), each named while it is built.
    assert any(re.match(r"report:\s+0%.*\| 0/13 \[.*digits: embedding_files\]", li) for li in lines)
    assert any("tuned-vs-default: tuned_default_files]" in li for li in lines), lines


def test_a_report_bar_closed_at_once_leaves_what_follows_on_a_line_of_its_own():
    # A fast report (CI's) closes its bar within tqdm's `delay`: that bar, once drawn, was
    # never cleared, and the first "skipped" line joined it.
    stream = io.StringIO()
    bar = building_bar(3, file=stream)
    bar.set_postfix_str("digits: embedding_files")
    bar.update()
    bar.close()
    stream.write("skipped l1: metrics.json ...\n")
    assert "skipped l1: metrics.json ..." in stream.getvalue().splitlines()
    assert "0/3" in stream.getvalue() and "digits: embedding_files" in stream.getvalue()


def test_paper_rows_stand_beside_measured_rows_never_among_them(tmp_path):
    results = tmp_path / "results"
    metrics = {k: 0.5 for k in KEYS}
    metrics.update(dataset="cars196", protocol="metric", loss="nngk", miner=None, dims=64, seed=0)
    finished_run(results / "cars", metrics)
    out = tmp_path / "reports"
    write_report(results, out)
    measured, _, published = (out / "cars196.md").read_text().partition("## Published numbers")
    assert "| nngk " in measured and "paper:" not in measured
    ours = next(line for line in published.splitlines() if "| Ours " in line and " 1024 " in line)
    assert "paper: Meyer et al. 2018, Table 1" in ours and "79.65" in ours and "65.30" in ours
    semihard = next(line for line in published.splitlines() if "| Semi-hard " in line)
    assert "| not stated " in semihard and "| googlenet " in ours  # each row's own setup
    papers = pd.read_csv(out / "cars196-paper.csv")
    assert (
        len(papers[(papers["paper"] == "Meyer et al. 2018") & (papers["table"] == "Table 1")]) == 11
    )
    assert (
        "Published" not in (out / "digits.md").read_text() if (out / "digits.md").exists() else True
    )


def test_protocol_tables_show_their_own_metrics(tmp_path):
    results = tmp_path / "results"
    for seed, acc in ((0, 0.8), (1, 0.9)):
        metrics = {k: 0.5 for k in KEYS}
        metrics.update(
            dataset="cub",
            protocol="classify",
            loss="softmax",
            miner=None,
            dims=64,
            seed=seed,
            accuracy=acc,
        )
        finished_run(results / f"c{seed}", metrics)
    pairs = {k: 0.5 for k in KEYS}
    pairs.update(
        dataset="tinyimagenet",
        protocol="pairs",
        loss="contrastive",
        miner=None,
        dims=96,
        seed=0,
        seen_accuracy=0.9,
        seen_far=0.1,
        seen_frr=0.2,
        seen_ap=0.95,
        unseen_accuracy=0.6,
        unseen_far=0.3,
        unseen_frr=0.5,
        unseen_ap=0.7,
    )
    finished_run(results / "p", pairs)
    out = tmp_path / "reports"
    write_report(results, out)
    classify = (out / "cub-classify.md").read_text()
    assert "| Accuracy " in classify and "85.00 ± 63.53" in classify  # 0.8, 0.9: t interval
    verification = (out / "tinyimagenet-pairs.md").read_text().split("## Published")[0]
    header = next(line for line in verification.splitlines() if line.startswith("| loss"))
    assert "seen acc." in header and "unseen FRR" in header and "Accuracy" not in header
    assert "| 60.00 " in verification and "| 95.00 " in verification


def test_runs_differing_only_in_learning_rate_get_rows_of_their_own(tmp_path):
    results = tmp_path / "results"
    fake_run(results, "base", "untrained", 64, 0, 0.61)
    for name, lr, value in [("a", 1e-3, 0.5), ("b", 0.0, 0.7)]:
        fake_run(results, name, "nngk", 64, 0, value)
        path = results / name / "metrics.json"
        atomic_write_json(path, {**json.loads(path.read_text()), "lr": lr})
    table = summarise(load_runs(results)[0])
    rows = dict(zip(table["method"], table["map@r_mean"], strict=True))
    assert rows["nngk, lr=0.001"] == pytest.approx(0.5) and rows["nngk, lr=0"] == pytest.approx(0.7)


def test_report_never_overwrites_or_removes_a_file_it_did_not_write(results, tmp_path):
    out = tmp_path / "rep"
    out.mkdir()
    (out / "README.md").write_text("# My project\n")  # an unrelated folder's README
    report = ["report", "--results", str(results), "--out", str(out)]
    first = CliRunner().invoke(main, report)
    assert first.exit_code == 1 and (out / "README.md").read_text() == "# My project\n"
    assert "is incomplete: 1 part(s) or file(s) not written" in first.output
    assert f"skipped {out / 'README.md'}: not a file this report wrote" in first.output
    assert (out / "digits.md").is_file()
    (out / "digits.csv").write_text("edited by hand")  # a report's file, changed since
    shutil.rmtree(results / "t64")
    fake_run(results, "t64", "triplet", 64, 0, 0.55, miner="semihard")  # new numbers
    again = CliRunner().invoke(main, report)
    assert again.exit_code == 1 and (out / "digits.csv").read_text() == "edited by hand"
    assert "is incomplete: 2 part(s) or file(s) not written" in again.output
    assert "55.00" in (out / "digits.md").read_text()  # its own unchanged file is rewritten
    shutil.rmtree(results)
    gone = CliRunner().invoke(main, report)  # no runs: an error, and nothing is removed
    assert gone.exit_code == 1 and "nothing was written or removed" in gone.output
    assert (out / "digits.csv").read_text() == "edited by hand" and (out / "digits.md").exists()


def test_default_report_folder_is_in_results_and_not_read_as_a_run(results, tmp_path, monkeypatch):
    here = tmp_path / "checkout"
    shutil.copytree(results, here / "results")
    monkeypatch.chdir(here)
    for _ in range(2):
        out = CliRunner().invoke(main, ["report"])
        assert out.exit_code == 0 and "skipped report" not in out.output
    assert sorted(p.name for p in here.iterdir()) == ["results"]
    assert (here / "results" / "report" / "digits.md").is_file()


def test_an_earlier_versions_nmi_is_shown_as_best_of_5_not_as_the_single_run(tmp_path):
    r = tmp_path / "r"
    fake_run(r, "new", "nngk", 64, 0, 0.70)
    old = {k: 0.6 for k in KEYS} | dict(dataset="digits", loss="nngk", miner=None, dims=64, seed=1)
    finished_run(r / "old", old)  # before nmi_best_of_5 existed
    row = summarise(load_runs(r)[0]).query("method == 'nngk'").iloc[0]
    assert row["nmi_mean"] == pytest.approx(0.70)  # the new run's single k-means NMI only
    assert row["nmi_best_of_5_mean"] == pytest.approx(0.65)  # both runs' best of 5
    assert row["nan_runs"] == 0 and row["runs"] == 2


def test_rows_not_above_both_baselines_on_map_at_r_are_named_under_the_table(results, tmp_path):
    fake_run(results, "untrained", "untrained", 1024, 0, 0.65)  # a second baseline row
    write_report(results, tmp_path / "rep")
    text = (tmp_path / "rep" / "digits.md").read_text()
    (note,) = [line for line in text.splitlines() if line.startswith("Not above both")]
    # the better baseline: 0.65; nngk 64-d's interval reaches down to 0.115, triplet is at 0.50,
    # nngk 512-d's one seed (0.90) clears both
    assert note.endswith(
        "at or below the better baseline's 65.00): nngk 64-d (75.00 ± 63.53); "
        "triplet (semihard) 64-d (50.00)."
    )


def test_no_note_when_every_row_is_above_both_baselines(results, tmp_path):
    shutil.rmtree(results / "t64")
    shutil.rmtree(results / "n64s1")
    write_report(results, tmp_path / "rep")
    assert "Not above both" not in (tmp_path / "rep" / "digits.md").read_text()
