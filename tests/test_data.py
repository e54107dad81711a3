"""Tests of pipeline.data: corpora, split, tokenizers, the token cache, and batches.

Everything runs on small temporary corpora except the stdlib checks (12-14 MB, under a second).
Cache folders are always under tmp_path; an autouse fixture points $SCALING_CACHE_DIR there
too, so nothing here can write to the home folder.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import random
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline import data as D
from pipeline.data import (
    DataConfig,
    DataError,
    Document,
    corpus_fingerprint,
    eval_batches,
    get_batch,
    load_corpus,
    prepare_data,
    split_documents,
)
from pipeline.data.tokenizers import ByteTokenizer, CharTokenizer, load_tokenizer

REPO = Path(__file__).resolve().parents[1]
WORDS = [
    "the",
    "of",
    "naïve",
    "data",
    "日本",
    "scaling",
    "law",
    "🙂",
    "token",
    "café",
    "x=1;",
    "\n",
]


@pytest.fixture(autouse=True)
def _cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "env-cache"))


@pytest.fixture
def corpus_dir(tmp_path) -> Path:
    """24 small UTF-8 text files (~2-5 KB each, some non-ASCII), deterministic content."""
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    rng = random.Random(0)
    for i in range(24):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(300, 700)))
        (folder / ("sub" if i % 3 == 0 else "") / f"doc{i:02d}.txt").write_text(text, "utf-8")
    return folder


def _cfg(corpus: Path | str, tmp_path: Path, **kw) -> DataConfig:
    return DataConfig(corpus=str(corpus), cache_dir=str(tmp_path / "cache"), **kw)


def _split_text(corpus: Path | str, val_fraction: float = 0.05) -> tuple[str, str]:
    train, val = split_documents(load_corpus(str(corpus)), val_fraction)
    return "".join(d.text for d in train), "".join(d.text for d in val)


# --- corpora -------------------------------------------------------------------------------


def test_stdlib_skips_tests_and_site_packages(tmp_path, monkeypatch):
    root = tmp_path / "lib"
    files = {
        "a.py": "a = 1\n",
        "pkg/b.py": "b = 2\n",
        "idlelib/ok.py": "ok = 3\n",
        "test/test_a.py": "bad\n",
        "pkg/tests/x.py": "bad\n",
        "idlelib/idle_test/y.py": "bad\n",
        "lib2to3/tests/data/z.py": "bad\n",
        "site-packages/numpy/q.py": "bad\n",
        "notes.txt": "not python\n",
        "empty.py": "",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    paths = dict(sysconfig.get_paths(), stdlib=str(root))
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    assert [d.name for d in load_corpus("stdlib")] == ["a.py", "idlelib/ok.py", "pkg/b.py"]


def test_site_packages_corpus_is_both_folders_once_py_only_and_utf8(tmp_path, monkeypatch):
    pure, plat = tmp_path / "purelib", tmp_path / "platlib"
    files = {
        pure / "pkg/a.py": b"a = 1\n",
        pure / "pkg/data.json": b"{}",
        pure / ".hidden/x.py": b"hidden = 1\n",
        pure / "pkg/latin1.py": "s = 'caf\xe9'\n".encode("latin-1"),  # not UTF-8: left out
        plat / "ext/b.py": b"b = 2\n",
    }
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    paths = dict(sysconfig.get_paths(), purelib=str(pure), platlib=str(plat))
    monkeypatch.setattr(sysconfig, "get_paths", lambda: paths)
    assert [d.name for d in load_corpus("site-packages")] == ["0/pkg/a.py", "1/ext/b.py"]
    same = dict(paths, platlib=str(pure))  # one folder for both (no virtual environment)
    monkeypatch.setattr(sysconfig, "get_paths", lambda: same)
    assert [d.name for d in load_corpus("site-packages")] == ["0/pkg/a.py"]


def test_real_stdlib_corpus_is_sorted_filtered_and_fingerprinted():
    docs = load_corpus("stdlib")
    names = [d.name for d in docs]
    assert names == sorted(names) and len(set(names)) == len(names)
    assert "os.py" in names and "json/__init__.py" in names
    banned = {"test", "tests", "idle_test", "site-packages", "dist-packages"}
    assert not [n for n in names if banned & set(n.split("/")[:-1])]
    assert all(n.endswith(".py") for n in names)
    assert sum(d.nbytes for d in docs) > 5_000_000  # ~12-14 MB depending on the version
    fp = corpus_fingerprint(docs)
    assert fp == corpus_fingerprint(load_corpus("stdlib")) and len(fp) == 64
    changed = [*docs[:-1], Document(docs[-1].name, docs[-1].text + " ", docs[-1].nbytes + 1)]
    assert corpus_fingerprint(changed) != fp
    renamed = [*docs[:-1], Document("x" + docs[-1].name, docs[-1].text, docs[-1].nbytes)]
    assert corpus_fingerprint(renamed) != fp


def test_local_corpus_forms_and_location_independent_fingerprint(corpus_dir, tmp_path):
    docs = load_corpus(str(corpus_dir))
    assert len(docs) == 24 and docs[0].name == "doc01.txt" and docs[-1].name == "sub/doc21.txt"
    assert [d.name for d in load_corpus(f"path:{corpus_dir}")] == [d.name for d in docs]
    globbed = load_corpus(str(corpus_dir / "sub" / "*.txt"))
    assert [d.name for d in globbed] == [f"doc{i:02d}.txt" for i in range(0, 24, 3)]
    single = load_corpus(str(corpus_dir / "doc01.txt"))
    assert [d.name for d in single] == ["doc01.txt"]
    moved = shutil.copytree(corpus_dir, tmp_path / "elsewhere" / "copy")
    assert corpus_fingerprint(load_corpus(str(moved))) == corpus_fingerprint(docs)


def test_max_bytes_takes_whole_documents_in_order(corpus_dir):
    docs = load_corpus(str(corpus_dir))
    cap = docs[0].nbytes + docs[1].nbytes + docs[2].nbytes // 2
    assert load_corpus(str(corpus_dir), max_bytes=cap) == docs[:2]


# --- split ---------------------------------------------------------------------------------


def test_split_is_by_document_disjoint_and_deterministic(corpus_dir):
    docs = load_corpus(str(corpus_dir))
    train, val = split_documents(docs, 0.2)
    names_t, names_v = {d.name for d in train}, {d.name for d in val}
    assert not names_t & names_v and names_t | names_v == {d.name for d in docs}
    assert sum(d.nbytes for d in val) >= 0.2 * sum(d.nbytes for d in docs)
    assert split_documents(list(reversed(docs)), 0.2)[1] == list(reversed(val))  # name decides
    # Tiny fraction: still one val document; two documents: one each side.
    assert len(split_documents(docs, 1e-9)[1]) == 1
    assert [len(s) for s in split_documents(docs[:2], 0.99)] == [1, 1]


def test_prepared_splits_are_exactly_the_split_documents(corpus_dir, tmp_path):
    """Validation text is never in the train tokens: each split is its documents, in order."""
    data = prepare_data(_cfg(corpus_dir, tmp_path, val_fraction=0.2))
    train_text, val_text = _split_text(corpus_dir, 0.2)
    assert bytes(data.train.astype(np.uint8)) == train_text.encode()
    assert bytes(data.val.astype(np.uint8)) == val_text.encode()
    assert (data.train_bytes, data.val_bytes) == (len(train_text.encode()), len(val_text.encode()))
    assert data.n_val_docs >= 1 and data.n_train_docs + data.n_val_docs == 24


# --- tokenizers ----------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_byte_tokenizer_round_trips(text):
    tok = ByteTokenizer()
    ids = tok.encode(text)
    assert tok.decode(ids) == text and all(0 <= i < 256 for i in ids)
    assert ids == tok.encode_array([text]).tolist()


def test_char_tokenizer_vocab_and_unk():
    tok = CharTokenizer.train(["banana", "cab"])
    assert tok.chars == "abcn" and tok.vocab_size == 5 and tok.unk_id == 4
    assert tok.encode("cabz") == [2, 0, 1, 4]
    assert tok.decode([2, 0, 1, 4]) == "cab\ufffd"
    assert load_tokenizer(tok.config, tok.to_json()).encode("nab") == tok.encode("nab")


def test_chars_round_trip_on_train_text(corpus_dir, tmp_path):
    data = prepare_data(_cfg(corpus_dir, tmp_path, tokenizer="chars"))
    train_text, val_text = _split_text(corpus_dir)
    tok = data.tokenizer()
    assert data.vocab_size == len(set(train_text)) + 1  # + <unk>
    assert tok.decode(data.train.tolist()) == train_text
    assert int(data.train.max()) < tok.unk_id  # train never needs <unk>
    assert len(data.val) == len(val_text)  # one token per character


def test_bpe_trains_on_train_split_and_round_trips(corpus_dir, tmp_path):
    data = prepare_data(_cfg(corpus_dir, tmp_path, tokenizer="bpe", bpe_vocab_size=300))
    train_text, val_text = _split_text(corpus_dir)
    tok = data.tokenizer()
    assert data.vocab_size == tok.vocab_size == 300
    assert tok.decode(data.train.tolist()) == train_text
    assert tok.decode(data.val.tolist()) == val_text
    assert tok.decode(tok.encode("unseen: Zürich ∑ 🚀")) == "unseen: Zürich ∑ 🚀"
    assert int(max(data.train.max(), data.val.max())) < 300
    assert data.bytes_per_token("train") > 1.2  # merges compress
    # Deterministic: a second build elsewhere learns the same merges.
    again = prepare_data(DataConfig(corpus=str(corpus_dir), tokenizer="bpe", bpe_vocab_size=300))
    assert again.fingerprint == data.fingerprint and again.cache_path != data.cache_path
    assert np.array_equal(again.train, data.train)


def test_bits_per_byte(corpus_dir, tmp_path):
    data = prepare_data(_cfg(corpus_dir, tmp_path))
    assert data.bytes_per_token("train") == data.bytes_per_token("val") == 1.0
    assert data.bits_per_byte(np.log(2)) == pytest.approx(1.0)
    with pytest.raises(DataError, match="'test'"):
        data.bytes_per_token("test")
    chars = prepare_data(_cfg(corpus_dir, tmp_path, tokenizer="chars"))
    # Non-ASCII characters are several bytes: more bytes per token than the byte tokenizer.
    assert chars.bytes_per_token() == chars.val_bytes / len(chars.val) > 1.0


# --- cache ---------------------------------------------------------------------------------


def test_cache_is_reused_and_keyed(corpus_dir, tmp_path):
    cfg = _cfg(corpus_dir, tmp_path)
    first = prepare_data(cfg)
    mtime = os.stat(first.cache_path).st_mtime_ns
    messages: list[str] = []
    second = prepare_data(cfg, progress=messages.append)
    assert first.built and not second.built
    assert os.stat(second.cache_path).st_mtime_ns == mtime
    assert any("loaded" in m for m in messages) and not any("built" in m for m in messages)
    assert second.fingerprint == first.fingerprint
    assert isinstance(second.train, np.memmap) and not second.train.flags.writeable
    assert second.train.dtype == np.uint16
    other = prepare_data(_cfg(corpus_dir, tmp_path, val_fraction=0.3))
    assert other.built and other.fingerprint != first.fingerprint
    assert other.corpus_fingerprint == first.corpus_fingerprint
    (corpus_dir / "doc05.txt").write_text("changed", "utf-8")
    assert prepare_data(cfg).corpus_fingerprint != first.corpus_fingerprint


def test_cache_dir_from_env_then_argument(tmp_path, monkeypatch):
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "from-env"))
    assert DataConfig().resolved_cache_dir() == tmp_path / "from-env"
    assert DataConfig(cache_dir=str(tmp_path / "arg")).resolved_cache_dir() == tmp_path / "arg"


@pytest.mark.parametrize(
    "damage", ["flip_byte", "truncate", "drop_meta", "garble_meta", "tokenizer"]
)
def test_damaged_cache_is_rebuilt(corpus_dir, tmp_path, damage):
    cfg = _cfg(corpus_dir, tmp_path, tokenizer="chars")
    good = prepare_data(cfg)
    expected = np.array(good.train), np.array(good.val)
    bin_path = Path(good.cache_path)
    del good  # release the memmap before damaging the file
    if damage == "flip_byte":
        raw = bytearray(bin_path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        bin_path.write_bytes(bytes(raw))  # same size: only the checksum can tell
    elif damage == "truncate":
        bin_path.write_bytes(bin_path.read_bytes()[:-7])
    elif damage == "drop_meta":
        bin_path.with_suffix(".json").unlink()
    elif damage == "garble_meta":
        bin_path.with_suffix(".json").write_text('{"format": 1, "fingerprint":')
    else:
        bin_path.with_suffix(".tokenizer.json").write_text('{"name": "chars", "chars": "ab"}')
    messages: list[str] = []
    rebuilt = prepare_data(cfg, progress=messages.append)
    assert rebuilt.built
    assert np.array_equal(rebuilt.train, expected[0]) and np.array_equal(rebuilt.val, expected[1])
    if damage != "drop_meta":  # a missing meta is the normal "not built yet" case
        assert any("rebuilding" in m for m in messages)
    assert not prepare_data(cfg).built


def test_leftovers_of_a_killed_writer_are_never_trusted(corpus_dir, tmp_path):
    cfg = _cfg(corpus_dir, tmp_path)
    bin_path = Path(prepare_data(cfg).cache_path)
    expected = bin_path.read_bytes()
    # What a writer killed mid-way could leave: a temp file, a partial .bin, no meta.
    bin_path.with_suffix(".json").unlink()
    bin_path.write_bytes(expected[: len(expected) // 3])
    stale = bin_path.parent / f"{bin_path.name}.tmp-dead"
    stale.write_bytes(b"\0" * 100)
    data = prepare_data(cfg)
    assert data.built and bin_path.read_bytes() == expected and not stale.exists()


def test_failed_build_leaves_no_entry(corpus_dir, tmp_path, monkeypatch):
    cfg = _cfg(corpus_dir, tmp_path)

    def explode(self, texts):
        raise RuntimeError("simulated crash while encoding")

    monkeypatch.setattr(ByteTokenizer, "encode_array", explode)
    with pytest.raises(RuntimeError, match="simulated crash"):
        prepare_data(cfg)
    folder = tmp_path / "cache" / "tokens"
    assert not list(folder.glob("*.bin")) and not list(folder.glob("*.json"))
    assert not list(folder.glob("*tmp*"))
    monkeypatch.undo()
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "env-cache"))
    assert prepare_data(cfg).built


def _run_py(code: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigkilled_builder_holds_no_lock_and_is_not_trusted(corpus_dir, tmp_path):
    """A builder SIGKILLed just before writing its meta: the next one must rebuild, not hang."""
    cfg = _cfg(corpus_dir, tmp_path)
    proc = _run_py(f"""
        import os, signal
        from pipeline.data import store as D
        real = D._atomic_write
        def dying(path, payload):
            if path.suffix == ".json":
                os.kill(os.getpid(), signal.SIGKILL)
            return real(path, payload)
        D._atomic_write = dying
        D.prepare_data(D.DataConfig(corpus={cfg.corpus!r}, cache_dir={cfg.cache_dir!r}))
    """)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -9, err
    assert list((tmp_path / "cache" / "tokens").glob("*.bin"))  # complete .bin, but no meta
    assert prepare_data(cfg).built


def test_concurrent_builders_agree(corpus_dir, tmp_path):
    cfg = _cfg(corpus_dir, tmp_path, tokenizer="bpe", bpe_vocab_size=280)
    code = f"""
        from pipeline.data import DataConfig, prepare_data
        d = prepare_data(DataConfig(corpus={cfg.corpus!r}, tokenizer="bpe", bpe_vocab_size=280,
                                    cache_dir={cfg.cache_dir!r}))
        print(d.fingerprint, int(d.train.sum()), d.built)
    """
    procs = [_run_py(code) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    results = [out.split() for out, _ in outs]
    assert results[0][:2] == results[1][:2]
    assert sorted(r[2] for r in results) == ["False", "True"]  # the lock: exactly one built
    data = prepare_data(cfg)
    assert not data.built and data.fingerprint == results[0][0]


def test_pickling_token_data_does_not_copy_tokens(corpus_dir, tmp_path):
    data = prepare_data(_cfg(corpus_dir, tmp_path))
    blob = pickle.dumps(data)
    assert len(blob) < 2_000 < data.train.nbytes
    back = pickle.loads(blob)
    assert isinstance(back.train, np.memmap) and np.array_equal(back.train, data.train)
    assert back.fingerprint == data.fingerprint and back.val_bytes == data.val_bytes



@pytest.mark.parametrize("tokenizer", ["bytes", "chars", "bpe"])
def test_tokens_shipped_without_their_cache_keep_their_tokenizer(corpus_dir, tmp_path,
                                                                 tokenizer):
    """Tokens sent by value to another node (Ray's object store: pipeline.trial) have no
    cache folder there; their tokenizer travels with them, so a run can still sample text."""
    data = prepare_data(_cfg(corpus_dir, tmp_path, tokenizer=tokenizer, bpe_vocab_size=300))
    there = D.TokenData(train=np.asarray(data.train), val=np.asarray(data.val),
                        **data.shipped_meta())
    assert there.cache_path == ""
    back = pickle.loads(pickle.dumps(there))  # by value: no cache to reopen
    text = "def main():\n    return 42"
    for copy in (there, back):
        assert copy.tokenizer().decode(copy.tokenizer().encode(text)) == \
            data.tokenizer().decode(data.tokenizer().encode(text))


# --- batches -------------------------------------------------------------------------------


@pytest.fixture
def ramp(tmp_path) -> np.ndarray:
    """tokens[i] = i as a read-only memmap, so a window's content reveals its offset."""
    path = tmp_path / "ramp.bin"
    np.arange(5000, dtype=np.uint16).tofile(path)
    return np.memmap(path, dtype=np.uint16, mode="r")


def test_get_batch_is_a_pure_function_of_seed_and_step(ramp):
    x, y = get_batch(ramp, 8, 16, seed=3, step=7)
    assert x.shape == y.shape == (8, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)  # y is x shifted by one token (the ramp makes this exact)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert torch.equal(x - x[:, :1], torch.arange(16).expand(8, 16))  # contiguous windows
    assert int(y.max()) < len(ramp)
    # Global RNG state must not matter: a resumed process has a different one.
    torch.manual_seed(123)
    np.random.seed(123)
    x2, y2 = get_batch(ramp, 8, 16, seed=3, step=7)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, get_batch(ramp, 8, 16, seed=3, step=8)[0])
    assert not torch.equal(x, get_batch(ramp, 8, 16, seed=4, step=7)[0])


