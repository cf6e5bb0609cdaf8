"""What the retrieval galleries show: a run's test split as displayable images, loaded from its
config.json as the trainer loaded it (the saved test embeddings are in the split's order), and
the grid of framed thumbnails they are drawn in."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from bench.data.datasets import DataSplits, load_run_data
from bench.data.identity import data_identity
from bench.data.names import FEATURES_PREFIX
from bench.protocols import data_protocol
from bench.report.figures import DPI, plt, png_bytes
from bench.report.run_files import DamagedRun, PartUnavailable, saved_embeddings
from bench.runs import store
from bench.runs.config import DATA_IDENTITY, RunConfig
from bench.util.errors import first_line

THUMB = 96  # a gallery cell's image side, in pixels: a glyph or a bird readable unclicked
BORDER = 5  # its frame's width, in pixels
GREEN = (44, 160, 44)  # matplotlib's tab:green: retrieved item of the query's class
RED = (214, 39, 40)  # tab:red: of another class
QUERY_FRAME = (31, 119, 180)  # tab:blue
DISAGREE_FRAME = (255, 127, 14)  # tab:orange: one run's top-1 right, the other's wrong
CELL_PX = THUMB + 2 * BORDER + 8  # a cell's side, in pixels of the figure
CAPTION_PX = 20  # room above each image for its caption (two lines at 6 points)
TITLE_PX = 13  # per line of the figure's title (8 points)
MARGIN_PX = 6
CAPTION_CHARS = 18  # what fits in a cell's width at 6 points
ImagesOf = Callable[[int], np.ndarray]


def no_images_error(dataset: str) -> ValueError:
    return ValueError(f"{dataset} holds feature vectors, no images: no retrieval gallery")


def has_images(dataset: str) -> bool:
    return not dataset.startswith(FEATURES_PREFIX)


def run_config(run_dir: Path) -> RunConfig:
    """The RunConfig a run recorded in its config.json (a linear method's run, Sharma et al.
    2015: the split of the data it was fitted on); a one-line ValueError where the file is
    missing or unreadable."""
    path = Path(run_dir) / store.CONFIG
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DamagedRun(path, f"unreadable run configuration: {first_line(err)}") from None
    if not isinstance(record, dict):
        raise DamagedRun(path, "not a JSON object")
    record["protocol"] = data_protocol(record)  # a linear method's: the split it was fitted on
    known = {f.name for f in fields(RunConfig)}
    return RunConfig(**{k: v for k, v in record.items() if k in known})


def load_splits(cfg: RunConfig) -> DataSplits:
    """The run's data, as its training loaded it; a one-line error for feature vectors, and
    PartUnavailable where its images are not at hand or are not the run's (`check_same_data`)."""
    if not has_images(cfg.dataset):
        raise no_images_error(cfg.dataset)
    check_same_data(cfg)
    try:
        return load_run_data(cfg)
    except (OSError, ValueError) as err:
        raise not_at_hand(cfg, err) from None


def check_same_data(cfg: RunConfig) -> None:
    """PartUnavailable where the run's images are not at hand, or are not those it recorded
    (changed or moved since, or a relative folder read from another working folder): its
    galleries would show other images."""
    try:
        now = data_identity(cfg.dataset, cfg.data_root)
    except (OSError, ValueError) as err:
        raise not_at_hand(cfg, err) from None
    changed = [k for k in DATA_IDENTITY if getattr(cfg, k) and getattr(cfg, k) != now[k]]
    if changed:
        raise PartUnavailable(
            f"{cfg.dataset}: its images changed or moved since the run ({changed[0]} now "
            f"{now[changed[0]]}, the run's {getattr(cfg, changed[0])}); its galleries would show "
            "other images (run from the folder the run was started in, or restore the data)"
        )


def not_at_hand(cfg: RunConfig, err: Exception) -> PartUnavailable:
    return PartUnavailable(f"{cfg.dataset}: its images are not at hand ({first_line(err)})")


def credited(title: str, data: DataSplits) -> str:
    """A figure's title, and below it what the data's images must be credited with."""
    return f"{title}\n{data.credits}" if data.credits else title


def item_image(split: Dataset, i: int) -> np.ndarray:
    """Item i of a split as (h, w, 3) uint8: cached pixels as they are; an image tensor
    (C, H, W) in [0, 1] times 255 (any other range stretched to 0-255), one channel as grey."""
    if hasattr(split, "image"):
        return split.image(i)
    pixels = np.asarray(split[i][0], dtype=np.float32)
    if pixels.ndim != 3:
        raise ValueError(f"item {i} holds feature vectors, no images (shape {pixels.shape})")
    lo, hi = float(pixels.min()), float(pixels.max())
    if lo < 0 or hi > 1:
        pixels = (pixels - lo) / (hi - lo or 1.0)
    pixels = np.round(pixels * 255).astype(np.uint8).transpose(1, 2, 0)
    return np.repeat(pixels, 3, axis=2) if pixels.shape[2] == 1 else pixels[..., :3]


def split_images(split: Dataset) -> ImagesOf:
    """Item i of the split as displayable pixels, for the figures."""
    return lambda i: item_image(split, i)


def thumbnail(image: np.ndarray, side: int = THUMB) -> np.ndarray:
    """The image fitted into side x side (a small one enlarged, pixels kept sharp)."""
    h, w = image.shape[:2]
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    resample = Image.Resampling.NEAREST if scale > 1 else Image.Resampling.LANCZOS
    return np.asarray(Image.fromarray(image).resize(size, resample))


