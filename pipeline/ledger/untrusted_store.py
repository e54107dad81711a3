"""Check an unpacked ledger store, which may come from anyone, before anything writes to it;
and move the folder's path in and out of a store (`pack` and `unpack`).

An SQLite file is more than data: a trigger or a view is SQL of the file's own making, run by
whoever writes to (or reads from) the store, and the paths it carries (artifact locations, the
checkpoint_dir tag) are where MLflow and the pipeline write later. So the store is opened
read-only and checked: an SQLite file, MLflow's tables at a schema revision the installed
MLflow knows, MLflow's one trigger and no other, no view, no corruption; and every path it
carries, once PLACEHOLDER is replaced, inside the new folder. Only then are the paths rewritten.

The tables' own expressions (CHECK, DEFAULT, MLflow's generated column spans.duration_ns) are
not compared with MLflow's: they cannot write another row or run a query, so the worst they do
is slow a write; the connections here do not evaluate CHECK constraints. A text comparison of
the tables would refuse real ledgers: two stores at one revision, made by this very MLflow,
list the runs table's constraints in different orders.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

from pipeline.ledger.untrusted_tar import LedgerArchiveError, shown

PLACEHOLDER = "/LEDGER_ROOT/"
SQLITE_MAGIC = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file

# The tables of MLflow 3.17.2's store (schema revision dc11669786a5), as a fresh store lists
# them; tests/test_untrusted_ledger.py checks the list against one the installed MLflow creates.
MLFLOW_TABLES = frozenset({
    "alembic_version", "assessments", "budget_policies", "datasets", "endpoint_bindings",
    "endpoint_model_mappings", "endpoint_tags", "endpoints", "entity_associations",
    "evaluation_dataset_records", "evaluation_dataset_tags", "evaluation_datasets",
    "experiment_tags", "experiments", "guardrail_configs", "guardrails", "input_tags", "inputs",
    "issues", "job_locks", "jobs", "label_schemas", "latest_metrics", "logged_model_metrics",
    "logged_model_params", "logged_model_tags", "logged_models", "mcp_access_endpoints",
    "mcp_server_aliases", "mcp_server_tags", "mcp_server_version_tags", "mcp_server_versions",
    "mcp_servers", "metrics", "model_definitions", "model_version_tags", "model_versions",
    "online_scoring_configs", "params", "registered_model_aliases", "registered_model_tags",
    "registered_models", "review_queue_items", "review_queue_label_schemas",
    "review_queue_users", "review_queues", "runs", "scheduler_leases", "scorer_versions",
    "scorers", "secrets", "span_metrics", "spans", "sql_assessment_daily_rollups",
    "sql_span_cost_daily_rollups", "sql_trace_metric_daily_rollups",
    "sql_trace_rollup_rebuild_queue", "tags", "trace_info", "trace_metrics",
    "trace_request_metadata", "trace_tags", "webhook_events", "webhooks", "workspaces",
})
# Tables SQLite itself keeps: AUTOINCREMENT counters, ANALYZE statistics.
SQLITE_TABLES = frozenset({"sqlite_sequence", "sqlite_stat1", "sqlite_stat4"})
# The tables every MLflow store has had since MLflow 1.x: without them it is no MLflow store.
REQUIRED_TABLES = ("alembic_version", "experiments", "runs", "tags", "params", "metrics")
# MLflow's one trigger (migrations 1bd49d398cd23 and 1b5f0d9ad7c1), compared whitespace-folded.
MLFLOW_TRIGGERS = {"prevent_secrets_aad_mutation": """
    CREATE TRIGGER prevent_secrets_aad_mutation BEFORE UPDATE ON secrets FOR EACH ROW
    WHEN OLD.secret_id != NEW.secret_id OR OLD.secret_name != NEW.secret_name
    BEGIN SELECT RAISE(ABORT, 'secret_id and secret_name are immutable (used as AAD in
    encryption)'); END"""}
# MLflow's indexes are on plain columns: no expression, no WHERE clause (both run SQL on write).
_NAME = r'(?:\w+|"[^"]+"|`[^`]+`|\[[^\]]+\])'
_COLUMN = _NAME + r"(?: (?:ASC|DESC))?"
_PLAIN_INDEX = re.compile(rf"CREATE (?:UNIQUE )?INDEX {_NAME} ON {_NAME} ?"
                          rf"\({_COLUMN}(?:, ?{_COLUMN})*\)", re.IGNORECASE)
