import hashlib
import io
import shutil

import numpy as np
import pytest

from bench.data import glyphs as G
from bench.data.datasets import check_dataset, load_dataset
from bench.data.glyphs import GlyphSpec, generate, load_glyphs

SMALL = "glyphs:classes=8,instances=5,size=12"
PINNED = "83bb77e4acb11250"  # sha1 of the SMALL set's pixels, its first 16 digits


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_parse_names_and_defaults():
    assert GlyphSpec.parse("glyphs") == GlyphSpec(200, 30, 28, 0, 1.0)
    spec = GlyphSpec.parse("glyphs:size=16,classes=40,difficulty=0.5")
    assert spec == GlyphSpec(classes=40, instances=30, size=16, seed=0, difficulty=0.5)
    assert spec.name() == "glyphs:classes=40,size=16,difficulty=0.5"
    assert GlyphSpec.parse(spec.name()) == spec and GlyphSpec().name() == "glyphs"
    assert spec.fingerprint() != GlyphSpec.parse("glyphs:classes=40,size=16").fingerprint()


@pytest.mark.parametrize(
    "name, message",
    [
        ("glyphs:colours=3", "bad glyphs parameter 'colours=3'"),
        ("glyphs:classes", "bad glyphs parameter 'classes'"),
        ("glyphs:classes=many", "bad value 'many' for glyphs parameter classes"),
        ("glyphs:classes=2", "glyphs needs classes >= 4"),
        ("glyphs:difficulty=9", "glyphs needs 0 <= difficulty <= 3"),
        ("glyphs:difficulty=nan", "glyphs needs 0 <= difficulty <= 3"),
        # Issue 43: the last value was taken, and the run named "classes-20-classes-30".
        ("glyphs:classes=20,classes=30", "glyphs parameter classes is given twice"),
        # Issue 43: a raw allocator error ("you tried to allocate 160000000000 bytes").
        (
            "glyphs:size=100000",
            r"glyphs needs size <= 512; got 100000, whose 200 x 30 images "
            r"would take 6e\+04 GB",
        ),
    ],
)
def test_bad_names_are_one_line_errors(name, message):
    with pytest.raises(ValueError, match=message):
        check_dataset(name)


def test_generation_is_deterministic_and_pinned():
    spec = GlyphSpec.parse(SMALL)
    images, labels = generate(spec)
    again, _ = generate(spec)
    assert images.shape == (40, 12, 12) and images.dtype == np.uint8
    assert labels.tolist() == [c for c in range(8) for _ in range(5)]
    assert np.array_equal(images, again)
    # The exact pixels of this set: a change of the generator must change VERSION too.
    digest = hashlib.sha1(images.tobytes()).hexdigest()[:16]
    assert (digest, G.VERSION) == (PINNED, 1)


# sha1 of the pixels (first 16 digits) the generator gave before it rendered a chunk of whole
# classes at a time into the cache: the same for every spec, the default set's included.
BEFORE_CHUNKS = [
    ("glyphs", "bb2c806dd0c133b8"),
    ("glyphs:classes=40,size=16", "dd73767f1861f66f"),
    ("glyphs:classes=23,instances=13,size=20,seed=3,difficulty=0.5", "48037d9b5b19f549"),
    ("glyphs:first=1000,classes=12,instances=7,size=9,difficulty=2.5", "6e0c1336e3bec0e6"),
    ("glyphs:classes=300,instances=2,size=8", "aa29e402654b8d29"),
]


@pytest.mark.parametrize("name, digest", BEFORE_CHUNKS)
def test_the_cache_written_a_chunk_at_a_time_keeps_the_pixels(name, digest):
    spec = GlyphSpec.parse(name)
    images, labels = load_glyphs(spec, say=lambda _: None)
    assert hashlib.sha1(images.tobytes()).hexdigest()[:16] == digest
    assert labels.tolist() == [c for c in range(spec.classes) for _ in range(spec.instances)]


def test_the_chunk_rendered_at_once_changes_no_pixel(monkeypatch):
    monkeypatch.setattr(G, "RENDER_CHUNK", 1)  # a class at a time: 23 chunks, not 2
    name, digest = BEFORE_CHUNKS[2]
    images, _ = generate(GlyphSpec.parse(name))
    assert hashlib.sha1(images.tobytes()).hexdigest()[:16] == digest