def test_resumed_run_sees_the_same_batches(ramp):
    uninterrupted = [get_batch(ramp, 4, 8, seed=0, step=s)[0] for s in range(10)]
    resumed = [get_batch(ramp, 4, 8, seed=0, step=s)[0] for s in range(5, 10)]
    assert all(torch.equal(a, b) for a, b in zip(uninterrupted[5:], resumed, strict=True))


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 10**6), st.integers(1, 8), st.integers(1, 64))
def test_get_batch_windows_stay_in_bounds(seed, step, batch_size, seq_len):
    tokens = np.arange(batch_size * seq_len + 1 + seed % 7, dtype=np.uint16)
    x, y = get_batch(tokens, batch_size, seq_len, seed, step)
    assert int(x.min()) >= 0 and int(y.max()) <= len(tokens) - 1
    assert torch.equal(y, x + 1)


def test_eval_batches_are_fixed_and_spread_over_the_split(ramp):
    batches = eval_batches(ramp, 4, 32, n_batches=3)
    again = eval_batches(ramp, 4, 32, n_batches=3)
    assert len(batches) == 3
    assert all(
        torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        for a, b in zip(batches, again, strict=True)
    )
    starts = torch.cat([x[:, 0] for x, _ in batches])
    assert int(starts[0]) == 0 and int(batches[-1][1][-1, -1]) == len(ramp) - 1  # both ends
    gaps = starts.diff()
    assert int(gaps.min()) >= int(gaps.max()) - 1  # evenly spaced
    assert all(torch.equal(y, x + 1) for x, y in batches)


