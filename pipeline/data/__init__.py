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

Modules: settings (DataConfig, DataError), corpus (documents, fingerprint, split), store (the
token cache, TokenData, load_data), batches (get_batch, eval_batches; torch), tokenizers.
This package imports no torch: only batches does, inside its functions.
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
