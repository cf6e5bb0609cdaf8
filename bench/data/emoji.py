"""Emoji: real, openly licensed images of many classes. A class is one emoji, by its Iconify
name; its images are that emoji as each of up to twelve artists' sets draws it, from the sets
published in Iconify's JSON format on the npm registry (docs/protocols.md, "emoji", installs
them and credits each set). The same concept by different artists, a few images a class, as in
Stanford Online Products.

`emoji` is the default set; `emoji:size=48,min_sets=10,sets=twemoji+noto+openmoji,classes=300`
is another (any of size, min_sets, sets, classes). A class is a name that at least `min_sets` of
the chosen sets draw; its images are in the order of `SETS`, one a set. An alias is resolved as
Iconify defines it (its parent's body, the flips and quarter turns of the chain combined), and a
name that some set declares a plain alias of another (an old name for the same drawing) is not a
class of its own, so no drawing is two classes. The classes are ordered by the SHA-1 of their
names, a fixed shuffle that does not depend on which sets are installed: the metric protocol
trains on the first half of that order and tests on the rest; `classes=N` keeps the first N.

Nothing is read at run time but the installed packages under the data root (`~/data/emoji`,
`--data-root` or $NNGK_DATA); the images are rendered once into the cache
(`bench.data.emoji_render`), never into the data root.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.data.names import EMOJI_NAME
from bench.data.set_params import parse_set_params

NAME = EMOJI_NAME
VERSION = 1  # bump when the rendered images change, so that no cache of older ones is read
SCOPE = "@iconify-json"
# The sets, in the order a class's images take, at the versions the harness was measured with.
SETS = {
    "twemoji": "1.2.5",
    "noto": "1.2.9",
    "noto-v1": "1.2.5",
    "openmoji": "1.2.29",
    "fluent-emoji": "1.2.7",
    "fluent-emoji-flat": "1.2.6",
    "fluent-emoji-high-contrast": "1.2.6",
    "fxemoji": "1.2.2",
    "emojione": "1.2.3",
    "emojione-v1": "1.2.3",
    "emojione-monotone": "1.2.1",
    "streamline-emojis": "1.2.4",
}
ALL_SETS = "all"
# Its test split has 519 classes of 8-12 images (CUB-200-2011's scale of a class): CUB's Ks.
RECALL_KS = (1, 2, 4, 8)
ALIAS_DEPTH = 24  # the longest alias chain followed (Iconify's own limit)
SIZES = (8, 256)  # pixels a side, inclusive


def install_line(folder: Path | str = "~/data/emoji") -> str:
    """The one command that installs every set, pinned, into `folder`."""
    packages = " ".join(f"{SCOPE}/{name}@{version}" for name, version in SETS.items())
    return f"npm install --prefix {folder} --save-exact {packages}"


@dataclass(frozen=True)
class EmojiSpec:
    """The parameters of an emoji set: the images' side in pixels, how many of the chosen
    sets must draw a name for it to be a class, which sets ('all', or names joined by '+'),
    how many classes to keep (0: all), and the sets held out of training whose images are the
    cross-style protocol's queries (names joined by '+'; '' under any other protocol)."""

    size: int = 32
    min_sets: int = 8
    sets: str = ALL_SETS
    classes: int = 0
    held_out: str = ""

    @classmethod
    def parse(cls, name: str) -> EmojiSpec:
        """'emoji' or 'emoji:size=48,sets=twemoji+noto,min_sets=2'; a one-line ValueError for
        anything else."""
        example = "emoji:size=48,min_sets=10,sets=twemoji+noto+openmoji"
        return parse_set_params(cls, name, NAME, example).checked()

    def set_names(self) -> tuple[str, ...]:
        """The chosen sets, in the order of `SETS`."""
        if self.sets == ALL_SETS:
            return tuple(SETS)
        chosen = listed(self.sets)
        return tuple(name for name in SETS if name in chosen)

    def held_out_names(self) -> tuple[str, ...]:
        """The held-out sets, in the order of `SETS`."""
        held = listed(self.held_out)
        return tuple(name for name in SETS if name in held)

    def checked(self) -> EmojiSpec:
        chosen = [] if self.sets == ALL_SETS else listed(self.sets)
        unknown = [name for name in chosen if name not in SETS]
        if unknown or len(set(chosen)) < len(chosen):
            raise ValueError(
                f"emoji sets must be distinct names among {', '.join(SETS)}, joined by '+' "
                f"(or 'all'); got sets={self.sets}"
            )
        sets = len(self.set_names())
        if not 2 <= self.min_sets <= sets:
            raise ValueError(
                f"emoji needs 2 <= min_sets <= the number of sets chosen ({sets}); got "
                f"min_sets={self.min_sets}: a class needs two images, one a set"
            )
        self.check_held_out()
        if not SIZES[0] <= self.size <= SIZES[1] or not (self.classes == 0 or self.classes >= 4):
            raise ValueError(
                f"emoji needs {SIZES[0]} <= size <= {SIZES[1]} and classes 0 (all) or >= 4; got "
                f"{self.name()}"
            )
        return self

    def check_held_out(self) -> None:
        held = listed(self.held_out)
        chosen = self.set_names()
        if len(set(held)) < len(held) or not set(held) <= set(chosen):
            raise ValueError(
                f"emoji held_out must be distinct sets among those chosen ({', '.join(chosen)}), "
                f"joined by '+'; got held_out={self.held_out}"
            )
        need = len(held) + 2
        if held and self.min_sets < need:
            # A class drawn by min_sets sets keeps min_sets - len(held) images in the sets
            # trained on: with one, it has no positive pair to train on (a class-balanced batch
            # would pair the image with itself) and validation none to rank.
            remedy = (
                f"give min_sets={need} or more"
                if need <= len(chosen)
                else f"choose {need} sets or more (sets=) with min_sets={need}"
            )
            raise ValueError(
                f"emoji needs min_sets of at least the held-out sets plus 2 ({need}), so that "
                f"every class keeps two images in the sets trained on (one image gives no "
                f"positive pair to train or validate on); got min_sets={self.min_sets}, "
                f"held_out={self.held_out}: {remedy}, or hold out fewer sets"
            )

    def name(self) -> str:
        """The canonical data set name: 'emoji', plus the parameters that differ from it
        (the sets in the order of `SETS`)."""
        given = {
            **asdict(self),
            "sets": "+".join(self.set_names()),
            "held_out": "+".join(self.held_out_names()),
        }
        if given["sets"] == "+".join(SETS):
            given["sets"] = ALL_SETS
        default = asdict(EmojiSpec())
        args = [f"{k}={v}" for k, v in given.items() if v != default[k]]
        return NAME + (":" + ",".join(args) if args else "")

    def fingerprint(self, versions: dict[str, str], renderer: str) -> str:
        """Names the rendered images: these parameters (but the held-out sets, which choose
        queries among the same images), the sets' versions, the renderer's."""
        record = {**asdict(self), "versions": versions, "renderer": renderer, "version": VERSION}
        del record["held_out"]
        return hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:16]


