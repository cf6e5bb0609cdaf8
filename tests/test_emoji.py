"""The emoji data set on Iconify JSON packages the tests write (a few SVG bodies): parameters,
aliases as Iconify resolves them, the classes, rendering, the cache, the splits and the faults."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.data import emoji_render
from bench.data.datasets import load_dataset
from bench.data.emoji import SETS, EmojiSpec, install_line, packages_folder, read_set
from bench.data.emoji_render import EmojiSet, load_emoji, render_icon
from bench.data.identity import data_identity
from bench.report import galleries
from tests.conftest import cli

FIXTURE_SETS = ("twemoji", "noto", "openmoji", "fxemoji")
COLOURS = ["#e6194b", "#3cb44b", "#ffe119", "#4363d8", "#f58231", "#911eb4", "#46f0f0", "#f032e6"]
# 16 names every fixture set draws: a coloured shape of its own, drawn a little differently by
# each set (its position), so that a class's images are alike and unlike the other classes'.
NAMES = [f"{shape}-{i}" for shape in ("square", "disc") for i in range(8)]


CREDITS = (
    "Emoji from the Iconify sets twemoji (CC-BY-4.0), noto (CC-BY-4.0), openmoji (CC-BY-4.0), "
    "fxemoji (CC-BY-4.0)"
)


def body(name: str, position: int) -> str:
    shape, i = name.split("-")
    colour, offset = COLOURS[int(i)], 2 * position
    if shape == "square":
        return f'<rect x="{4 + offset}" y="{4 + offset}" width="20" height="20" fill="{colour}"/>'
    return f'<circle cx="{18 + offset}" cy="{18 - offset}" r="10" fill="{colour}"/>'


def write_set(root: Path, name: str, icons: dict, aliases: dict | None = None, **extra) -> Path:
    """An installed package of the set `name` under the data root `root`, as npm lays it out."""
    folder = packages_folder(root) / name
    folder.mkdir(parents=True, exist_ok=True)
    data = {"prefix": name, "icons": icons, "aliases": aliases or {}, "width": 36, "height": 36}
    (folder / "icons.json").write_text(json.dumps({**data, **extra}))
    (folder / "package.json").write_text(json.dumps({"version": SETS[name], "license": "MIT"}))
    info = {"name": name.title(), "license": {"spdx": "CC-BY-4.0"}, "author": {"name": "A"}}
    (folder / "info.json").write_text(json.dumps(info))
    return folder


@pytest.fixture
def data_root(tmp_path) -> Path:
    """Four sets drawing the 16 names; one more name each, drawn by that set alone; twemoji
    also has an old name, a plain alias of square-0, and a flipped alias of disc-1."""
    root = tmp_path / "data"
    for position, name in enumerate(FIXTURE_SETS):
        icons = {n: {"body": body(n, position)} for n in NAMES}
        icons[f"only-{name}"] = {"body": body("square-1", position)}
        aliases = {}
        if name == "twemoji":
            aliases = {
                "old-square": {"parent": "square-0"},
                "mirrored-disc": {"parent": "disc-1", "hFlip": True},
            }
        write_set(root, name, icons, aliases)
    return root


def fixture_spec(**given) -> EmojiSpec:
    return EmojiSpec(**{"size": 16, "min_sets": 2, "sets": "+".join(FIXTURE_SETS), **given})


def test_parameters_parse_check_and_name_the_set():
    spec = EmojiSpec.parse("emoji:size=48,sets=noto+twemoji,min_sets=2")
    assert (spec.size, spec.min_sets, spec.set_names()) == (48, 2, ("twemoji", "noto"))
    assert spec.name() == "emoji:size=48,min_sets=2,sets=twemoji+noto"
    assert EmojiSpec.parse("emoji").name() == "emoji" and len(EmojiSpec().set_names()) == 12
    assert EmojiSpec.parse(f"emoji:sets={'+'.join(SETS)}").name() == "emoji"
    for name, message in [
        ("emoji:colour=1", "bad emoji parameter 'colour=1'"),
        ("emoji:size=big", "bad value 'big' for emoji parameter size"),
        ("emoji:size=16.5", "bad value '16.5' for emoji parameter size: give a whole number"),
        ("emoji:sets=twemoji+wingdings", "emoji sets must be distinct names"),
        ("emoji:sets=noto+noto", "emoji sets must be distinct names"),
        ("emoji:sets=twemoji+noto,min_sets=3", "2 <= min_sets <= the number of sets chosen (2)"),
        ("emoji:min_sets=1", "2 <= min_sets"),
        ("emoji:size=4", "8 <= size <= 256"),
        ("emoji:classes=3", "classes 0 (all) or >= 4"),
    ]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            EmojiSpec.parse(name)


def test_the_install_line_pins_every_set():
    line = install_line("/x/emoji")
    assert line.startswith("npm install --prefix /x/emoji --save-exact ")
    assert all(f"@iconify-json/{name}@{version}" in line for name, version in SETS.items())


def test_aliases_resolve_as_iconify_does(data_root):
    """An alias takes its parent's body and box; flips combine by parity, quarter turns add."""
    folder = write_set(
        data_root,
        "noto",
        {"arrow": {"body": "<path/>", "width": 24, "rotate": 1, "hFlip": True}},
        {
            "a": {"parent": "arrow", "rotate": 2, "hFlip": True, "vFlip": True},
            "b": {"parent": "a", "rotate": 3, "height": 20},
            "loop": {"parent": "loop"},
            "broken": {"parent": "nothing"},
        },
    )
    icons = read_set(data_root, folder.name)
    a, b = icons.resolve("a"), icons.resolve("b")
    assert (a.rotate, a.h_flip, a.v_flip, a.width, a.height) == (3, False, True, 24, 36)
    assert (b.rotate, b.h_flip, b.v_flip, b.width, b.height) == (2, False, True, 24, 20)
    assert icons.resolve("loop") is None and icons.resolve("broken") is None


