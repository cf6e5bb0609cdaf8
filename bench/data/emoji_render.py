"""The emoji sets rendered once into the cache: every class's drawings as uint8 RGB images on a
white background (resvg, through the resvg-py wheel), with each image's set kept beside it, so
that each image keeps its licence. Rendered with a progress bar, written atomically, read back
memory-mapped; a drawing that fails to render is left out, named and counted."""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm import tqdm

from bench.data.emoji import (
    NAME,
    SCOPE,
    EmojiSpec,
    Icon,
    IconSet,
    emoji_classes,
    icons_digest,
    read_set,
    set_versions,
)
from bench.data.glyphs import mapped_member, whole_file
from bench.data.image_cache import cache_folder
from bench.util.progress import log

BACKGROUND = "#ffffff"
SHOWN_FAILURES = 5  # failed drawings named in the message, the rest counted


def renderer() -> str:
    """The renderer and its version: part of the images' identity."""
    import resvg_py

    return f"resvg-py {resvg_py.__version__} (resvg {resvg_py.__resvg_version__})"


def emoji_fingerprint(spec: EmojiSpec, data_root: Path) -> str:
    """Names a set's rendered images: its parameters, its sets' installed versions (a missing
    set a one-line error), the renderer's version."""
    return spec.fingerprint(set_versions(data_root, spec.set_names()), renderer())


def icon_svg(icon: Icon) -> str:
    """The drawing as a whole SVG document, its view box made square about its centre."""
    side = max(icon.width, icon.height)
    left = icon.left - (side - icon.width) / 2
    top = icon.top - (side - icon.height) / 2
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
        f'viewBox="{left:g} {top:g} {side:g} {side:g}">{icon.body}</svg>'
    )


def render_icon(icon: Icon, size: int) -> np.ndarray:
    """(size, size, 3) uint8: the drawing on white, flipped, then turned clockwise (Iconify's
    order); a ValueError where resvg cannot render it."""
    import resvg_py

    png = resvg_py.svg_to_bytes(
        svg_string=icon_svg(icon), width=size, height=size, background=BACKGROUND
    )
    with Image.open(io.BytesIO(bytes(png))) as image:
        pixels = np.asarray(image.convert("RGB"))
    if pixels.shape != (size, size, 3):
        raise ValueError(f"rendered {pixels.shape[1]}x{pixels.shape[0]}, not {size}x{size}")
    if icon.h_flip:
        pixels = pixels[:, ::-1]
    if icon.v_flip:
        pixels = pixels[::-1]
    return np.ascontiguousarray(np.rot90(pixels, k=-icon.rotate))


@dataclass(frozen=True)
class EmojiSet:
    """The rendered images (N, size, size, 3) uint8, their labels and the position of each
    one's set among `set_names`; the classes' names by label; each set's version and licence."""

    images: np.ndarray
    labels: np.ndarray
    sets: np.ndarray
    class_names: tuple[str, ...]
    set_names: tuple[str, ...]
    versions: tuple[str, ...]
    licences: tuple[str, ...]

    def packages(self) -> dict[str, str]:
        """Each set's npm package and its version."""
        return {f"{SCOPE}/{name}": v for name, v in zip(self.set_names, self.versions, strict=True)}

    def credits(self) -> str:
        """The sets its images come from and their licences, as a figure that shows them
        credits them (docs/protocols.md, "emoji", credits each set in full)."""
        used = sorted(set(self.sets.tolist()))
        sets = ", ".join(f"{self.set_names[i]} ({self.licences[i]})" for i in used)
        return f"Emoji from the Iconify sets {sets}"