# --- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"tokenizer": "wordpiece"}, "wordpiece"),
        ({"tokenizer": "bpe", "bpe_vocab_size": 200}, "200"),
        ({"bpe_vocab_size": "big"}, "big"),
        ({"val_fraction": 0}, "0"),
        ({"val_fraction": 1.5}, "1.5"),
        ({"max_bytes": 0}, "max_bytes"),
        ({"max_bytes": -5}, "-5"),
        ({"corpus": ""}, "corpus"),
        ({"corpus": "hf:"}, "hf:"),
        ({"corpus": "hf:a:b:c:d"}, "hf:a:b:c:d"),
    ],
)
def test_bad_config_raises_data_error_naming_the_value(kwargs, named):
    with pytest.raises(DataError, match=named.replace("[", r"\[")):
        DataConfig(**kwargs)


def test_bad_corpora_raise_data_error_naming_them(tmp_path, corpus_dir):
    cases = {
        str(tmp_path / "nope.txt"): "does not exist",
        str(tmp_path / "nope" / "*.txt"): "matched no files",
    }
    (tmp_path / "empty_dir").mkdir()
    cases[str(tmp_path / "empty_dir")] = "contains no files"
    (tmp_path / "blank").mkdir()
    for i in range(3):
        (tmp_path / "blank" / f"{i}.txt").write_text("")
    cases[str(tmp_path / "blank")] = "empty"
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "x.dat").write_bytes(b"\xff\xfe\x00abc")
    cases[str(tmp_path / "bin")] = "not UTF-8"
    cases[str(corpus_dir / "doc01.txt")] = "needs at least 2"  # one document cannot be split
    for corpus, why in cases.items():
        with pytest.raises(DataError, match=why) as info:
            prepare_data(_cfg(corpus, tmp_path))
        assert "1 document" in str(info.value) or Path(corpus).name in str(info.value)
    with pytest.raises(DataError, match="max_bytes=10"):
        prepare_data(_cfg(corpus_dir, tmp_path, max_bytes=10))


