"""Where a corpus's documents come from, read one at a time: the interpreter's standard
library, local files (text, .jsonl, .parquet; a file, folder or glob) and Hugging Face
datasets (streamed once into a local JSONL cache).

A `Source` lists its files when it is made (cheap: names and stat) and reads their documents
lazily on every iteration, in a fixed order: files by name, records in file order. Nothing
here holds more than one file's text (a text file) or one record batch (jsonl, parquet) at a
time, so a corpus of any size streams through in bounded memory.

Document names (what the split hashes and the fingerprint covers):
- a text file: its path relative to the files' common folder ("sub/doc01.txt");
- a record of a .jsonl or .parquet file: "<relative path>:<record index, 9 digits>";
- a record of a Hugging Face dataset: "<index, 9 digits>" (its order in the dataset).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import stat
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pipeline.data.files import _atomic_file, _atomic_write, _file_lock, _file_sha256
from pipeline.data.settings import DataError, Progress, _parse_hf_spec

TEXT_FIELD = "text"  # the field (jsonl) or column (parquet) a local record's text is in
RECORD_SUFFIXES = (".jsonl", ".parquet")  # files of one document per record
MAX_TEXT_FILE_BYTES = 1 << 30  # a text file is one document, read whole: refuse larger ones
_STDLIB_SKIP_DIRS = frozenset({"test", "tests", "idle_test", "site-packages", "dist-packages"})
_STDLIB_TEST_DIRS = frozenset({"test", "tests", "idle_test"})
_PARQUET_BATCH_ROWS = 1024


@dataclass(frozen=True)
class Document:
    """One unit of the split: a file, or one record of a dataset."""

    name: str  # relative path or record index: what the split hashes
    text: str
    nbytes: int  # UTF-8 bytes of text (the denominator of bits per byte)


@dataclass(frozen=True)
class _File:
    name: str  # relative to the corpus's common folder
    path: Path
    kind: str  # "text" | "jsonl" | "parquet" | "hf" (a cached stream: one JSON string a line)


class Source:
    """The files of one corpus spec, and their documents in order (see the module doc)."""

    def __init__(self, files: list[_File], skip_undecodable: bool = False) -> None:
        self.files = files
        self.skip_undecodable = skip_undecodable  # the stdlib+tests rule (see stdlib_source)

    def stamp(self) -> list[list]:
        """(name, size, mtime ns) of every file: what changes when the corpus's files do."""
        out = []
        for f in self.files:
            st = f.path.stat()
            out.append([f.name, f.kind, st.st_size, st.st_mtime_ns])
        return out

    def total_file_bytes(self) -> int:
        return sum(f.path.stat().st_size for f in self.files)

    def __iter__(self) -> Iterator[Document]:
        for f in self.files:
            if f.kind == "text":
                doc = _read_text(f, self.skip_undecodable)
                if doc is not None:
                    yield doc
            elif f.kind in ("jsonl", "hf"):
                yield from _jsonl_records(f)
            else:
                yield from _parquet_records(f)


# --- the three kinds of corpora ------------------------------------------------------------


