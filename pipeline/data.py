"""Corpora, train/validation split, memmap token cache, and deterministic batches.

The flow, top to bottom:

1. `load_corpus`: a corpus spec -> sorted list of Documents (one file or one HF record each).
   "stdlib" (default, offline) is the running interpreter's standard library without tests.
2. `corpus_fingerprint`: sha256 over (name, content) of every document, so a result says
   exactly what it was trained on and the cache can never serve tokens of other text.
3. `split_documents`: train/validation split BY DOCUMENT (never inside one), decided by a hash
   of the document's name, so the validation set is stable and never trained on.
4. `prepare_data`: trains the tokenizer on the train split, encodes both splits into one
   .bin (train tokens then val tokens) + tokenizer JSON + meta JSON, written atomically and
   verified (size and sha256) on every load; returns read-only memmaps.
5. `get_batch` / `eval_batches`: batches as a pure function of (seed, step) / a fixed set.

Bits per byte: each split records its UTF-8 bytes and tokens, so
bpb = loss_nats / ln(2) * tokens / bytes (`TokenData.bits_per_byte`).
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from pipeline.spec import DataSpec
from pipeline.tokenizers import (
    BPE_MIN_VOCAB,
    TOKENIZER_NAMES,
    Tokenizer,
    load_tokenizer,
    tokenizer_config,
    train_tokenizer,
)

if TYPE_CHECKING:  # torch is imported where batches are made: preparing data never needs it
    import torch


CACHE_ENV = "SCALING_CACHE_DIR"
DEFAULT_CACHE_DIR = "~/.cache/scaling-pipeline"
# Bump when the cache layout or the split rule changes: old entries then simply miss.
CACHE_FORMAT = 1
SPLIT_RULE = "sha256(name) order, greedy to val_fraction of bytes"
# Directory names never read from the standard library: its test suites (test, tests,
# idlelib/idle_test, ...) and installed third-party packages.
_STDLIB_SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages"})
_ENCODE_CHUNK_BYTES = 8 << 20  # encode this much text at a time: bounds peak memory (bytes)

Progress = Callable[[str], None]


class DataError(ValueError):
    """Bad data input (corpus, tokenizer, sizes); the message names the offending value."""


@dataclass(frozen=True)
class DataConfig(DataSpec):
    """A DataSpec (the fields and defaults, part of every run_id) plus where the token cache
    lives (not part of the run_id), validated on construction."""

    cache_dir: str | None = None
    """Token cache folder; default $SCALING_CACHE_DIR, else ~/.cache/scaling-pipeline."""

    def __post_init__(self) -> None:
        if not isinstance(self.corpus, str) or not self.corpus.strip():
            raise DataError(f"corpus must be a non-empty string, got {self.corpus!r}")
        if self.corpus.startswith("hf:"):
            _parse_hf_spec(self.corpus)  # fail at config time, not after minutes of work
        if self.tokenizer not in TOKENIZER_NAMES:
            raise DataError(
                f"unknown tokenizer {self.tokenizer!r}; expected one of {TOKENIZER_NAMES}"
            )
        if not _is_int(self.bpe_vocab_size):
            raise DataError(f"bpe_vocab_size must be an int, got {self.bpe_vocab_size!r}")
        if self.tokenizer == "bpe" and self.bpe_vocab_size < BPE_MIN_VOCAB:
            raise DataError(
                f"bpe_vocab_size={self.bpe_vocab_size} is too small: byte-level BPE needs at "
                f"least {BPE_MIN_VOCAB} (256 byte tokens + one merge)"
            )
        if (
            isinstance(self.val_fraction, bool)
            or not isinstance(self.val_fraction, int | float)
            or not 0 < self.val_fraction < 1
        ):
            raise DataError(f"val_fraction must be in (0, 1), got {self.val_fraction!r}")
        if self.max_bytes is not None and not (_is_int(self.max_bytes) and self.max_bytes > 0):
            raise DataError(f"max_bytes must be a positive int or None, got {self.max_bytes!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, str | os.PathLike):
            raise DataError(f"cache_dir must be a path or None, got {self.cache_dir!r}")

    def resolved_cache_dir(self) -> Path:
        """Argument, then $SCALING_CACHE_DIR, then the default (so tests and clusters redirect it)."""
        raw = self.cache_dir or os.environ.get(CACHE_ENV) or DEFAULT_CACHE_DIR
        return Path(raw).expanduser()


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
    if spec == "stdlib":
        docs = _stdlib_documents()
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


def _stdlib_documents() -> list[Document]:
    """The interpreter's standard-library .py files (~12-14 MB), without tests or site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):  # does not follow symlinked folders
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d not in _STDLIB_SKIP_DIRS]
        files += [
            ((here / f).relative_to(root).as_posix(), here / f)
            for f in filenames
            if f.endswith(".py")
        ]
    return [_read_document(name, path) for name, path in sorted(files)]


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


