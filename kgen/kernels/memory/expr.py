"""Elementwise expressions: a user's text parsed into a checked tree of whitelisted nodes and
rendered into CUDA from that tree, never from the text. Names are the operands (arrays or
scalars), numbers are float constants, and the operators and functions are those of
``OPERATORS`` and ``FUNCTIONS``; anything else is an ExpressionError naming the token.

>>> e = parse("a*x + y")
>>> e.text, e.names
('a * x + y', ('a', 'x', 'y'))
>>> e.cuda()
'((v_a * v_x) + v_y)'
>>> parse("relu(x) ** 2").cuda()
'kgen_pow(kgen_relu(v_x), 2.0f)'
"""

from __future__ import annotations

import ast
import functools
import math
import re
from dataclasses import dataclass

from kgen.errors import ExpressionError

OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
# name -> (arguments, the device function of templates/memory/expr_functions.cuh)
FUNCTIONS: dict[str, tuple[int, str]] = {
    "exp": (1, "expf"), "log": (1, "logf"), "sqrt": (1, "sqrtf"), "rsqrt": (1, "rsqrtf"),
    "abs": (1, "fabsf"), "tanh": (1, "tanhf"), "sin": (1, "sinf"), "cos": (1, "cosf"), "erf": (1, "erff"),
    "sigmoid": (1, "kgen_sigmoid"), "relu": (1, "kgen_relu"), "gelu": (1, "kgen_gelu"), "silu": (1, "kgen_silu"),
    "maximum": (2, "fmaxf"), "minimum": (2, "fminf"), "pow": (2, "kgen_pow"),
}
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,31}$")
MAX_NODES = 256


@dataclass(frozen=True)
class Expression:
    """A checked expression: its canonical text (the problem's ``expr``), the operand names it
    reads, sorted, and its tree."""

    text: str
    names: tuple[str, ...]
    tree: ast.expr

    def cuda(self) -> str:
        """The expression in CUDA, over float locals ``v_<name>``."""
        return _render(self.tree)


def _error(message: str, node: ast.AST | None, text: str) -> ExpressionError:
    col = getattr(node, "col_offset", None)
    where = f" at column {col + 1}" if col is not None else ""
    return ExpressionError(f"{message}{where} of {text!r}",
                           remedy="use operand names, numbers, + - * / **, and the functions "
                                  + ", ".join(sorted(FUNCTIONS)))


def _token(node: ast.AST, text: str) -> str:
    return ast.get_source_segment(text, node) or type(node).__name__


@functools.lru_cache(maxsize=256)
def parse(text: str) -> Expression:
    """The checked Expression of ``text``, or an ExpressionError naming what is not allowed."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("an elementwise expression is a non-empty string", remedy='e.g. "a * x + y"')
    if len(text) > 2000:
        raise ExpressionError(f"the expression is {len(text)} characters long; at most 2000 are read")
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"{text!r} is not an expression: {exc.msg} at column {exc.offset}",
                              remedy='write it as in Python, e.g. "a * x + y"') from None
    source = text.strip()
    names: set[str] = set()
    count = 0
    for node in ast.walk(tree):
        count += 1
        if count > MAX_NODES:
            raise _error(f"the expression has more than {MAX_NODES} terms", None, source)
        _check_node(node, source, names)
    if not names:
        raise _error("the expression reads no operand", tree, source)
    return Expression(ast.unparse(tree), tuple(sorted(names)), tree)


def _check_node(node: ast.AST, text: str, names: set[str]) -> None:
    if isinstance(node, ast.BinOp):
        if type(node.op) not in OPERATORS and not isinstance(node.op, ast.Pow):
            raise _error(f"operator {_token(node, text)!r} is not allowed", node, text)
    elif isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, (ast.USub, ast.UAdd)):
            raise _error(f"unary operator in {_token(node, text)!r} is not allowed", node, text)
    elif isinstance(node, ast.Call):
        func = node.func
        if not isinstance(func, ast.Name):
            raise _error(f"call of {_token(func, text)!r}: only the named functions may be called", func, text)
        if func.id not in FUNCTIONS:
            raise _error(f"unknown function {func.id!r}", func, text)
        if node.keywords or len(node.args) != FUNCTIONS[func.id][0] \
                or any(isinstance(a, ast.Starred) for a in node.args):
            raise _error(f"{func.id} takes {FUNCTIONS[func.id][0]} positional argument(s)", node, text)
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            return          # checked as the function of its call (a bare function name is caught below)
        if not NAME.match(node.id):
            raise _error(f"name {node.id!r} is not an operand name (a letter, then letters, digits or _)",
                         node, text)
        names.add(node.id)
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise _error(f"constant {_token(node, text)!r} is not a finite number", node, text)
    elif not isinstance(node, (ast.operator, ast.unaryop, ast.Load)):
        raise _error(f"{_token(node, text)!r} ({type(node).__name__}) is not allowed", node, text)
    if isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Call)):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Name) and child.id in FUNCTIONS and not (
                    isinstance(node, ast.Call) and child is node.func):
                raise _error(f"function {child.id!r} used as a value", child, text)


def _render(node: ast.expr) -> str:
    if isinstance(node, ast.BinOp):
        left, right = _render(node.left), _render(node.right)
        if isinstance(node.op, ast.Pow):
            return f"kgen_pow({left}, {right})"
        return f"({left} {OPERATORS[type(node.op)]} {right})"
    if isinstance(node, ast.UnaryOp):
        return f"(-{_render(node.operand)})" if isinstance(node.op, ast.USub) else _render(node.operand)
    if isinstance(node, ast.Call):
        return f"{FUNCTIONS[node.func.id][1]}({', '.join(_render(a) for a in node.args)})"
    if isinstance(node, ast.Name):
        return f"v_{node.id}"
    if isinstance(node, ast.Constant):
        return _float_literal(float(node.value))
    raise ExpressionError(f"cannot render {type(node).__name__}")      # parse() lets none through


def _float_literal(value: float) -> str:
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f"
