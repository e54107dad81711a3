"""Corpora as sorted Documents (stdlib, local files, Hugging Face datasets), the corpus
fingerprint, and the train/validation split by document."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import sysconfig
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.data.files import _atomic_write, _file_lock
from pipeline.data.settings import (
    DataConfig,
    DataError,
    Progress,
    _parse_hf_spec,
    _quiet,
)
from pipeline.spec import STDLIB_CORPORA

SPLIT_RULE = "sha256(name) order, greedy to val_fraction of bytes"
_STDLIB_SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages"})
_STDLIB_TEST_DIRS = frozenset({"test", "tests", "idle_test"})


@dataclass(frozen=True)
class Document:
    """One unit of the split: a file, or one record of a dataset."""

    name: str  # relative path or record index: what the split hashes
    text: str
    nbytes: int  # UTF-8 bytes of text (the denominator of bits per byte)


# --- corpora -------------------------------------------------------------------------------


def load_corpus(
    spec: str,
    max_bytes: int | None = None,
    cache_dir: Path | None = None,
    progress: Progress | None = None,
) -> list[Document]:
    """Documents of a corpus spec (see DataConfig.corpus), sorted by name, empty ones dropped."""
    if spec in STDLIB_CORPORA:
        docs = _stdlib_documents(with_tests=spec == "stdlib+tests")
    elif spec.startswith("hf:"):
        cache = cache_dir or DataConfig().resolved_cache_dir()
        docs = _hf_documents(spec, max_bytes, cache, progress or _quiet)
    else:
        docs = _local_documents(spec.removeprefix("path:"))
    docs = _cap([d for d in docs if d.nbytes], max_bytes)
    if not docs:
        why = f" within max_bytes={max_bytes}" if max_bytes else ""
        raise DataError(f"corpus {spec!r} is empty: no non-empty documents{why}")
    return docs


def _stdlib_documents(with_tests: bool = False) -> list[Document]:
    """The interpreter's standard-library .py files (~12-14 MB), without site-packages, and
    without the test suites unless with_tests.

    The test suites hold a few deliberately mis-encoded sources (4 on CPython 3.11, e.g.
    test/encoded_modules/module_koi8_r.py): with_tests leaves out every file that is not
    UTF-8, a fixed rule of this corpus (the fingerprint covers what is kept).
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = _STDLIB_SKIP_DIRS - (_STDLIB_TEST_DIRS if with_tests else frozenset())
    files: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):  # does not follow symlinked folders
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d not in skip]
        files += [
            ((here / f).relative_to(root).as_posix(), here / f)
            for f in filenames
            if f.endswith(".py")
        ]
    if not with_tests:
        return [_read_document(name, path) for name, path in sorted(files)]
    docs = []
    for name, path in sorted(files):
        try:
            docs.append(_read_document(name, path))
        except DataError:  # not UTF-8: one of the suites' encoding test cases
            continue
    return docs


def _local_documents(pattern: str) -> list[Document]:
    """Files of a path, directory (recursive, hidden files skipped) or glob, one document each."""
    expanded = os.path.expanduser(pattern)
    if any(ch in expanded for ch in "*?["):
        paths = [Path(p) for p in glob.glob(expanded, recursive=True) if os.path.isfile(p)]
        if not paths:
            raise DataError(f"corpus glob {pattern!r} matched no files")
    else:
        path = Path(expanded)
        if not path.exists():
            raise DataError(f"corpus path {pattern!r} does not exist")
        if path.is_dir():
            paths = [
                p
                for p in path.rglob("*")
                if p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            ]
            if not paths:
                raise DataError(f"corpus directory {pattern!r} contains no files")
        else:
            paths = [path]
    # Names relative to the files' common folder: moving the corpus keeps its fingerprint.
    base = Path(os.path.commonpath([p.resolve().parent for p in paths]))
    named = sorted((p.resolve().relative_to(base).as_posix(), p) for p in paths)
    return [_read_document(name, p) for name, p in named]


def _read_document(name: str, path: Path) -> Document:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"corpus file {str(path)!r} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from e
    return Document(name, text, len(data))



