"""Corpora as streams of Documents (pipeline.data.sources reads them), the corpus
fingerprint, the train/validation split by document, and the corpus index: one streaming pass
that learns all three without keeping any text.

The index holds 40 bytes per document (the sha256 of its name and its size), so a 2 GB corpus
of 250k documents needs 10 MB, and it is cached by the stamp of the corpus's files (name,
size, modification time): a second `prepare_data` of an unchanged corpus reads no text at all.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.data.files import _atomic_file
from pipeline.data.meter import Meter
from pipeline.data.settings import DataConfig, DataError, Progress, _quiet
from pipeline.data.sources import (
    Document,
    Source,
    hf_source,
    local_source,
    site_packages_source,
    stdlib_source,
)
from pipeline.vocab.spec import STDLIB_CORPORA

SPLIT_RULE = "sha256(name) order, greedy to val_fraction of bytes"
INDEX_FORMAT = 1  # of the cached corpus index; a new reader rule must change it
_DIGEST = np.dtype("S32")

__all__ = ["SPLIT_RULE", "CorpusIndex", "Document", "corpus_fingerprint", "index_corpus",
           "iter_documents", "load_corpus", "source_for", "split_documents", "split_mask"]


# --- corpora -------------------------------------------------------------------------------


def source_for(spec: str, max_bytes: int | None = None, cache_dir: Path | None = None,
               progress: Progress | None = None) -> Source:
    """The files of a corpus spec (see DataSpec.corpus); an HF dataset is streamed into the
    cache first (once)."""
    if spec == "site-packages":
        return site_packages_source()
    if spec in STDLIB_CORPORA:
        return stdlib_source(with_tests=spec == "stdlib+tests")
    if spec.startswith("hf:"):
        cache = cache_dir or DataConfig().resolved_cache_dir()
        return hf_source(spec, max_bytes, cache, progress or _quiet)
    return local_source(spec.removeprefix("path:"))


def iter_documents(source: Source, max_bytes: int | None) -> Iterator[Document]:
    """The corpus's documents in order: empty ones dropped, then whole documents while the
    running total stays <= max_bytes (the cap stops at the first one that would not fit)."""
    total = 0
    for doc in source:
        if not doc.nbytes:
            continue
        if max_bytes is not None and total + doc.nbytes > max_bytes:
            return
        total += doc.nbytes
        yield doc


def load_corpus(
    spec: str,
    max_bytes: int | None = None,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> list[Document]:
    """All documents of a corpus spec in memory (small corpora, tests): prepare_data streams."""
    docs = list(iter_documents(source_for(spec, max_bytes, cache_dir, progress), max_bytes))
    if not docs:
        raise _empty(spec, max_bytes)
    return docs


def _empty(spec: str, max_bytes: int | None) -> DataError:
    why = f" within max_bytes={max_bytes}" if max_bytes else ""
    return DataError(f"corpus {spec!r} is empty: no non-empty documents{why}")


class _Fingerprint:
    """sha256 over the (name, content) pairs in order; length-prefixed so it is unambiguous."""

    def __init__(self) -> None:
        self._h = hashlib.sha256()

    def add(self, doc: Document) -> None:
        name, data = doc.name.encode("utf-8"), doc.text.encode("utf-8")
        self._h.update(f"{len(name)}:{len(data)}:".encode())
        self._h.update(name)
        self._h.update(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def corpus_fingerprint(docs: Iterable[Document]) -> str:
    """sha256 hex over the documents' (name, content) pairs, in order."""
    fp = _Fingerprint()
    for doc in docs:
        fp.add(doc)
    return fp.hexdigest()


# --- split ---------------------------------------------------------------------------------


def name_digest(name: str) -> bytes:
    return hashlib.sha256(name.encode()).digest()