def test_a_turn_and_a_flip_render_as_iconify_orders_them(data_root):
    """Flipped first, then turned clockwise: a bar on the left turned a quarter is on top."""
    bar = '<rect x="0" y="0" width="12" height="36" fill="#000"/>'
    folder = write_set(
        data_root,
        "noto",
        {"bar": {"body": bar}},
        {"turned": {"parent": "bar", "rotate": 1}, "flipped": {"parent": "bar", "hFlip": True}},
    )
    icons = read_set(data_root, folder.name)
    dark = {
        n: render_icon(icons.resolve(n), 18).mean(2) < 128 for n in ("bar", "turned", "flipped")
    }
    assert dark["bar"][:, :6].all() and not dark["bar"][:, 7:].any()
    assert dark["turned"][:6].all() and not dark["turned"][7:].any()
    assert np.array_equal(dark["flipped"], dark["bar"][:, ::-1])


def test_classes_are_names_enough_sets_draw_in_sha1_order(data_root):
    emoji = load_emoji(fixture_spec(), data_root)
    order = sorted(NAMES, key=lambda n: hashlib.sha1(n.encode()).hexdigest())
    # mirrored-disc is drawn by twemoji alone, old-square is an old name: neither is a class.
    assert emoji.class_names == tuple(order)
    assert np.array_equal(emoji.labels, np.repeat(np.arange(16), 4))
    assert np.array_equal(emoji.sets, np.tile(np.arange(4), 16))  # in the order of SETS
    assert emoji.images.shape == (64, 16, 16, 3) and emoji.images.dtype == np.uint8
    assert emoji.credits() == CREDITS
    assert emoji.packages()["@iconify-json/openmoji"] == SETS["openmoji"]
    first = emoji.images[emoji.labels == order.index("square-0")][0]
    assert tuple(first[8, 8]) == (0xE6, 0x19, 0x4B) and tuple(first[0, 0]) == (255, 255, 255)
    assert len(load_emoji(fixture_spec(classes=5), data_root).class_names) == 5
    said = []
    assert len(load_emoji(fixture_spec(classes=40), data_root, say=said.append).class_names) == 16
    assert said[-1].endswith("only 16 emoji are drawn by 2 of these sets")


def test_the_cache_is_read_back_and_never_written_into_the_data_root(
    data_root, monkeypatch, tmp_path
):
    before = sorted(p.relative_to(data_root) for p in data_root.rglob("*"))
    first = load_emoji(fixture_spec(), data_root)
    cached = list((tmp_path / "cache").glob("emoji-*.npz"))
    assert len(cached) == 1 and isinstance(first.images, np.memmap)
    assert sorted(p.relative_to(data_root) for p in data_root.rglob("*")) == before

    def no_rendering(*_):
        raise AssertionError("rendered again")

    rendering = emoji_render.render_icon
    monkeypatch.setattr(emoji_render, "render_icon", no_rendering)
    again = load_emoji(fixture_spec(), data_root)
    assert np.array_equal(again.images, first.images) and again.class_names == first.class_names
    pixels = np.array(first.images)
    del first, again  # their maps of the file; damaged anew (a new file, as an editor writes)
    cached[0].unlink()
    cached[0].write_bytes(b"PK\x03\x04 not a whole file")
    monkeypatch.setattr(emoji_render, "render_icon", rendering)
    said = []
    damaged = load_emoji(fixture_spec(), data_root, say=said.append)
    assert np.array_equal(damaged.images, pixels) and "damaged" in said[0]


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "cache"))


