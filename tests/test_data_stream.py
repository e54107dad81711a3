"""Streaming data preparation (issue 17): record files (.jsonl, .parquet) as corpora, the
corpus index and its cache, the tokenizer's bounded sample, a corpus edited or a builder
killed mid-build, and `python -m pipeline.data prepare`.

The 2 GB memory and throughput figures are a benchmark (benchmarks/perf/bench_prepare.py), not a
test: here the corpora are a few hundred KB and every check is exact.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from pipeline import data as D
from pipeline.data import (
    DataConfig,
    DataError,
    build,
    corpus,
    load_corpus,
    prepare_data,
    sources,
    split_documents,
)

REPO = Path(__file__).resolve().parents[1]
WORDS = ["the", "of", "naïve", "data", "日本", "scaling", "law", "🙂", "token", "café", "\n"]


@pytest.fixture(autouse=True)
def _cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv(D.CACHE_ENV, str(tmp_path / "env-cache"))


def _texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(50, 400))) for _ in range(n)]


@pytest.fixture
def jsonl(tmp_path) -> Path:
    """60 records over two .jsonl files in a folder (a blank line and an extra field too)."""
    folder = tmp_path / "records"
    folder.mkdir()
    texts = _texts(60)
    for part, chunk in (("a.jsonl", texts[:35]), ("b.jsonl", texts[35:])):
        with open(folder / part, "w", encoding="utf-8") as f:
            for i, t in enumerate(chunk):
                f.write(json.dumps({"text": t, "id": i}) + "\n")
                if i == 3:
                    f.write("\n")
    return folder


def _cfg(corpus, tmp_path: Path, **kw) -> DataConfig:
    return DataConfig(corpus=str(corpus), cache_dir=str(tmp_path / "cache"), **kw)


def test_a_jsonl_folder_is_one_document_per_record(jsonl):
    docs = load_corpus(str(jsonl))
    assert len(docs) == 60
    assert docs[0].name == "a.jsonl:000000000"
    assert docs[4].name == "a.jsonl:000000005"  # names count lines: the blank one is line 4
    assert docs[35].name == "b.jsonl:000000000"
    texts = _texts(60)
    assert [d.text for d in docs] == texts
    assert [d.nbytes for d in docs] == [len(t.encode()) for t in texts]


def test_a_parquet_file_is_one_document_per_row(tmp_path):
    pa = pytest.importorskip("pyarrow")  # a dependency of mlflow: present wherever we run
    import pyarrow.parquet as pq

    texts = _texts(30)
    pq.write_table(pa.table({"text": texts, "n": list(range(30))}), tmp_path / "c.parquet",
                   row_group_size=7)
    docs = load_corpus(str(tmp_path / "c.parquet"))
    assert [d.text for d in docs] == texts and docs[29].name == "c.parquet:000000029"
    pq.write_table(pa.table({"body": texts}), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r"bad\.parquet.*no 'text' column.*'body'"):
        load_corpus(str(tmp_path / "bad.parquet"))


@pytest.mark.parametrize("line, why", [
    ('{"body": "x"}', r"line 2 has no 'text' field \(it has \['body'\]\)"),
    ('{"text": 5}', r"line 2: 'text' is a int, not a string"),
    ("not json", r"line 2 is not JSON"),
])
def test_bad_records_are_named_by_file_and_line(tmp_path, line, why):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "fine"}\n' + line + "\n")
    with pytest.raises(DataError, match=why) as info:
        prepare_data(_cfg(path, tmp_path))
    assert "bad.jsonl" in str(info.value)
    assert not list((tmp_path / "cache").rglob("*.bin"))


def test_a_lone_surrogate_is_replaced_as_utf8_cannot_hold_it(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"text": "a\\ud800b"}\n{"text": "plain"}\n')
    (doc, _) = load_corpus(str(path))
    assert doc.text == "a?b" and doc.nbytes == 3  # as the HF path encodes it


def test_a_text_file_too_large_to_read_whole_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_TEXT_FILE_BYTES", 100)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "big.txt").write_text("x" * 101)
    (tmp_path / "c" / "small.txt").write_text("y" * 10)
    with pytest.raises(DataError, match=r"big\.txt.*101 bytes.*\.jsonl"):
        load_corpus(str(tmp_path / "c"))


def test_streamed_tokens_are_exactly_the_split_documents(jsonl, tmp_path):
    data = prepare_data(_cfg(jsonl, tmp_path, val_fraction=0.2))
    train, val = split_documents(load_corpus(str(jsonl)), 0.2)
    assert bytes(data.train.astype(np.uint8)) == "".join(d.text for d in train).encode()
    assert bytes(data.val.astype(np.uint8)) == "".join(d.text for d in val).encode()
    assert (data.n_train_docs, data.n_val_docs) == (len(train), len(val))


def test_split_mask_is_the_greedy_rule():
    """split_mask (vectorised) against the rule written as a loop, on random sizes."""
    rng = np.random.default_rng(0)
    for n in (2, 3, 10, 200):
        names = [f"doc{i}" for i in range(n)]
        sizes = rng.integers(1, 1000, n)
        for fraction in (1e-9, 0.05, 0.3, 0.99):
            order = sorted(range(n), key=lambda i: (corpus.name_digest(names[i]), i))
            val, got = set(), 0
            for i in order:
                if got >= fraction * sizes.sum() or len(val) == n - 1:
                    break
                val.add(i)
                got += sizes[i]
            digests = np.array([corpus.name_digest(x) for x in names], dtype="S32")
            mask = corpus.split_mask(digests, sizes, fraction)
            assert set(np.flatnonzero(mask)) == val


def test_the_index_is_cached_by_the_files_stamp(jsonl, tmp_path, monkeypatch):
    cfg = _cfg(jsonl, tmp_path)
    first = prepare_data(cfg)
    reads = []
    real_iter = sources.Source.__iter__
    monkeypatch.setattr(sources.Source, "__iter__",
                        lambda self: reads.append(1) or real_iter(self))
    again = prepare_data(cfg)
    assert not again.built and again.fingerprint == first.fingerprint and reads == []
    # Same size, new content and modification time: read again, new tokens.
    path = jsonl / "b.jsonl"
    text = path.read_text()
    path.write_text(text.replace("scaling", "scalinG", 1))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    changed = prepare_data(cfg)
    assert changed.built and changed.corpus_fingerprint != first.corpus_fingerprint
    assert reads  # the corpus was read


def test_a_large_corpus_trains_its_tokenizer_on_a_sample(jsonl, tmp_path, monkeypatch):
    """The tokenizer learns from train documents in sha256(name) order up to the budget; a
    character only in the other documents is unknown to it; the sample is in the key."""
    whole = prepare_data(_cfg(jsonl, tmp_path, tokenizer="chars"))
    rare = "§"
    path = jsonl / "a.jsonl"
    lines = path.read_text().splitlines()
    docs = load_corpus(str(jsonl))
    budget = sum(d.nbytes for d in docs) // 4
    index = corpus.CorpusIndex(corpus.corpus_fingerprint(docs),
                               np.array([corpus.name_digest(d.name) for d in docs], dtype="S32"),
                               np.array([d.nbytes for d in docs]))
    val = index.val_mask(0.05)
    sample = build.tokenizer_sample(index, val, budget)
    assert sample is not None and not (sample & val).any()
    assert budget <= index.sizes[sample].sum() < budget + index.sizes.max()
    outside = next(i for i in range(35) if not sample[i] and not val[i] and i != 4)
    line = outside + (outside > 3)  # the blank line 4 shifts the later records
    lines[line] = json.dumps({"text": rare + json.loads(lines[line])["text"]})
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(build, "TOKENIZER_SAMPLE_BYTES", budget + len(rare.encode()))
    data = prepare_data(_cfg(jsonl, tmp_path, tokenizer="chars"))
    meta = json.loads(Path(data.cache_path).with_suffix(".json").read_text())
    assert meta["key"]["tokenizer_sample"]["bytes"] == budget + len(rare.encode())
    assert 0 < meta["tokenizer_sample_bytes"] < meta["train_bytes"]
    tok = data.tokenizer()
    assert rare not in tok.chars and tok.unk_id in data.train  # learned without that doc
    assert whole.fingerprint != data.fingerprint


def test_a_corpus_edited_during_the_build_leaves_no_entry(jsonl, tmp_path, monkeypatch):
    from pipeline.data import store

    real = store.learn_tokenizer

    def then_edit(*args):
        tok = real(*args)
        with open(jsonl / "b.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"text": "one more record"}) + "\n")
        return tok

    monkeypatch.setattr(store, "learn_tokenizer", then_edit)
    with pytest.raises(DataError, match="changed while it was being prepared"):
        prepare_data(_cfg(jsonl, tmp_path))
    tokens = tmp_path / "cache" / "tokens"
    assert not list(tokens.glob("*.bin")) and not list(tokens.glob("*tmp*"))
    monkeypatch.undo()
    assert prepare_data(_cfg(jsonl, tmp_path)).built  # the edited corpus, indexed again


def _run_py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                          text=True, timeout=120)


def test_a_builder_killed_mid_encoding_is_restarted_cleanly(jsonl, tmp_path):
    """SIGKILL on the third encoded batch: a partial .bin and val side file are left under
    temporary names, never an entry; the next build removes them and equals an
    uninterrupted one."""
    cfg = _cfg(jsonl, tmp_path, tokenizer="bpe", bpe_vocab_size=300)
    done = _run_py(f"""
        import os, signal
        from pipeline.data import DataConfig, build, prepare_data
        from pipeline.data.tokenizers import BpeTokenizer
        build.ENCODE_BATCH_BYTES = 2000
        real, calls = BpeTokenizer.encode_array, []
        def dying(self, texts):
            calls.append(1)
            if len(calls) == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(self, texts)
        BpeTokenizer.encode_array = dying
        prepare_data(DataConfig(corpus={cfg.corpus!r}, tokenizer="bpe", bpe_vocab_size=300,
                                cache_dir={cfg.cache_dir!r}))
    """)
    assert done.returncode == -9, done.stderr
    tokens = tmp_path / "cache" / "tokens"
    left = sorted(p.name for p in tokens.iterdir() if "tmp" in p.name)
    assert any(".tmp-val-" in n for n in left) and len(left) == 2, left
    metas = [p for p in tokens.glob("*.json") if not p.name.endswith(".tokenizer.json")]
    assert not list(tokens.glob("*.bin")) and not metas
    data = prepare_data(cfg)
    assert data.built and not [p for p in tokens.iterdir() if "tmp" in p.name]
    fresh = prepare_data(_cfg(jsonl, tmp_path / "other", tokenizer="bpe", bpe_vocab_size=300))
    assert np.array_equal(data.train, fresh.train) and np.array_equal(data.val, fresh.val)


def _sweep_file(tmp_path: Path, corpus: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(f"""\
        name: prep
        kind: isoflop
        family: gpt
        shape: {{head_dim: 8}}
        data: {{corpus: {corpus}, tokenizer: bpe, bpe_vocab_size: 300, seq_len: 32}}
        train: {{batch_size: 4}}
        isoflop:
          budgets: [3.0e+9]
          sizes: {{shapes: [{{n_layer: 1, d_model: 16}}]}}
    """))
    return path


def test_prepare_cli_builds_what_the_sweep_then_loads(jsonl, tmp_path, capsys):
    from pipeline.config import load_sweep
    from pipeline.data.__main__ import main
    from pipeline.planner import data_spec_for

    sweep = _sweep_file(tmp_path, "records")  # relative to the sweep file, as the sweep reads
    cache = str(tmp_path / "cache")
    assert main(["prepare", str(sweep), "--cache-dir", cache]) == 0
    out = capsys.readouterr().out
    assert "data: encoding: [####################] 100%" in out and "ready: " in out
    assert main(["prepare", str(sweep), "--cache-dir", cache, "--json"]) == 0
    entry = json.loads(capsys.readouterr().out)
    assert entry["built"] is False and entry["vocab_size"] == 300
    spec = data_spec_for(load_sweep(sweep), sweep)
    assert D.load_data(spec, cache_dir=cache).cache_path == entry["cache_path"]


def test_prepare_cli_errors_name_the_file_and_value(tmp_path, capsys):
    from pipeline.data.__main__ import main

    assert main(["prepare", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    sweep = _sweep_file(tmp_path, "missing_folder")
    assert main(["prepare", str(sweep), "--cache-dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "missing_folder" in err and "Traceback" not in err


def test_tokens_that_are_not_a_cache_entry_pickle_by_value():
    """TokenData built from arrays (a cluster's workers get them from Ray's object store)
    has no cache file to reopen: it pickles its arrays (issue 18's Ray Train workers)."""
    import pickle

    data = D.TokenData(train=np.arange(10, dtype=np.uint16), val=np.arange(3, dtype=np.uint16),
                       vocab_size=256, fingerprint="f" * 64, corpus_fingerprint="c" * 64,
                       train_bytes=10, val_bytes=3)
    again = pickle.loads(pickle.dumps(data))
    assert np.array_equal(again.train, data.train) and again.fingerprint == data.fingerprint