def render_sets(spec: EmojiSpec, sets: list[IconSet], say=log.info) -> EmojiSet:
    """Every class's drawings rendered, in memory, until `spec.classes` classes (0: all); a
    drawing resvg cannot render is left out, named and counted, and then a class that fewer
    than `min_sets` sets still draw."""
    classes = emoji_classes(sets, spec.min_sets)
    if not classes:
        raise ValueError(
            f"no emoji name is drawn by min_sets={spec.min_sets} of the sets "
            f"{', '.join(s.name for s in sets)}; give a smaller min_sets or more sets"
        )
    wanted = classes[: spec.classes] if spec.classes else classes
    images = np.empty((sum(len(d) for _, d in classes), spec.size, spec.size, 3), np.uint8)
    labels, positions, names, failed = [], [], [], []
    total = sum(len(drawn) for _, drawn in wanted)
    with tqdm(total=total, desc=f"rendering {spec.name()}", unit="images", mininterval=1.0) as bar:
        for name, drawn in classes:
            rendered = []
            for position, icon in drawn:
                try:
                    rendered.append((position, render_icon(icon, spec.size)))
                except ValueError as err:
                    failed.append(f"{sets[position].name}:{name} ({' '.join(str(err).split())})")
                bar.update()
            if len(rendered) < spec.min_sets:
                continue
            for position, pixels in rendered:
                images[len(labels)] = pixels
                labels.append(len(names))
                positions.append(position)
            names.append(name)
            if len(names) == spec.classes:
                break
    say_failures(spec, failed, say)
    if len(names) < spec.classes:  # never a silently smaller set than asked for
        say(f"{spec.name()}: only {len(names)} emoji are drawn by {spec.min_sets} of these sets")
    return EmojiSet(
        images=images[: len(labels)],
        labels=np.asarray(labels, np.int64),
        sets=np.asarray(positions, np.int64),
        class_names=tuple(names),
        set_names=tuple(s.name for s in sets),
        versions=tuple(s.version for s in sets),
        licences=tuple(s.licence for s in sets),
    )


def say_failures(spec: EmojiSpec, failed: list[str], say) -> None:
    if not failed:
        return
    shown = ", ".join(failed[:SHOWN_FAILURES])
    more = f" and {len(failed) - SHOWN_FAILURES} more" if len(failed) > SHOWN_FAILURES else ""
    say(f"{spec.name()}: {len(failed)} drawings failed to render and are left out: {shown}{more}")


def write_cache(path: Path, emoji: EmojiSet) -> None:
    """The rendered set as one .npz (uncompressed, so its images can be memory-mapped), written
    whole or not at all (`whole_file`)."""
    meta = {
        "class_names": emoji.class_names,
        "set_names": emoji.set_names,
        "versions": emoji.versions,
        "licences": emoji.licences,
    }
    with whole_file(path, NAME) as f:
        np.savez(
            f,
            images=emoji.images,
            labels=emoji.labels,
            sets=emoji.sets,
            meta=np.array(json.dumps(meta)),
        )


def read_cache(path: Path, size: int) -> EmojiSet | str:
    """The cached set, its images memory-mapped (read-only), or what is wrong with the file."""
    if not path.is_file():
        return "missing"
    try:
        images = mapped_member(path, "images.npy")
        with np.load(path, allow_pickle=False) as saved:
            labels, sets, meta = saved["labels"], saved["sets"], json.loads(str(saved["meta"]))
        emoji = EmojiSet(
            images=images,
            labels=labels,
            sets=sets,
            **{
                key: tuple(meta[key])
                for key in ("class_names", "set_names", "versions", "licences")
            },
        )
    except (OSError, ValueError, KeyError, EOFError, TypeError, zipfile.BadZipFile) as err:
        return f"damaged: {' '.join(str(err).split()) or type(err).__name__}"
    n = len(images)
    if images.shape[1:] != (size, size, 3) or len(labels) != n or len(sets) != n:
        return f"damaged: images of shape {images.shape}, {len(labels)} labels"
    if n and labels.max() >= len(emoji.class_names):
        return "damaged: labels past its classes"
    return emoji


def load_emoji(spec: EmojiSpec, data_root: Path, say=log.info) -> EmojiSet:
    """The rendered emoji set (memory-mapped from the cache), rendered into the cache first
    where it is missing or damaged; in memory where the cache cannot be written."""
    # Keyed also on the icons' digest: a reinstall of the same versions after a damaged one
    # renders anew (bad-inputs #13), while the run's identity stays the versions'.
    fingerprint = emoji_fingerprint(spec, data_root)  # first: it names every set missing
    digest = icons_digest(data_root, spec.set_names())
    path = cache_folder() / f"{NAME}-{fingerprint}-{digest}.npz"
    cached = read_cache(path, spec.size)
    if not isinstance(cached, str):
        return cached
    sets = [read_set(data_root, name) for name in spec.set_names()]
    why = "" if cached == "missing" else f" (the cached file was {cached})"
    say(f"rendering {spec.name()} from {len(sets)} sets into {path}{why}")
    emoji = render_sets(spec, sets, say)
    try:
        write_cache(path, emoji)
    except OSError as err:
        say(f"could not cache {spec.name()} in {path} ({err}); it is rendered again next time")
        return emoji
    cached = read_cache(path, spec.size)
    if isinstance(cached, str):
        raise RuntimeError(f"{path}: the emoji cache just written reads back {cached}")
    return cached
