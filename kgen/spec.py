"""KernelSpec: a template, its space, launch geometry, inputs and reference.

A family (built in, or a user's) subclasses ``KernelSpec`` and is registered by name
(``kgen.registry``); the tuner, the measure workers and the dispatcher see nothing else of
it. See the README for a complete user kernel (a vector add); the built-in GEMMs are in
``kgen.kernels.gemm``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from kgen.fields import Field
from kgen.problem import Problem, Target
from kgen.space import Config, Space


GENERIC_RUNTIME = "generic_module.py"   # the exported runtime that replays each problem's recorded launch


@dataclass(frozen=True)
class Launch:
    """Grid, block and dynamic shared memory of one kernel launch."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int = 0


def scalar_operand(value: Any, dtype: str = "float32") -> Any:
    """A scalar operand (one the call gives, not the problem) as a kernel argument of ``dtype``;
    while ``kgen export`` records a launch, the operand's name, which the exported runtime
    reads from the call."""
    as_scalar = getattr(value, "as_scalar", None)
    if as_scalar is not None:
        return as_scalar(dtype)
    import numpy as np

    return np.dtype(dtype).type(value)


@dataclass(frozen=True)
class Check:
    """Outcome of comparing a kernel's outputs with the reference."""

    ok: bool
    error: float
    detail: str = ""