def test_images_rendered_a_few_at_a_time_change_no_pixel(monkeypatch):
    # Large images are rendered a few at a time (a class of 256-px images took 12.7 GB at once).
    monkeypatch.setattr(G, "RENDER_PIXELS", 3 * 20 * 20)  # 3 images a piece, not 13 x 23
    name, digest = BEFORE_CHUNKS[2]
    images, _ = generate(GlyphSpec.parse(name))
    assert hashlib.sha1(images.tobytes()).hexdigest()[:16] == digest


def test_a_set_larger_than_the_cache_disk_is_refused_before_it_is_drawn(cache, monkeypatch):
    free = shutil.disk_usage(cache.parent).free
    classes = free // (30 * 28 * 28) + 1  # a set one class past the disk's free bytes
    spec = GlyphSpec(classes=int(classes))
    with pytest.raises(ValueError, match=r"GB free on the disk of .*; give fewer classes"):
        load_glyphs(spec, say=pytest.fail)
    assert not cache.exists() or not any(cache.iterdir())


def test_a_class_looks_the_same_whatever_the_number_of_classes():
    few, _ = generate(GlyphSpec(classes=4, instances=3, size=10))
    many, _ = generate(GlyphSpec(classes=9, instances=3, size=10))
    assert np.array_equal(few, many[: len(few)])
    other_seed, _ = generate(GlyphSpec(classes=4, instances=3, size=10, seed=1))
    assert not np.array_equal(few, other_seed)


def test_a_range_from_first_holds_those_classes_of_any_larger_set():
    # Classes 1000-1003 alone, and as the last four of classes 0-1003 (minimal images: 0.8 s).
    spec = GlyphSpec.parse("glyphs:first=1000,classes=4,instances=2,size=8")
    images, labels = generate(spec)
    whole, whole_labels = generate(GlyphSpec(classes=1004, instances=2, size=8))
    assert np.array_equal(images, whole[whole_labels >= 1000])
    assert labels.tolist() == [0, 0, 1, 1, 2, 2, 3, 3]  # a set numbers its classes from 0
    assert spec.class_indices() == range(1000, 1004)
    # The pretraining source and the benchmark (the default set) share no class of seed 0.
    source, benchmark = GlyphSpec.parse("glyphs:first=1000,classes=1000"), GlyphSpec()
    assert (source.seed, benchmark.seed) == (0, 0)
    assert (source.class_indices(), benchmark.class_indices()) == (range(1000, 2000), range(200))
    assert set(source.class_indices()).isdisjoint(benchmark.class_indices())
    assert source.fingerprint() != GlyphSpec(classes=1000).fingerprint()


# Pinned before `first` existed (data set name, fingerprint: the cache file's name, run id).
BEFORE_FIRST = [
    ("glyphs", "443a3f8d998d", "glyphs-nngk-d64-s0-f6313792"),
    (
        "glyphs:classes=16,instances=6,size=12",
        "e0c2d892ba9b",
        "glyphs-classes-16-instances-6-size-12-nngk-d64-s0-666dbf9d",
    ),
]


@pytest.mark.parametrize("name, fingerprint, run_id", BEFORE_FIRST)
def test_sets_from_class_0_keep_their_names_caches_and_run_ids(name, fingerprint, run_id):
    from bench.data.identity import data_identity
    from bench.train.presets import make_configs

    spec = GlyphSpec.parse(name)
    assert (spec.name(), spec.fingerprint()) == (name, fingerprint)
    assert GlyphSpec.parse(f"{name}{',' if ':' in name else ':'}first=0") == spec
    (cfg,) = make_configs(name, "nngk", (64,), {}, seed=0)
    assert cfg.run_id() == run_id
    assert data_identity(name, "") == {"data_location": "", "data_fingerprint": ""}


def test_first_is_named_where_it_is_not_0():
    spec = GlyphSpec.parse("glyphs:first=1000,classes=1000")
    assert spec.name() == "glyphs:classes=1000,first=1000" and GlyphSpec.parse(spec.name()) == spec
    with pytest.raises(ValueError, match="first >= 0"):
        GlyphSpec.parse("glyphs:first=-1")