def _hf_documents(
    spec: str, max_bytes: int | None, cache_dir: Path, progress: Progress
) -> list[Document]:
    """Stream an HF dataset once into a local JSONL cache; later calls read only the cache.

    Records are taken in dataset order while they fit max_bytes (the same rule as `_cap`), so
    the cached texts depend only on (spec, max_bytes).
    """
    name, split, text_field = _parse_hf_spec(spec)
    key = hashlib.sha256(json.dumps([spec, max_bytes]).encode()).hexdigest()[:20]
    folder = cache_dir / "hf"
    stem = f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}-{key}"
    texts_path, meta_path = folder / f"{stem}.jsonl", folder / f"{stem}.json"
    texts = _read_verified_jsonl(texts_path, meta_path)
    if texts is None:
        folder.mkdir(parents=True, exist_ok=True)
        with _file_lock(folder / f"{stem}.lock"):
            texts = _read_verified_jsonl(texts_path, meta_path)  # built while we waited?
            if texts is None:
                progress(
                    f"streaming Hugging Face dataset {name!r} split {split!r} (once; then cached)"
                )
                texts = _stream_hf(name, split, text_field, max_bytes)
                meta_path.unlink(missing_ok=True)
                digest = _atomic_write(
                    texts_path, "".join(json.dumps(t) + "\n" for t in texts).encode()
                )
                meta = {
                    "spec": spec,
                    "max_bytes": max_bytes,
                    "n_docs": len(texts),
                    "sha256": digest,
                }
                _atomic_write(meta_path, json.dumps(meta, indent=1).encode())
    return [Document(f"{i:09d}", t, len(t.encode("utf-8"))) for i, t in enumerate(texts)]


def _stream_hf(name: str, split: str, text_field: str, max_bytes: int | None) -> list[str]:
    try:
        import datasets  # optional extra: only users of HF corpora need it
    except ImportError as e:
        raise DataError(
            f"corpus 'hf:{name}' needs the Hugging Face `datasets` package: pip install -e .[hf]"
        ) from e
    try:
        records = datasets.load_dataset(name, split=split, streaming=True)
        texts, total = [], 0
        for record in records:
            if text_field not in record:
                raise DataError(
                    f"Hugging Face dataset {name!r} has no text field {text_field!r}; "
                    f"its fields are {sorted(record)}"
                )
            # Lone surrogates cannot be UTF-8 encoded: replace them so bytes stay well defined.
            text = str(record[text_field]).encode("utf-8", errors="replace").decode("utf-8")
            size = len(text.encode("utf-8"))
            if max_bytes is not None and total + size > max_bytes:
                break
            texts.append(text)
            total += size
    except DataError:
        raise
    except Exception as e:  # network, auth, unknown dataset/split: say which one failed
        raise DataError(
            f"could not stream Hugging Face dataset {name!r} split {split!r}: {e}"
        ) from e
    return texts


def _read_verified_jsonl(texts_path: Path, meta_path: Path) -> list[str] | None:
    try:
        meta = json.loads(meta_path.read_text())
        data = texts_path.read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(data).hexdigest() != meta.get("sha256"):
        return None
    texts = [json.loads(line) for line in data.decode("utf-8").splitlines()]
    return texts if len(texts) == meta.get("n_docs") else None


def _cap(docs: list[Document], max_bytes: int | None) -> list[Document]:
    """Documents in order while the running total stays <= max_bytes (whole documents only)."""
    if max_bytes is None:
        return docs
    kept, total = [], 0
    for doc in docs:
        if total + doc.nbytes > max_bytes:
            break
        kept.append(doc)
        total += doc.nbytes
    return kept


def corpus_fingerprint(docs: Sequence[Document]) -> str:
    """sha256 hex over the sorted (name, content) pairs; length-prefixed so it is unambiguous."""
    h = hashlib.sha256()
    for doc in docs:
        name, data = doc.name.encode("utf-8"), doc.text.encode("utf-8")
        h.update(f"{len(name)}:{len(data)}:".encode())
        h.update(name)
        h.update(data)
    return h.hexdigest()


def split_documents(
    docs: Sequence[Document], val_fraction: float
) -> tuple[list[Document], list[Document]]:
    """Split by whole documents: val takes documents in sha256(name) order until it holds
    val_fraction of the bytes (at least one document; at least one stays in train).

    Hashing the name (not the position) keeps a document on the same side when others are
    added or removed, and spreads val over the corpus instead of taking its tail. Both splits
    keep the corpus's sorted order.
    """
    if len(docs) < 2:
        raise DataError(
            f"the corpus has {len(docs)} document(s); a train/validation split by document needs "
            "at least 2 (split a single text file into several, or raise max_bytes)"
        )
    target = val_fraction * sum(d.nbytes for d in docs)  # bytes
    order = sorted(
        range(len(docs)), key=lambda i: (hashlib.sha256(docs[i].name.encode()).digest(), i)
    )
    val_ids: set[int] = set()
    val_bytes = 0
    for i in order:
        if val_bytes >= target or len(val_ids) == len(docs) - 1:
            break
        val_ids.add(i)
        val_bytes += docs[i].nbytes
    train = [d for i, d in enumerate(docs) if i not in val_ids]
    val = [d for i, d in enumerate(docs) if i in val_ids]
    return train, val


# --- token cache ---------------------------------------------------------------------------
