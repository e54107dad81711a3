"""Corpora, train/validation split, memmap token cache, and deterministic batches.

The flow, top to bottom (no step holds the corpus in memory):

1. `sources`: a corpus spec -> its files, read as Documents one at a time (a text file, or
   one record of a .jsonl/.parquet file or Hugging Face dataset). "stdlib" (default, offline)
   is the running interpreter's standard library without tests.
2. `corpus.index_corpus`: one pass -> the corpus fingerprint (sha256 over (name, content) of
   every document, so a result says exactly what it was trained on and the cache can never
   serve tokens of other text) and each document's name hash and size, cached by the files'
   stamp. `split_documents`/`split_mask`: train/validation split BY DOCUMENT (never inside
   one), decided by a hash of the document's name, so the validation set is stable.
3. `prepare_data` (store, build): trains the tokenizer on the train split (a bounded sample of
   a large one), encodes both splits into one .bin (train tokens then val tokens) + tokenizer
   JSON + meta JSON, written atomically and verified (size and sha256) on every load;
   returns read-only memmaps. `python -m pipeline.data prepare SWEEP_FILE` does it ahead.
4. `get_batch` / `eval_batches`: batches as a pure function of (seed, step) / a fixed set.

Bits per byte: each split records its UTF-8 bytes and tokens, so
bpb = loss_nats / ln(2) * tokens / bytes (`TokenData.bits_per_byte`).

Modules: settings (DataConfig, DataError), sources, corpus (index, fingerprint, split), build
(the streaming passes), meter (progress lines), store (the token cache, TokenData,
load_data), files (atomic writes, lock), batches (get_batch, eval_batches; torch),
repetition, tokenizers. This package imports no torch: only batches does, inside its
functions.
"""

from pipeline.data.batches import eval_batches, get_batch
from pipeline.data.corpus import (
    SPLIT_RULE,
    Document,
    corpus_fingerprint,
    load_corpus,
    split_documents,
)
from pipeline.data.settings import CACHE_ENV, DEFAULT_CACHE_DIR, DataConfig, DataError, Progress
from pipeline.data.store import CACHE_FORMAT, TokenData, load_data, prepare_data

__all__ = [
    "CACHE_ENV", "CACHE_FORMAT", "DEFAULT_CACHE_DIR", "SPLIT_RULE", "DataConfig", "DataError",
    "Document", "Progress", "TokenData", "corpus_fingerprint", "eval_batches", "get_batch",
    "load_corpus", "load_data", "prepare_data", "split_documents",
]