def test_instances_vary_and_difficulty_zero_repeats_the_class():
    images, _ = generate(GlyphSpec(classes=4, instances=3, size=16))
    assert not np.array_equal(images[0], images[1])  # one class, two instances
    plain, _ = generate(GlyphSpec(classes=4, instances=3, size=16, difficulty=0))
    assert np.array_equal(plain[0], plain[1]) and not np.array_equal(plain[0], plain[3])
    assert plain.max() == 255 and (plain == 0).mean() > 0.3  # strokes on a clear background


def test_metric_protocol_is_class_disjoint():
    data = load_dataset(SMALL, "metric", 0.2)
    train, val, test = (np.asarray(s.labels) for s in (data.train, data.val, data.test))
    assert set(train) == set(val) == {0, 1, 2, 3} and set(test) == {4, 5, 6, 7}
    assert len(train) + len(val) == 20 and len(test) == 20
    assert data.in_channels == 1 and data.num_train_classes == 4
    image, label, index = data.train[0]
    assert image.shape == (1, 12, 12) and 0 <= float(image.min()) <= float(image.max()) <= 1
    by_classes = load_dataset(SMALL, "metric", 0.2, val_split="classes")
    assert set(np.asarray(by_classes.val.labels)).isdisjoint(np.asarray(by_classes.train.labels))


def test_cache_is_read_back_and_a_damaged_one_is_generated_again(cache, monkeypatch):
    spec = GlyphSpec.parse(SMALL)
    images, labels = load_glyphs(spec, say=lambda _: None)
    assert isinstance(images, np.memmap) and not images.flags.writeable  # read in place
    # A copy: the test rewrites the file in place below, which the memory map would not survive
    # (the harness never does: it replaces a cache by renaming a new file over it).
    images, labels = np.array(images), np.array(labels)
    assert np.array_equal(images, generate(spec)[0])
    (path,) = cache.glob("glyphs-*.npz")
    assert spec.fingerprint() in path.name

    def no_generation(*_):
        raise AssertionError("generated again")

    render = G.class_images
    monkeypatch.setattr(G, "class_images", no_generation)
    cached, cached_labels = load_glyphs(spec, say=lambda _: None)
    assert np.array_equal(cached, images) and np.array_equal(cached_labels, labels)
    del cached
    path.write_bytes(b"not an npz")
    monkeypatch.setattr(G, "class_images", render)
    messages = []
    again, _ = load_glyphs(spec, say=messages.append)
    assert np.array_equal(again, images) and messages[0].startswith("generating " + SMALL)


def test_a_cache_that_cannot_be_written_is_said_and_the_set_generated_in_memory(cache, monkeypatch):
    # A cache folder below a file cannot be made (root writes any folder, whatever its mode);
    # NNGK_CACHE naming a file itself is refused before anything runs (tests/test_environ.py).
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("a file where the cache folder's parent should be")
    monkeypatch.setenv("NNGK_CACHE", str(cache / "below"))
    spec = GlyphSpec.parse(SMALL)
    messages = []
    images, labels = load_glyphs(spec, say=messages.append)
    assert (
        np.array_equal(images, generate(spec)[0]) and labels.tolist() == G.set_labels(spec).tolist()
    )
    assert messages[1].startswith(f"could not cache {SMALL} in {cache / 'below'}")


def test_a_previous_format_cache_is_read_in_place_and_a_compressed_one_replaced(cache):
    # np.savez's files (the cache before it was written a chunk at a time) are read as they are.
    spec = GlyphSpec.parse(SMALL)
    images, labels = generate(spec)
    path = cache / f"glyphs-{spec.fingerprint()}.npz"
    cache.mkdir(parents=True)
    np.savez(path, images=images, labels=labels)
    loaded, _ = load_glyphs(spec, say=lambda m: pytest.fail(m))
    assert isinstance(loaded, np.memmap) and np.array_equal(loaded, images)
    del loaded
    np.savez_compressed(path, images=images, labels=labels)
    assert (
        G.read_cache(path, spec)
        == "damaged: images.npy is compressed, so it cannot be memory-mapped"
    )