def _parse_hf_spec(spec: str) -> tuple[str, str, str]:
    """ "hf:<dataset>[:<split>][:<text_field>]" -> (dataset, split, field)."""
    parts = spec[len("hf:") :].split(":")
    if not parts[0] or len(parts) > 3:
        raise DataError(
            f"bad Hugging Face corpus {spec!r}; expected hf:<dataset>[:<split>][:<text_field>]"
        )
    split = parts[1] if len(parts) > 1 and parts[1] else "train"
    text_field = parts[2] if len(parts) > 2 and parts[2] else "text"
    return parts[0], split, text_field


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


@dataclass(frozen=True)
class TokenData:
    """Tokenised splits as read-only memmaps plus what is needed to compare runs.

    Pickling (e.g. to a Ray worker) sends only the cache path: the receiver re-opens the
    memmap, so processes share the page cache instead of copying the array.
    """

    train: np.ndarray  # read-only memmap of train token ids
    val: np.ndarray  # read-only memmap of validation token ids
    vocab_size: int
    fingerprint: str  # sha256 hex of corpus + tokenizer config + split rule: the cache key
    corpus_fingerprint: str
    train_bytes: int  # UTF-8 bytes of the train split
    val_bytes: int  # UTF-8 bytes of the validation split
    tokenizer_config: dict = field(default_factory=dict)
    n_train_docs: int = 0
    n_val_docs: int = 0
    cache_path: str = ""  # the .bin; its .json meta sits next to it
    built: bool = False  # True when this call built the cache, False when it was loaded

    def bytes_per_token(self, split: str = "val") -> float:
        """UTF-8 bytes per token of a split ("train" or "val")."""
        if split not in ("train", "val"):
            raise DataError(f"split must be 'train' or 'val', got {split!r}")
        tokens, nbytes = (
            (self.train, self.train_bytes) if split == "train" else (self.val, self.val_bytes)
        )
        return nbytes / len(tokens)

    def bits_per_byte(self, loss_nats: float, split: str = "val") -> float:
        """Cross-entropy in nats/token -> bits per UTF-8 byte, comparable across tokenizers."""
        return loss_nats / math.log(2) / self.bytes_per_token(split)

    def tokenizer(self) -> Tokenizer:
        """The tokenizer these tokens were made with (for sampling and prompts)."""
        saved = _tokenizer_path(Path(self.cache_path))
        return load_tokenizer(self.tokenizer_config, saved.read_text() if saved.exists() else None)

    def __reduce__(self):
        return (_reopen, (self.cache_path, self.fingerprint))


def prepare_data(cfg: DataConfig, progress: Progress | None = None) -> TokenData:
    """Load the token cache for `cfg`, building it first if it is missing or fails verification.

    Safe with concurrent callers: builders of one key take a file lock (POSIX), and every file
    is written under a temporary name and renamed into place, the meta last.
    """
    say = progress or _quiet
    t0 = time.perf_counter()
    cache_dir = cfg.resolved_cache_dir()
    docs = load_corpus(cfg.corpus, cfg.max_bytes, cache_dir, say)
    corpus_fp = corpus_fingerprint(docs)
    say(
        f"corpus {cfg.corpus!r}: {len(docs)} documents, {sum(d.nbytes for d in docs):,} bytes, sha256 {corpus_fp[:12]}"
    )
    tok_cfg = tokenizer_config(cfg.tokenizer, cfg.bpe_vocab_size)
    key = {"format": CACHE_FORMAT, "corpus": corpus_fp, "tokenizer": tok_cfg}
    key["split"] = {"rule": SPLIT_RULE, "val_fraction": cfg.val_fraction}
    fingerprint = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()
    folder = cache_dir / "tokens"
    bin_path = folder / f"{cfg.tokenizer}-{fingerprint[:24]}.bin"

    data = _open_verified(bin_path, fingerprint, say)
    if data is None:
        folder.mkdir(parents=True, exist_ok=True)
        with _file_lock(bin_path.with_suffix(".lock")):
            # Another process may have built it while we waited for the lock.
            data = _open_verified(bin_path, fingerprint, _quiet)
            if data is None:
                _build(bin_path, docs, cfg, key, fingerprint, say)
                data = _open_verified(bin_path, fingerprint, say)
                if data is None:
                    raise RuntimeError(
                        f"token cache {bin_path} failed verification right after building it"
                    )
                data = replace(data, built=True)
    say(
        f"tokens {'built' if data.built else 'loaded'} in {time.perf_counter() - t0:.2f}s: "
        f"train {len(data.train):,}, val {len(data.val):,}, vocab {data.vocab_size} ({bin_path.name})"
    )
    return data