# The columns MLflow writes artifacts under: each must be a path in the folder.
ARTIFACT_COLUMNS = (("experiments", "artifact_location", "experiment_id"),
                    ("runs", "artifact_uri", "run_uuid"),
                    ("logged_models", "artifact_location", "model_id"))
# The key/value tables whose values the pipeline sets: a value that is a path must be in the
# folder (the trainer writes checkpoints to checkpoint_dir, pipeline/trial.py).
TAG_TABLES = (("tags", "run_uuid"), ("params", "run_uuid"), ("experiment_tags", "experiment_id"))
CHECKPOINT_TAG = "checkpoint_dir"
# MLflow's Default experiment is made with the store, its artifacts in the creating process's
# working folder (mlruns/0 there), wherever that was; the pipeline never uses it. Unpack points
# it at FOLDER/mlruns/0 (as in every ledger whose sweep ran in its own folder) instead of
# checking it.
DEFAULT_EXPERIMENT = "0"


def _folded(sql: str) -> str:
    return " ".join(sql.split()).rstrip(";").strip()


@functools.cache
def known_revisions() -> frozenset[str]:
    """The schema revisions the installed MLflow knows, from its migration scripts (found
    without importing MLflow, which takes seconds)."""
    spec = importlib.util.find_spec("mlflow")
    roots = list(spec.submodule_search_locations or []) if spec else []
    found = set()
    for root in roots:
        for script in (Path(root) / "store" / "db_migrations" / "versions").glob("*.py"):
            match = re.search(r"""^revision\s*(?::\s*str\s*)?=\s*["']([\w-]+)["']""",
                              script.read_text(encoding="utf-8"), re.MULTILINE)
            if match:
                found.add(match.group(1))
    return frozenset(found)


SQL_DEADLINE_S = 60.0
"""Most seconds the statements on one connection to an untrusted store may take together. A
real ledger's checks and rewrite take well under a second (the committed ones: 0.2-0.7 s for
the whole unpack); a store can still hold SQL of its own making that runs on every write (a
generated column computing a 200 MB string per row hung the rewrite for minutes, out of
reach of SIGTERM while inside one statement). Past the deadline sqlite aborts the statement
("interrupted"), which unpack reports as an error."""


def _deadline(seconds: float) -> Callable[[], int]:
    end = time.monotonic() + seconds
    return lambda: int(time.monotonic() > end)  # non-zero: sqlite interrupts the statement


def connect(db: Path, *, read_only: bool) -> sqlite3.Connection:
    """A connection that runs no SQL function of the schema's making that could do harm
    (trusted_schema=off) and evaluates no CHECK constraint of it (those are the store's SQL
    too, and quick_check would run them); read-only also at the file (mode=ro); interrupted
    after SQL_DEADLINE_S."""
    if read_only:
        conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    else:
        conn = sqlite3.connect(db)
    conn.set_progress_handler(_deadline(SQL_DEADLINE_S), 10_000)  # checked every 10k VM steps
    conn.execute("pragma trusted_schema = off")
    conn.execute("pragma ignore_check_constraints = on")
    if read_only:
        conn.execute("pragma query_only = on")
    return conn


def _schema_problem(db: sqlite3.Connection) -> str | None:
    """What in the store's schema is not MLflow's, or None."""
    tables = set()
    for kind, name, table, rootpage, sql in db.execute(
            "select type, name, tbl_name, rootpage, sql from sqlite_master"):
        name, table = str(name), str(table)
        if kind == "table":
            tables.add(name)
        if kind == "table" and name not in MLFLOW_TABLES | SQLITE_TABLES:
            return f"table {shown(name)} is not one of MLflow's"
        if kind == "table" and not rootpage:
            return f"table {shown(name)} is a virtual table; MLflow has none"
        if kind == "view":
            return f"view {shown(name)}: MLflow's store has none"
        if kind == "trigger" and (table != "secrets" or name not in MLFLOW_TRIGGERS
                                  or _folded(sql or "") != _folded(MLFLOW_TRIGGERS[name])):
            return f"trigger {shown(name)} on table {shown(table)} is not MLflow's"
        if kind == "index" and sql and not _PLAIN_INDEX.fullmatch(sql.strip()):
            return f"index {shown(name)} on {shown(table)} is not on plain columns"
        if kind not in ("table", "view", "trigger", "index"):
            return f"{shown(name)} is a schema entry of unknown type {shown(str(kind))}"
    missing = [t for t in REQUIRED_TABLES if t not in tables]
    if missing:
        return f"not an MLflow store (no table {', '.join(missing)})"
    return None