def listed(text: str) -> list[str]:
    """The set names a parameter joins by '+' ('' lists none)."""
    return text.split("+") if text else []


def emoji_folder(data_root: Path) -> Path:
    """The folder the sets are installed into under a data root (`install_line`'s prefix)."""
    return Path(data_root).expanduser() / NAME


def packages_folder(data_root: Path) -> Path:
    """Where npm puts the sets under a data root (the prefix's node_modules)."""
    return emoji_folder(data_root) / "node_modules" / SCOPE


def missing_error(data_root: Path, missing: list[str]) -> ValueError:
    folder = emoji_folder(data_root)
    return ValueError(
        f"the emoji sets {', '.join(missing)} are not installed under {folder}; install them "
        f"(about 180 MB, a few seconds) with: {install_line(folder)}"
    )


def read_json(path: Path, data_root: Path) -> dict:
    """A package's JSON file, or a one-line ValueError naming it and how to mend it (the
    install line for the data root it lies under)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(
            f"{path} cannot be read as JSON ({' '.join(str(err).split())}); reinstall the emoji "
            f"sets with: {install_line(emoji_folder(data_root))}"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds no JSON object; reinstall the emoji sets")
    return data


def set_versions(data_root: Path, names: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each set (its package.json); the missing ones an error."""
    folder = packages_folder(data_root)
    missing = [name for name in names if not (folder / name / "package.json").is_file()]
    if missing:
        raise missing_error(data_root, missing)
    packages = {name: read_json(folder / name / "package.json", data_root) for name in names}
    return {name: str(package.get("version", "")) for name, package in packages.items()}


@dataclass(frozen=True)
class Icon:
    """A drawing resolved as Iconify does: its SVG body in its view box, flipped, then turned
    clockwise by `rotate` quarter turns."""

    body: str
    left: float
    top: float
    width: float
    height: float
    h_flip: bool = False
    v_flip: bool = False
    rotate: int = 0