def _build(
    bin_path: Path,
    docs: list[Document],
    cfg: DataConfig,
    key: dict,
    fingerprint: str,
    say: Progress,
) -> None:
    """Split, train the tokenizer on train, encode train then val into one .bin; meta last."""
    t0 = time.perf_counter()
    meta_path, tok_path = bin_path.with_suffix(".json"), _tokenizer_path(bin_path)
    meta_path.unlink(missing_ok=True)  # from here until the new meta lands, the entry is invalid
    for stale in bin_path.parent.glob(f"{bin_path.stem}.*.tmp-*"):  # left by a killed builder
        stale.unlink(missing_ok=True)  # safe: we hold this key's lock
    train_docs, val_docs = split_documents(docs, cfg.val_fraction)
    say(f"training {cfg.tokenizer!r} tokenizer on {len(train_docs)} train documents")
    tok = train_tokenizer(cfg.tokenizer, [d.text for d in train_docs], cfg.bpe_vocab_size)
    saved = tok.to_json()
    tok_sha = _atomic_write(tok_path, saved.encode()) if saved is not None else None
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32)  # ids < vocab_size
    counts = []
    with _atomic_file(bin_path) as f:
        for split in (train_docs, val_docs):
            n = 0
            for texts in _chunks(split):
                ids = tok.encode_array(texts).astype(dtype, copy=False)
                f.write(ids.tobytes())
                n += len(ids)
            counts.append(n)
    meta = {
        "format": CACHE_FORMAT,
        "fingerprint": fingerprint,
        "key": key,
        "corpus": cfg.corpus,
        "max_bytes": cfg.max_bytes,
        "vocab_size": tok.vocab_size,
        "dtype": dtype.name,
        "train_tokens": counts[0],
        "val_tokens": counts[1],
        "train_bytes": sum(d.nbytes for d in train_docs),
        "val_bytes": sum(d.nbytes for d in val_docs),
        "train_docs": len(train_docs),
        "val_docs": len(val_docs),
        "bin_size": bin_path.stat().st_size,
        "bin_sha256": _file_sha256(bin_path),
        "tokenizer_sha256": tok_sha,
        "build_seconds": round(time.perf_counter() - t0, 3),
        "python": sys.version.split()[0],
    }
    _atomic_write(meta_path, json.dumps(meta, indent=1).encode())
    say(f"built {bin_path.name} in {meta['build_seconds']}s")