def test_batch_size_errors_name_the_numbers(ramp):
    with pytest.raises(DataError, match=r"5,000 tokens.*64\*100\+1"):
        get_batch(ramp, 64, 100, seed=0, step=0)
    with pytest.raises(DataError, match="batch_size"):
        get_batch(ramp, 0, 8, seed=0, step=0)
    with pytest.raises(DataError, match="step"):
        get_batch(ramp, 1, 8, seed=0, step=-1)
    with pytest.raises(DataError, match=r"validation split has 5,000 tokens.*5001"):
        eval_batches(ramp, 1, 5000, n_batches=1)
    with pytest.raises(DataError, match="n_batches"):
        eval_batches(ramp, 1, 8, n_batches=0)


# --- Hugging Face (a fake `datasets`; never the network) ------------------------------------


def _fake_datasets(records: list[dict], calls: list) -> types.ModuleType:
    module = types.ModuleType("datasets")

    def load_dataset(name, split=None, streaming=False):
        calls.append((name, split, streaming))
        if name == "missing/dataset":
            raise FileNotFoundError(f"Dataset '{name}' doesn't exist on the Hub")
        return iter(records)

    module.load_dataset = load_dataset
    return module


def test_hf_corpus_is_streamed_once_then_cached(tmp_path, monkeypatch):
    records = [{"story": f"Once upon a time {i} " * (i + 3), "id": i} for i in range(40)]
    calls: list = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(records, calls))
    cfg = _cfg("hf:fake/stories:validation:story", tmp_path, max_bytes=5_000)
    data = prepare_data(cfg)
    assert calls == [("fake/stories", "validation", True)]
    kept = []
    for r in records:  # whole records in order while they fit the cap
        if sum(len(t) for t in kept) + len(r["story"]) > 5_000:
            break
        kept.append(r["story"])
    assert data.train_bytes + data.val_bytes == sum(len(t) for t in kept)
    assert data.n_train_docs + data.n_val_docs == len(kept)
    train_docs, val_docs = split_documents(
        load_corpus(cfg.corpus, 5_000, Path(cfg.cache_dir)), 0.05
    )
    assert [d.text for d in sorted(train_docs + val_docs, key=lambda d: d.name)] == kept
    assert bytes(data.val.astype(np.uint8)).decode() == "".join(d.text for d in val_docs)
    # Second run: no streaming (network) at all, same tokens.
    monkeypatch.setitem(sys.modules, "datasets", None)
    again = prepare_data(cfg)
    assert not again.built and again.fingerprint == data.fingerprint and len(calls) == 1