def framed(image: np.ndarray, colour: tuple[int, int, int], width: int = BORDER) -> np.ndarray:
    """The image in a frame of `colour`, `width` pixels wide."""
    h, w = image.shape[:2]
    out = np.empty((h + 2 * width, w + 2 * width, 3), dtype=np.uint8)
    out[:] = colour
    out[width : width + h, width : width + w] = image
    return out


def class_name(names: Sequence[str], label: int) -> str:
    """A label's class name as a caption fits it: its first synonym, at most CAPTION_CHARS."""
    name = names[label].split(",")[0] if 0 <= label < len(names) else str(label)
    # A folder name that is not UTF-8 (Latin-1 'café') comes as surrogates, which matplotlib
    # refuses: its bytes shown as what they decode to, the rest as '?'.
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return name if len(name) <= CAPTION_CHARS else name[: CAPTION_CHARS - 1] + "…"


def saved_test(run_dir: Path, split: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """A run's saved test embeddings and labels; a one-line ValueError where they are not the
    test split of the data as loaded now (another version of the data, say)."""
    saved = saved_embeddings(run_dir, store.EMBEDDINGS)
    if saved is None:
        path = Path(run_dir) / store.EMBEDDINGS
        raise FileNotFoundError(f"{path} not found; galleries need a finished run")
    emb, labels = saved
    if not np.array_equal(labels, np.asarray(split.labels)):
        raise ValueError(
            f"{Path(run_dir).name}: its saved test labels are not those of the test split "
            "as loaded now; was the data changed since the run?"
        )
    return emb, labels


@dataclass(frozen=True)
class Cell:
    """A grid cell: a framed thumbnail and the caption above it."""

    image: np.ndarray  # framed thumbnail, (h, w, 3) uint8
    caption: str
    colour: str = "black"


def cell(
    image: np.ndarray, frame: tuple[int, int, int], caption: str, colour: str = "black"
) -> Cell:
    """An image as a grid cell: thumbnail, frame of colour `frame`, caption above."""
    return Cell(framed(thumbnail(image), frame), caption, colour)


def cell_origins(widths: Sequence[float], rows: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel x of each column's left edge, and y of each row's top (caption included)."""
    xs = np.concatenate([[0], np.cumsum(np.round(np.asarray(widths) * CELL_PX))]).astype(int)
    return xs + MARGIN_PX, np.arange(rows + 1) * (CAPTION_PX + CELL_PX)


def grid_figure(rows: list[list[Cell | None]], title: str, widths: Sequence[float]) -> bytes:
    """PNG: a grid of framed thumbnails with a caption above each, drawn as one image at one
    figure pixel per image pixel (fast, and the frames keep their exact colours); None leaves a
    cell (or a spacer column) empty."""
    xs, ys = cell_origins(widths, len(rows))
    canvas = np.full((ys[-1], xs[-1] + MARGIN_PX, 3), 255, dtype=np.uint8)
    # Each cell's framed thumbnail centred below its caption's room: (cell, its top, column).
    placed = [
        (item, ys[r] + CAPTION_PX + (CELL_PX - item.image.shape[0]) // 2, c)
        for r, row in enumerate(rows)
        for c, item in enumerate(row)
        if item is not None
    ]
    for item, y, c in placed:
        h, w = item.image.shape[:2]
        left = xs[c] + (xs[c + 1] - xs[c] - w) // 2
        canvas[y : y + h, left : left + w] = item.image
    height, width = canvas.shape[:2]
    lines = [part for line in title.splitlines() for part in textwrap.wrap(line, width // 6)]
    top = TITLE_PX * (len(lines) + 1)
    fig = plt.figure(figsize=(width / DPI, (height + top) / DPI))
    ax = fig.add_axes((0, 0, 1, height / (height + top)))
    ax.imshow(canvas, interpolation="none")
    ax.axis("off")
    for item, y, c in placed:
        ax.text(
            (xs[c] + xs[c + 1]) / 2,  # the column's centre
            y - 2,
            item.caption,
            ha="center",
            va="bottom",
            fontsize=6,
            color=item.colour,
            linespacing=1.1,
        )
    fig.text(0.5, 1 - 4 / (height + top), "\n".join(lines), ha="center", va="top", fontsize=8)
    return png_bytes(fig)


def answer_cells(
    images_of: ImagesOf,
    labels: np.ndarray,
    names: Sequence[str],
    found: np.ndarray,
    right: np.ndarray,
) -> list[Cell]:
    """Retrieved items as cells, framed and captioned green where right, red where wrong."""
    return [
        cell(
            images_of(j),
            GREEN if ok else RED,
            class_name(names, int(labels[j])),
            "tab:green" if ok else "tab:red",
        )
        for j, ok in zip(found, right, strict=True)
    ]


def query_cell(
    images_of: ImagesOf,
    labels: np.ndarray,
    names: Sequence[str],
    q: int,
    note: str = "",
    frame: tuple[int, int, int] = QUERY_FRAME,
) -> Cell:
    """The query's cell: its class, and a note below that where one is given."""
    caption = f"query: {class_name(names, int(labels[q]))}" + (f"\n{note}" if note else "")
    return cell(images_of(q), frame, caption)


def pair_cells(
    images_of: ImagesOf, labels: np.ndarray, names: Sequence[str], pair: np.ndarray, distance: float
) -> list[Cell]:
    """A wrongly decided pair's two cells, red-framed, the second with the pair's distance."""
    i, j = int(pair[0]), int(pair[1])
    return [
        cell(images_of(i), RED, class_name(names, int(labels[i]))),
        cell(images_of(j), RED, f"{class_name(names, int(labels[j]))}, d={distance:.3g}"),
    ]
