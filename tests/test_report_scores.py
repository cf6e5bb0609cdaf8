"""Per-query scores saved beside the test embeddings (issue 26): what the trainer saves is what
the report would compute; a stale, damaged or truncated file is scored again, never trusted;
a run without one is scored once and the file written; a second report searches nothing."""

import errno
import json
import shutil

import faiss
import numpy as np
import pytest

import bench.report.significance as significance
from bench.evaluation.metrics import evaluate
from bench.evaluation.retrieval import query_scores
from bench.report.write import write_report
from bench.runs import store
from bench.util import atomic
from bench.util.atomic import atomic_save_npz
from tests.test_report_tables import make_run
from tests.test_significance import embedded_run


def embeddings(seed=0, n=60, dims=8):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % 6
    return (rng.normal(size=(n, dims)) + labels[:, None]).astype(np.float32), labels


def saved_run(tmp_path, seed=0):
    """A run folder with test embeddings and the scores saved as the trainer saves them."""
    emb, labels = embeddings(seed)
    run = tmp_path / "run"
    atomic_save_npz(run / store.EMBEDDINGS, embeddings=emb, labels=labels)
    scores = evaluate(emb, labels, clustering=False).scores
    store.save_query_scores(run, scores, store.EMBEDDINGS)
    return run, scores


def no_search(monkeypatch):
    """Any kNN search from here on fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(faiss, "IndexFlatL2", refuse)
    monkeypatch.setattr(significance, "query_scores", refuse)


def test_saved_scores_read_back_as_the_report_computes_them(tmp_path, monkeypatch):
    run, scores = saved_run(tmp_path)
    computed = query_scores(*embeddings())
    no_search(monkeypatch)
    read = store.read_query_scores(run)
    assert list(read) == ["recall@1", "recall@2", "recall@4", "recall@8", "r_precision", "map@r"]
    for key in read:
        np.testing.assert_array_equal(read[key], computed[key])
        np.testing.assert_array_equal(read[key], scores[key])
    assert significance.run_query_scores(run).keys() == read.keys()


def test_changed_embeddings_make_the_scores_stale(tmp_path):
    run, _ = saved_run(tmp_path)
    before = (run / store.QUERY_SCORES).read_bytes()
    emb, labels = embeddings(seed=1)  # the same size, other values: only the hash tells
    atomic_save_npz(run / store.EMBEDDINGS, embeddings=emb, labels=labels)
    assert store.read_query_scores(run) is None
    rescored = significance.run_query_scores(run)
    np.testing.assert_array_equal(rescored["map@r"], query_scores(emb, labels)["map@r"])
    assert (run / store.QUERY_SCORES).read_bytes() != before  # written again, for these
    np.testing.assert_array_equal(store.read_query_scores(run)["map@r"], rescored["map@r"])
    atomic_save_npz(run / store.EMBEDDINGS, embeddings=emb[:30], labels=labels[:30])
    assert store.read_query_scores(run) is None  # another size


def damaged(data: bytes, how: str) -> bytes:
    if how == "truncated":
        return data[: len(data) // 2]
    if how == "empty":
        return b""
    flipped = bytearray(data)
    flipped[len(data) // 3] ^= 0xFF  # inside the scores' bytes: the zip's CRC no longer fits
    return bytes(flipped)


@pytest.mark.parametrize("how", ["truncated", "empty", "flipped byte"])
def test_a_damaged_scores_file_is_scored_again_and_replaced(tmp_path, how):
    run, scores = saved_run(tmp_path)
    path = run / store.QUERY_SCORES
    path.write_bytes(damaged(path.read_bytes(), how))
    assert store.read_query_scores(run) is None
    rescored = significance.run_query_scores(run)
    for key in scores:
        np.testing.assert_array_equal(rescored[key], scores[key])
    assert store.read_query_scores(run) is not None


def rewritten(run, **change):
    """The scores file with its record or table changed, as another version might write it."""
    with np.load(run / store.QUERY_SCORES) as saved:
        table, record = saved["scores"], json.loads(saved["record"].item())
    table = change.pop("scores", table)
    record.update(change)
    atomic_save_npz(run / store.QUERY_SCORES, scores=table, record=np.array(json.dumps(record)))


@pytest.mark.parametrize(
    "change",
    [
        {"format": 2},
        {"embeddings_sha256": "0" * 64, "embeddings_mtime_ns": 0},
        {"names": ["recall@1"]},
        {"scores": np.zeros((5, 60), dtype=np.float32)},
        {"scores": np.zeros(60)},
    ],
    ids=["format", "hash", "names", "float32", "one row"],
)
def test_a_scores_file_of_another_format_or_embedding_is_not_trusted(tmp_path, change):
    run, _ = saved_run(tmp_path)
    rewritten(run)  # unchanged: still read
    assert store.read_query_scores(run) is not None
    rewritten(run, **change)
    assert store.read_query_scores(run) is None


def test_the_hash_is_read_only_where_the_embeddings_time_changed(tmp_path, monkeypatch):
    """Scores whose record names the embeddings' size and time are read without hashing them;
    after a copy that kept the bytes but not the time (or an earlier version's record, which has
    none), the hash decides once and the time is recorded for the next report."""
    run, scores = saved_run(tmp_path)
    hashed = []
    real = store.file_sha256
    monkeypatch.setattr(store, "file_sha256", lambda path: hashed.append(path) or real(path))
    assert store.read_query_scores(run) is not None and hashed == []
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, copy_function=shutil.copyfile)  # new times, the same bytes
    rewritten(copy, embeddings_mtime_ns=None)
    np.testing.assert_array_equal(store.read_query_scores(copy)["map@r"], scores["map@r"])
    assert hashed == [copy / store.EMBEDDINGS]
    assert store.read_query_scores(copy) is not None and len(hashed) == 1  # restamped
    emb, labels = embeddings(seed=1)  # replaced: a new time, and the hash says it is other
    atomic_save_npz(copy / store.EMBEDDINGS, embeddings=emb, labels=labels)
    assert store.read_query_scores(copy) is None and len(hashed) == 2


def test_scores_without_their_embeddings_are_not_read(tmp_path):
    run, _ = saved_run(tmp_path)
    (run / store.EMBEDDINGS).unlink()
    assert store.read_query_scores(run) is None
    assert significance.run_query_scores(run) is None


def test_scores_that_do_not_fit_together_are_refused_when_saved(tmp_path):
    run, _ = saved_run(tmp_path)
    with pytest.raises(ValueError, match="one value per query"):
        store.save_query_scores(run, {"recall@1": np.zeros(60), "map@r": np.zeros(59)})
    with pytest.raises(ValueError, match="one value per query"):
        store.save_query_scores(run, {})


def test_an_older_run_is_scored_once_then_read(tmp_path, monkeypatch):
    emb, labels = embeddings()
    run = tmp_path / "old"
    atomic_save_npz(run / store.EMBEDDINGS, embeddings=emb, labels=labels)
    first = significance.run_query_scores(run)
    assert (run / store.QUERY_SCORES).is_file()
    no_search(monkeypatch)
    second = significance.run_query_scores(run)
    for key in first:
        np.testing.assert_array_equal(first[key], second[key])


def test_a_folder_that_cannot_be_written_is_scored_from_memory(tmp_path, monkeypatch):
    emb, labels = embeddings()
    run = tmp_path / "read-only"
    atomic_save_npz(run / store.EMBEDDINGS, embeddings=emb, labels=labels)

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", read_only)
    scores = significance.run_query_scores(run)
    np.testing.assert_array_equal(scores["map@r"], query_scores(emb, labels)["map@r"])
    assert sorted(p.name for p in run.iterdir()) == [store.EMBEDDINGS]


def report_files(results, out):
    """The report's tables and figures (README.md and index.html name the results folder)."""
    written, problems, _, _ = write_report(results, out)
    assert problems == []
    return {p.name: p.read_bytes() for p in written if p.name not in ("README.md", "index.html")}


