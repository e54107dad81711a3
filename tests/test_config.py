"""Tests of pipeline.config (sweep files) and pipeline.planner (planning).

* tests/data/bad_sweeps/: every malformed sweep file is refused with a message that names the
  file and the field path (or line) and contains its expected fragment; through the CLI
  none of them starts Ray or creates an MLflow store.
* Hypothesis fuzzes the loader: random YAML structures and mutations of valid sweeps either
  load (and then expand) or raise SweepError, never anything else.
* Every shipped sweeps/*.yaml validates and expands; isoflop cells hit their budget within 1%.
* Planning is deterministic, and run_id follows what is trained, not resources or the name.

Subprocesses (about 1 s each) are few: four bad files through `python -m pipeline.sweep`, one
that checks that Ray and MLflow are never imported, and the quickstart dry run.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline import sweep as sweep_cli
from pipeline.config import (
    MAX_FILE_BYTES,
    DataSection,
    GridSection,
    IsoflopSection,
    ResourcesSection,
    RunEntry,
    ShapeOverride,
    ShapeSection,
    SizesSection,
    SweepConfig,
    SweepError,
    TrainSection,
    _Loader,
    load_sweep,
    parse_sweep,
    resolve_corpus,
)
from pipeline.planner import ISOFLOP_TOLERANCE, Plan, expand, vocab_size_for
from pipeline.vocab import flops

ROOT = Path(__file__).resolve().parents[1]
BAD = ROOT / "tests" / "data" / "bad_sweeps"
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))

# file -> fragments its error must contain (besides the file's path, checked for every line).
BAD_SWEEPS: dict[str, tuple[str, ...]] = {
    "unknown_key_top.yaml": ("unknown key 'isoflops'", "did you mean 'isoflop'?"),
    "unknown_key_nested.yaml": ("unknown key 'train.batchsize'", "did you mean 'batch_size'?"),
    "yaml_syntax.yaml": ("yaml_syntax.yaml:4:", "invalid YAML"),
    "yaml_tab.yaml": ("yaml_tab.yaml:4:", "'\\t'"),
    "not_a_mapping.yaml": ("must be a YAML mapping", "got a list"),
    "scalar_document.yaml": ("must be a YAML mapping", "'just some text'"),
    "empty.yaml": ("the file is empty",),
    "not_utf8.yaml": ("not a UTF-8 text file", "at byte 92"),
    "nul_character.yaml": ("nul_character.yaml:3:", "#x0000"),
    "python_tag.yaml": ("python_tag.yaml:12:", "python/object/apply:os.system"),
    "duplicate_key.yaml": ("duplicate_key.yaml:9:", "duplicate key 'lr'", "first given on line 8"),
    "octal_number.yaml": ("octal_number.yaml:7:", "ambiguous number '010'"),
    "sexagesimal_number.yaml": ("sexagesimal_number.yaml:7:", "ambiguous number '1:30'"),
    "quoted_number.yaml": ("train.batch_size:", "(got '16')", "without quotes"),
    "fractional_cpus.yaml": ("resources.num_cpus: must be a whole number (got 1.5)",),
    "negative_gpus.yaml": ("resources.num_gpus:", "(got -0.5)"),
    "zero_lr.yaml": ("train.lr: Input should be greater than 0 (got 0)",),
    "seq_len_one.yaml": ("data.seq_len:", "(got 1)"),
    "bad_name.yaml": ("name: must start with a letter or digit", "(got 'runs/v2')"),
    "bool_name.yaml": ("name:", "(got True)", "quote it"),
    "missing_kind.yaml": ("kind: required field is missing",),
    "bad_kind.yaml": ("kind:", "(got 'isoflops')", "did you mean 'isoflop'?"),
    "kind_section_mismatch.yaml": ("isoflop: section does not belong to kind 'grid'",
                                   "grid: section is missing"),
    "sizes_none.yaml": ("isoflop.sizes: give exactly one of depths, widths, shapes, count (none given)",
                        "'span': 4"),
    "sizes_several.yaml": ("isoflop.sizes:", "(depths and count given)"),
    "empty_budgets.yaml": ("isoflop.budgets:", "at least 1 item", "(got [])"),
    "duplicate_budgets.yaml": ("isoflop.budgets[2]: duplicate of budgets[0]",),
    "infinite_budget.yaml": ("isoflop.budgets[1]:", "finite", "(got inf)"),
    "duplicate_runs.yaml": ("runs[2]: duplicate of runs[0]", "'depth': 2"),
    "runs_depth_and_shape.yaml": ("runs[0]: give either depth or (n_layer, d_model)",),
    "corpus_missing.yaml": ("data.corpus: path does not exist", "'no_such_corpus.txt'"),
    "corpus_glob_empty.yaml": ("data.corpus: glob matches no file",
                               "'path:no_such_folder/*.txt'"),
    "d_model_not_divisible.yaml": ("isoflop.sizes.shapes[1].d_model:", "head_dim=8", "(got 20)"),
    "depth_over_max.yaml": ("isoflop.sizes.depths[2]:", "max_depth=64", "(got 80)"),
    "count_in_grid.yaml": ("grid.sizes.count: is for isoflop sweeps only", "(got 3)"),
    "odd_head_dim.yaml": ("shape.head_dim: must be even (got 7)",),
    "ignored_setting.yaml": ("train.decay_fraction: is ignored without schedule 'wsd' (schedule 'cosine')",
                             "(got 0.3)"),
    "section_not_mapping.yaml": ("train: must be a mapping", "(got ['batch_size', 16])"),
    "multiple_documents.yaml": ("multiple_documents.yaml:12:", "single document"),
    "bad_flops_convention.yaml": ("flops_convention:", "(got 'exactt')",
                                  "did you mean 'exact'?"),
    "too_many_runs.yaml": ("isoflop: plans 161 budgets x 64 sizes x 1 seeds = 10,304 runs",),
    "alias_bomb.yaml": ("description: Input should be a valid string",
                        "isoflop: must be a mapping"),
    "deeply_nested.yaml": ("nested too deeply",),
    "hf_spec.yaml": ("data.corpus: expected hf:<dataset>", "(got 'hf:')"),
    "duplicate_seeds.yaml": ("train.seeds[2]: duplicate of seeds[0] (got 0)",),
    "wsd_overlap.yaml": ("train.decay_fraction: warmup_fraction + decay_fraction exceeds 1",),
}
# Valid files whose every cell is skipped: the CLI refuses them (pipeline.sweep.main).
EMPTY_PLANS: dict[str, tuple[str, ...]] = {
    "budgets_too_small.yaml": ("the sweep has no buildable run", "< min_steps=20"),
}
# The handful that also go through a real `python -m pipeline.sweep` subprocess.
CLI_SAMPLES = ("unknown_key_top.yaml", "duplicate_key.yaml", "python_tag.yaml",
               "budgets_too_small.yaml")


# --------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------

ISO_BASE: dict[str, Any] = {
    "name": "base",
    "kind": "isoflop",
    "family": "gpt",
    "shape": {"head_dim": 8},
    "data": {"corpus": "stdlib", "tokenizer": "bytes", "seq_len": 64},
    "train": {"batch_size": 8, "lr": 3e-3, "seeds": [0]},
    "resources": {"num_cpus": 1, "num_gpus": 0},
    "flops_convention": "exact",
    "isoflop": {"budgets": [6e10, 1.5e11],
                "sizes": {"shapes": [{"n_layer": 1, "d_model": 16},
                                     {"n_layer": 2, "d_model": 32}]}},
}
GRID_BASE: dict[str, Any] = {
    "name": "grid", "kind": "grid",
    "grid": {"sizes": {"depths": [1, 2]}, "tokens": [2e5, 4e5]},
}
RUNS_BASE: dict[str, Any] = {
    "name": "runs", "kind": "runs", "family": "llama",
    "runs": [{"depth": 2, "tokens": 1e6}, {"n_layer": 1, "d_model": 32, "tokens": 5e5}],
}


def merged(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of base with sections updated: merged(ISO_BASE, train={"lr": 0.01})."""
    doc = copy.deepcopy(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key] = {**doc[key], **value}
        else:
            doc[key] = value
    return doc


