"""The token cache: tokenise a corpus once into a verified on-disk .bin (written atomically,
under a file lock) and open it as read-only memmaps (TokenData)."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from pipeline.data.corpus import (
    SPLIT_RULE,
    Document,
    corpus_fingerprint,
    load_corpus,
    split_documents,
)
from pipeline.data.files import _atomic_file, _atomic_write, _file_lock, _file_sha256
from pipeline.data.settings import (
    DataConfig,
    DataError,
    Progress,
    _quiet,
)
from pipeline.data.tokenizers import (
    Tokenizer,
    load_tokenizer,
    tokenizer_config,
    train_tokenizer,
)
from pipeline.spec import DataSpec

CACHE_FORMAT = 1
_ENCODE_CHUNK_BYTES = 8 << 20  # encode this much text at a time: bounds peak memory (bytes)


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


def load_data(d: DataSpec, cache_dir: str | None = None,
              progress: Progress | None = None) -> TokenData:
    """Tokens of a DataSpec (built once into the on-disk cache, then memory-mapped);
    ``progress`` gets a line per step of a build (reading, tokenizer, writing)."""
    return prepare_data(DataConfig(**asdict(d), cache_dir=cache_dir), progress)
