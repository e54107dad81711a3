"""Tokenizers for the token cache: UTF-8 bytes, characters, and byte-level BPE.

Why three: bytes need no training and make bits-per-byte trivial; characters are the classic
small-vocabulary baseline; BPE is what real language models use. They change how many tokens a
byte of text costs, which is why every run also reports bits per byte (see pipeline.data).

Every tokenizer has `encode`/`decode` (for sampling), `encode_array` (the fast bulk path the
token cache uses), `vocab_size`, a `config` dict that goes into the cache fingerprint, and
`to_json` so the cache can store what was trained. This module does no file I/O: pipeline.data
owns the cache and writes these JSON strings atomically.

Input validation for users lives in pipeline.data.DataConfig (it raises DataError); the
ValueErrors here guard programmatic misuse only.

Note: import this module as `pipeline.data.tokenizers`. Inside it `import tokenizers` is the
Hugging Face library (absolute imports), so the name clash is harmless unless a file in
pipeline/ is run as a script.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence

import numpy as np

TOKENIZER_NAMES = ("bytes", "chars", "bpe")
# Byte-level BPE starts from the 256 byte symbols; it has no special tokens (documents are
# concatenated as they are, and a literal "<|endoftext|>" in a text must stay plain text), so
# the smallest useful vocabulary is 256 + one merge.
BPE_MIN_VOCAB = 257
UNK_CHAR = "\ufffd"  # what the chars tokenizer decodes its <unk> id to
_MAX_CODEPOINT = 0x10FFFF


def tokenizer_config(name: str, bpe_vocab_size: int) -> dict:
    """The config that identifies a tokenizer *before* training, for the cache key.

    chars needs nothing more: its vocabulary is a function of the train split, and the split
    is already in the fingerprint. bpe records the library version because a new version of
    `tokenizers` may learn different merges from the same text.
    """
    if name == "bytes":
        return {"name": "bytes", "vocab_size": 256}
    if name == "chars":
        return {"name": "chars"}
    if name == "bpe":
        import tokenizers

        return {
            "name": "bpe",
            "vocab_size": int(bpe_vocab_size),
            "tokenizers": tokenizers.__version__,
        }
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {TOKENIZER_NAMES}")


class Tokenizer(ABC):
    """Common interface; ids are always in range(vocab_size)."""

    name: str
    vocab_size: int

    @property
    @abstractmethod
    def config(self) -> dict:
        """Identifies this tokenizer in the cache fingerprint (see tokenizer_config)."""

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Inverse of encode; never raises on ids a model samples (bad bytes -> U+FFFD)."""

    @abstractmethod
    def encode_array(self, texts: Sequence[str]) -> np.ndarray:
        """Concatenated ids of `texts` as an unsigned-int array (bulk path, no Python loop)."""

    def to_json(self) -> str | None:
        """What the cache must store to reload this tokenizer (None: nothing to store)."""
        return None


class ByteTokenizer(Tokenizer):
    """Token = one UTF-8 byte: no training, vocab 256, bits per byte = bits per token."""

    name = "bytes"
    vocab_size = 256

    @property
    def config(self) -> dict:
        return tokenizer_config("bytes", 0)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(ids).decode("utf-8", errors="replace")

    def encode_array(self, texts: Sequence[str]) -> np.ndarray:
        return np.frombuffer("".join(texts).encode("utf-8"), dtype=np.uint8)