def test_hf_errors_are_clear(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    with pytest.raises(DataError, match=r"pip install -e \.\[hf\]"):
        prepare_data(_cfg("hf:roneneldan/TinyStories", tmp_path))
    calls: list = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets([{"text": "a"}], calls))
    with pytest.raises(DataError, match="'content'.*'text'"):
        prepare_data(_cfg("hf:fake/x:train:content", tmp_path))
    with pytest.raises(DataError, match="missing/dataset"):
        prepare_data(_cfg("hf:missing/dataset", tmp_path))
    assert not list((tmp_path / "cache").rglob("*.jsonl"))  # failures cache nothing


def test_hf_cache_with_bad_checksum_is_streamed_again(tmp_path, monkeypatch):
    records = [{"text": f"record number {i}\n" * 20} for i in range(12)]
    calls: list = []
    monkeypatch.setitem(sys.modules, "datasets", _fake_datasets(records, calls))
    cfg = _cfg("hf:fake/x", tmp_path)
    first = prepare_data(cfg)
    (jsonl,) = (tmp_path / "cache" / "hf").glob("*.jsonl")
    jsonl.write_text(jsonl.read_text().replace("number 3", "number 9"))
    assert json.loads((jsonl.with_suffix(".json")).read_text())["n_docs"] == 12
    assert prepare_data(cfg).fingerprint == first.fingerprint and len(calls) == 2


