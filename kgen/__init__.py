"""kgen: CUDA kernels generated from Jinja2 templates, tuned with Optuna, dispatched at call time.

>>> import kgen
>>> "gemm" in kgen.families()
True
"""

from kgen.errors import (CompileError, DatabaseError, DeviceError, DtypeError, InputError, KgenError,
                         LayoutError, NoConfigError, NoDeviceError, ShapeError, SpaceError, TemplateError)
from kgen.dispatch import refresh, run
from kgen.kernels.gemm import gemm, gemm_problem
from kgen.kernels.gemm_tc_call import GemmChoice, gemm_choice
from kgen.problem import Problem, Target
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Check, KernelSpec, Launch, families, get_spec, register

__version__ = "0.1.0"

__all__ = [
    "gemm", "gemm_choice", "GemmChoice", "gemm_problem", "refresh", "run", "Problem", "Target", "Param", "Space", "Constraint", "Config",
    "KernelSpec", "Launch", "Check", "register", "get_spec", "families",
    "KgenError", "InputError", "DeviceError", "DtypeError", "ShapeError", "LayoutError", "SpaceError",
    "TemplateError", "CompileError", "NoDeviceError", "NoConfigError", "DatabaseError",
]
