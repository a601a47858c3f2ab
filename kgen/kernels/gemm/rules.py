"""GEMM call rules with no dependency beyond the standard library.

Layout from strides, vector alignment, launch geometry and the problem key. kgen's own
call path uses them, and ``kgen export`` copies this file into exported packages, so an
exported module and kgen decide every call the same way.
"""

ITEMSIZE = {"float32": 4, "float64": 8, "float16": 2}
COMPUTE_SIZE = {"float32": 4, "float64": 8, "float16": 4}
# the CUDA-core family's split-K choices (its grid's y dimension): 32 and 64 for long-K problems
# of a few tiles, whose blocks otherwise run tens of dependent k steps each
SPLIT_K = (1, 2, 4, 8, 16, 32, 64)


def operand_layout(shape, strides):
    """('N', ld) for row-major storage, ('T', ld) for a transposed view, None for neither.

    ``strides`` are in elements. Size-0 and size-1 dimensions fit either layout.
    """
    (rows, cols), (s0, s1) = shape, strides
    if rows == 0 or cols == 0:
        return "N", max(cols, 1)
    if cols <= 1 or s1 == 1:
        ld = s0 if rows > 1 else max(cols, 1)
        if ld >= max(cols, 1):
            return "N", ld
    if rows <= 1 or s0 == 1:
        ld = s1 if cols > 1 else max(rows, 1)
        if ld >= max(rows, 1):
            return "T", ld
    return None


def alignment(ptr, ld, itemsize):
    """Widest vector (elements, up to 16 bytes) that both the pointer and ``ld`` allow."""
    v = 16 // itemsize
    while v > 1 and (ld % v or ptr % (v * itemsize)):
        v //= 2
    return v


def natural_alignment(ld, itemsize):
    """Alignment of a fresh allocation (pointer 256-byte aligned) with leading dimension ``ld``."""
    return alignment(0, ld, itemsize)


def launch_geometry(m, n, dtype, values):
    """(grid, block, dynamic shared bytes) of a config's launch for an m x n output."""
    bm, bn, tm, tn = values["BM"], values["BN"], values["TM"], values["TN"]
    ct_size = COMPUTE_SIZE[dtype]
    pad = 16 // ct_size
    smem = (2 if values["DB"] else 1) * values["BK"] * (bm + pad + bn + pad) * ct_size
    grid = (-(-m // bm) * -(-n // bn), values["SK"], 1)
    return grid, ((bm // tm) * (bn // tn), 1, 1), smem


def problem_key(m, n, k, dtype, layout, align_a, align_b):
    """The same text as ``kgen.Problem.key`` for a GEMM problem."""
    return (f"gemm|align_a={align_a}|align_b={align_b}|dtype={dtype}|k={k}|layout={layout}"
            f"|m={m}|n={n}")


def storage_shape(m: int, n: int, k: int, layout: str, operand: str) -> tuple[int, int]:
    """(rows, cols) of an operand's row-major storage: A is m x k (N) or k x m (T); B is
    k x n (N) or n x k (T); C is m x n."""
    if operand == "a":
        return (m, k) if layout[0] == "N" else (k, m)
    if operand == "b":
        return (k, n) if layout[1] == "N" else (n, k)
    return m, n


def footprints(m: int, n: int, k: int, layout: str, lds: tuple[int, int, int], itemsizes: tuple[int, int, int]):
    """Bytes from the first element of A, B and C to one past the last each may touch.

    >>> footprints(2, 3, 4, "NN", (4, 3, 3), (4, 4, 4))
    (32, 48, 24)
    """
    out = []
    for operand, ld, size in zip("abc", lds, itemsizes):
        rows, cols = storage_shape(m, n, k, layout, operand)
        out.append(0 if rows == 0 or cols == 0 else ((rows - 1) * ld + cols) * size)
    return tuple(out)


def aliases(pc: int, c_bytes: int, operands) -> bool:
    """Whether the output's bytes overlap any (pointer, bytes) of ``operands``."""
    return any(p < pc + c_bytes and pc < p + size for p, size in operands if size and c_bytes)