def stdlib_source(with_tests: bool = False) -> Source:
    """The interpreter's standard-library .py files (~12-14 MB), without site-packages, and
    without the test suites unless with_tests.

    The test suites hold a few deliberately mis-encoded sources (4 on CPython 3.11, e.g.
    test/encoded_modules/module_koi8_r.py): with_tests leaves out every file that is not
    UTF-8, a fixed rule of this corpus (the fingerprint covers what is kept).
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = _STDLIB_SKIP_DIRS - (_STDLIB_TEST_DIRS if with_tests else frozenset())
    files: list[_File] = []
    for dirpath, dirnames, filenames in os.walk(root):  # does not follow symlinked folders
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if d not in skip]
        files += [
            _File((here / f).relative_to(root).as_posix(), here / f, "text")
            for f in filenames
            if f.endswith(".py")
        ]
    return Source(sorted(files, key=lambda f: f.name), skip_undecodable=with_tests)


def site_packages_source() -> Source:
    """The .py files of the interpreter's site-packages folders (purelib and platlib: a
    virtual environment's own when one is active), named "<folder>/<path inside it>" with the
    folder numbered in sysconfig's order ("0/torch/nn/modules/linear.py").

    A larger offline corpus than the standard library (issue 16: runs of 1e8 byte tokens that
    never see one twice). Its text is whatever is installed, so two machines differ; the
    fingerprint says exactly which files a run trained on. Files that are not UTF-8 are left
    out, as in stdlib+tests.
    """
    paths = sysconfig.get_paths()
    roots: list[Path] = []
    for key in ("purelib", "platlib"):
        root = Path(paths[key])
        if root.is_dir() and root.resolve() not in [r.resolve() for r in roots]:
            roots.append(root)
    if not roots:
        raise DataError("corpus 'site-packages': this interpreter has no site-packages folder")
    files: list[_File] = []
    for i, root in enumerate(roots):
        for dirpath, dirnames, filenames in os.walk(root):  # does not follow symlinked folders
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            files += [_File(f"{i}/{(here / f).relative_to(root).as_posix()}", here / f, "text")
                      for f in filenames if f.endswith(".py")]
    return Source(sorted(files, key=lambda f: f.name), skip_undecodable=True)


def local_source(pattern: str) -> Source:
    """Files of a path, directory (recursive, hidden files skipped) or glob. A .jsonl or
    .parquet file holds one document per record (its "text" field); any other file is one
    document."""
    paths = local_files(pattern)
    # Names relative to the files' common folder: moving the corpus keeps its fingerprint.
    base = Path(os.path.commonpath([p.resolve().parent for p in paths]))
    named = sorted((p.resolve().relative_to(base).as_posix(), p) for p in paths)
    return Source([_File(name, p, _kind(p)) for name, p in named])


def local_files(pattern: str) -> list[Path]:
    """The regular files of a local corpus spec (a path, directory or glob; "~" expanded),
    unread; DataError naming the spec when there are none, NotAFileError naming the entry
    when one is not a regular file or folder.

    Every local corpus is listed here (sweep files through pipeline.config, `pipeline.data
    prepare`, a sweep's data and `pipeline.train --corpus` through local_source). A device
    reads without end (/dev/zero filled 15.5 GB in 40 s: st_size, what the size check
    reads, is 0 for it) and a FIFO or socket blocks a reader for ever, so only regular files
    (symlinks followed) are a corpus: any other entry is refused by name, never skipped.
    Folders inside a directory or matched by a glob are walked (a directory) or passed over
    (a glob), as before; a symlink to a folder inside a directory is not followed.
    """
    expanded = os.path.expanduser(pattern)
    if any(ch in expanded for ch in "*?["):
        paths = []
        for match in sorted(glob.glob(expanded, recursive=True)):
            if (why := _not_a_file(Path(match))) is not None:
                raise NotAFileError(f"corpus glob {pattern!r} matches {match!r}, {why}")
            if not os.path.isdir(match):
                paths.append(Path(match))
        if not paths:
            raise DataError(f"corpus glob {pattern!r} matched no files")
        return paths
    path = Path(expanded)
    if not path.exists() and not path.is_symlink():
        raise DataError(f"corpus path {pattern!r} does not exist")
    if (why := _not_a_file(path)) is not None:
        raise NotAFileError(f"corpus path {pattern!r} is {why}")
    if not path.is_dir():
        return [path]
    paths = []
    for p in path.rglob("*"):
        if any(part.startswith(".") for part in p.relative_to(path).parts):
            continue
        if (why := _not_a_file(p)) is not None:
            raise NotAFileError(f"corpus directory {pattern!r} holds "
                                f"{p.relative_to(path).as_posix()!r}, {why}")
        if not p.is_dir():
            paths.append(p)
    if not paths:
        raise DataError(f"corpus directory {pattern!r} contains no files")
    return paths


class NotAFileError(DataError):
    """A corpus entry that is a device, FIFO or socket (or a broken symlink): never read."""


_NOT_REGULAR = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
_ONLY_FILES = ("a corpus is regular files (or folders of them): a device never ends and a "
               "FIFO or socket blocks its reader")


def _not_a_file(path: Path) -> str | None:
    """Why path is neither a regular file nor a folder (after its symlinks), None if it is
    one; "a FIFO (named pipe), not a regular file: ..." names what it is. Reads nothing."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return (f"a symlink to {os.readlink(path)!r}, which does not exist"
                if path.is_symlink() else "gone (removed while the corpus was listed)")
    except OSError as e:  # a symlink loop, a name too long, no permission to look
        return f"not readable ({e.strerror or e})"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    via = f" (through the symlink to {os.path.realpath(path)})" if path.is_symlink() else ""
    return f"{_what(mode)}{via}, not a regular file: {_ONLY_FILES}"