@dataclass(frozen=True)
class IconSet:
    """One installed set: its icons and aliases (Iconify JSON), version, title and licence."""

    name: str
    version: str
    title: str
    licence: str
    author: str
    icons: dict = field(repr=False)
    aliases: dict = field(repr=False)
    width: float = 16  # Iconify's default box
    height: float = 16

    @functools.cached_property
    def names(self) -> frozenset[str]:
        """Every name it draws, its icons' and its aliases'."""
        return frozenset(self.icons) | frozenset(self.aliases)

    def renamed(self) -> set[str]:
        """The names this set declares plain aliases (the same drawing under an older name)."""
        return {name for name, alias in self.aliases.items() if set(alias) == {"parent"}}

    def resolve(self, name: str) -> Icon | None:
        """The drawing a name stands for, following its alias chain; None for a chain that
        breaks, loops or has no body."""
        chain = []
        while name in self.aliases and len(chain) < ALIAS_DEPTH:
            chain.append(self.aliases[name])
            name = self.aliases[name].get("parent", "")
        icon = self.icons.get(name)
        if not isinstance(icon, dict) or not isinstance(icon.get("body"), str):
            return None
        # The box: the nearest alias's own, else the icon's, else the set's.
        box = {"left": 0, "top": 0, "width": self.width, "height": self.height, **icon}
        for alias in reversed(chain):
            box.update({k: alias[k] for k in ("left", "top", "width", "height") if k in alias})
        turns = [box.get("rotate", 0), *(a.get("rotate", 0) for a in chain)]
        h_flips = [box.get("hFlip", False), *(a.get("hFlip", False) for a in chain)]
        v_flips = [box.get("vFlip", False), *(a.get("vFlip", False) for a in chain)]
        return Icon(
            body=icon["body"],
            left=float(box["left"]),
            top=float(box["top"]),
            width=float(box["width"]),
            height=float(box["height"]),
            h_flip=sum(map(bool, h_flips)) % 2 == 1,
            v_flip=sum(map(bool, v_flips)) % 2 == 1,
            rotate=sum(int(t) for t in turns) % 4,
        )


def read_set(data_root: Path, name: str) -> IconSet:
    """An installed set, or a one-line ValueError (missing, or not Iconify JSON)."""
    folder = packages_folder(data_root) / name
    if not (folder / "icons.json").is_file():
        raise missing_error(data_root, [name])
    data = read_json(folder / "icons.json", data_root)
    icons, aliases = data.get("icons"), data.get("aliases", {})
    if not isinstance(icons, dict) or not isinstance(aliases, dict):
        raise ValueError(
            f"{folder / 'icons.json'} is not an Iconify icon set (no 'icons' object); reinstall "
            f"the emoji sets with: {install_line(emoji_folder(data_root))}"
        )
    check_bodies(folder / "icons.json", icons, data_root)
    info, package = (
        read_json(folder / name, data_root) if (folder / name).is_file() else {}
        for name in ("info.json", "package.json")
    )
    licence = info.get("license", {}) if isinstance(info.get("license"), dict) else {}
    author = info.get("author", {}) if isinstance(info.get("author"), dict) else {}
    return IconSet(
        name=name,
        version=str(package.get("version", "")),
        title=str(info.get("name", name)),
        licence=str(licence.get("spdx") or package.get("license", "")),
        author=str(author.get("name", "")),
        icons=icons,
        aliases={k: v for k, v in aliases.items() if isinstance(v, dict)},
        width=float(data.get("width", 16)),
        height=float(data.get("height", 16)),
    )


def check_bodies(path: Path, icons: dict, data_root: Path) -> None:
    """A one-line ValueError where icons have no SVG body (a string 'body'): a damaged install,
    which would otherwise lose those drawings silently, and with them classes."""
    bad = sum(not isinstance(i, dict) or not isinstance(i.get("body"), str) for i in icons.values())
    if bad:
        raise ValueError(
            f"{path}: {bad} of its {len(icons)} icons have no SVG body (a string 'body'), a "
            f"damaged install; reinstall the emoji sets with: "
            f"{install_line(emoji_folder(data_root))}"
        )


def icons_digest(data_root: Path, names: tuple[str, ...]) -> str:
    """A digest of the sets' icons.json files: names the rendered images in the cache (not the
    run, whose identity is the sets' versions, the same on every machine), so that an install
    changed under the same versions is rendered anew, never served the old images."""
    digest = hashlib.sha1()
    for name in names:
        path = packages_folder(data_root) / name / "icons.json"
        if not path.is_file():
            raise missing_error(data_root, [name])
        with open(path, "rb") as f:
            digest.update(hashlib.file_digest(f, "sha1").digest())
    return digest.hexdigest()[:16]


def name_order(name: str) -> str:
    """A class's place: the SHA-1 of its name (the same whichever sets are installed)."""
    return hashlib.sha1(name.encode()).hexdigest()


def emoji_classes(sets: list[IconSet], min_sets: int) -> list[tuple[str, list[tuple[int, Icon]]]]:
    """(name, [(set position, drawing), ...]) of every name at least `min_sets` of the sets
    draw, in the order of `name_order`; a set's name whose alias chain breaks is not drawn."""
    renamed = set().union(*(s.renamed() for s in sets))
    names = set().union(*(s.names for s in sets)) - renamed
    classes = []
    for name in sorted(names, key=name_order):
        drawn = [(i, s.resolve(name)) for i, s in enumerate(sets) if name in s.names]
        drawn = [(i, icon) for i, icon in drawn if icon is not None]
        if len(drawn) >= min_sets:
            classes.append((name, drawn))
    return classes


if __name__ == "__main__":  # `python -m bench.data.emoji FOLDER`: the install line (.ci/run)
    import sys

    print(install_line(sys.argv[1] if len(sys.argv) > 1 else "~/data/emoji"))
