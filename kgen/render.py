"""Render a spec's Jinja2 template for one config into a CUDA Source (pure, no GPU).

Templates are found under the shipped template root (``templates/`` in a source tree,
``kgen/_data/templates`` when installed) or at an absolute path a user's spec gives.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from kgen.errors import SpaceError, TemplateError
from kgen.problem import Problem, Target

if TYPE_CHECKING:
    import jinja2


@dataclass(frozen=True)
class Source:
    code: str
    entry: str
    options: tuple[str, ...]
    arch: str
    digest: str          # sha256 of code + options + arch: the compile cache key (with NVRTC's version)


@lru_cache(maxsize=1)
def data_root() -> Path:
    """Folder holding templates/ and tuning_db/ for an installed or a source tree (found once:
    a dispatch miss asks for it several times, and resolving the path costs system calls)."""
    here = Path(__file__).resolve().parent
    installed = here / "_data"
    if (installed / "templates").is_dir():
        return installed
    return here.parent


def templates_root() -> Path:
    return data_root() / "templates"


def _template_path(spec) -> Path:
    path = Path(spec.template)
    return path if path.is_absolute() else templates_root() / path


def template_text(spec) -> str | None:
    """The inline template of a spec that gives ``template_source`` instead of a file."""
    return getattr(spec, "template_source", None) or None


# a piece named by a Jinja include / import / from / extends: literal, or computed (any piece then)
_PIECE = re.compile(r"""\{%-?\s*(?:include|import|from|extends)\s+(?:(["'])(.+?)\1)?""")


def _pieces_of(text: str, folder: Path) -> list[Path]:
    """The files ``text`` names as Jinja includes, found as the environment finds them (the
    template's own folder first, then the template root); every shared piece where a name
    is computed at render time."""
    found = []
    for match in _PIECE.finditer(text):
        if match.group(2) is None:
            found += sorted((templates_root() / "common").rglob("*.cuh"))
            continue
        for root in (folder, templates_root()):
            if (root / match.group(2)).is_file():
                found.append(root / match.group(2))
                break
        else:
            raise TemplateError(f"template piece {match.group(2)!r} does not exist",
                                remedy="name a file under templates/ (e.g. common/...) in the include")
    return found


def template_files(spec) -> list[Path]:
    """The spec's template file (none for an inline ``template_source``), then every piece it
    includes, directly or through other pieces, in a stable order."""
    inline = template_text(spec)
    main = None if inline else _template_path(spec)
    if main is not None and not main.is_file():
        raise TemplateError(f"template {main} of family {spec.family!r} does not exist",
                            remedy="give KernelSpec.template as a path under templates/ or an absolute path")
    folder = templates_root() if inline else main.parent
    pieces: list[Path] = []
    todo = _pieces_of(inline or main.read_text(), folder)
    while todo:
        piece = todo.pop(0).resolve()
        if piece not in pieces:
            pieces.append(piece)
            todo += _pieces_of(piece.read_text(), folder)
    return ([] if main is None else [main]) + sorted(pieces)


_digests: dict[tuple, tuple[list, tuple, str]] = {}  # (inline text, template or root) -> (files, their stats, digest)


def _stats(files: list[Path]) -> tuple | None:
    """Each file's modification time (ns) and size; None where one is gone."""
    try:
        return tuple((st.st_mtime_ns, st.st_size) for st in map(Path.stat, files))
    except OSError:
        return None


def remembered_digest(spec, digest) -> str:
    """``digest(files)`` of ``spec``'s template files, remembered while every one of them keeps
    its modification time and size: a dispatch decision for a new problem asks for it, and
    reading a template with its pieces costs milliseconds where looking at the files' stats
    costs microseconds. An edited template or piece (a new include changes the file that names
    it) is read again; the stats are taken before the files are read, so an edit made while
    they are read is seen by the next call."""
    inline = template_text(spec)
    key = (inline, str(templates_root()) if inline else str(_template_path(spec)))   # (the root may move: tests)
    found = _digests.get(key)
    if found is not None and _stats(found[0]) == found[1]:
        return found[2]
    files = template_files(spec)
    stats = _stats(files)
    value = digest(files)
    if stats is not None:
        _digests[key] = (files, stats, value)
    return value


def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates on disk beside the cubins: a new process skips Jinja's parser."""
    import jinja2

    from kgen.knobs import knobs

    folder = knobs.cache_dir / "templates"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return jinja2.FileSystemBytecodeCache(str(folder))


@lru_cache(maxsize=16)
def _environment(folder: str) -> jinja2.Environment:
    import jinja2   # here, not at import: a dispatch served from the memo never renders

    loader = jinja2.FileSystemLoader([folder, str(templates_root())])
    return jinja2.Environment(loader=loader, undefined=jinja2.StrictUndefined, bytecode_cache=_bytecode_cache(),
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def _check_config(spec, problem: Problem, config, space) -> None:
    """Only a config of the space's declared choices, named as the space names it, is ever
    rendered: a value or a name that came from a shared record never reaches the source."""
    values = config.as_dict()
    broken = space.violations(values)
    if broken:
        raise SpaceError(f"{config.name} is not a valid {spec.family} config for {problem.key}: {broken}",
                         remedy="tune the problem, or drop the record this config came from")
    if space.make(values).name != config.name:
        raise SpaceError(f"config {config.name!r} is not the name its values give "
                         f"({space.make(values).name!r})", remedy="build configs with Space.make or Space.config")


_SOURCES: dict[tuple, Source] = {}   # (template, its digest, arch, options, entry, context) -> Source
_SOURCES_MAX = 512


def _context_key(ctx: dict) -> tuple | None:
    """The context as a hashable key, or None where a value is not hashable."""
    try:
        key = tuple(sorted(ctx.items()))
        hash(key)
    except TypeError:
        return None
    return key


def render(spec, problem: Problem, config, target: Target, space=None) -> Source:
    """The CUDA source of one config of ``spec`` for ``problem`` on ``target``. A context seen
    before with the same template files (their digest) is not rendered again: a family's context
    holds what changes the binary, not the shape, so a new problem of a known config (a dispatch
    miss at a new M, a grouped call's new token count) skips Jinja."""
    import jinja2

    inline = template_text(spec)
    path = Path(f"<{spec.family} template_source>") if inline else _template_path(spec)
    space = space or spec.space(problem, target)
    _check_config(spec, problem, config, space)
    options = tuple(spec.options)
    arch = spec.compile_arch(target)
    ctx = spec.context(problem, config, space)
    ctx_key = _context_key(ctx)
    key = None if ctx_key is None else (inline or str(path), spec.template_digest(), arch, options, config.name,
                                        ctx_key)
    found = _SOURCES.get(key) if key is not None else None
    if found is not None:
        return found
    env = _environment(str(templates_root()) if inline else str(path.parent))
    try:
        template = env.from_string(inline) if inline else env.get_template(path.name)
        code = template.render(**ctx)
    except jinja2.TemplateError as exc:
        raise TemplateError(f"template {path.name} failed to render for {config.name}: "
                            f"{type(exc).__name__}: {exc}",
                            remedy="fix the template or the variables KernelSpec.context gives it",
                            template=str(path), config=config.name) from None
    digest = hashlib.sha256("\0".join([code, *options, arch]).encode()).hexdigest()
    source = Source(code=code, entry=config.name, options=options, arch=arch, digest=digest)
    if key is not None:
        if len(_SOURCES) >= _SOURCES_MAX:
            _SOURCES.clear()
        _SOURCES[key] = source
    return source