def flip_a_pixel_byte(data: bytes) -> bytes:
    """The .npz with one byte of its images changed: its zip member fails the CRC check."""
    at = data.index(b"images.npy") + 400
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def other_arrays() -> bytes:
    buf = io.BytesIO()
    np.savez(buf, images=np.zeros((3, 12, 12), np.uint8), labels=np.zeros(3, np.int64))
    return buf.getvalue()


@pytest.mark.parametrize(
    "damage, why",
    [
        (lambda data: data[: len(data) // 2], "not a whole .npz"),  # truncated: was BadZipFile
        (lambda data: b"", "not a whole .npz (0 bytes)"),  # empty: was a bare "Aborted!"
        (flip_a_pixel_byte, "CRC"),
        (lambda data: other_arrays(), "images of shape (3, 12, 12)"),
    ],
    ids=["truncated", "zero bytes", "a changed byte", "other arrays"],
)
def test_a_damaged_cache_is_named_and_replaced_whole(cache, damage, why):
    spec = GlyphSpec.parse(SMALL)
    images, labels = (np.array(a) for a in load_glyphs(spec, say=lambda _: None))
    (path,) = cache.glob("glyphs-*.npz")
    path.write_bytes(damage(path.read_bytes()))  # in place: the copies above survive it
    messages = []
    again, again_labels = load_glyphs(spec, say=messages.append)
    assert np.array_equal(again, images) and np.array_equal(again_labels, labels)
    assert len(messages) == 1 and messages[0].startswith("generating " + SMALL)
    assert str(path) in messages[0] and why in messages[0]
    assert [p.name for p in cache.iterdir()] == [path.name]  # replaced, no temporary file left
    saved = G.read_cache(path, spec)
    assert np.array_equal(saved[0], images)  # the next run reads it without generating


def test_a_run_on_glyphs_says_what_it_does_from_the_start(tmp_path):
    from click.testing import CliRunner

    from bench.cli import main

    name = "glyphs:classes=8,instances=10,size=12"
    args = ["run", "--loss", "contrastive", "--dataset", name, "--dims", "8", "--epochs", "2"]
    args += ["--results", str(tmp_path / "r")]
    too_big = CliRunner().invoke(main, args)
    first = too_big.stderr.splitlines()  # progress and errors go to stderr
    assert too_big.exit_code == 1 and first[-1] == (
        f"Error: batch size 64 exceeds the 32 training items of {name}; give a smaller --batch-size"
    )
    assert first[0].startswith("1 run(s) into") and first[1].startswith("generating " + name)
    out = CliRunner().invoke(main, [*args, "--batch-size", "8"])
    assert out.exit_code == 0, out.output
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    steps = ["loading " + name, "training/validation/test items; building small_cnn", "untrained"]
    assert all(any(step in line for line in lines) for step in steps)
    assert "generating" not in out.stderr  # the first attempt cached the images
    assert [line.split("epoch ")[1][:3] for line in lines if ": epoch " in line] == ["1/2", "2/2"]
    # Then the test (a warning may follow it: a run this small can end below its start).
    last_epoch = max(i for i, line in enumerate(lines) if ": epoch " in line)
    assert "testing the checkpoint of epoch" in lines[last_epoch + 1] and "map@r=" in out.stdout


def test_a_validation_split_that_cannot_rank_is_a_one_line_error(tmp_path):
    from click.testing import CliRunner

    from bench.cli import main

    args = ["run", "--loss", "contrastive", "--dataset", SMALL, "--batch-size", "8"]
    out = CliRunner().invoke(main, [*args, "--epochs", "1", "--results", str(tmp_path)])
    assert out.exit_code == 1 and out.stderr.splitlines()[-1] == (
        f"Error: the validation split of {SMALL} has 4 items and no class with two, so it "
        "cannot choose an epoch; use a data set with more images per class, or --val-split classes"
    )
    assert not [p for p in tmp_path.iterdir() if "contrastive" in p.name]  # nothing half-written
    again = CliRunner().invoke(
        main, [*args, "--epochs", "1", "--val-split", "classes"] + ["--results", str(tmp_path)]
    )
    assert again.exit_code == 0, again.output
