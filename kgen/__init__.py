"""kgen: CUDA kernels generated from Jinja2 templates, tuned with Optuna, dispatched at call time.

>>> import kgen
>>> "gemm" in kgen.families()
True
"""

from kgen.errors import (CompileError, DatabaseError, DeviceError, DtypeError, InputError, KgenError,
                         LayoutError, NoConfigError, NoDeviceError, ShapeError, SpaceError, TemplateError, ExpressionError)
from kgen.dispatch import refresh
from kgen.dispatch import set_miss_tuner as _set_miss_tuner
from kgen.kernels.gemm.problem import gemm_problem
from kgen.ops.conv import conv2d
from kgen.ops.conv_wgrad import conv2d_weight_gradient
from kgen.ops.elementwise import cast, elementwise
from kgen.ops.reduce import reduce
from kgen.ops.caller import set_custom_ops as _set_custom_ops
from kgen.ops.gemm import GemmChoice, gemm, gemm_choice
from kgen.ops.gemm_grouped import gemm_grouped
from kgen.ops.gemm_kgrouped import gemm_kgrouped
from kgen.ops.permute import permute, transpose
from kgen.ops.rownorm import rmsnorm, softmax
from kgen.ops.run import run
from kgen.problem import Problem, Target
from kgen.registry import families, get_spec, register
from kgen.space import Config, Constraint, Param, Space
from kgen.spec import Check, KernelSpec, Launch
from kgen.tune_on_miss import miss_tuner as _miss_tuner

__version__ = "0.1.0"

_set_miss_tuner(_miss_tuner())     # dispatch tunes a missed problem (KGEN_TUNE_ON_MISS) with kgen's search


def _custom_ops():
    """kgen's PyTorch custom operators, registered on first use (under torch.compile)."""
    import kgen.torch

    return kgen.torch


_set_custom_ops(_custom_ops)

__all__ = [
    "softmax", "rmsnorm", "conv2d", "conv2d_weight_gradient",
    "permute", "transpose", "gemm", "gemm_choice", "gemm_grouped", "gemm_kgrouped", "elementwise", "cast", "reduce", "GemmChoice", "gemm_problem", "refresh", "run", "Problem", "Target", "Param", "Space", "Constraint", "Config",
    "KernelSpec", "Launch", "Check", "register", "get_spec", "families",
    "KgenError", "InputError", "DeviceError", "DtypeError", "ShapeError", "LayoutError", "SpaceError", "ExpressionError",
    "TemplateError", "CompileError", "NoDeviceError", "NoConfigError", "DatabaseError",
]
