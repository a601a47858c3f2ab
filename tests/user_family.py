"""The README's user-kernel example (examples/vector_add_family.py) as an importable module, as
written or changed (spawned GPU workers and a sanitizer's child process unpickle its spec, so
it must import by name)."""

from __future__ import annotations

import contextlib
import importlib
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "vector_add_family.py"
STORE = "if (i + j < n) out[i + j] = x[i + j] + y[i + j];"


def with_stray_write(family: str, write: str) -> str:
    """The example's text as family ``family``, whose VEC=4 configs also run ``write`` (one
    thread's store past the output)."""
    text = EXAMPLE.read_text().replace('"vadd"', f'"{family}"')
    assert STORE in text
    # braces: the store is the loop's only statement, and the stray write must stay in the loop (j)
    return text.replace(STORE, "{ " + STORE + f" {{% if VEC == 4 %}}if (i == 0 && j == 0) {write}{{% endif %}}}}")


@contextlib.contextmanager
def as_module(folder: Path, name: str, text: str):
    """``text`` imported as module ``name`` from ``folder`` (on sys.path meanwhile)."""
    (folder / f"{name}.py").write_text(text)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)
