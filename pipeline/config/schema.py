"""The whole sweep file (SweepConfig): its sections and the checks that involve several of
them."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from pipeline.config.base import (
    _NO_VALUE,
    MAX_RUNS,
    Strict,
    _duplicates,
    _raise_if,
    _repr,
    _unused,
)
from pipeline.config.sections import (
    DataSection,
    GridSection,
    IsoflopSection,
    ResourcesSection,
    RunEntry,
    ShapeSection,
    TrainSection,
)
from pipeline.vision.sources import declared_geometry, is_image_corpus
from pipeline.vocab.families import DEFAULT_FAMILY, FAMILY_REGISTRY, family_names, get_family
from pipeline.vocab.flops import CONVENTIONS

SWEEP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
"""A sweep's or experiment's name. It names folders (checkpoints/NAME/, reports/NAME/), so it
is one path component: no separator, no leading dot (so never `.` or `..`)."""
_SECTIONS = ("isoflop", "grid", "runs")


class SweepConfig(Strict):
    name: str
    """Sweep name = MLflow experiment name = reports/<name>/: letters, digits, _ . -"""
    description: str = ""
    kind: Literal["isoflop", "grid", "runs"]
    family: str = DEFAULT_FAMILY
    """Model family: a name in the family registry (pipeline.vocab.families.FAMILY_REGISTRY)."""
    shape: ShapeSection = ShapeSection()
    data: DataSection = DataSection()
    train: TrainSection = TrainSection()
    resources: ResourcesSection = ResourcesSection()
    flops_convention: Literal[CONVENTIONS] = "exact"  # type: ignore[valid-type]
    """FLOP convention that turns an isoflop budget into tokens (see pipeline.vocab.flops)."""
    isoflop: IsoflopSection | None = None
    grid: GridSection | None = None
    runs: Annotated[list[RunEntry], Field(min_length=1)] | None = None

    @field_validator("family")
    @classmethod
    def _registered(cls, name: str) -> str:
        """The registry is read when the file is (a family registered at run time counts); the
        error is pydantic's own for a Literal, so it names the choices and a close one."""
        if name not in FAMILY_REGISTRY:
            expected = ", ".join(repr(n) for n in family_names()[:-1])
            expected = f"{expected} or {family_names()[-1]!r}" if expected else ""
            raise PydanticCustomError("literal_error", "Input should be {expected}",
                                      {"expected": expected})
        return name

    @model_validator(mode="after")
    def _check(self) -> SweepConfig:
        problems: list[tuple[tuple[str | int, ...], str, object]] = []
        if not SWEEP_NAME.fullmatch(self.name):
            problems.append((("name",), "must start with a letter or digit and contain only "
                             "letters, digits, '_', '.', '-' (at most 100 characters)",
                             self.name))
        for section in _SECTIONS:
            present = getattr(self, section) is not None
            if section == self.kind and not present:
                problems.append(((section,), f"section is missing (kind is {self.kind!r})",
                                 _NO_VALUE))
            elif section != self.kind and present:
                problems.append(((section,), f"section does not belong to kind {self.kind!r}"
                                 f" (kind {section!r} would use it)", _NO_VALUE))
        fam = get_family(self.family)
        # Keys some families read and the others ignore: a given one is a mistake to name.
        others = {k for f in FAMILY_REGISTRY.values() for k in f.shape_keys} - set(fam.shape_keys)
        problems += [((("shape",) + loc), msg, v) for loc, msg, v in
                     _unused(self.shape, tuple(sorted(others)), f"by family {self.family!r}")]
        problems += self._image_problems()
        if "mask_rate" not in fam.objective.train_keys:
            problems += self._train_unused(("mask_rate",), f"by family {self.family!r} "
                                           "(mask_rate is for masked LMs)")
        problems += self._shape_problems()
        rep = self.isoflop.replicates if self.isoflop is not None else None
        # A set: `in` on the list made 30,000 replicate seeds x 30,000 train seeds a 35 s check.
        train_seeds = set(self.train.seeds)
        for i, seed in enumerate(rep.seeds if rep is not None else []):
            if seed in train_seeds:
                problems.append((("isoflop", "replicates", "seeds", i), "is already one of "
                                 f"train.seeds {_repr.repr(self.train.seeds)}", seed))
        held = self.isoflop.holdout if self.isoflop is not None else None
        for i, seed in enumerate(held.seeds or [] if held is not None else []):
            if seed in train_seeds:
                problems.append((("isoflop", "holdout", "seeds", i), "is already one of "
                                 f"train.seeds {_repr.repr(self.train.seeds)}", seed))
        problems += self._micro_batch_problems()
        runs, how = self._plan_size()
        if not problems and runs > MAX_RUNS:
            problems.append(((self.kind,), f"plans {how} = {runs:,} runs; at most {MAX_RUNS:,}",
                             _NO_VALUE))
        _raise_if(problems)
        return self

    def _train_unused(self, names: tuple[str, ...], why: str
                      ) -> list[tuple[tuple[str | int, ...], str, object]]:
        """Train keys the family ignores, given in the recipe or in any of its variants."""
        out = [(("train",) + loc, msg, v) for loc, msg, v in _unused(self.train, names, why)]
        for i, variant in enumerate(self.train.variants or []):
            out += [(("train", "variants", i, k), f"is ignored {why}; remove it", variant[k])
                    for k in names if k in variant]
        return out

    def _image_problems(self) -> list[tuple[tuple[str | int, ...], str, object]]:
        """An image family (vit) reads an image corpus with a patch size that divides its
        images; the text families read text and take no image settings."""
        d, out = self.data, []
        if not get_family(self.family).objective.images:
            if is_image_corpus(d.corpus):
                images = " or ".join(repr(f) for f in family_names(images=True))
                out.append((("data", "corpus"), f"is an image corpus; family {self.family!r} "
                            f"reads text (images are for family {images})", d.corpus))
            out += [(("data",) + loc, msg, v) for loc, msg, v in
                    _unused(d, ("image_size",), f"by family {self.family!r}")]
            out += [(("shape",) + loc, msg, v) for loc, msg, v in
                    _unused(self.shape, ("patch_size",), f"by family {self.family!r}")]
            return out
        if not is_image_corpus(d.corpus):
            return [(("data", "corpus"), f"family {self.family!r} needs an image corpus: "
                     "images:digits, images:folder:<path> or images:hf:<dataset>[:<split>]",
                     d.corpus)]
        out += [(("data",) + loc, msg, v) for loc, msg, v in _unused(
            d, ("tokenizer", "bpe_vocab_size", "seq_len", "max_bytes"),
            f"by family {self.family!r} (images, not text)")]
        if d.corpus == "images:digits" and d.image_size is not None:
            out.append((("data", "image_size"), "is not used with images:digits (8x8 images, "
                        "not resized); remove it", d.image_size))
        geometry = declared_geometry(d.corpus, d.image_size)
        if geometry is None:
            out.append((("data", "image_size"), "is required with a folder or Hugging Face "
                        "image corpus (every image is resized to it)", _NO_VALUE))
        out += self._train_unused(("sampling",), f"by family {self.family!r} (images are "
                                  "drawn without replacement, a new permutation each epoch)")
        out += self._train_unused(("eval_batches", "eval_budget"), f"by family {self.family!r} (it "
                                  "scores the whole validation split)")
        if self.resources.workers_per_run > 1:
            out.append((("resources", "workers_per_run"), f"must be 1 with family {self.family!r} "
                        "(data-parallel image runs are not supported yet)",
                        self.resources.workers_per_run))
        patch = self.shape.patch_size
        if patch is None:
            out.append((("shape", "patch_size"), f"is required by family {self.family!r}",
                        _NO_VALUE))
        elif geometry is not None and geometry[0] % patch:
            out.append((("shape", "patch_size"), f"does not divide the image side "
                        f"{geometry[0]} pixels", patch))
        return out

    def _micro_batch_problems(self) -> list[tuple[tuple[str | int, ...], str, object]]:
        """workers_per_run must divide every batch the sweep can use, and a fixed
        micro_batch_size every worker's share of it."""
        workers, micro = self.resources.workers_per_run, self.resources.micro_batch_size
        out: list[tuple[tuple[str | int, ...], str, object]] = []
        if self.train.batch_rule_steps is not None:  # its batches are powers of two
            for name, value in (("workers_per_run", workers), ("micro_batch_size", micro)):
                if isinstance(value, int) and value & (value - 1):
                    out.append((("resources", name), "must be a power of two with "
                                "train.batch_rule_steps (its batches are powers of two)", value))
            return out
        batches = sorted({r.batch_size for r in self.train.recipes()})
        out += [(("resources", "workers_per_run"), f"does not divide train.batch_size={b} "
                 "(each worker trains an equal share of every batch)", workers)
                for b in batches if b % workers]
        if isinstance(micro, int) and not out:
            share = "" if workers == 1 else " the sequences each of its workers takes of"
            out += [(("resources", "micro_batch_size"), f"does not divide{share} "
                     f"train.batch_size={b} (gradients are accumulated over whole "
                     "micro-batches)", micro) for b in batches if (b // workers) % micro]
        return out

    def _shape_problems(self) -> list[tuple[tuple[str | int, ...], str, object]]:
        """Depths beyond shape.max_depth and d_model values that head_dim does not divide."""
        hd, max_depth = self.shape.head_dim, self.shape.max_depth
        out: list[tuple[tuple[str | int, ...], str, object]] = []

        def depth(loc: tuple[str | int, ...], value: int) -> None:
            if value > max_depth:
                out.append((loc, f"depth is above shape.max_depth={max_depth}", value))

        def width(loc: tuple[str | int, ...], value: int) -> None:
            if value % hd:
                out.append((loc, f"is not a multiple of shape.head_dim={hd}", value))

        def knob_width(loc: tuple[str | int, ...], value: int) -> None:
            if value > self.shape.max_width:
                out.append((loc, f"width is above shape.max_width={self.shape.max_width}",
                             value))
            elif round(value * hd / self.shape.aspect_ratio) > max_depth:
                out.append((loc, f"width gives more than shape.max_depth={max_depth} layers",
                             value))

        section = self.isoflop or self.grid
        if section is not None:
            where = (self.kind, "sizes")
            for i, d in enumerate(section.sizes.depths or []):
                depth((*where, "depths", i), d)
            for i, w in enumerate(section.sizes.widths or []):
                knob_width((*where, "widths", i), w)
            for i, s in enumerate(section.sizes.shapes or []):
                width((*where, "shapes", i, "d_model"), s.d_model)
        for i, r in enumerate(self.runs or []):
            if r.depth is not None:
                depth(("runs", i, "depth"), r.depth)
            if r.d_model is not None:
                width(("runs", i, "d_model"), r.d_model)
        if self.runs is not None:
            out += _duplicates(self.runs, "runs")
        return out

    def planned_runs(self) -> int:
        """Cells x seeds before any cell is skipped (an upper bound on the plan's size)."""
        return self._plan_size()[0]

    def _plan_size(self) -> tuple[int, str]:
        if self.isoflop is not None:
            factors = {"budgets": len(self.isoflop.budgets),
                       "sizes": self.isoflop.sizes.size_count()}
        elif self.grid is not None:
            factors = {"token counts": len(self.grid.tokens),
                       "sizes": self.grid.sizes.size_count()}
        else:
            factors = {"runs": len(self.runs or [])}
        factors["seeds"] = len(self.train.seeds)
        if self.train.lrs is not None:
            factors["learning rates"] = len(self.train.lrs)
        if self.train.schedules is not None:
            factors["schedules"] = len(self.train.schedules)
        if self.train.variants is not None:
            factors["recipes"] = 1 + len(self.train.variants)
        total = 1
        for n in factors.values():
            total *= n
        how = " x ".join(f"{n} {what}" for what, n in factors.items())
        per_budget = total // len(self.isoflop.budgets) if self.isoflop is not None else 0
        rep = self.isoflop.replicates if self.isoflop is not None else None
        if rep is not None:  # extra seeds on some budgets: same factors, those budgets only
            extra = per_budget * len(rep.budgets) * len(rep.seeds) // len(self.train.seeds)
            total += extra
            how += f" + {extra} replicate(s)"
        repeats = self.isoflop.repeats if self.isoflop is not None else None
        if repeats is not None:  # every run of those budgets again per fraction (train.seeds)
            extra = per_budget * len(repeats.budgets) * len(repeats.fractions)
            total += extra
            how += f" + {extra} repeated-data cell run(s)"
        return total, how