class CharTokenizer(Tokenizer):
    """Token = one Unicode code point of the train split; anything else maps to <unk>.

    Ids 0..len(chars)-1 are the characters in code-point order; id len(chars) is <unk>, which
    only the validation split (or sampling prompts) can hit.
    """

    name = "chars"

    def __init__(self, chars: str) -> None:
        if len(set(chars)) != len(chars) or list(chars) != sorted(chars):
            raise ValueError("chars must be sorted and unique")
        self.chars = chars
        self.unk_id = len(chars)
        self.vocab_size = len(chars) + 1
        self._lut: np.ndarray | None = None  # code point -> id, built on first encode

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        seen = np.zeros(_MAX_CODEPOINT + 1, dtype=bool)  # 1.1 MB, one flag per code point
        for text in texts:
            seen[_codepoints(text)] = True
        return cls("".join(chr(c) for c in np.flatnonzero(seen)))

    @property
    def config(self) -> dict:
        return tokenizer_config("chars", 0)

    def encode(self, text: str) -> list[int]:
        return self.encode_array([text]).tolist()

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[i] if 0 <= i < self.unk_id else UNK_CHAR for i in ids)

    def encode_array(self, texts: Sequence[str]) -> np.ndarray:
        if self._lut is None:
            # A full lookup table (4.4 MB) makes encoding one vectorised gather.
            lut = np.full(_MAX_CODEPOINT + 1, self.unk_id, dtype=np.uint32)
            lut[_codepoints(self.chars)] = np.arange(len(self.chars), dtype=np.uint32)
            self._lut = lut
        return self._lut[_codepoints("".join(texts))]

    def to_json(self) -> str:
        return json.dumps({"name": "chars", "chars": self.chars})


class BpeTokenizer(Tokenizer):
    """Byte-level BPE (GPT-2 style pre-tokenisation) trained with Hugging Face `tokenizers`.

    vocab_size is the *configured* size, so a model's shape does not depend on how many merges
    a small corpus allowed; ids the trainer did not fill are simply never produced.
    """

    name = "bpe"

    def __init__(self, hf_tokenizer, vocab_size: int) -> None:  # hf_tokenizer: tokenizers.Tokenizer
        self._tok = hf_tokenizer
        self.vocab_size = max(int(vocab_size), hf_tokenizer.get_vocab_size())

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BpeTokenizer:
        if vocab_size < BPE_MIN_VOCAB:
            raise ValueError(f"bpe vocab_size {vocab_size} < {BPE_MIN_VOCAB}")
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        tok = HFTokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes: no <unk>
            special_tokens=[],
            show_progress=False,
        )
        # An iterator is consumed in batches: the texts need not all be in memory at once.
        tok.train_from_iterator(texts, trainer=trainer)
        return cls(tok, vocab_size)

    @classmethod
    def from_json(cls, text: str, vocab_size: int) -> BpeTokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_str(text), vocab_size)

    @property
    def config(self) -> dict:
        return tokenizer_config("bpe", self.vocab_size)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def encode_array(self, texts: Sequence[str]) -> np.ndarray:
        # encode_batch_fast (tokenizers >= 0.20) skips offsets we do not need; both run in
        # parallel in Rust.
        encode_batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        ids = [np.asarray(e.ids, dtype=np.uint32) for e in encode_batch(list(texts))]
        return np.concatenate(ids) if ids else np.zeros(0, dtype=np.uint32)

    def to_json(self) -> str:
        return self._tok.to_str()


def train_tokenizer(name: str, train_texts: Iterable[str], bpe_vocab_size: int) -> Tokenizer:
    """Fit `name` on the TRAIN split only, so validation text never shapes the vocabulary.
    train_texts may be a one-pass iterator (pipeline.data streams it from disk)."""
    if name == "bytes":
        return ByteTokenizer()
    if name == "chars":
        return CharTokenizer.train(train_texts)
    if name == "bpe":
        return BpeTokenizer.train(train_texts, bpe_vocab_size)
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {TOKENIZER_NAMES}")


def load_tokenizer(config: dict, saved: str | None) -> Tokenizer:
    """Rebuild a tokenizer from its config and the JSON string `to_json` returned."""
    name = config.get("name")
    if name == "bytes":
        return ByteTokenizer()
    if saved is None:
        raise ValueError(f"tokenizer {name!r} needs its saved JSON to load")
    if name == "chars":
        return CharTokenizer(json.loads(saved)["chars"])
    if name == "bpe":
        return BpeTokenizer.from_json(saved, config["vocab_size"])
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {TOKENIZER_NAMES}")


def _codepoints(text: str) -> np.ndarray:
    """Code points of `text` as uint32, via one C-level encode (no per-character Python)."""
    # surrogatepass: a lone surrogate (possible in scraped text) is still one code point.
    return np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype="<u4")