def _revision_problem(db: sqlite3.Connection) -> str | None:
    rows = db.execute("select version_num from alembic_version").fetchall()
    if len(rows) != 1:
        return f"alembic_version holds {len(rows)} rows, not one"
    revision = rows[0][0]
    if revision not in known_revisions():
        mlflow = importlib.metadata.version("mlflow")
        return (f"schema revision {shown(str(revision))} is not one MLflow {mlflow} knows "
                "(a newer MLflow made it? upgrade MLflow here)")
    return None


def _local_path(value: str) -> str:
    """The filesystem path a value names as MLflow reads it (a file: URI's path, unquoted)."""
    if value[:5].lower() == "file:":
        return urllib.parse.unquote(urllib.parse.urlsplit(value).path)
    return value


def _inside(value: str, folder: Path) -> bool:
    """Whether VALUE, a path or a file: URI, is an absolute path in FOLDER (resolved), any link
    already there followed. A `..` is refused, not collapsed: after a link it goes elsewhere
    than the text says, and no ledger written by `pack` has one."""
    try:
        path = _local_path(value)
    except ValueError:  # not a URI at all (urlsplit: "Invalid IPv6 URL" for file://[...)
        return False
    if not os.path.isabs(path) or "\0" in path:  # a NUL: no path, and resolve() would raise
        return False
    if ".." in path.split("/"):
        return False
    return Path(path).resolve().is_relative_to(folder)


def _looks_like_path(value: str) -> bool:
    return value.startswith("/") or value[:5].lower() == "file:"