def sweep_from(doc: dict[str, Any]) -> SweepConfig:
    """Through YAML text, as a file would be read."""
    return parse_sweep(yaml.safe_dump(doc), "test.yaml")


def plan_of(doc: dict[str, Any]) -> Plan:
    return expand(sweep_from(doc))


def run_ids(doc: dict[str, Any]) -> list[str]:
    return [s.run_id for s in plan_of(doc).specs]


def cli(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m pipeline.sweep ARGS` in cwd, with a private, empty RAY_TMPDIR."""
    environ = {k: v for k, v in os.environ.items()
               if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                          environ.get("PYTHONPATH")]))
    environ.update(RAY_TMPDIR=str(cwd / "ray"), RAY_USAGE_STATS_ENABLED="0", **env)
    (cwd / "ray").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "pipeline.sweep", *args], cwd=cwd,
                          env=environ, capture_output=True, text=True, timeout=120)


def assert_untouched(cwd: Path) -> None:
    """No MLflow store, no Ray session, nothing written but the empty Ray temp folder."""
    assert not (cwd / "mlflow.db").exists()
    assert not (cwd / "mlruns").exists()
    assert list((cwd / "ray").iterdir()) == []
    assert sorted(p.name for p in cwd.iterdir()) == ["ray"]


# --------------------------------------------------------------------------------------
# malformed sweep files
# --------------------------------------------------------------------------------------


def test_every_bad_sweep_file_has_an_expectation() -> None:
    on_disk = {p.name for p in BAD.iterdir()}
    assert on_disk == set(BAD_SWEEPS) | set(EMPTY_PLANS)
    assert len(on_disk) >= 25


@pytest.mark.parametrize("name", sorted(BAD_SWEEPS))
def test_bad_sweep_is_refused_naming_file_and_field(name: str) -> None:
    path = BAD / name
    with pytest.raises(SweepError) as info:
        expand(load_sweep(path), path)
    message = str(info.value)
    for line in message.splitlines():
        assert line.startswith(f"{path}:"), line
    for fragment in BAD_SWEEPS[name]:
        assert fragment in message


@pytest.mark.parametrize("name", sorted(EMPTY_PLANS))
def test_unbuildable_sweep_loads_but_plans_nothing(name: str) -> None:
    path = BAD / name
    plan = expand(load_sweep(path), path)
    assert plan.specs == []
    assert plan.skipped and all("min_steps" in s.reason for s in plan.skipped)


def test_cli_refuses_every_bad_sweep_before_ray_or_mlflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a bad sweep reached Ray")

    monkeypatch.setattr("pipeline.driver.runner.init_ray", forbidden)
    monkeypatch.setattr(sweep_cli, "run_sweep", forbidden)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ray").mkdir()
    for name, fragments in {**BAD_SWEEPS, **EMPTY_PLANS}.items():
        assert sweep_cli.main([str(BAD / name)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith(f"error: {BAD / name}"), err
        assert all(f in err for f in fragments), (name, err)
    assert_untouched(tmp_path)


@pytest.mark.parametrize("name", CLI_SAMPLES)
def test_cli_subprocess_exits_2_and_touches_nothing(name: str, tmp_path: Path) -> None:
    result = cli([str(BAD / name)], tmp_path)
    assert result.returncode == 2, result.stderr
    fragments = {**BAD_SWEEPS, **EMPTY_PLANS}[name]
    assert all(f in result.stderr for f in fragments), result.stderr
    assert str(BAD / name) in result.stderr
    assert_untouched(tmp_path)  # also: python_tag.yaml's `touch pwned` never ran


def test_bad_sweeps_never_import_ray_or_mlflow(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from pipeline.sweep import main\n"
        "codes = [main([p]) for p in sys.argv[1:]]\n"
        "assert codes == [2] * len(codes), codes\n"
        "print('imported:', sorted(m for m in ('ray', 'mlflow') if m in sys.modules))\n"
    )
    files = [str(BAD / n) for n in sorted({**BAD_SWEEPS, **EMPTY_PLANS})]
    result = subprocess.run([sys.executable, "-c", code, *files], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "RAY_TMPDIR": str(tmp_path / "ray")})
    assert result.returncode == 0, result.stderr
    assert "imported: []" in result.stdout
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------
# reading files and YAML
# --------------------------------------------------------------------------------------


def test_missing_file_directory_and_huge_file(tmp_path: Path) -> None:
    with pytest.raises(SweepError, match="no such sweep file"):
        load_sweep(tmp_path / "nope.yaml")
    with pytest.raises(SweepError, match="not a regular file"):
        load_sweep(tmp_path)
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\n" + "# padding\n" * (MAX_FILE_BYTES // 10 + 1))
    with pytest.raises(SweepError, match=r"huge\.yaml: file is 1,000,0\d\d bytes"):
        load_sweep(huge)


def test_utf8_bom_and_comments_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbf# a comment\n" + yaml.safe_dump(ISO_BASE).encode())
    assert load_sweep(path).name == "base"


@pytest.mark.parametrize("tag", [
    "!!python/object:pipeline.config.SweepConfig {}",
    "!!python/name:os.system ''",
    "!!python/object/apply:os.system ['echo hacked']",
    "!!python/module:os ''",
])
def test_python_tags_are_refused(tag: str) -> None:
    assert issubclass(_Loader, yaml.SafeLoader)
    with pytest.raises(SweepError, match=r"x\.yaml:2:\d+: invalid YAML: could not determine"):
        parse_sweep(f"name: t\ndescription: {tag}\nkind: runs\n", "x.yaml")


def test_yaml_12_floats_without_touching_safeloader() -> None:
    cfg = sweep_from(ISO_BASE)
    text = yaml.safe_dump(ISO_BASE).replace("60000000000.0", "6e10").replace(
        "150000000000.0", "1.5e11")
    assert "6e10" in text and "1.5e11" in text
    assert parse_sweep(text).isoflop == cfg.isoflop  # 6e10 is a number, not "6e10"
    assert yaml.safe_load("x: 6e10") == {"x": "6e10"}  # the global SafeLoader is unchanged


def test_merge_keys_may_override_but_real_duplicates_may_not() -> None:
    text = ("name: t\nkind: runs\nruns:\n"
            "  - &one {depth: 2, tokens: 1e6}\n"
            "  - {<<: *one, tokens: 2e6}\n")
    cfg = parse_sweep(text)
    assert [r.tokens for r in cfg.runs or []] == [1e6, 2e6]
    with pytest.raises(SweepError, match=r"x\.yaml:5:\d+: .*duplicate key 'tokens'"):
        parse_sweep(text.replace("{<<: *one, tokens: 2e6}", "{depth: 3, tokens: 1, tokens: 2}"),
                    "x.yaml")


@pytest.mark.parametrize(("section", "key", "value", "fragment"), [
    ("train", "batch_size", 16.0, "must be a whole number (got 16.0)"),
    ("train", "batch_size", True, "valid integer (got True)"),
    ("train", "lr", "0.01", "valid number (got '0.01')"),
    ("train", "seeds", 0, "valid list (got 0)"),
    ("resources", "num_gpus", "0.5", "valid number (got '0.5')"),
    ("data", "tokenizer", 1, "(got 1)"),
    ("train", "lr", float("nan"), "finite number (got nan)"),
])
def test_no_value_is_coerced(section: str, key: str, value: object, fragment: str) -> None:
    with pytest.raises(SweepError, match=f"test.yaml: {section}.{key}: ") as info:
        sweep_from(merged(ISO_BASE, **{section: {key: value}}))
    assert fragment in str(info.value)


def test_ints_for_floats_are_not_a_change() -> None:
    cfg = sweep_from(merged(ISO_BASE, train={"lr": 1}, isoflop={"budgets": [10**11]}))
    assert cfg.train.lr == 1.0 and cfg.isoflop is not None and cfg.isoflop.budgets == [1e11]


def test_all_errors_are_reported_at_once() -> None:
    doc = merged(ISO_BASE, train={"lr": -1, "batch_size": 0}, resources={"num_cpus": 0})
    with pytest.raises(SweepError) as info:
        sweep_from(doc)
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert {line.split(":")[1].strip() for line in lines} == {
        "train.lr", "train.batch_size", "resources.num_cpus"}


def test_settings_the_options_ignore_are_errors() -> None:
    for doc, where in [
        (merged(ISO_BASE, data={"bpe_vocab_size": 512}), "data.bpe_vocab_size"),
        (merged(ISO_BASE, shape={"gqa_ratio": 4}), "shape.gqa_ratio"),
        (merged(ISO_BASE, isoflop={"budgets": [1e11], "sizes": {"depths": [1], "span": 4.0}}),
         "isoflop.sizes.span"),
    ]:
        with pytest.raises(SweepError, match=f"{where}: is ignored"):
            sweep_from(doc)
    # ... but used ones are fine
    sweep_from(merged(ISO_BASE, data={"tokenizer": "bpe", "bpe_vocab_size": 512}))
    sweep_from(merged(ISO_BASE, family="llama", shape={"gqa_ratio": 4}))


def test_config_is_frozen() -> None:
    cfg = sweep_from(ISO_BASE)
    with pytest.raises(ValueError, match="frozen"):
        cfg.train.lr = 1.0  # type: ignore[misc]


# --------------------------------------------------------------------------------------
# corpus paths
# --------------------------------------------------------------------------------------


def test_resolve_corpus_matches_what_load_corpus_reads(tmp_path: Path) -> None:
    from pipeline.data import load_corpus

    sweep_file = tmp_path / "s.yaml"
    (tmp_path / "text.txt").write_text("hello world\n")
    plain = resolve_corpus("text.txt", sweep_file)
    assert plain == str(tmp_path.resolve() / "text.txt")
    assert resolve_corpus("path:text.txt", sweep_file) == plain  # same files, same run_id
    assert resolve_corpus(f"path:{plain}", sweep_file) == plain
    assert resolve_corpus("stdlib", sweep_file) == "stdlib"
    assert resolve_corpus("path:stdlib", sweep_file) == str(tmp_path.resolve() / "stdlib")
    assert resolve_corpus("hf:roneneldan/TinyStories", sweep_file) == "hf:roneneldan/TinyStories"
    assert resolve_corpus("~/x.txt", sweep_file) == str(Path.home().resolve() / "x.txt")
    assert [d.text for d in load_corpus(plain)] == ["hello world\n"]


@pytest.mark.parametrize("corpus", ["text.txt", "path:text.txt", "sub*/*.txt", "path:sub1",
                                    "**/*.txt"])
def test_local_corpus_forms_load(tmp_path: Path, corpus: str) -> None:
    from pipeline.data import load_corpus

    (tmp_path / "text.txt").write_text("a")
    (tmp_path / "sub1").mkdir()
    (tmp_path / "sub1" / "b.txt").write_text("b")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(merged(ISO_BASE, data={"corpus": corpus})))
    spec = expand(load_sweep(path), path).specs[0]
    assert Path(spec.data.corpus.split("*")[0]).is_absolute()
    assert load_corpus(spec.data.corpus)  # pipeline.data reads what the planner resolved


def test_corpus_folder_without_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty" / ".hidden").mkdir(parents=True)
    (tmp_path / "empty" / ".hidden" / "x.txt").write_text("hidden files are skipped")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(merged(ISO_BASE, data={"corpus": "empty"})))
    with pytest.raises(SweepError, match="data.corpus: directory holds no files"):
        load_sweep(path)


# --------------------------------------------------------------------------------------
# shipped sweeps
# --------------------------------------------------------------------------------------


def test_shipped_sweeps_exist() -> None:
    assert ROOT / "sweeps" / "quickstart.yaml" in SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_sweep_validates_and_expands(path: Path) -> None:
    cfg = load_sweep(path)
    plan = expand(cfg, path, vocab_size_for(cfg) or 128)  # chars: any vocabulary will do
    assert len(plan.specs) > 0
    ids = [s.run_id for s in plan.specs]
    assert len(set(ids)) == len(ids)
    assert all(s.sweep == cfg.name and s.steps >= cfg.train.min_steps for s in plan.specs)
    if cfg.kind == "isoflop":
        for s in plan.specs:
            assert s.budget is not None
            achieved = flops.training_flops(s.model, s.tokens, cfg.flops_convention)
            assert achieved == pytest.approx(s.budget, rel=0.01), s.run_id


def test_quickstart_dry_run_prints_the_plan(tmp_path: Path) -> None:
    quick = ROOT / "sweeps" / "quickstart.yaml"
    # Another hash seed than this process: run_ids must not depend on it.
    result = cli([str(quick), "--dry-run", "--no-estimate"], tmp_path, PYTHONHASHSEED="12345")
    assert result.returncode == 0, result.stderr
    plan = expand(load_sweep(quick), quick)
    for spec in plan.specs:
        assert spec.run_id in result.stdout
    assert f"total: {len(plan.specs)} runs" in result.stdout
    assert_untouched(tmp_path)


# --------------------------------------------------------------------------------------
# planning
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("base", [ISO_BASE, GRID_BASE, RUNS_BASE], ids=["isoflop", "grid", "runs"])
def test_expansion_is_deterministic(base: dict[str, Any]) -> None:
    first, second = run_ids(base), run_ids(base)
    assert first == second and len(first) > 0 and len(set(first)) == len(first)


@pytest.mark.parametrize("change", [
    {"train": {"lr": 1e-3}},
    {"train": {"batch_size": 16}},
    {"train": {"seeds": [1]}},
    {"train": {"warmup_fraction": 0.1}},
    {"train": {"weight_decay": 0.0}},
    {"data": {"seq_len": 32}},
    {"flops_convention": "6nd"},
], ids=lambda c: str(c))
def test_run_id_changes_with_what_is_trained(change: dict[str, Any]) -> None:
    before, after = run_ids(ISO_BASE), run_ids(merged(ISO_BASE, **change))
    assert after and not set(before) & set(after)


@pytest.mark.parametrize("change", [
    {"resources": {"num_cpus": 4}},
    {"resources": {"num_gpus": 0.25, "max_retries": 5, "checkpoint_interval": 10}},
    {"name": "another-name"},
    {"description": "words"},
], ids=lambda c: str(c))
def test_run_id_ignores_resources_and_name(change: dict[str, Any]) -> None:
    assert run_ids(merged(ISO_BASE, **change)) == run_ids(ISO_BASE)


def test_more_seeds_add_runs_and_keep_the_first() -> None:
    one, two = run_ids(ISO_BASE), run_ids(merged(ISO_BASE, train={"seeds": [0, 1]}))
    assert len(two) == 2 * len(one) and set(one) < set(two)


def test_isoflop_order_and_budget_round_trip() -> None:
    cfg = sweep_from(ISO_BASE)
    plan = expand(cfg)
    assert [(s.budget, s.model.d_model) for s in plan.specs] == [
        (6e10, 16), (6e10, 32), (1.5e11, 16), (1.5e11, 32)]
    for s in plan.specs:
        assert s.tokens == s.steps * cfg.train.batch_size * cfg.data.seq_len
        assert s.budget is not None
        gap = flops.training_flops(s.model, s.tokens, "exact") / s.budget - 1
        assert abs(gap) <= ISOFLOP_TOLERANCE


def test_cells_off_budget_or_too_short_are_skipped_not_dropped() -> None:
    cfg = sweep_from(ISO_BASE)
    small = expand(cfg).specs[0].model
    per_step = cfg.train.batch_size * cfg.data.seq_len
    fpt = flops.flops_per_token(small, "exact")
    one = {"shapes": [{"n_layer": 1, "d_model": 16}]}
    budgets = [fpt * per_step * 20.6,  # 21 steps: 1.9% over the budget
               fpt * per_step * 60.4,  # 60 steps: 0.7% under
               fpt * per_step * 3]     # 3 steps < min_steps
    plan = plan_of(merged(ISO_BASE, isoflop={"budgets": budgets, "sizes": one}))
    assert [s.steps for s in plan.specs] == [60]
    reasons = " | ".join(s.reason for s in plan.skipped)
    assert "off the budget by more than 1%" in reasons and "< min_steps=20" in reasons


def test_grid_tokens_below_one_step_are_skipped() -> None:
    plan = plan_of(merged(GRID_BASE, grid={"sizes": {"depths": [1]}, "tokens": [1.0, 4e5]}))
    assert len(plan.specs) == 1
    assert plan.skipped[0].reason.startswith("1 tokens give 0 steps")


def test_runs_resolving_to_the_same_run_are_reported_as_duplicates() -> None:
    # depth 2 of the default rule is n_layer 2, d_model 32: the same run, written twice.
    doc = merged(RUNS_BASE, family="gpt",
                 runs=[{"depth": 2, "tokens": 1e6}, {"n_layer": 2, "d_model": 32, "tokens": 1e6}])
    plan = plan_of(doc)
    assert len(plan.specs) == 1
    assert [s.reason for s in plan.skipped] == ["duplicate of gpt L2 d32 D=1e+06"]


def test_count_sizes_spread_around_the_optimum() -> None:
    doc = merged(ISO_BASE, isoflop={"budgets": [1e12], "sizes": {"count": 5, "span": 16.0}})
    plan = plan_of(doc)
    sizes = [flops.params_total(s.model) for s in plan.specs]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes) >= 3
    assert len(plan.specs) + sum("deduplicated" in s.reason for s in plan.skipped) >= 1


def test_chars_tokenizer_needs_a_vocabulary() -> None:
    cfg = sweep_from(merged(ISO_BASE, data={"tokenizer": "chars"}))
    with pytest.raises(ValueError, match="vocab_size"):
        expand(cfg)
    assert all(s.model.vocab_size == 97 for s in expand(cfg, vocab_size=97).specs)


# --------------------------------------------------------------------------------------
# fuzzing: load or SweepError, nothing else
# --------------------------------------------------------------------------------------

_MODELS = (SweepConfig, ShapeSection, DataSection, TrainSection, ResourcesSection,
           SizesSection, ShapeOverride, IsoflopSection, GridSection, RunEntry)
FIELD_NAMES = sorted({name for m in _MODELS for name in m.model_fields})
SCALARS = (st.none() | st.booleans() | st.integers(-(10**6), 10**20) | st.floats()
           | st.sampled_from(["isoflop", "grid", "runs", "gpt", "llama", "bytes", "stdlib",
                              "exact", "6nd", "hf:x", "path:x", "1e5", "010"])
           | st.text(max_size=10))
PLAUSIBLE_INTS = st.sampled_from([0, 1, 2, 3, 4, 8, 16, 32, 64, 100, 512, 10**6])
PLAUSIBLE_FLOATS = st.sampled_from([0.0, 1e-4, 3e-3, 0.1, 0.5, 0.99, 1.0, 2.0, 20.0, 1e5, 1e6,
                                    4e6, 1e9, 1e11, 3e11, 1e13])
PLAUSIBLE_STRINGS = st.sampled_from(["isoflop", "grid", "runs", "gpt", "llama", "bytes",
                                      "chars", "bpe", "exact", "6nd", "kaplan", "cosine", "wsd",
                                      "constant", "fp32", "bf16", "stdlib", "name-2"])
KEYS = st.sampled_from(FIELD_NAMES) | st.text(max_size=8)
TREES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=20,
)


@st.composite
def mutated_sweeps(draw: st.DrawFn) -> dict[str, Any]:
    """A valid sweep with 1-3 random edits: replace, delete or add somewhere in the tree."""
    doc = copy.deepcopy(draw(st.sampled_from([ISO_BASE, GRID_BASE, RUNS_BASE])))
    for _ in range(draw(st.integers(1, 3))):
        slots: list[tuple[Any, Any]] = []
        stack: list[Any] = [doc]
        while stack:
            node = stack.pop()
            keys = list(node) if isinstance(node, dict) else range(len(node))
            for k in keys:
                slots.append((node, k))
                if isinstance(node[k], dict | list):
                    stack.append(node[k])
        leaves = [(c, k) for c, k in slots if not isinstance(c[k], dict | list)]
        action = draw(st.sampled_from(["tweak", "tweak", "replace", "delete", "add"]))
        if action == "tweak" and leaves:
            slots = leaves
        if not slots:  # everything deleted
            break
        container, key = slots[draw(st.integers(0, len(slots) - 1))]
        if action == "tweak":  # a plausible value of the same type: many of these still load
            old = container[key]
            pool = (PLAUSIBLE_INTS if isinstance(old, int) and not isinstance(old, bool)
                    else PLAUSIBLE_FLOATS if isinstance(old, float)
                    else PLAUSIBLE_STRINGS if isinstance(old, str) else SCALARS)
            container[key] = draw(pool)
        elif action == "replace":
            container[key] = draw(SCALARS | TREES)
        elif action == "delete":
            del container[key]
        elif isinstance(container, dict):
            container[draw(KEYS)] = draw(PLAUSIBLE_INTS | PLAUSIBLE_FLOATS | PLAUSIBLE_STRINGS
                                         | TREES)
        else:
            container.append(draw(TREES))
    return doc


def load_or_sweep_error(text: str, folder: Path) -> None:
    """The property: a text loads (and plans) or raises SweepError, never anything else."""
    path = folder / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        cfg = load_sweep(path)
    except SweepError as e:
        assert str(e).startswith(f"{path}"), str(e)
        return
    plan = expand(cfg, path, vocab_size=300)
    ids = [s.run_id for s in plan.specs]
    assert len(set(ids)) == len(ids)
    for s in plan.specs:
        if s.budget is not None:
            achieved = flops.training_flops(s.model, s.tokens, cfg.flops_convention)
            assert abs(achieved / s.budget - 1) <= ISOFLOP_TOLERANCE


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@FUZZ
@given(doc=st.dictionaries(KEYS, TREES, max_size=8))
def test_fuzz_random_structures(doc: dict[str, Any], fuzz_dir: Path) -> None:
    load_or_sweep_error(yaml.safe_dump(doc, allow_unicode=True), fuzz_dir)


@FUZZ
@given(doc=TREES)
def test_fuzz_random_documents(doc: Any, fuzz_dir: Path) -> None:
    load_or_sweep_error(yaml.safe_dump(doc, allow_unicode=True), fuzz_dir)


@FUZZ
@given(doc=mutated_sweeps())
def test_fuzz_mutated_valid_sweeps(doc: dict[str, Any], fuzz_dir: Path) -> None:
    load_or_sweep_error(yaml.safe_dump(doc, allow_unicode=True), fuzz_dir)


@FUZZ
@given(text=st.text(alphabet=st.sampled_from(list(":-[]{}&*!|>'\"%@`#,?\n\t  abc019.e"))
                    | st.characters(codec="utf-8"), max_size=80))
def test_fuzz_raw_text(text: str, fuzz_dir: Path) -> None:
    load_or_sweep_error(text, fuzz_dir)


def test_docs_list_every_sweep_field() -> None:
    """docs/sweeps.md documents every key a sweep file accepts (docs match the code)."""
    from pipeline import config as c

    text = (Path(__file__).parent.parent / "docs" / "sweeps.md").read_text()
    sections = (c.ShapeSection, c.DataSection, c.TrainSection, c.ResourcesSection,
                c.SizesSection, c.IsoflopSection, c.ReplicatesSection, c.HoldoutSection,
                c.SweepConfig)
    missing = [f"{m.__name__}.{name}" for m in sections for name in m.model_fields
               if f"`{name}`" not in text and f"{name}:" not in text]
    assert not missing, f"undocumented sweep keys: {missing}"