def test_a_new_version_of_a_set_is_other_data(data_root, tmp_path):
    before = data_identity(fixture_spec().name(), str(data_root))
    moved = tmp_path / "moved"
    data_root.rename(moved)
    assert data_identity(fixture_spec().name(), str(moved)) == before  # where they lie: no matter
    package = packages_folder(moved) / "noto" / "package.json"
    package.write_text(json.dumps({"version": "9.9.9"}))
    after = data_identity(fixture_spec().name(), str(moved))
    assert before["data_location"] == after["data_location"] == ""  # the same anywhere
    assert before["data_fingerprint"] != after["data_fingerprint"]


def test_the_metric_protocol_trains_on_the_first_half_of_the_classes(data_root):
    data = load_dataset(fixture_spec().name(), data_root=data_root, val_split="classes")
    emoji = load_emoji(fixture_spec(), data_root)
    assert data.in_channels == 3 and data.num_train_classes == 6  # 2 held out to validate
    assert data.train[0][0].shape == (3, 16, 16)
    assert set(data.class_names[:8]) == set(emoji.class_names[:8])  # first half by SHA-1
    assert len(data.test) == 32 and (len(data.train), len(data.val)) == (24, 8)  # 2 classes
    assert data.packages == emoji.packages() and data.credits == CREDITS


def test_missing_packages_name_the_install_line(tmp_path):
    with pytest.raises(ValueError) as err:
        load_emoji(fixture_spec(), tmp_path / "empty")
    message = str(err.value)
    assert "\n" not in message and "twemoji, noto, openmoji, fxemoji are not installed" in message
    assert f"npm install --prefix {tmp_path / 'empty' / 'emoji'} --save-exact" in message


def test_a_corrupt_json_file_is_named(data_root):
    (packages_folder(data_root) / "noto" / "icons.json").write_text('{"icons": {')
    with pytest.raises(ValueError, match=r"noto/icons.json cannot be read as JSON .*reinstall"):
        load_emoji(fixture_spec(), data_root)
    (packages_folder(data_root) / "noto" / "icons.json").write_text('{"prefix": "noto"}')
    with pytest.raises(ValueError, match="is not an Iconify icon set"):
        load_emoji(fixture_spec(), data_root)


def test_sets_that_share_no_name_are_refused(data_root):
    write_set(data_root, "emojione", {"alone": {"body": body("disc-2", 0)}})
    spec = EmojiSpec(size=16, min_sets=2, sets="twemoji+emojione")
    with pytest.raises(ValueError, match="no emoji name is drawn by min_sets=2 of the sets"):
        load_emoji(spec, data_root)


def test_a_drawing_that_fails_to_render_is_named_and_counted(data_root):
    folder = packages_folder(data_root) / "noto"
    icons = json.loads((folder / "icons.json").read_text())
    icons["icons"]["disc-3"]["body"] = "<rect x='<'"  # not XML: resvg refuses the document
    (folder / "icons.json").write_text(json.dumps(icons))
    said = []
    emoji = load_emoji(fixture_spec(min_sets=4), data_root, say=said.append)
    assert any("1 drawings failed to render and are left out: noto:disc-3" in s for s in said)
    assert "disc-3" not in emoji.class_names and len(emoji.class_names) == 15  # now 3 sets < 4


def test_an_emoji_set_holds_what_it_says():
    emoji = EmojiSet(
        images=np.zeros((2, 8, 8, 3), np.uint8),
        labels=np.array([0, 0]),
        sets=np.array([1, 0]),
        class_names=("x",),
        set_names=("twemoji", "noto"),
        versions=("1", "2"),
        licences=("CC-BY-4.0", "Apache-2.0"),
    )
    assert emoji.credits() == "Emoji from the Iconify sets twemoji (CC-BY-4.0), noto (Apache-2.0)"


def test_a_run_on_emoji_records_the_sets_and_reports(data_root, tmp_path, monkeypatch):
    """From the command line: a run trains on the rendered sets, names them and their versions
    in its config.json, and the report makes the data set's table, its galleries crediting
    the sets."""
    titles = []
    drawn = galleries.grid_figure
    monkeypatch.setattr(
        galleries, "grid_figure", lambda r, t, w: titles.append(t) or drawn(r, t, w)
    )
    results = tmp_path / "results"
    args = ["--dataset", fixture_spec().name(), "--data-root", data_root, "--results", results]
    small = ["--epochs", "1", "--dims", "8", "--batch-size", "16"]
    done = cli("run", "--loss", "contrastive", *args, *small)
    assert done.exit_code == 0, done.output + done.stderr
    (run,) = [p for p in results.iterdir() if "-contrastive-" in p.name]
    config = json.loads((run / "config.json").read_text())
    assert config["val_split"] == "classes" and config["data_fingerprint"]
    assert {f"@iconify-json/{n}": SETS[n] for n in FIXTURE_SETS}.items() <= config[
        "versions"
    ].items()
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["input_size"] == "3x16x16" and 0 <= metrics["recall@1"] <= 1
    report = cli("report", "--results", results, "--out", tmp_path / "report")
    assert report.exit_code == 0, report.output + report.stderr
    assert list((tmp_path / "report").glob("emoji*.md"))
    assert titles and all(CREDITS in t for t in titles)