def test_a_local_dataset_through_the_real_datasets_library_trains(tmp_path, monkeypatch):
    """hf:<folder of .jsonl files>: the real `datasets` (the hf extra, installed in CI)
    streams it offline with its json builder; a run trains on the tokens."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")  # never the network
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))  # nothing in the home folder
    folder = tmp_path / "stories"
    folder.mkdir()
    sources = sorted(Path(json.__file__).parent.parent.glob("*.py"))[:60]  # stdlib text
    with open(folder / "train.jsonl", "w", encoding="utf-8") as f:
        for src in sources:
            f.write(json.dumps({"text": src.read_text(encoding="utf-8"), "path": src.name}) + "\n")
    from pipeline.train import train
    from pipeline.vocab.families import make_config
    from pipeline.vocab.spec import DataSpec, RunSpec, TrainSpec

    spec = RunSpec(sweep="hf", model=make_config("gpt", 1, 16, vocab_size=256, seq_len=32,
                                                 head_dim=8),
                   data=DataSpec(corpus=f"hf:{folder}", max_bytes=400_000),
                   train=TrainSpec(batch_size=8), steps=120)
    data = prepare_data(DataConfig(corpus=spec.data.corpus, max_bytes=400_000,
                                   cache_dir=str(tmp_path / "cache")))
    assert 300_000 < data.train_bytes + data.val_bytes <= 400_000
    assert list((tmp_path / "cache" / "hf").glob("*.jsonl"))  # streamed once, then cached
    result = train(spec, data=data)
    assert result.status == "finished" and result.final_val_loss < math.log(256) - 1.5