def _open_verified(bin_path: Path, fingerprint: str, say: Progress) -> TokenData | None:
    """The cache entry as TokenData, or None unless meta, size and sha256 all check out."""
    meta_path, tok_path = bin_path.with_suffix(".json"), _tokenizer_path(bin_path)
    try:
        meta = json.loads(meta_path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        say(f"token cache meta {meta_path.name} is unreadable: rebuilding")
        return None
    try:
        dtype = np.dtype(meta["dtype"])
        n_train, n_val = int(meta["train_tokens"]), int(meta["val_tokens"])
        problem = None
        if meta["format"] != CACHE_FORMAT or meta["fingerprint"] != fingerprint:
            problem = "was made for another corpus/tokenizer"
        elif not bin_path.exists() or not (
            bin_path.stat().st_size == meta["bin_size"] == (n_train + n_val) * dtype.itemsize
        ):
            problem = "has the wrong size (truncated?)"
        elif _file_sha256(bin_path) != meta["bin_sha256"]:
            problem = "fails its sha256 check"
        elif meta["tokenizer_sha256"] is not None and (
            not tok_path.exists() or _file_sha256(tok_path) != meta["tokenizer_sha256"]
        ):
            problem = "has a missing or altered tokenizer file"
    except (KeyError, TypeError, ValueError):
        problem = "has an incomplete meta file"
    if problem:
        say(f"token cache {bin_path.name} {problem}: rebuilding")
        return None
    tokens = np.memmap(bin_path, dtype=dtype, mode="r", shape=(n_train + n_val,))
    return TokenData(
        train=tokens[:n_train],
        val=tokens[n_train:],
        vocab_size=int(meta["vocab_size"]),
        fingerprint=fingerprint,
        corpus_fingerprint=meta["key"]["corpus"],
        train_bytes=int(meta["train_bytes"]),
        val_bytes=int(meta["val_bytes"]),
        tokenizer_config=meta["key"]["tokenizer"],
        n_train_docs=int(meta["train_docs"]),
        n_val_docs=int(meta["val_docs"]),
        cache_path=str(bin_path),
    )


def _reopen(cache_path: str, fingerprint: str) -> TokenData:
    """Unpickling a TokenData: map the cached file again (shared page cache, no copy)."""
    data = _open_verified(Path(cache_path), fingerprint, _quiet)
    if data is None:
        raise DataError(
            f"token cache {cache_path!r} is missing or invalid here: call prepare_data(cfg)"
        )
    return data


def _tokenizer_path(bin_path: Path) -> Path:
    return bin_path.with_suffix(".tokenizer.json")


def _chunks(docs: Sequence[Document]) -> Iterator[list[str]]:
    """Texts grouped into ~_ENCODE_CHUNK_BYTES batches (whole documents)."""
    batch: list[str] = []
    size = 0
    for doc in docs:
        batch.append(doc.text)
        size += doc.nbytes
        if size >= _ENCODE_CHUNK_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


@contextmanager
def _atomic_file(path: Path) -> Iterator[BinaryIO]:
    """Write to a temp file in path's folder, fsync, then rename over path: readers see the
    old file or the complete new one, never a partial one (a crash leaves only a .tmp-*)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _atomic_write(path: Path, data: bytes) -> str:
    """Atomically write `data` to `path`; returns its sha256 hex."""
    with _atomic_file(path) as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable on POSIX (directories cannot be opened on Windows)."""
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """Exclusive lock between processes building the same entry (flock; released on exit or
    process death). Without fcntl (Windows) we rely on atomic renames alone."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):  # 4 MiB reads
            h.update(chunk)
    return h.hexdigest()


# --- batches -------------------------------------------------------------------------------


def load_data(d: DataSpec, cache_dir: str | None = None) -> TokenData:
    """Tokens of a DataSpec (built once into the on-disk cache, then memory-mapped)."""
    return prepare_data(DataConfig(**asdict(d), cache_dir=cache_dir))


def get_batch(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    seed: int,
    step: int,
    device: str | torch.device = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Training batch (x, y), int64 (batch_size, seq_len), y = x shifted by one token.

    A pure function of (seed, step): offsets come from np.random.default_rng([seed, step]), so a
    run resumed at step k sees exactly the batches an uninterrupted run would, with no RNG state
    to checkpoint. Only the sampled windows are read from the memmap.
    """
    _check_sizes(batch_size=batch_size, seq_len=seq_len, seed=seed, step=step)
    n = len(tokens)
    if n < batch_size * seq_len + 1:
        raise DataError(
            f"train split has {n:,} tokens, fewer than one batch needs "
            f"(batch_size*seq_len+1 = {batch_size}*{seq_len}+1 = {batch_size * seq_len + 1:,})"
        )
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, n - seq_len, size=batch_size)  # last window ends at index n-1
    return _windows(tokens, starts, seq_len, device)


def eval_batches(
    tokens: np.ndarray,
    batch_size: int,
    seq_len: int,
    n_batches: int,
    device: str | torch.device = "cpu",
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed list of n_batches (x, y) batches whose windows are spread evenly over the split.

    Fixed, not random per eval, so every eval of every run measures the same text and curves
    are comparable. Windows overlap when the split is shorter than all of them end to end.
    """
    _check_sizes(batch_size=batch_size, seq_len=seq_len, n_batches=n_batches)
    n = len(tokens)
    if n < seq_len + 1:
        raise DataError(
            f"validation split has {n:,} tokens, fewer than one sequence needs (seq_len+1 = {seq_len + 1})"
        )
    starts = np.linspace(0, n - seq_len - 1, num=n_batches * batch_size).round().astype(np.int64)
    return [_windows(tokens, row, seq_len, device) for row in starts.reshape(n_batches, batch_size)]


def _windows(
    tokens: np.ndarray, starts: np.ndarray, seq_len: int, device: str | torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    chunk = np.asarray(tokens[starts[:, None] + np.arange(seq_len + 1)], dtype=np.int64)  # (B, T+1)
    x = torch.from_numpy(np.ascontiguousarray(chunk[:, :-1]))
    y = torch.from_numpy(np.ascontiguousarray(chunk[:, 1:]))
    return _to_device(x, device), _to_device(y, device)


def _to_device(t: torch.Tensor, device: str | torch.device) -> torch.Tensor:
    import torch

    if torch.device(device).type == "cuda":  # pinned + non_blocking overlaps copy and compute
        return t.pin_memory().to(device, non_blocking=True)
    return t.to(device)


def _check_sizes(**values: int) -> None:
    for name, value in values.items():
        low = 0 if name in ("seed", "step") else 1
        if not _is_int(value) or value < low:
            raise DataError(f"{name} must be an int >= {low}, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def _quiet(_message: str) -> None:
    pass
