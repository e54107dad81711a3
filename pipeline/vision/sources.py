"""Image corpora named in a data section: what they are, and their geometry, without reading
them. Pure Python: the sweep schema and the planner use it before any data is loaded.

  images:digits                 scikit-learn's handwritten digits (1,797 8x8 grey images,
                                10 classes; shipped inside the installed package: offline)
  images:folder:<path>          a local folder, one sub-folder per class (root/<class>/*.png)
  images:hf:<dataset>[:<split>] a Hugging Face image dataset (split defaults to train)

Folder and Hugging Face images are converted to RGB and resized to data.image_size, so their
geometry is (image_size, 3 channels) whatever the files hold; the digits are (8, 1).
"""

from __future__ import annotations

from dataclasses import dataclass

IMAGE_PREFIX = "images:"
DIGITS = (8, 1, 10)
"""(image side, channels, classes) of scikit-learn's digits."""


@dataclass(frozen=True)
class ImageSource:
    kind: str
    """"digits", "folder" or "hf"."""
    location: str = ""
    """The folder (folder) or the dataset name (hf)."""
    split: str = "train"
    """hf: the split read (train and validation are then cut from it)."""


def is_image_corpus(corpus: str) -> bool:
    return corpus.startswith(IMAGE_PREFIX)


def parse_image_source(corpus: str) -> ImageSource:
    """The source a corpus string names; ValueError naming the value when it names none."""
    if not is_image_corpus(corpus):
        raise ValueError(f"{corpus!r} is not an image corpus (expected {IMAGE_PREFIX}...)")
    rest = corpus[len(IMAGE_PREFIX):]
    if rest == "digits":
        return ImageSource("digits")
    if rest.startswith("folder:") and rest[len("folder:"):].strip():
        return ImageSource("folder", rest[len("folder:"):])
    if rest.startswith("hf:"):
        parts = rest[len("hf:"):].split(":")
        if 1 <= len(parts) <= 2 and all(p.strip() for p in parts):
            return ImageSource("hf", parts[0], parts[1] if len(parts) == 2 else "train")
    raise ValueError(f"unknown image corpus {corpus!r}: expected images:digits, "
                     "images:folder:<path> or images:hf:<dataset>[:<split>]")


def image_source_problem(corpus: str) -> str | None:
    """Why a corpus string is not a valid image source (None when it is)."""
    try:
        parse_image_source(corpus)
    except ValueError as e:
        return str(e)
    return None


def declared_geometry(corpus: str, image_size: int | None) -> tuple[int, int] | None:
    """(image side, channels) the data will have, from the settings alone; None when the
    settings do not fix it (a folder or dataset without data.image_size)."""
    source = parse_image_source(corpus)
    if source.kind == "digits":
        return DIGITS[0], DIGITS[1]
    return None if image_size is None else (image_size, 3)


def declared_classes(corpus: str) -> int | None:
    """The number of classes when known without reading the data (the digits: 10)."""
    return DIGITS[2] if parse_image_source(corpus).kind == "digits" else None