def test_the_bootstrap_is_the_same_from_saved_scores_and_a_second_report_searches_nothing(
    tmp_path, monkeypatch
):
    r = tmp_path / "r"
    for seed in range(2):
        embedded_run(r, f"good{seed}", "contrastive", seed, noise=0.6)
        embedded_run(r, f"bad{seed}", "lifted", seed + 20, noise=1.2)
    # The trainer's way for one run: the scores of its evaluation, saved beside its embeddings.
    emb, labels = np.load(r / "good0" / store.EMBEDDINGS).values()
    store.save_query_scores(r / "good0", evaluate(emb, labels).scores)
    shutil.copytree(r, tmp_path / "copy")
    first = report_files(r, tmp_path / "rep1")  # the other three scored and saved
    assert all((r / run / store.QUERY_SCORES).is_file() for run in ("good1", "bad0", "bad1"))
    no_search(monkeypatch)
    second = report_files(r, tmp_path / "rep2")
    assert first == second and "digits-differences.csv" in second
    monkeypatch.undo()
    for run in ("good0", "good1", "bad0", "bad1"):  # none saved: all four scored in memory
        (tmp_path / "copy" / run / store.QUERY_SCORES).unlink(missing_ok=True)
    monkeypatch.setattr(store, "save_query_scores", lambda *a, **k: None)
    assert report_files(tmp_path / "copy", tmp_path / "rep3") == first


def test_a_run_without_embeddings_leaves_its_table_unmarked(tmp_path):
    r = tmp_path / "r"
    embedded_run(r, "good0", "contrastive", 0, noise=0.6)
    make_run(r, "plain", loss="lifted", seed=1)  # metrics only: no embeddings, no scores
    written, problems, _, _ = write_report(r, tmp_path / "rep")
    assert problems == [] and not (tmp_path / "rep" / "digits-differences.csv").exists()
    assert not (r / "plain" / store.QUERY_SCORES).exists()
