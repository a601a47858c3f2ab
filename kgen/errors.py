"""KgenError and its subclasses.

Each carries its fields and a ``remedy`` (what the user can do), and pickles, so that an
error raised in a worker process reaches the driver whole.

>>> err = ShapeError("inner dimensions differ: a is 4x3, b is 5x2", remedy="pass b with 3 rows")
>>> "remedy" in str(err)
True
"""

from __future__ import annotations


class KgenError(Exception):
    """Base of every error kgen raises on purpose."""

    default_remedy = ""

    def __init__(self, message: str, remedy: str | None = None, **fields):
        self.message = message
        self.remedy = remedy if remedy is not None else self.default_remedy
        self.fields = fields
        super().__init__(message)

    def __str__(self) -> str:
        if self.remedy:
            return f"{self.message} (remedy: {self.remedy})"
        return self.message

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.remedy, self.fields))


def _rebuild(cls, message, remedy, fields):
    err = cls.__new__(cls)
    KgenError.__init__(err, message, remedy, **fields)
    return err


class SettingError(KgenError):
    """A KGEN_* environment variable holds a value of the wrong type."""

    def __init__(self, env: str, raw: str, why: str):
        super().__init__(f"{env}={raw!r} is not valid: {why}",
                         remedy=f"unset {env} or give it a valid value (kgen info lists them)",
                         env=env, raw=raw)


class InputError(KgenError):
    """The arrays or arguments handed to a kernel cannot be used as they are."""


class FieldError(InputError):
    """A problem field (``kgen tune FAMILY --field value``, a problems file) is unknown, missing,
    or of the wrong type or value."""


class ExpressionError(InputError):
    """An elementwise expression uses something outside the allowed names, operators and
    functions (the message names the token and its column)."""


class DeviceError(InputError):
    default_remedy = "move the arrays to one CUDA device (cupy.asarray / tensor.cuda())"


class DtypeError(InputError):
    default_remedy = "cast the arrays with .astype(...) to a dtype the kernel supports"


class ShapeError(InputError):
    default_remedy = "pass a as m x k, b as k x n and c as m x n"


class LayoutError(InputError):
    default_remedy = "pass a contiguous array (.copy()) or a transposed view of one"


class SpaceError(KgenError):
    """A space, parameter or configuration is malformed."""


class UnknownFamilyError(KgenError):
    default_remedy = "register the KernelSpec first (kgen.register) or check the name (kgen info)"


class FamilyLoadError(KgenError):
    """A family named by kgen or by an installed package's entry point does not load."""

    default_remedy = "fix or reinstall the package that provides the family"


class TemplateError(KgenError):
    """A template does not render or does not compile, whatever the configuration."""


class CompileError(KgenError):
    """A kernel did not compile (the source is saved under ``fields['source_path']``)."""


class NoDeviceError(DeviceError):
    default_remedy = ("run on a machine with an NVIDIA GPU and driver, or use the replay "
                      "runner (--replay FILE) to tune from recorded measurements")


class DatabaseError(KgenError):
    """The tuning database cannot be read or written."""


class NoConfigError(KgenError):
    """No valid configuration exists for a problem (or strict mode forbids a fallback)."""


class ReportError(KgenError):
    """A report page cannot be written."""

    default_remedy = "give -o a file in a folder that exists and that you may write to"


class DistError(KgenError):
    """The distributed runtime (kgen.dist) cannot do what was asked."""

    default_remedy = "see docs/dist.md"


class BackendError(DistError):
    """The distributed backend asked for is not available, or the processes were not started
    in a way it can join."""


class DistLayoutError(DistError):
    """A distributed layout or process grid is malformed or does not fit the ranks; raised
    before any communication."""

    default_remedy = ("name a layout (replicated, rows, cols, block2d, cyclic2d) whose grid "
                      "p x q multiplies to the number of ranks and whose block sizes are positive")


class RankLostError(DistError):
    """Some rank did not reach a collective call within ``KGEN_DIST_TIMEOUT`` seconds: it died
    or is stuck. The ranks' communicators are unusable after it."""

    default_remedy = ("look at the other ranks' output for the one that failed; start mpiexec with "
                      "-disable-auto-cleanup (MPICH) to see this error on the surviving ranks, or raise "
                      "KGEN_DIST_TIMEOUT if a rank is only slow")


class MismatchError(DistError):
    """The ranks disagree about a collective call (shape, layout, dtype, operation); every
    rank raises the same one, with what each rank had under ``fields['values']``."""

    default_remedy = ("call the same kgen.dist operations in the same order on every rank, with "
                      "matrices of the same global shape, layout and dtype")
