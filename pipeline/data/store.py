"""The token cache: tokenise a corpus once into a verified on-disk .bin (written atomically,
under a file lock) and open it as read-only memmaps (TokenData)."""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from pipeline.data import build
from pipeline.data.build import SAMPLE_RULE, encode_corpus, learn_tokenizer, tokenizer_sample
from pipeline.data.corpus import SPLIT_RULE, CorpusIndex, index_corpus
from pipeline.data.files import _atomic_write, _file_lock, _file_sha256
from pipeline.data.settings import (
    DataConfig,
    DataError,
    Progress,
    _quiet,
)
from pipeline.data.sources import Source
from pipeline.data.tokenizers import Tokenizer, load_tokenizer, tokenizer_config
from pipeline.vision.sources import is_image_corpus
from pipeline.vocab.spec import DataSpec

CACHE_FORMAT = 1


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
    tokenizer_json: str = ""
    """The saved tokenizer (chars, bpe) of tokens that travel without their cache folder
    (through Ray's object store to another node: ``shipped_meta``); "" when it is read from
    the cache folder, or the tokenizer needs none (bytes)."""

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
        return load_tokenizer(self.tokenizer_config, self._saved_tokenizer())

    def _saved_tokenizer(self) -> str | None:
        if self.tokenizer_json:
            return self.tokenizer_json
        if not self.cache_path:  # tokens by value (e.g. from Ray's object store)
            return None
        saved = _tokenizer_path(Path(self.cache_path))
        return saved.read_text() if saved.exists() else None

    def shipped_meta(self) -> dict:
        """Everything but the two token arrays, to rebuild these tokens on a machine without
        the cache (``TokenData(train=..., val=..., **meta)``): the tokenizer travels with them."""
        here_only = ("train", "val", "cache_path", "built")  # the arrays; this machine's cache
        meta = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in here_only}
        return {**meta, "tokenizer_json": self._saved_tokenizer() or ""}

    def __reduce__(self):
        if not self.cache_path:  # tokens that are not a cache entry (e.g. from Ray's store)
            return (_by_value, tuple(getattr(self, f.name) for f in fields(self)))
        return (_reopen, (self.cache_path, self.fingerprint))


def prepare_data(cfg: DataConfig, progress: Progress | None = None) -> TokenData:
    """Load the token cache for `cfg`, building it first if it is missing or fails verification.

    The corpus is streamed, never held in memory (pipeline.data.build). Safe with concurrent
    callers: builders of one key take a file lock (POSIX), and every file is written under a
    temporary name and renamed into place, the meta last; a killed build leaves no entry.
    """
    say = progress or _quiet
    t0 = time.perf_counter()
    cache_dir = cfg.resolved_cache_dir()
    source, index = index_corpus(cfg.corpus, cfg.max_bytes, cache_dir, say)
    say(f"corpus {cfg.corpus!r}: {index.n_docs:,} documents, {index.total_bytes:,} bytes, "
        f"sha256 {index.fingerprint[:12]}")
    val = index.val_mask(cfg.val_fraction)
    budget = build.TOKENIZER_SAMPLE_BYTES  # read here: tests lower it
    sample = tokenizer_sample(index, val, budget) if cfg.tokenizer != "bytes" else None
    key = {"format": CACHE_FORMAT, "corpus": index.fingerprint,
           "tokenizer": tokenizer_config(cfg.tokenizer, cfg.bpe_vocab_size)}
    key["split"] = {"rule": SPLIT_RULE, "val_fraction": cfg.val_fraction}
    if sample is not None:  # only a large corpus: smaller ones keep their fingerprints
        key["tokenizer_sample"] = {"rule": SAMPLE_RULE, "bytes": budget}
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
                _build(bin_path, source, index, val, sample, cfg, key, fingerprint, say)
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
    source: Source,
    index: CorpusIndex,
    val: np.ndarray,
    sample: np.ndarray | None,
    cfg: DataConfig,
    key: dict,
    fingerprint: str,
    say: Progress,
) -> None:
    """Train the tokenizer, encode train then val into one .bin (pipeline.data.build); the
    meta last, so an entry exists only once it is complete."""
    t0 = time.perf_counter()
    meta_path, tok_path = bin_path.with_suffix(".json"), _tokenizer_path(bin_path)
    meta_path.unlink(missing_ok=True)  # from here until the new meta lands, the entry is invalid
    for stale in bin_path.parent.glob(f"{bin_path.stem}.*.tmp-*"):  # left by a killed builder
        stale.unlink(missing_ok=True)  # safe: we hold this key's lock
    tok = learn_tokenizer(cfg, source, index, val, sample, say)
    saved = tok.to_json()
    tok_sha = _atomic_write(tok_path, saved.encode()) if saved is not None else None
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32)  # ids < vocab_size
    n_train, n_val, bin_sha, rate = encode_corpus(bin_path, tok, dtype, cfg, source, index,
                                                  val, say)
    meta = {
        "format": CACHE_FORMAT,
        "fingerprint": fingerprint,
        "key": key,
        "corpus": cfg.corpus,
        "max_bytes": cfg.max_bytes,
        "vocab_size": tok.vocab_size,
        "dtype": dtype.name,
        "train_tokens": n_train,
        "val_tokens": n_val,
        "train_bytes": int(index.sizes[~val].sum()),
        "val_bytes": int(index.sizes[val].sum()),
        "train_docs": int((~val).sum()),
        "val_docs": int(val.sum()),
        "tokenizer_sample_bytes": int(index.sizes[sample].sum()) if sample is not None else None,
        "bin_size": bin_path.stat().st_size,
        "bin_sha256": bin_sha,
        "tokenizer_sha256": tok_sha,
        "build_seconds": round(time.perf_counter() - t0, 3),
        "encode_mb_per_s": round(rate, 2),
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


def _by_value(*values) -> TokenData:
    return TokenData(*values)


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


def load_data(d: DataSpec, cache_dir: str | None = None,
              progress: Progress | None = None) -> TokenData:
    """Tokens of a DataSpec (built once into the on-disk cache, then memory-mapped);
    ``progress`` gets a line per step of a build (reading, tokenizer, writing). An image
    corpus ("images:...", family vit) gives its ImageData instead (pipeline.vision.data)."""
    if is_image_corpus(d.corpus):
        from pipeline.vision.data import load_images

        return load_images(d)  # type: ignore[return-value]
    return prepare_data(DataConfig(**asdict(d), cache_dir=cache_dir), progress)
