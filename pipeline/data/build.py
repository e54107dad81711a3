"""Building one token-cache entry from a corpus stream, in bounded memory.

Two more passes over the corpus after its index (pipeline.data.corpus.index_corpus):
1. the tokenizer learns from the train documents (all of them, or a bounded sample of a large
   corpus: TOKENIZER_SAMPLE_BYTES), streamed to it;
2. every document is encoded in ~8 MB batches (the `tokenizers` library encodes a batch on all
   cores) while a reader thread parses the next batch; train ids go straight to the entry's
   .bin, validation ids to a side file appended at the end (the .bin is train then val).
The .bin is hashed as it is written, and the pass checks every document against the index
(count, sizes, fingerprint): a corpus edited during the build fails it instead of producing
tokens that disagree with their fingerprint.

Peak memory: the tokenizer's training state (word counts of at most the sample) plus two
batches of text and their ids (~100 MB), whatever the corpus size.
"""

from __future__ import annotations

import hashlib
import os
import queue
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pipeline.data.corpus import CorpusIndex, _Fingerprint, iter_documents
from pipeline.data.files import _atomic_file
from pipeline.data.meter import Meter
from pipeline.data.settings import DataConfig, DataError, Progress
from pipeline.data.sources import Document, Source
from pipeline.data.tokenizers import Tokenizer, train_tokenizer

# The tokenizer learns from at most this many bytes of train text. 256 MiB is ~20x the
# default corpus (the stdlib, 12 MB: it learns from all of it, as before this bound existed);
# a 32k BPE learns from 256 MiB of a 2 GB corpus in ~1 minute, and the whole preparation
# peaks at 0.77 GB resident (BENCHMARKS.md, "Data preparation").
TOKENIZER_SAMPLE_BYTES = 256 << 20
SAMPLE_RULE = "train documents in sha256(name) order, greedy to the byte budget"
ENCODE_BATCH_BYTES = 8 << 20  # text encoded per call: bounds the memory of a batch
_PREFETCH = 2  # batches the reader thread may parse ahead


def tokenizer_sample(index: CorpusIndex, val: np.ndarray, budget: int) -> np.ndarray | None:
    """The train documents the tokenizer learns from: None when all of them fit the budget;
    else a mask of train documents taken in sha256(name) order (spread over the corpus, not
    its first files) until they hold `budget` bytes."""
    train = ~val
    if int(index.sizes[train].sum()) <= budget:
        return None
    order = np.argsort(index.digests, kind="stable")
    order = order[train[order]]
    before = np.concatenate([[0], np.cumsum(index.sizes[order])])[: len(order)]
    mask = np.zeros(len(index.sizes), dtype=bool)
    mask[order[before < budget]] = True
    return mask


def learn_tokenizer(cfg: DataConfig, source: Source, index: CorpusIndex, val: np.ndarray,
                    sample: np.ndarray | None, say: Progress) -> Tokenizer:
    """Pass 1: the tokenizer, trained on the streamed train documents (or their sample)."""
    learn = ~val if sample is None else sample
    if cfg.tokenizer == "bytes":
        return train_tokenizer("bytes", [], cfg.bpe_vocab_size)
    total = int(index.sizes[learn].sum())
    what = "all" if sample is None else f"a sample of {int(learn.sum()):,}"
    say(f"training {cfg.tokenizer!r} tokenizer on {what} train documents ({total:,} bytes)")
    meter = Meter(say, "tokenizer", total)

    def texts() -> Iterator[str]:
        for i, doc in enumerate(iter_documents(source, cfg.max_bytes)):
            if i < len(learn) and learn[i]:
                meter.add(doc.nbytes)
                yield doc.text

    tok = train_tokenizer(cfg.tokenizer, texts(), cfg.bpe_vocab_size)
    if total > 50e6:
        meter.finish()
    return tok


def encode_corpus(bin_path: Path, tok: Tokenizer, dtype: np.dtype, cfg: DataConfig,
                  source: Source, index: CorpusIndex, val: np.ndarray,
                  say: Progress) -> tuple[int, int, str, float]:
    """Pass 2: write train ids then val ids into bin_path (atomically). Returns (train
    tokens, val tokens, sha256 of the file, MB/s of text encoded)."""
    meter = Meter(say, "encoding", index.total_bytes)
    fp, counts, digest = _Fingerprint(), [0, 0], hashlib.sha256()
    fd, side = tempfile.mkstemp(dir=bin_path.parent, prefix=f"{bin_path.name}.tmp-val-")
    try:
        with _atomic_file(bin_path) as out, os.fdopen(fd, "w+b") as val_out:
            i = 0
            for batch in _prefetched(_batches(iter_documents(source, cfg.max_bytes))):
                texts: tuple[list[str], list[str]] = ([], [])
                nbytes = 0
                for doc in batch:
                    if i >= index.n_docs or doc.nbytes != index.sizes[i]:
                        raise _changed(cfg, f"document {i} ({doc.name})")
                    fp.add(doc)
                    texts[int(val[i])].append(doc.text)
                    nbytes += doc.nbytes
                    i += 1
                for split, dest in ((0, out), (1, val_out)):
                    if texts[split]:
                        ids = tok.encode_array(texts[split]).astype(dtype, copy=False).tobytes()
                        dest.write(ids)
                        counts[split] += len(ids) // dtype.itemsize
                        if split == 0:
                            digest.update(ids)
                meter.add(nbytes, len(batch))
            if i != index.n_docs or fp.hexdigest() != index.fingerprint:
                raise _changed(cfg, f"its {i:,} documents (indexed: {index.n_docs:,})")
            val_out.seek(0)
            while chunk := val_out.read(16 << 20):
                out.write(chunk)
                digest.update(chunk)
    finally:
        Path(side).unlink(missing_ok=True)
    seconds = meter.finish()
    return counts[0], counts[1], digest.hexdigest(), index.total_bytes / 1e6 / seconds


def _changed(cfg: DataConfig, what: str) -> DataError:
    return DataError(f"corpus {cfg.corpus!r} changed while it was being prepared ({what} differ "
                     "from the first read): nothing was kept; run again once it is stable")


def _batches(docs: Iterator[Document]) -> Iterator[list[Document]]:
    """Documents grouped into ~ENCODE_BATCH_BYTES batches (whole documents)."""
    batch: list[Document] = []
    size = 0
    for doc in docs:
        batch.append(doc)
        size += doc.nbytes
        if size >= ENCODE_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _prefetched(items: Iterator[list[Document]]) -> Iterator[list[Document]]:
    """`items` produced by a reader thread, up to _PREFETCH ahead: parsing (Python, holds the
    GIL) overlaps encoding (Rust, releases it). An error in the reader is raised here."""
    q: queue.Queue = queue.Queue(maxsize=_PREFETCH)
    stop = threading.Event()
    done = object()

    def offer(item: object) -> bool:
        """Put item unless the consumer has stopped; False when it has."""
        while not stop.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read() -> None:
        try:
            for item in items:
                if not offer(item):
                    return
            offer(done)
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            offer(e)

    reader = threading.Thread(target=read, name="corpus-reader", daemon=True)
    reader.start()
    try:
        while (item := q.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        reader.join(timeout=5)