def _text(value: object) -> str:
    """A stored value as text (a BLOB, which SQL's LIKE and replace() read as text, too)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _stored_paths(db: sqlite3.Connection, *, skip_default: bool = True
                  ) -> Iterator[tuple[str, str]]:
    """(where, stored value) of every path the store carries: every artifact location (each
    must be a path; the Default experiment's too unless SKIP_DEFAULT, which localize moves),
    every checkpoint_dir tag but an empty one, every other tag or param whose value is an
    absolute path or a file: URI."""
    tables = {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}
    for table, column, key in ARTIFACT_COLUMNS:
        if table in tables:
            for ident, value in db.execute(f"select {key}, {column} from {table} "
                                           f"where {column} is not null"):
                if not (skip_default and table == "experiments"
                        and str(ident) == DEFAULT_EXPERIMENT):
                    yield f"{table}.{column} of {key} {shown(str(ident))}", _text(value)
    for table, owner in TAG_TABLES:
        for ident, key, value in db.execute(
                f"select {owner}, key, value from {table} where value is not null and "
                "(key = ? or value like '/%' or value like 'file:%')", (CHECKPOINT_TAG,)):
            value = _text(value)
            if (key == CHECKPOINT_TAG and value) or _looks_like_path(value):
                yield f"{table} {shown(_text(key))} of {owner} {shown(str(ident))}", value


def check_store(db_path: Path, folder: Path, label: str) -> None:
    """Refuse (LedgerArchiveError, message starting with LABEL) a store that is not an
    untampered MLflow store whose every path, PLACEHOLDER replaced by FOLDER, is in FOLDER.
    Opens it read-only: nothing is written."""
    with open(db_path, "rb") as f:
        if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise LedgerArchiveError(f"{label}: not an SQLite database")
    folder = folder.resolve()
    try:
        with closing(connect(db_path, read_only=True)) as db:
            problem = _schema_problem(db) or _revision_problem(db)
            if problem is None:
                result = [r[0] for r in db.execute("pragma quick_check(1)")]
                if result != ["ok"]:
                    problem = f"corrupt (sqlite's quick_check: {shown(str(result[0]))})"
            if problem is None:
                prefix = str(folder).rstrip("/") + "/"
                for where, value in _stored_paths(db):
                    if not _inside(rewritten(value, PLACEHOLDER, prefix), folder):
                        problem = f"{where} is {shown(value)}, not a path inside {folder}"
                        break
    except sqlite3.Error as e:
        raise LedgerArchiveError(f"{label}: cannot be read as an SQLite database "
                                 f"({type(e).__name__}: {e})") from e
    if problem:
        raise LedgerArchiveError(f"{label}: {problem}")


def quoted(name: str) -> str:
    """An SQL identifier, quoted (the names come from the store, which may be untrusted)."""
    return '"' + name.replace('"', '""') + '"'


def _text_columns(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(table, column) of every column that can hold a path, whatever MLflow's schema version."""
    tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
    out = []
    for table in tables:
        for _, column, kind, *_ in db.execute(f"pragma table_info({quoted(table)})"):
            if kind.upper() in ("", "TEXT", "CLOB") or "CHAR" in kind.upper():
                out.append((quoted(table), quoted(column)))
    return out


def _uri_prefix(prefix: str) -> str:
    return "file://" + urllib.parse.quote(prefix)


def rewritten(value: str, old: str, new: str) -> str:
    """VALUE as `rewrite` leaves it: the same two replacements, in Python."""
    return value.replace(_uri_prefix(old), _uri_prefix(new)).replace(old, new)


def _replace_everywhere(db: sqlite3.Connection, old: str, new: str) -> None:
    for table, column in _text_columns(db):
        db.execute(f"update {table} set {column} = replace({column}, ?, ?) "
                   f"where instr({column}, ?) > 0", (old, new, old))


def rewrite(db: sqlite3.Connection, old_prefix: str, new_prefix: str) -> None:
    """Replace a folder prefix, in file URIs first (percent-encoded: a folder with a space is
    file:///a/my%20dir/ there) and then as a plain path (tags such as checkpoint_dir)."""
    _replace_everywhere(db, _uri_prefix(old_prefix), _uri_prefix(new_prefix))
    _replace_everywhere(db, old_prefix, new_prefix)


def localize(db_path: Path, folder: Path) -> None:
    """Write FOLDER for PLACEHOLDER in the store at DB_PATH, checked by check_store first, and
    point the Default experiment into FOLDER (see DEFAULT_EXPERIMENT)."""
    folder = folder.resolve()
    with closing(connect(db_path, read_only=False)) as db:
        rewrite(db, PLACEHOLDER, str(folder).rstrip("/") + "/")
        (location,) = db.execute("select artifact_location from experiments where "
                                 "experiment_id = ?", (DEFAULT_EXPERIMENT,)).fetchone() or (None,)
        if location is not None and not _inside(str(location), folder):
            db.execute("update experiments set artifact_location = ? where experiment_id = ?",
                       (str(folder / "mlruns" / DEFAULT_EXPERIMENT), DEFAULT_EXPERIMENT))
        db.commit()


def verify_localized(db_path: Path, folder: Path, label: str) -> None:
    """After localize: every path the store now carries, the Default experiment's included,
    read back from the store itself, lies in FOLDER. check_store predicted the rewrite in
    Python; a store whose schema differs from MLflow's (a path column declared BLOB, which the
    rewrite passes over; an experiment id stored so that localize's lookup misses it) would
    otherwise keep a path outside."""
    folder = folder.resolve()
    try:
        with closing(connect(db_path, read_only=True)) as db:
            for where, value in _stored_paths(db, skip_default=False):
                if not _inside(value, folder):
                    raise LedgerArchiveError(f"{label}: {where} is {shown(value)} after the "
                                             f"rewrite, not a path inside {folder}")
    except sqlite3.Error as e:
        raise LedgerArchiveError(f"{label}: cannot be read as an SQLite database "
                                 f"({type(e).__name__}: {e})") from e


def occurrences(db: sqlite3.Connection, text: str) -> list[str]:
    """Where TEXT is still in the store: 'table.column (n rows)'."""
    out = []
    for table, column in _text_columns(db):
        n = db.execute(f"select count(*) from {table} where instr({column}, ?) > 0",
                       (text,)).fetchone()[0]
        if n:
            out.append(f"{table}.{column} ({n} rows)")
    return out