class KernelSpec:
    """Everything kgen needs to know about one kernel family.

    Override ``space``, ``launch``, ``args``, ``inputs``, ``reference``; the rest has
    defaults. ``template`` is a path relative to a template root, or a ``Path``.
    ``problem_fields`` names what a user gives to make a problem (``kgen tune FAMILY
    --field value``); by default each of ``shape_params`` as an integer.
    """

    family: str = ""
    template: str | Path = ""        # a file under templates/, or an absolute path
    template_source: str = ""        # or the Jinja2 template itself
    shape_params: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ("out",)
    options: tuple[str, ...] = ("--std=c++17",)
    problem_fields: tuple[Field, ...] = ()
    export_runtime: str = GENERIC_RUNTIME    # the exported package's module (kgen/export_runtime/)
    export_replays: bool = True              # the runtime rebuilds each launch from its recorded recipe
    export_dependencies: tuple[str, ...] = ("cupy-cuda13x",)   # what the exported package installs

    # --- the front door: problems from what a user gives ----------------------------------
    def fields(self) -> tuple[Field, ...]:
        """The problem fields (``problem_fields``, else each shape parameter as an integer)."""
        return self.problem_fields or tuple(Field(name, int, "problem size") for name in self.shape_params)

    def request(self, target: Target, **values) -> tuple["KernelSpec", Problem]:
        """(spec, problem) of the field values a user gave (typed and checked by
        ``kgen.fields``): this family's problem, or, for a family that routes requests (GEMM:
        CUDA cores or tensor cores), another family's."""
        return self, Problem.of(self.family, **{k: v for k, v in values.items() if v is not None})

    def rivals(self, target: Target, **values) -> list[tuple["KernelSpec", Problem]]:
        """(spec, problem) of the other families dispatch may run the same request on, besides
        ``request``'s: a tune of the request measures their first configs too, so that dispatch
        compares measured times (GEMM: the other families of its path). None by default."""
        return []

    # fields whose text is not a word (letters, digits, _ and .): the family checks them itself
    # (``text_field_error``) when a problem comes from a file
    text_fields: tuple[str, ...] = ()

    def text_field_error(self, problem: Problem) -> str | None:
        """Why the ``text_fields`` of a problem read from a file are not as this family writes
        them (None: they are); families with text fields override this."""
        return f"the {self.family} family declares no check of its text fields" if self.text_fields else None

    def problem_from_operands(self, operands: Mapping[str, Any]) -> tuple[Problem, int]:
        """(problem, device) of a call on ``operands`` (``kgen.run(family, **operands)``);
        families that can read their problem from the arrays override this."""
        from kgen.errors import InputError

        raise InputError(f"the {self.family} family does not read its problem from the operands",
                         remedy=f"pass the problem: kgen.run({self.family!r}, Problem.of({self.family!r}, ...), "
                                "operands)")

    def record_problem(self, problem: Problem) -> Problem:
        """The problem whose records and dispatch decision serve ``problem``: itself, except in
        a family whose kernel runs a range of problems alike and would otherwise face a new
        decision per call (grouped GEMM: a bucket of token counts, ``token_bucket``). Tunes
        measure it, records are stored under its key, dispatch decides for it once."""
        return problem

    # --- what the tuner searches -------------------------------------------------------
    def space(self, problem: Problem, target: Target) -> Space:
        raise NotImplementedError

    def default_config(self, problem: Problem, target: Target) -> Config:
        """A sensible untuned config: the first valid one (families override)."""
        return self.first_valid(self.space(problem, target), (), problem)

    def model_picks(self, problem: Problem, target: Target, count: int) -> list[Config]:
        """Up to ``count`` configs a device model ranks first, best first, for a search to try
        before its own proposals; families with such a model override this, the rest offer
        their default."""
        return [self.default_config(problem, target)][:count]

    def model_choice(self, problem: Problem, target: Target) -> tuple[Config, float] | None:
        """(config, predicted ms) of the config a cost model predicts fastest for an untuned
        problem, or None (no model: dispatch falls back to the nearest tuned problem's best,
        then the default). Predictions of the families that run one request are compared
        with each other, so they are times on the device, not scores."""
        return None

    def model_version(self) -> str | None:
        """The version of the cost model behind ``model_choice`` (``kgen info`` shows it)."""
        return None

    # --- the vendor library as a candidate (kgen.vendor) ----------------------------------
    def vendor_supported(self, problem: Problem) -> bool:
        """Whether ``vendor_call`` runs ``problem`` (families with a library call override)."""
        return False

    def vendor_call(self, problem: Problem):
        """A function (a, b, c, alpha, beta, bias) computing the problem with the vendor library
        on the caller's arrays and current stream."""
        raise NotImplementedError(f"{self.family} has no vendor call")

    def vendor_run(self, problem: Problem, operands: Mapping[str, Any]):
        """The vendor call on a tune's operands, as a tune times it (None: no vendor call):
        what is timed is what dispatch runs when it chooses the vendor."""
        if not self.vendor_supported(problem):
            return None
        call = self.vendor_call(problem)
        a, b, c, bias = operands["a"], operands["b"], operands["c"], operands.get("bias")
        alpha, beta = operands.get("alpha", 1.0), operands.get("beta", 0.0)
        return lambda: call(a, b, c, alpha, beta, bias)

    def first_valid(self, space: Space, candidates, problem: Problem) -> Config:
        """The first of ``candidates`` (parameter dicts) valid in ``space``, else the space's first
        config; NoConfigError when the space is empty."""
        from kgen.errors import NoConfigError

        for values in candidates:
            if space.is_valid(values):
                return space.make(values)
        configs = space.configs()
        if not configs:
            raise NoConfigError(f"no valid {self.family} config for {problem.key}")
        return configs[0]

    def context(self, problem: Problem, config: Config, space: Space) -> dict[str, Any]:
        """Variables the template sees: problem parameters, config and derived values."""
        ctx = problem.as_dict()
        ctx.update(space.full_values(config.as_dict()))
        ctx["entry"] = config.name
        return ctx

    def compile_arch(self, target: Target) -> str:
        """The NVRTC target: the device's ``sm_XY`` (families using sm_90a features override)."""
        return target.arch

    # --- how it runs ---------------------------------------------------------------------
    def launch(self, problem: Problem, config: Config) -> Launch:
        raise NotImplementedError

    def args(self, problem: Problem, config: Config, arrays: Mapping[str, Any]) -> Sequence[Any]:
        raise NotImplementedError

    def cleared_outputs(self, problem: Problem, config: Config) -> dict[str, int]:
        """The outputs a launch adds into (e.g. split-K's partial sums, added atomically), by
        name, with the bytes zeroed on the launch's stream before it; an exported runtime
        zeroes them too."""
        return {}

    def run(self, kernel, problem: Problem, config: Config, arrays: Mapping[str, Any]) -> None:
        """Launch once on the current stream (its ``cleared_outputs`` zeroed first); families
        needing more steps override this."""
        cleared = self.cleared_outputs(problem, config)
        if cleared:
            import cupy

            from kgen.arrays import device_pointer

            stream = cupy.cuda.get_current_stream().ptr
            for name, nbytes in cleared.items():
                cupy.cuda.runtime.memsetAsync(device_pointer(arrays[name], name), 0, nbytes, stream)
        geo = self.launch(problem, config)
        kernel.launch(geo.grid, geo.block, self.args(problem, config, arrays), geo.shared_mem)

    # --- how it is checked (GPU side) ----------------------------------------------------
    def inputs(self, problem: Problem, seed: int) -> dict[str, Any]:
        """Random (never zero) device arrays, outputs included."""
        raise NotImplementedError

    def reference(self, problem: Problem, arrays: Mapping[str, Any]) -> dict[str, Any]:
        """Expected outputs, computed from the inputs before the kernel runs."""
        raise NotImplementedError

    baseline_name = "baseline"     # what ``baseline`` runs, as reports name it

    def baseline(self, problem: Problem, operands: Mapping[str, Any]):
        """A function running the library equivalent on ``operands`` (for ratios), or None."""
        return None

    def tolerance(self, problem: Problem) -> float:
        return 1e-5

    def check(self, problem: Problem, arrays: Mapping[str, Any], expected: Mapping[str, Any]) -> Check:
        """Max abs error over max abs reference, per output; NaN or Inf never passes."""
        import cupy

        tol = self.tolerance(problem)
        worst = 0.0
        for name, want in expected.items():
            got = arrays[name].astype(cupy.float64)
            want = want.astype(cupy.float64)
            if not bool(cupy.isfinite(got).all()):
                return Check(False, float("inf"), f"{name} holds NaN or Inf (unwritten or overflowed)")
            scale = float(cupy.abs(want).max()) or 1.0
            err = float(cupy.abs(got - want).max()) / scale
            worst = max(worst, err)
            if not err <= tol:
                return Check(False, err, f"{name}: max error {err:.3g} over tolerance {tol:.1g}")
        return Check(True, worst)

    def flops(self, problem: Problem) -> float:
        return 0.0

    # --- export (kgen export) ---------------------------------------------------------------
    def export_extras(self, target: Target, bests: Sequence[Problem], write_kernel) -> dict[str, Any]:
        """More entries of the exported package's table.json (``write_kernel(problem, config)``
        adds a kernel to the package); families with their own runtime override this."""
        return {}

    def export_files(self) -> dict[str, Path]:
        """Files copied into the exported package, by their name there."""
        return {}

    def arg_recipe(self, problem: Problem, config: Config) -> list[dict] | None:
        """The kernel's arguments as data, which an exported runtime rebuilds at call time
        (``kgen.export_runtime.replay`` says the items); None: ``kgen export`` records them by
        calling ``args`` with stand-ins for the operands. Families whose arguments are
        computed from the operands (leading dimensions, tensor maps, workspaces) say them here."""
        return None

    def bytes(self, problem: Problem) -> float:
        return 0.0

    # a family tuned by all ranks of a distributed run together (kgen.dist.tuning): `kgen tune`
    # hands its fields to ``tune_on_ranks(values, trials=, sampler=, seed=, open_db=, say=)``
    tunes_on_ranks: bool = False

    def devices(self, problem: Problem) -> int:
        """How many GPUs (or ranks) one run of ``problem`` spreads over (a distributed family's
        world size): the physical floor of its time divides by it."""
        return 1

    # --- identity ------------------------------------------------------------------------
    def template_digest(self) -> str:
        """sha256 of the template and every shared piece it includes (first 16 hex); remembered
        while none of those files changes (``kgen.render.remembered_digest``)."""
        from kgen.render import remembered_digest, template_text

        def digest(files) -> str:
            h = hashlib.sha256()
            inline = template_text(self)
            if inline:
                h.update(inline.encode())
            for path in files:
                h.update(path.name.encode())
                h.update(path.read_bytes())
            return h.hexdigest()[:16]

        return remembered_digest(self, digest)