def _what(mode: int) -> str:
    """What a file of this st_mode is, in words: "a FIFO (named pipe)"."""
    return next((name for test, name in _NOT_REGULAR if test(mode)), "not a regular file")


def hf_source(spec: str, max_bytes: int | None, cache_dir: Path, progress: Progress) -> Source:
    """Stream an HF dataset once into a local JSONL cache; later calls read only the cache.

    Records are taken in dataset order while they fit max_bytes (the corpus's cap rule), so
    the cached texts depend only on (spec, max_bytes). The cache is written as it streams
    (never held in memory), under a temporary name, and verified (size, sha256) before use.
    """
    name, split, text_field = _parse_hf_spec(spec)
    key = hashlib.sha256(json.dumps([spec, max_bytes]).encode()).hexdigest()[:20]
    folder = cache_dir / "hf"
    stem = f"{re.sub(r'[^A-Za-z0-9._-]+', '_', name)}-{key}"
    texts_path, meta_path = folder / f"{stem}.jsonl", folder / f"{stem}.json"
    if not _verified_jsonl(texts_path, meta_path):
        folder.mkdir(parents=True, exist_ok=True)
        with _file_lock(folder / f"{stem}.lock"):
            if not _verified_jsonl(texts_path, meta_path):  # built while we waited?
                progress(
                    f"streaming Hugging Face dataset {name!r} split {split!r} (once; then cached)"
                )
                meta_path.unlink(missing_ok=True)
                with _atomic_file(texts_path) as f:
                    n_docs = _stream_hf(name, split, text_field, max_bytes, f)
                meta = {"spec": spec, "max_bytes": max_bytes, "n_docs": n_docs,
                        "size": texts_path.stat().st_size, "sha256": _file_sha256(texts_path)}
                _atomic_write(meta_path, json.dumps(meta, indent=1).encode())
    return Source([_File("", texts_path, "hf")])


def _stream_hf(name: str, split: str, text_field: str, max_bytes: int | None, out) -> int:
    """Write the dataset's texts (one JSON string a line) to `out`; returns how many."""
    try:
        import datasets  # optional extra: only users of HF corpora need it
    except ImportError as e:
        raise DataError(
            f"corpus 'hf:{name}' needs the Hugging Face `datasets` package: pip install -e .[hf]"
        ) from e
    n, total = 0, 0
    try:
        for record in datasets.load_dataset(name, split=split, streaming=True):
            if text_field not in record:
                raise DataError(
                    f"Hugging Face dataset {name!r} has no text field {text_field!r}; "
                    f"its fields are {sorted(record)}"
                )
            # Lone surrogates cannot be UTF-8 encoded: replace them so bytes stay well defined.
            data = str(record[text_field]).encode("utf-8", errors="replace")
            if max_bytes is not None and total + len(data) > max_bytes:
                break
            out.write((json.dumps(data.decode("utf-8")) + "\n").encode("utf-8"))
            n, total = n + 1, total + len(data)
    except DataError:
        raise
    except Exception as e:  # network, auth, unknown dataset/split: say which one failed
        raise DataError(
            f"could not stream Hugging Face dataset {name!r} split {split!r}: {e}"
        ) from e
    return n


def _verified_jsonl(texts_path: Path, meta_path: Path) -> bool:
    """The cached stream is complete: its meta exists and its size and sha256 match."""
    try:
        meta = json.loads(meta_path.read_text())
        if texts_path.stat().st_size != meta.get("size", texts_path.stat().st_size):
            return False
        return _file_sha256(texts_path) == meta.get("sha256")
    except (OSError, ValueError):
        return False


# --- readers -------------------------------------------------------------------------------


