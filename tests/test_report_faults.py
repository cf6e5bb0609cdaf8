"""Faults that could make a report wrong, merged or gone without a word: each provoked here."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import bench.report.manifest as manifest
from bench.cli import main
from bench.report.runs import load_runs
from bench.report.setup import seeds_text, setup_line
from bench.report.write import write_report
from bench.runs import store
from bench.util.atomic import atomic_write_json
from tests.test_report import (
    fake_run,
    results,  # noqa: F401 (a fixture: finished and damaged runs)
)
from tests.test_report_tables import make_run


def relabel(run_dir, **changes):
    path = run_dir / store.METRICS
    atomic_write_json(path, {**json.loads(path.read_text()), **changes})


def folder_runs(r, dataset, location, fingerprint, value):
    """A raw-input baseline and a trained run of a `folder:` data set."""
    identity = dict(dataset=dataset, data_location=location, data_fingerprint=fingerprint)
    name = re.sub(r"\W", "_", location + fingerprint)
    make_run(r, f"base-{name}", loss="untrained", **identity, **{"map@r": value})
    make_run(r, f"nngk-{name}", loss="nngk", **identity, **{"map@r": value})


def test_data_sets_whose_names_read_alike_never_share_a_table(tmp_path):
    r = tmp_path / "r"
    folder_runs(r, "folder:/data/鳥", "/data/鳥", "aaaa", 0.2)
    folder_runs(r, "folder:/data/猫", "/data/猫", "bbbb", 0.4)
    folder_runs(r, "folder:my data", "/w/my data", "cccc", 0.6)
    folder_runs(r, "folder:my-data", "/w/my-data", "dddd", 0.8)
    folder_runs(r, "folder:my-data", "/w/my-data", "eeee", 0.9)  # its images changed since
    df, problems = load_runs(r)
    assert problems == []
    tables = df.groupby("table")
    assert tables.ngroups == 5
    for _, part in tables:  # one data identity a table, its baseline with it
        assert part[["data_location", "data_fingerprint"]].drop_duplicates().shape[0] == 1
        assert sorted(part["loss"]) == ["nngk", "untrained"]
    names = sorted(tables.groups)
    # Named by the folder's own name ('鳥' is no file name's letters: its hash alone).
    assert all(re.fullmatch(r"folder-(my-data-)?[0-9a-f]{8}", n) for n in names), names
    written, problems, _, _ = write_report(r, tmp_path / "rep")
    assert problems == [] and len([p for p in written if re.fullmatch(r".*-\w{8}\.md", p.name)])
    assert len({p.name for p in written if p.suffix == ".md"} - {"README.md"}) == 5
    assert load_runs(r)[0]["table"].tolist() == df["table"].tolist()  # stable names


def test_one_folder_given_under_several_spellings_is_one_table(tmp_path):
    # Before: 'folder:imgs' and 'folder:/w/imgs' were two tables of the same images, so their
    # losses were never compared.
    r = tmp_path / "r"
    for i, spelling in enumerate(("folder:imgs", "folder:imgs/", "folder:/w/imgs")):
        make_run(r, f"n{i}", loss="nngk", seed=i, dataset=spelling, data_location="/w/imgs",
                 data_fingerprint="aaaa")  # fmt: skip
    make_run(r, "other", loss="nngk", dataset="folder:/v/imgs", data_location="/v/imgs",
             data_fingerprint="bbbb")  # fmt: skip
    tables = load_runs(r)[0].groupby("table")["run"].apply(sorted)
    assert sorted(tables.tolist()) == [["n0", "n1", "n2"], ["other"]]
    assert all(re.fullmatch(r"folder-imgs-[0-9a-f]{8}", t) for t in tables.index)


def test_built_in_sets_and_older_runs_keep_their_table_names(tmp_path):
    r = tmp_path / "r"
    make_run(r, "g", loss="nngk", dataset="glyphs")
    make_run(r, "c", loss="nngk", dataset="cars196")  # recorded no identity: an older run
    make_run(r, "f", loss="nngk", dataset="folder:/x/鳥")  # likewise: its name is its identity
    make_run(r, "b", loss="nngk", dataset="folder:/x/猫")
    tables = set(load_runs(r)[0]["table"])
    assert {"glyphs", "cars196"} <= tables and len(tables) == 4


def truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def embedded(r, name, loss, seed, noise=0.5):
    rng = np.random.default_rng([seed, len(loss)])
    labels = np.repeat(np.arange(6), 5)
    emb = (np.eye(8)[labels] + rng.normal(0, noise, (30, 8))).astype(np.float32)
    arrays = {store.EMBEDDINGS: (emb, labels), store.TRAIN_EMBEDDINGS: (emb, labels)}
    return make_run(r, name, arrays=arrays, loss=loss, seed=seed, dims=8)


def test_one_damaged_run_is_left_out_and_named_and_the_table_kept(tmp_path):
    r, out = tmp_path / "r", tmp_path / "rep"
    for seed in range(2):
        embedded(r, f"c{seed}", "contrastive", seed)
        embedded(r, f"l{seed}", "lifted", seed)
    truncate(r / "c1" / store.EMBEDDINGS)
    relabel(r / "l1", **{"map@r": "0.5"})  # a metric that is a string
    args = ["report", "--results", str(r), "--out", str(out), "--tsne"]  # the t-SNE reads them too
    cli = CliRunner().invoke(main, args)
    assert cli.exit_code == 0, cli.output
    skipped = [x for x in cli.output.splitlines() if x.startswith("skipped")]
    assert len(skipped) == 2
    assert skipped[0].startswith("skipped l1: metrics.json has map@r = '0.5', not a number")
    assert skipped[1].startswith("skipped c1: test_embeddings.npz is damaged (")
    assert skipped[1].endswith("the run is left out of digits")
    for name in ("digits.md", "digits.csv", "digits.png", "digits-tsne.png"):
        assert (out / name).is_file(), name
    table = pd.read_csv(out / "digits.csv").set_index("method")
    assert table.loc["contrastive", "runs"] == 1 and table.loc["lifted", "runs"] == 1


def test_the_only_trained_run_damaged_keeps_the_table_of_baselines_saying_so(tmp_path):
    # Issue 43: the whole table went, baselines and all, without a word in the report.
    r = tmp_path / "r"
    embedded(r, "c0", "contrastive", 0)
    make_run(r, "raw", loss="untrained", dims=64, features="raw inputs")
    truncate(r / "c0" / store.EMBEDDINGS)
    written, problems, _, _ = write_report(r, tmp_path / "rep")
    damaged = "c0: test_embeddings.npz is damaged (File is not a zip file)"
    # Named once, and no builder failed on a table of baselines alone.
    assert problems == [f"{damaged}; the run is left out of digits"]
    text = (tmp_path / "rep" / "digits.md").read_text()
    title, blank, note = text.splitlines()[:3]
    assert title.startswith("# digits") and blank == ""
    assert note == f"> Left out, damaged: {damaged}"
    assert pd.read_csv(tmp_path / "rep" / "digits.csv")["method"].tolist() == ["raw inputs"]


def test_a_truncated_training_file_is_named_too(tmp_path):
    r = tmp_path / "r"
    for seed in range(3):
        embedded(r, f"c{seed}", "contrastive", seed)
    relabel(r / "c0", embedding="gap")  # two embeddings: the train/test table reads the files
    truncate(r / "c1" / store.TRAIN_EMBEDDINGS)
    written, problems, _, _ = write_report(r, tmp_path / "rep")
    assert problems == [
        "c1: train_embeddings.npz is damaged (File is not a zip file); the run is left out of "
        "digits"
    ]
    table = pd.read_csv(tmp_path / "rep" / "digits-train-test.csv")
    assert table["runs"].tolist() == [1, 1, 1, 1]  # c0 (GAP) and c2 (FC), each on both splits


class Killed(BaseException):
    """Stands for kill -9: nothing after it runs (not an Exception: no handler catches it)."""


def killed_at(monkeypatch, step: int) -> None:
    """The report's writes stop dead at write number `step` (0: the first)."""
    real, calls = manifest.atomic_write_bytes, []

    def write(path, data):
        if len(calls) == step:
            monkeypatch.setattr(manifest, "atomic_write_bytes", real)
            raise Killed
        calls.append(path)
        real(path, data)

    monkeypatch.setattr(manifest, "atomic_write_bytes", write)