def test_a_run_without_the_packages_says_how_to_install_them(tmp_path):
    results = tmp_path / "results"
    args = ["--dataset", "emoji", "--data-root", tmp_path, "--results", results]
    done = cli("run", "--loss", "contrastive", *args, "--epochs", "1", "--dims", "8")
    assert done.exit_code != 0
    (line,) = done.stderr.strip().splitlines()
    assert "are not installed under" in line and "npm install --prefix" in line
    assert not list(results.glob("*/metrics.json"))


def test_cross_style_queries_the_held_out_sets_in_the_others(data_root):
    """Training never sees a held-out set; each held-out image of a test class is a query,
    searched among the other sets' images of the test classes."""
    spec = fixture_spec(min_sets=4, held_out="openmoji+noto")
    data = load_dataset(spec.name(), "cross-style", data_root=data_root, val_split="classes")
    emoji = load_emoji(spec, data_root)
    held = np.isin(emoji.sets, [1, 2])  # noto, openmoji
    test_rows, queries = data.test.rows, data.test.queries
    assert not held[data.train.rows].any() and not held[data.val.rows].any()
    assert np.array_equal(queries, held[test_rows]) and queries.sum() == 16  # 8 classes x 2
    train_classes = set(emoji.labels[np.concatenate([data.train.rows, data.val.rows])])
    assert train_classes == set(range(8)) and set(emoji.labels[test_rows]) == set(range(8, 16))
    assert len(test_rows) == 32 and len(data.train.rows) + len(data.val.rows) == 16
    assert spec.name().endswith("held_out=noto+openmoji")  # named in the order of SETS


def test_held_out_sets_are_checked_against_the_protocol_and_the_sets(data_root):
    with pytest.raises(ValueError, match="queries sets held out of training: name them"):
        load_dataset(fixture_spec().name(), "cross-style", data_root=data_root)
    with pytest.raises(ValueError, match="applies to --protocol cross-style only"):
        load_dataset(
            fixture_spec(min_sets=3, held_out="noto").name(), "metric", data_root=data_root
        )
    with pytest.raises(ValueError, match="distinct sets among those chosen"):
        EmojiSpec.parse("emoji:sets=twemoji+noto+openmoji,min_sets=2,held_out=fxemoji")
    with pytest.raises(ValueError, match=r"at least the held-out sets plus 2 \(4\)"):
        EmojiSpec.parse("emoji:sets=twemoji+noto+openmoji,min_sets=3,held_out=twemoji+noto")
    # The same images whichever sets are held out: one rendering, one cache.
    versions, renderer = {"noto": "1"}, "r"
    assert fixture_spec(held_out="noto").fingerprint(versions, renderer) == fixture_spec(
        held_out="twemoji"
    ).fingerprint(versions, renderer)


def test_a_data_set_without_styles_cannot_take_the_cross_style_protocol():
    from bench.data.splits import make_splits

    table = pd.DataFrame({"label": np.repeat(np.arange(8), 6), "split": ""})
    with pytest.raises(ValueError, match="needs a data set that names its images' styles"):
        make_splits("cross-style", table, 0.2)


def test_a_cross_style_run_reports_under_its_held_out_sets(data_root, tmp_path):
    results = tmp_path / "results"
    name = fixture_spec(min_sets=3, held_out="openmoji").name()
    args = ["--dataset", name, "--data-root", data_root, "--results", results]
    small = ["--epochs", "1", "--dims", "8", "--batch-size", "16", "--protocol", "cross-style"]
    done = cli("run", "--loss", "contrastive", *args, *small)
    assert done.exit_code == 0, done.output + done.stderr
    report = cli("report", "--results", results, "--out", tmp_path / "report")
    assert report.exit_code == 0, report.output + report.stderr
    (table,) = (tmp_path / "report").glob("emoji*held_out-openmoji*-cross-style.md")
    assert "contrastive" in table.read_text()


def test_the_pages_give_the_declared_install_line():
    """The README's and docs' npm line is the one bench/data/emoji.py declares (CI runs that)."""
    root = Path(__file__).resolve().parents[1]
    for page in (root / "README.md", root / "docs" / "protocols.md"):
        assert install_line("~/data/emoji") in page.read_text(), page