def _kind(path: Path) -> str:
    suffix = path.suffix.lower()
    return suffix[1:] if suffix in RECORD_SUFFIXES else "text"


def _open_regular(path: Path) -> BinaryIO:
    """path opened for reading, if it is a regular file (after its symlinks): the check is
    made on the open file, so a file swapped for a FIFO or device since it was listed, or one
    of the standard library's or site-packages' files (listed by name only), is refused too.
    O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, for ever."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:  # a socket cannot be opened at all (ENXIO): say what it is
        if (why := _not_a_file(path)) is not None:
            raise NotAFileError(f"corpus file {str(path)!r} is {why}") from e
        raise DataError(f"corpus file {str(path)!r} cannot be opened: {e.strerror or e}") from e
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotAFileError(f"corpus file {str(path)!r} is {_what(mode)}, not a regular "
                            f"file: {_ONLY_FILES}")
    return os.fdopen(fd, "rb")  # O_NONBLOCK changes nothing for a regular file's reads


def _read_text(f: _File, skip_undecodable: bool) -> Document | None:
    with _open_regular(f.path) as file:
        size = os.fstat(file.fileno()).st_size
        if size > MAX_TEXT_FILE_BYTES:
            raise DataError(
                f"corpus file {str(f.path)!r} is {size:,} bytes: a text file is one document "
                f"and is read whole (at most {MAX_TEXT_FILE_BYTES:,}); split it into several "
                f"files, or write one document per line as .jsonl ({{\"{TEXT_FIELD}\": ...}})"
            )
        data = file.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        if skip_undecodable:  # stdlib+tests, site-packages: e.g. encoding test cases
            return None
        raise DataError(
            f"corpus file {str(f.path)!r} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from e
    return Document(f.name, text, len(data))


def _jsonl_records(f: _File) -> Iterator[Document]:
    """One document per line: {"text": ...} (a local file) or a JSON string (the HF cache)."""
    with _open_regular(f.path) as lines:
        for i, raw in enumerate(lines):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except ValueError as e:  # UnicodeDecodeError is a ValueError
                raise DataError(f"corpus file {str(f.path)!r} line {i + 1} is not JSON: {e}") from e
            if f.kind == "hf":
                yield _document(f"{i:09d}", record)
            else:
                yield _document(f"{f.name}:{i:09d}", _field(record, f, f"line {i + 1}"))


def _parquet_records(f: _File) -> Iterator[Document]:
    try:
        import pyarrow.parquet as pq  # comes with mlflow (and datasets)
    except ImportError as e:
        raise DataError(f"corpus file {str(f.path)!r} is parquet: it needs pyarrow") from e
    _open_regular(f.path).close()  # pyarrow reads the path itself (its own buffered reads)
    try:
        table = pq.ParquetFile(f.path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise DataError(f"corpus file {str(f.path)!r} is not a readable parquet file: {e}") from e
    if TEXT_FIELD not in table.schema_arrow.names:
        raise DataError(f"corpus file {str(f.path)!r} has no {TEXT_FIELD!r} column; its columns "
                        f"are {table.schema_arrow.names}")
    i = 0
    for batch in table.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=[TEXT_FIELD]):
        for text in batch.column(0).to_pylist():
            record = {TEXT_FIELD: "" if text is None else text}
            yield _document(f"{f.name}:{i:09d}", _field(record, f, f"row {i}"))
            i += 1


def _document(name: str, text: str) -> Document:
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON "\ud800"): no UTF-8 for it
        data = text.encode("utf-8", errors="replace")
        text = data.decode("utf-8")
    return Document(name, text, len(data))


def _field(record: object, f: _File, where: str) -> str:
    if not isinstance(record, dict) or TEXT_FIELD not in record:
        fields = sorted(record) if isinstance(record, dict) else type(record).__name__
        raise DataError(f"corpus file {str(f.path)!r} {where} has no {TEXT_FIELD!r} field "
                        f"(it has {fields})")
    text = record[TEXT_FIELD]
    if not isinstance(text, str):
        raise DataError(f"corpus file {str(f.path)!r} {where}: {TEXT_FIELD!r} is a "
                        f"{type(text).__name__}, not a string")
    return text