def test_a_publish_killed_at_any_write_is_completed_by_the_next(tmp_path, monkeypatch):
    old = {"a.md": b"a1", "b.md": b"b1", "gone.md": b"g1", "kept.md": b"k1"}
    new = {"a.md": b"a2", "b.md": b"b1", "c.md": b"c2", "kept.md": b"k2"}
    for step in range(5):  # the manifest before and after, and the three files it may write
        out = tmp_path / str(step)
        manifest.publish(out, old, {})
        (out / "kept.md").write_bytes(b"mine")  # changed by hand since: never overwritten
        (out / "notes.txt").write_bytes(b"mine")  # never a report's
        killed_at(monkeypatch, step)
        with pytest.raises(Killed):
            manifest.publish(out, new, manifest.read_manifest(out))
        written, removed = manifest.publish(out, new, manifest.read_manifest(out))
        assert sorted(written) == ["a.md", "b.md", "c.md"] and removed in ([], ["gone.md"])
        files = {p.name: p.read_bytes() for p in out.iterdir()}
        assert files == {
            ".nngk-report.json": files[".nngk-report.json"],
            "a.md": b"a2",
            "b.md": b"b1",
            "c.md": b"c2",
            "kept.md": b"mine",
            "notes.txt": b"mine",
        }, step
        recorded = manifest.read_manifest(out)
        assert recorded == {n: {manifest.digest(new[n])} for n in ("a.md", "b.md", "c.md")}


