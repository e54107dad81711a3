"""Image corpora for the vit family: loaded, split, fingerprinted, batched.

The counterpart of pipeline.data's token store for images (sources: pipeline.vision.sources).
An ImageData carries what the trainer, the sweep driver and the ledger read from a TokenData
(train/val arrays whose lengths count the unit of data, vocab_size, fingerprints, bytes), so
a vit run goes through the same planner, repetition check, trial and ledger as a text run.

Split: by class, deterministic, the same for every run: each class's images are permuted by
a fixed stream and the first round(val_fraction * count) (at least one) go to validation.
Batches: a pure function of (seed, step), images drawn without replacement in a new
permutation each epoch (a resumed run sees the same batches); validation is the whole val
split in its fixed order.

The digits (scikit-learn's copy of the UCI handwritten digits: 1,797 8x8 grey images of 10
classes) are small: a study on them is data-constrained, and its sweep must say how many
epochs it allows (data.max_epochs).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from pipeline.data.settings import DataError
from pipeline.vision.sources import ImageSource, parse_image_source

if TYPE_CHECKING:
    import torch

    from pipeline.vocab.spec import DataSpec

SPLIT_RULE = "per-class permutation rng([0x5EED, class]); val = first max(1, round(f * n))"
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}


@dataclass(frozen=True, eq=False)
class ImageData:
    """An image corpus split into train and validation, (N, C, H, W): float32 in [0, 1] (the
    digits), or uint8 pixels (folders and Hugging Face sets: a quarter of the memory; batches
    are scaled to [0, 1] when made)."""

    train: np.ndarray
    """Train images; len() is the number of images (the unit of D)."""
    train_labels: np.ndarray
    val: np.ndarray
    val_labels: np.ndarray
    vocab_size: int
    """Number of classes (the classifier's outputs)."""
    classes: tuple[str, ...]
    fingerprint: str
    """sha256 of the source, the split rule and every image and label."""
    corpus_fingerprint: str
    """sha256 of the images and labels before the split."""
    source: str
    note: str
    """What the data is, in a line (size, classes, and whether it is data-constrained)."""
    cache_path: str = ""
    """Never cached on disk (the arrays are small); pickled by value to Ray workers."""

    @property
    def image_size(self) -> int:
        return int(self.train.shape[-1])

    @property
    def channels(self) -> int:
        return int(self.train.shape[1])

    @property
    def train_bytes(self) -> int:
        return int(self.train.nbytes)

    @property
    def val_bytes(self) -> int:
        return int(self.val.nbytes)


def load_images(d: DataSpec) -> ImageData:
    """The image corpus a DataSpec names (d.corpus "images:..."), split by d.val_fraction."""
    try:
        source = parse_image_source(d.corpus)
    except ValueError as e:
        raise DataError(str(e)) from None
    if not 0.0 < d.val_fraction < 1.0:
        raise DataError(f"val_fraction must be in (0, 1), got {d.val_fraction!r}")
    if source.kind == "digits":
        if d.image_size not in (None, 8):
            raise DataError(f"images:digits are 8x8 and not resized; image_size "
                            f"{d.image_size} is not theirs")
        images, labels, classes = _digits()
    elif d.image_size is None:
        raise DataError(f"{d.corpus}: image_size is required (every image is resized to it)")
    elif source.kind == "folder":
        images, labels, classes = _folder(Path(source.location), d.image_size)
    else:
        images, labels, classes = _hugging_face(source, d.image_size)
    return _split(images, labels, classes, d.corpus, d.val_fraction)


def _digits() -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """scikit-learn's digits, shipped inside the package (no network): values 0..16."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise DataError("images:digits needs scikit-learn (pip install scikit-learn)") from None
    bunch = load_digits()
    images = (bunch.data.reshape(-1, 1, 8, 8) / 16.0).astype(np.float32)
    return images, bunch.target.astype(np.int64), tuple(str(c) for c in bunch.target_names)


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("image folders and Hugging Face image datasets need Pillow "
                        "(pip install pillow)") from None
    return Image


def _to_array(image, size: int) -> np.ndarray:
    """One PIL image as uint8 (3, size, size) pixels (RGB, bilinear resize)."""
    Image = _pil()
    rgb = image.convert("RGB").resize((size, size), Image.BILINEAR)
    return np.ascontiguousarray(np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1))


def _pixels(images: np.ndarray):
    """A batch as a float32 tensor in [0, 1] (uint8 pixels scaled by 1/255)."""
    import torch

    batch = torch.from_numpy(np.ascontiguousarray(images))
    return batch.float().div_(255.0) if batch.dtype == torch.uint8 else batch


def _folder(root: Path, size: int) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """root/<class>/<image files>, classes in sorted order."""
    Image = _pil()
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist")
    classes = tuple(sorted(p.name for p in root.iterdir() if p.is_dir()))
    if len(classes) < 2:
        raise DataError(f"image folder {root} has {len(classes)} class folder(s); a classifier "
                        "needs at least 2 (root/<class>/<image>)")
    images, labels = [], []
    for label, name in enumerate(classes):
        files = sorted(p for p in (root / name).iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
        # An image's name on a FIFO, device or socket would block or never end the read (as
        # a text corpus's: pipeline/data/sources.py local_files): refused by name, not skipped.
        if odd := next((f for f in files if not f.is_file()), None):
            raise DataError(f"image folder entry {str(odd)!r} is not a regular file "
                            "(a FIFO, device, socket or folder): an image folder holds files")
        if not files:
            raise DataError(f"image folder {root / name} holds no image "
                            f"({', '.join(sorted(_IMAGE_SUFFIXES))})")
        for f in files:
            try:
                with Image.open(f) as im:
                    images.append(_to_array(im, size))
            except (OSError, ValueError) as e:
                raise DataError(f"{f}: not a readable image ({e})") from None
            labels.append(label)
    return np.stack(images), np.asarray(labels, dtype=np.int64), classes


def _hugging_face(source: ImageSource, size: int
                  ) -> tuple[np.ndarray, np.ndarray, tuple[str, ...]]:
    """A Hugging Face image dataset: its "img" or "image" column and its "label" column."""
    try:
        import datasets
    except ImportError:
        raise DataError("images:hf: needs the datasets library (pip install "
                        "'scaling-pipeline[hf]')") from None
    try:
        ds = datasets.load_dataset(source.location, split=source.split)
    except Exception as e:  # the library raises many types (network, name, split)
        raise DataError(f"images:hf:{source.location}:{source.split}: could not be loaded "
                        f"({type(e).__name__}: {e})") from None
    column = next((c for c in ("img", "image") if c in ds.column_names), None)
    if column is None or "label" not in ds.column_names:
        raise DataError(f"images:hf:{source.location}: expected an 'img' or 'image' column and "
                        f"a 'label' column, found {ds.column_names}")
    feature = ds.features["label"]
    n = int(getattr(feature, "num_classes", 0)) or int(max(ds["label"])) + 1
    names = tuple(getattr(feature, "names", None) or (str(i) for i in range(n)))
    images = np.stack([_to_array(row[column], size) for row in ds])
    return images, np.asarray(ds["label"], dtype=np.int64), names


def _sha(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.tobytes() if isinstance(part, np.ndarray) else
                 json.dumps(part, sort_keys=True).encode())
    return h.hexdigest()


def _split(images: np.ndarray, labels: np.ndarray, classes: tuple[str, ...], corpus: str,
           val_fraction: float) -> ImageData:
    val_idx = []
    for c in range(len(classes)):
        members = np.flatnonzero(labels == c)
        if len(members) < 2:
            raise DataError(f"{corpus}: class {classes[c]!r} has {len(members)} image(s); "
                            "each class needs at least 2 (one for training, one held out)")
        order = np.random.default_rng([0x5EED, c]).permutation(members)
        val_idx.append(order[:max(1, min(len(members) - 1, round(val_fraction * len(members))))])
    is_val = np.zeros(len(labels), dtype=bool)
    is_val[np.concatenate(val_idx)] = True
    corpus_fp = _sha(images, labels)
    note = (f"{len(labels):,} images of {len(classes)} classes, "
            f"{images.shape[2]}x{images.shape[3]}x{images.shape[1]}")
    return ImageData(
        train=images[~is_val], train_labels=labels[~is_val], val=images[is_val],
        val_labels=labels[is_val], vocab_size=len(classes), classes=classes,
        fingerprint=_sha({"corpus": corpus, "split": SPLIT_RULE, "val_fraction": val_fraction},
                         corpus_fp),
        corpus_fingerprint=corpus_fp, source=corpus, note=note)


# --- batches ----------------------------------------------------------------------------------


def _permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng([seed, epoch, 0x1A6E]).permutation(n)


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Train-split indices of step `step`: epoch e takes the images in the order of a
    permutation seeded by (seed, e); batch k holds positions k*B .. k*B+B-1 of that sequence,
    so every image is used once before any is used twice."""
    if n < 1 or batch_size < 1 or step < 0:
        raise DataError(f"need n >= 1, batch_size >= 1, step >= 0; got {n}, {batch_size}, "
                        f"{step}")
    index = np.arange(step * batch_size, (step + 1) * batch_size, dtype=np.int64)
    epochs, pos = np.divmod(index, n)
    out = np.empty(batch_size, dtype=np.int64)
    for e in np.unique(epochs):
        at = epochs == e
        out[at] = _permutation(n, seed, int(e))[pos[at]]
    return out


def image_batch(data: ImageData, batch_size: int, seed: int, step: int,
                device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(images (B, C, H, W) float32, labels (B,) int64) of training step `step`."""
    import torch

    idx = batch_indices(len(data.train), batch_size, seed, step)
    return (_pixels(data.train[idx]).to(device),
            torch.from_numpy(data.train_labels[idx]).to(device))


def val_batches(data: ImageData, batch_size: int, device: str | torch.device = "cpu"
                ) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The whole validation split in its fixed order, batch_size images at a time (the last
    batch may be smaller): every run is scored on the same images."""
    import torch

    return [(_pixels(data.val[i:i + batch_size]).to(device),
             torch.from_numpy(data.val_labels[i:i + batch_size]).to(device))
            for i in range(0, len(data.val), batch_size)]


def images_seen(n: int, batch_size: int, steps: int) -> int:
    """Distinct train images that `steps` batches cover (epochs are whole permutations)."""
    return min(n, steps * batch_size)