def split_mask(digests: np.ndarray, sizes: np.ndarray, val_fraction: float) -> np.ndarray:
    """True for the validation documents: they are taken in sha256(name) order until they
    hold val_fraction of the bytes (at least one document; at least one stays in train).

    Hashing the name (not the position) keeps a document on the same side when others are
    added or removed, and spreads val over the corpus instead of taking its tail.
    """
    n = len(sizes)
    if n < 2:
        raise DataError(
            f"the corpus has {n} document(s); a train/validation split by document needs "
            "at least 2 (split a single text file into several, or raise max_bytes)"
        )
    order = np.argsort(digests, kind="stable")  # ties (never, for distinct names) by position
    before = np.concatenate([[0], np.cumsum(sizes[order])])[:n]  # val bytes before each
    target = val_fraction * float(sizes.sum())  # bytes
    reached = np.flatnonzero(before >= target)
    k = min(int(reached[0]) if len(reached) else n, n - 1)  # >= 1: before[0] = 0 < target
    mask = np.zeros(n, dtype=bool)
    mask[order[:k]] = True
    return mask


def split_documents(
    docs: Sequence[Document], val_fraction: float
) -> tuple[list[Document], list[Document]]:
    """(train, val) by whole documents (split_mask); both keep the corpus's order."""
    digests = np.array([name_digest(d.name) for d in docs], dtype=_DIGEST)
    val = split_mask(digests, np.array([d.nbytes for d in docs], dtype=np.int64), val_fraction)
    return ([d for d, v in zip(docs, val, strict=True) if not v],
            [d for d, v in zip(docs, val, strict=True) if v])


# --- the corpus index ----------------------------------------------------------------------


@dataclass(frozen=True)
class CorpusIndex:
    """One pass over a corpus, without its text: enough to split, fingerprint and sample it."""

    fingerprint: str  # corpus_fingerprint of the documents
    digests: np.ndarray  # S32: sha256 of each document's name, in corpus order
    sizes: np.ndarray  # int64: UTF-8 bytes of each document

    @property
    def n_docs(self) -> int:
        return len(self.sizes)

    @property
    def total_bytes(self) -> int:
        return int(self.sizes.sum())

    def val_mask(self, val_fraction: float) -> np.ndarray:
        return split_mask(self.digests, self.sizes, val_fraction)


def index_corpus(spec: str, max_bytes: int | None, cache_dir: Path,
                 progress: Progress | None = None) -> tuple[Source, CorpusIndex]:
    """The corpus's source and index; the index is read from the cache when the corpus's
    files are unchanged (same names, sizes and modification times), else made by reading it."""
    say = progress or _quiet
    source = source_for(spec, max_bytes, cache_dir, say)
    stamp = json.dumps([INDEX_FORMAT, spec, max_bytes, source.stamp()]).encode()
    path = cache_dir / "corpora" / f"{hashlib.sha256(stamp).hexdigest()[:24]}.npz"
    index = _load_index(path)
    if index is None:
        index = _scan(spec, source, max_bytes, say)
        path.parent.mkdir(parents=True, exist_ok=True)
        with _atomic_file(path) as f:  # straight to disk: no second copy in memory
            np.savez(f, fingerprint=np.array(index.fingerprint), digests=index.digests,
                     sizes=index.sizes)
    return source, index


def _scan(spec: str, source: Source, max_bytes: int | None, say: Progress) -> CorpusIndex:
    meter = Meter(say, f"reading corpus {spec!r}", total=None)
    fp, digests, sizes = _Fingerprint(), bytearray(), array("q")
    for doc in iter_documents(source, max_bytes):
        fp.add(doc)
        digests += name_digest(doc.name)
        sizes.append(doc.nbytes)
        meter.add(doc.nbytes)
    if not sizes:
        raise _empty(spec, max_bytes)
    if meter.nbytes > 50e6:  # a long read: say how it ended
        meter.finish()
    return CorpusIndex(fp.hexdigest(), np.frombuffer(bytes(digests), dtype=_DIGEST),
                       np.frombuffer(sizes.tobytes(), dtype=np.int64))


def _load_index(path: Path) -> CorpusIndex | None:
    try:
        with np.load(path) as z:
            index = CorpusIndex(str(z["fingerprint"]), z["digests"], z["sizes"])
    except (OSError, ValueError, KeyError):
        return None
    ok = (len(index.fingerprint) == 64 and index.digests.dtype == _DIGEST
          and len(index.digests) == len(index.sizes) >= 1)
    return index if ok else None