def test_a_report_killed_midway_is_completed_by_the_next(results, tmp_path, monkeypatch):  # noqa: F811
    out = tmp_path / "rep"
    write_report(results, out)
    fake_run(results, "t64", "triplet", 64, 0, 0.55, miner="semihard")  # new numbers
    killed_at(monkeypatch, 3)
    with pytest.raises(Killed):
        write_report(results, out)
    _, problems, _, _ = write_report(results, out)
    assert not [p for p in problems if "not a file this report wrote" in p]
    assert "55.00" in (out / "digits.md").read_text()
    recorded = manifest.read_manifest(out)
    on_disk = {p.name: p.read_bytes() for p in out.iterdir() if p.name != manifest.MANIFEST}
    assert recorded == {n: {manifest.digest(d)} for n, d in on_disk.items()}


def test_a_full_disk_mid_report_leaves_files_whole_and_the_next_report_completes(
    results,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    out = tmp_path / "rep"
    write_report(results, out)
    fake_run(results, "t64", "triplet", 64, 0, 0.55, miner="semihard")
    real, calls = manifest.atomic_write_bytes, []

    def full(path, data):
        if len(calls) == 3:
            raise OSError(28, "No space left on device", str(path))
        calls.append(path)
        real(path, data)

    monkeypatch.setattr(manifest, "atomic_write_bytes", full)
    cli = CliRunner().invoke(main, ["report", "--results", str(results), "--out", str(out)])
    assert cli.exit_code == 1 and "no space left on the device" in cli.output
    assert not list(out.glob(".*.tmp"))
    monkeypatch.setattr(manifest, "atomic_write_bytes", real)
    _, problems, _, _ = write_report(results, out)
    assert not [p for p in problems if "not a file this report wrote" in p]
    assert "55.00" in (out / "digits.md").read_text()


def test_index_links_survive_paths_with_hash_and_percent(tmp_path):
    r = tmp_path / "res#1 50%"
    embedded(r, "run#2", "contrastive", 0)
    embedded(r, "run%3", "lifted", 1)
    out = tmp_path / "rep"
    write_report(r, out)
    page = (out / "index.html").read_text()
    assert 'href="../res%231%2050%25/run%232/"' in page
    assert 'href="../res%231%2050%25/run%253/"' in page
    assert "#1 50%/" not in page.split("<body>")[1].split("Generated by")[0]


def test_the_setup_line_names_which_loss_had_which_value_and_counts_seeds(tmp_path):
    r = tmp_path / "r"
    for seed in (0, 1, 2):
        make_run(r, f"n{seed}", loss="nngk", seed=seed, lr=0.001, sampler="random")
        make_run(r, f"c{seed}", loss="contrastive", seed=seed, lr=0.01, sampler="16 classes x 4")
    make_run(r, "s", loss="softmax", seed=0, lr=0.001, sampler="random")
    line = setup_line(load_runs(r)[0])
    assert "lr 0.001 (nngk, softmax) / 0.01 (contrastive)" in line
    assert "sampler 16 classes x 4 (contrastive) / random (nngk, softmax)" in line
    # softmax ran one seed: the line says so, not "3 seeds" for every row
    assert line.endswith("; 3 seeds (0, 1, 2); 1 seed (0) for softmax.")
    assert "processes" not in line  # one process (or not recorded) is not stated
    same = dict(lr=0.001, sampler="random")  # as their loss's other runs: no label
    make_run(r, "s64", loss="softmax", seed=1, dims=64, processes=2, **same)
    make_run(r, "n64", loss="nngk", seed=1, dims=64, processes=1, **same)
    line = setup_line(load_runs(r)[0])
    assert "; processes 1 (nngk) / 2 (softmax);" in line
    ends = "; 1 seed (1) for nngk 64-d / softmax 64-d; 1 seed (0) for softmax 16-d."
    assert line.endswith("; 3 seeds (0, 1, 2)" + ends)
    assert seeds_text(pd.Series([0])) == "1 seed (0)"
    assert seeds_text(pd.Series([3, 1])) == "2 seeds (1, 3)"
    assert seeds_text(pd.Series(range(10))) == "10 seeds (0-9)"


@pytest.mark.parametrize(
    "bad",
    [
        {"dims": "64"},
        {"seed": -1},
        {"dataset": 3},
        # Read by the main table's builder, whose ValueError dropped the whole table.
        {"untrained_network": {"map@r": "n/a"}},
        {"untrained_network": 5},
    ],
)
def test_a_run_with_a_malformed_record_is_left_out_and_named(tmp_path, bad):
    r = tmp_path / "r"
    make_run(r, "ok", loss="nngk")
    make_run(r, "bad", **{"loss": "nngk", "seed": 1, **bad})
    df, problems = load_runs(r)
    assert df["run"].tolist() == ["ok"]
    (line,) = problems
    assert line.startswith("bad: metrics.json ") and line.endswith("; the run is left out")


@pytest.mark.parametrize("key, value", [("recall@1", 1.5), ("map@r", -0.5), ("nmi", 2.0)])
def test_a_metric_outside_0_to_1_is_left_out_and_named(tmp_path, key, value):
    # Issue 43: R@1 1.5 went into the table ("63.67 ± 185.93") and check --update's baseline.
    r = tmp_path / "r"
    for seed in range(2):
        make_run(r, f"c{seed}", loss="contrastive", seed=seed)
    relabel(r / "c1", **{key: value})
    cli = CliRunner().invoke(main, ["report", "--results", str(r), "--out", str(tmp_path / "o")])
    assert cli.exit_code == 0, cli.output
    (skipped,) = [x for x in cli.output.splitlines() if x.startswith("skipped")]
    assert skipped.startswith(f"skipped c1: metrics.json has {key} = {value}, outside 0 to 1")
    assert (
        pd.read_csv(tmp_path / "o" / "digits.csv").set_index("method").loc["contrastive", "runs"]
        == 1
    )


def test_an_unknown_reference_is_refused_naming_the_rows(tmp_path):
    # Issue 43: `report --reference bogus` was ignored silently (each column's best instead).
    r = tmp_path / "r"
    make_run(r, "c", loss="contrastive")
    make_run(r, "n", loss="nngk")
    args = ["report", "--results", str(r), "--out", str(tmp_path / "o")]
    out = CliRunner().invoke(main, [*args, "--reference", "ngk"])
    (line,) = [x for x in out.output.splitlines() if not x.startswith("report: ")]
    assert out.exit_code == 1 and not (tmp_path / "o").exists()
    assert "--reference 'ngk' is no row of these runs (did you mean nngk?)" in line
    assert "the rows: contrastive, nngk; nothing was written" in line
    assert CliRunner().invoke(main, [*args, "--reference", "nngk"]).exit_code == 0


def test_the_report_goes_beside_its_results_by_default(tmp_path, monkeypatch):
    # Issue 43: `report --results OTHER` replaced the report of ./results.
    monkeypatch.chdir(tmp_path)
    make_run(tmp_path / "other", "c", loss="contrastive")
    out = CliRunner().invoke(main, ["report", "--results", "other"])
    assert out.exit_code == 0, out.output
    assert (tmp_path / "other" / "report" / "digits.md").is_file()
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("given", ["folder:{root}", "folder:imgs"])
def test_a_report_into_the_runs_image_folder_is_refused_writing_nothing(tmp_path, given):
    # Issue 69: `report --out <images>/report` wrote 11 files there, and the next run read
    # them as a class; `run --results`, `visualize --out` and `features --out` refused it.
    root = tmp_path / "imgs"
    (root / "maple").mkdir(parents=True)
    r = tmp_path / "r"
    # 'folder:imgs' ran elsewhere: its recorded location is the folder it read.
    dataset = given.format(root=root)
    make_run(r, "n", loss="nngk", dataset=dataset, data_location=str(root), data_fingerprint="a")
    for out in (root / "report", root):
        cli = report_cli(r, out)
        assert cli.exit_code == 1, cli.output
        line = cli.output.strip().splitlines()[-1]
        assert line == (
            f"Error: --out {out} lies inside the data folder {root}: nothing is written into "
            "your data, where it would be read back as a class of it; give --out outside it "
            "(e.g. run from the folder above); nothing was written or removed"
        )
    assert sorted(p.name for p in root.iterdir()) == ["maple"]
    assert report_cli(r, tmp_path / "report").exit_code == 0


@pytest.mark.parametrize(
    "command", [["report", "--out"], ["report", "--results"], ["run", "--results"]]
)
def test_a_file_where_a_folder_goes_is_named(tmp_path, command):
    # Was "Error: /proc/version: File exists" from the first write into it.
    a_file = tmp_path / "notes.txt"
    a_file.write_text("the user's")
    out = CliRunner().invoke(main, [*command, str(a_file)])
    assert out.exit_code == 2, out.output
    assert f"Invalid value for '{command[1]}': Directory '{a_file}' is a file." in out.output
    assert a_file.read_text() == "the user's"


def report_cli(folder, out):
    return CliRunner().invoke(main, ["report", "--results", str(folder), "--out", str(out)])


def test_a_part_that_fails_keeps_the_earlier_reports_files_and_exits_non_zero(
    results,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    # Before: "skipped digits: embedding_files left out", the earlier digits.md, .csv and .png
    # removed as stale, and exit 0.
    out = tmp_path / "rep"
    assert report_cli(results, out).exit_code == 0
    before = (out / "digits.md").read_bytes()

    def failing(runs, name):
        raise ValueError("a fault")

    import bench.report.write as write

    builders = (failing, *write.TABLE_BUILDERS[1:])
    monkeypatch.setattr(write, "TABLE_BUILDERS", builders)
    failed = report_cli(results, out)
    assert failed.exit_code == 1 and "removed" not in failed.output
    assert "skipped digits: failing left out (ValueError: a fault)" in failed.output
    assert (
        failed.output.strip()
        .splitlines()[-1]
        .startswith(
            f"Error: the report in {out} is incomplete: 1 part(s) or file(s) not written "
            "(digits: failing left out); its earlier files were kept"
        )
    )
    assert (out / "digits.md").read_bytes() == before and (out / "digits.png").is_file()
    monkeypatch.setattr(write, "TABLE_BUILDERS", (write.embedding_files, *builders[1:]))
    again = report_cli(results, out)  # still the report's own files: rewritten, not refused
    assert again.exit_code == 0 and "not a file this report wrote" not in again.output


def test_baselines_alone_are_no_report(tmp_path):
    # Before: exit 0, a README saying "No finished runs." and an index with no table.
    r = tmp_path / "r"
    make_run(r, "base", loss="untrained")
    make_run(r, "half", loss="nngk")
    (r / "half" / store.METRICS).unlink()
    out = report_cli(r, tmp_path / "o")
    assert out.exit_code == 1 and out.output.strip().splitlines()[-1] == (
        f"Error: no finished trained run in {r}, only 1 baseline(s) (1 folder(s) unfinished or "
        "damaged: half: unfinished (no metrics.json)); train some first, finish an unfinished "
        "one (run the same command again), or retrain a damaged one (the same command with "
        "--force); nothing was written or removed"
    )
    assert not (tmp_path / "o").exists()


def test_a_damaged_only_run_is_named_with_why(tmp_path):
    # Before: "1 folder(s) unfinished or damaged ... run the same command again": neither the
    # folder nor the reason, which the report knew, and advice that could not help.
    r = tmp_path / "r"
    make_run(r, "base", loss="untrained")
    make_run(r, "bad", loss="nngk", **{"map@r": 1.7})
    line = report_cli(r, tmp_path / "o").output.strip().splitlines()[-1]
    assert "bad: metrics.json has map@r = 1.7, outside 0 to 1" in line
    assert "retrain a damaged one (the same command with --force)" in line


def test_a_record_whose_two_files_disagree_is_left_out(tmp_path):
    # A metrics.json edited to another protocol was filed, as a cross-style result, in a
    # table of its own, without a word.
    r = tmp_path / "r"
    make_run(r, "base", loss="untrained")
    make_run(r, "good", loss="nngk")
    metric = {"dataset": "digits", "protocol": "metric", "loss": "nngk", "dims": 16, "seed": 0}
    make_run(r, "edited", config=metric, loss="nngk", protocol="cross-style")
    df, problems = load_runs(r)
    assert set(df["run"]) == {"base", "good"}
    assert problems == [
        "edited: config.json and metrics.json disagree on its protocol ('metric' and "
        "'cross-style'): one was edited or replaced; the run is left out"
    ]


def test_a_lost_manifest_is_an_error_saying_what_to_do(results, tmp_path):  # noqa: F811
    # Before: exit 0 with every file "left as it is", the new run in none of them.
    out = tmp_path / "rep"
    assert report_cli(results, out).exit_code == 0
    (out / manifest.MANIFEST).unlink()
    fake_run(results, "t64", "triplet", 64, 0, 0.55, miner="semihard")
    stale = report_cli(results, out)
    assert stale.exit_code == 1 and "55.00" not in (out / "digits.md").read_text()
    last = stale.output.strip().splitlines()[-1]
    assert last.endswith("not written, ...); move those files away (or give --out another "
                         "folder) and report again")  # fmt: skip


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_run_without_its_config_is_left_out_and_named_under_the_table(tmp_path, damage):
    # Before: it took RunConfig's defaults for what metrics.json lacks (m_per_class 16 where it
    # had 4): a row of its own, one seed each, and not a word.
    r = tmp_path / "r"
    for seed in range(2):
        make_run(r, f"n{seed}", loss="nngk", seed=seed, config={"m_per_class": 4})
    config = r / "n1" / store.CONFIG
    if damage == "missing":
        config.unlink()
        why = "n1: has no config.json, where its settings are"
    else:
        config.write_text(config.read_text()[:5])
        why = "n1: config.json is unreadable (JSONDecodeError: "
    written, problems, _, incomplete = write_report(r, tmp_path / "rep")
    (line,) = problems
    assert line.startswith(why) and line.endswith("; the run is left out") and not incomplete
    table = (tmp_path / "rep" / "digits.md").read_text()
    assert f"> Left out, damaged: {line.removesuffix('; the run is left out')}" in table
    rows = pd.read_csv(tmp_path / "rep" / "digits.csv")
    assert rows["method"].tolist() == ["nngk"] and rows["runs"].tolist() == [1]


def test_a_run_with_a_metric_that_is_no_number_is_named_under_the_table(tmp_path):
    r = tmp_path / "r"
    for seed in range(2):
        make_run(r, f"c{seed}", loss="contrastive", seed=seed)
    relabel(r / "c1", **{"map@r": "0.02"})
    report_cli(r, tmp_path / "rep")
    table = (tmp_path / "rep" / "digits.md").read_text()
    title, note = table.splitlines()[:3:2]
    assert title.startswith("# ") and note == (
        "> Left out, damaged: c1: metrics.json has map@r = '0.02', not a number"
    )
    assert (
        "Left out, damaged: c1: metrics.json has map@r = "
        in (tmp_path / "rep" / "index.html").read_text()
    )


def test_a_search_alone_is_reported_by_its_tuning_page(tmp_path):
    # Before: `tune --no-retrain` then `report` said "no run folder in results" (exit 1).
    study = "glyphs-contrastive-d8-t2-e1-f1-s0-hyperband"
    setup = {"dataset": "glyphs", "dims": 8, "epochs": 1, "trials": 2, "folds": 1}
    record = {"study": study, "loss": "contrastive", "best_value": 0.4147, "trials": 2}
    record.update(best_params={"lr": 0.00025, "pos_margin": 0.29}, setup=setup)
    atomic_write_json(tmp_path / "results" / "tune" / study / "best.json", record)
    out = CliRunner().invoke(main, ["report", "--results", str(tmp_path / "results")])
    assert out.exit_code == 0, out.output
    page = (tmp_path / "results" / "report" / "tuning.md").read_text()
    row = [cell.strip() for cell in page.splitlines()[-1].split("|")]
    assert row[1:4] + row[6:8] == [
        "contrastive",
        "glyphs",
        "8",
        "41.47",
        "lr=0.00025, pos_margin=0.29",
    ]
    assert "tuning.md" in (tmp_path / "results" / "report" / "README.md").read_text()
    out = CliRunner().invoke(
        main, ["report", "--results", str(tmp_path / "results"), "--reference", "nngk"]
    )
    assert out.exit_code == 1 and "no trained run" in out.output.splitlines()[-1], out.output


def test_a_run_whose_embeddings_cannot_be_searched_is_left_out_not_the_table(tmp_path):
    # Before: one run's NaN embeddings failed the table's part: no digits.md, .csv or answer.
    r, out = tmp_path / "r", tmp_path / "rep"
    for seed in range(2):
        embedded(r, f"c{seed}", "contrastive", seed)
        embedded(r, f"l{seed}", "lifted", seed)
    emb, labels = (np.load(r / "c1" / store.EMBEDDINGS)[k] for k in ("embeddings", "labels"))
    emb[0, 0] = np.nan
    np.savez(r / "c1" / store.EMBEDDINGS, embeddings=emb, labels=labels)
    (r / "c1" / store.QUERY_SCORES).unlink(missing_ok=True)
    cli = CliRunner().invoke(main, ["report", "--results", str(r), "--out", str(out)])
    assert cli.exit_code == 0, cli.output
    skipped = [x for x in cli.output.splitlines() if x.startswith("skipped c1")]
    assert skipped and "some values are NaN or infinite: they cannot be searched" in skipped[0]
    table = pd.read_csv(out / "digits.csv").set_index("method")
    assert table.loc["contrastive", "runs"] == 1 and table.loc["lifted", "runs"] == 2


def test_baselines_of_two_input_pipelines_are_two_rows_never_one_mean(tmp_path):
    # Runs at two resize/crop settings write a baseline each; both read "untrained
    # small_cnn (random init)" and were averaged as copies of one seed.
    r = tmp_path / "r"
    for size, value in ((32, 0.2), (48, 0.4)):
        for kind in ("raw", "net"):
            backbone = {"raw": {"backbone": "none"}, "net": {"backbone": "small_cnn"}}[kind]
            make_run(r, f"{kind}{size}", loss="untrained", dataset="cub", resize=size, crop=size,
                     dims=64, **backbone, **{"map@r": value})  # fmt: skip
        make_run(r, f"t{size}", loss="nngk", dataset="cub", resize=size, crop=size)
    df = load_runs(r)[0].set_index("run")
    assert df.loc["net32", "name"] != df.loc["net48", "name"]
    assert df.loc["net48", "name"].endswith("resize 48, crop 48")
    assert df.loc["raw32", "name"] == "raw inputs, resize 32, crop 32"


def test_a_folders_table_names_its_folder(tmp_path):
    # Two folders whose names differ only in letters safe_name drops ('fold år', 'fold ör')
    # made tables 'folder-fold-r-<hash>' that no page tied to either folder.
    r, out = tmp_path / "r", tmp_path / "o"
    for i, where in enumerate(("/data/fold år", "/data/fold ör")):
        ident = {"dataset": f"folder:{where}", "data_location": where, "data_fingerprint": "f"}
        make_run(r, f"b{i}", loss="untrained", **ident)
        make_run(r, f"t{i}", loss="nngk", **ident)
    assert report_cli(r, out).exit_code == 0
    pages = {p.read_text() for p in out.glob("folder-fold-r-*.md") if p.stem.count("-") == 3}
    assert len(pages) == 2
    for where in ("/data/fold år", "/data/fold ör"):
        (page,) = [p for p in pages if f"Setup: data {where};" in p]
        assert page


def test_a_finished_run_with_a_cut_config_says_its(tmp_path):
    # "finished, but it config.json is unreadable": the record's fault read ungrammatically.
    from bench.cli.training import finished_record

    run = make_run(tmp_path / "r", "cut", loss="contrastive")
    (run / store.CONFIG).write_text('{"loss": "contrastive", ')
    with pytest.raises(ValueError, match="finished, but its config.json is unreadable"):
        finished_record(run)
    (run / store.CONFIG).unlink()
    with pytest.raises(ValueError, match="finished, but it has no config.json"):
        finished_record(run)
