"""A family's template digest covers every file its template includes, however deep: editing
a shared piece makes the records measured with the old one another template version."""

import os
import shutil

import jinja2
import jinja2.meta
import pytest

import kgen.render
from kgen import KernelSpec
from kgen.errors import TemplateError
from kgen.registry import get_spec
from kgen.render import template_files, templates_root

FAMILIES = ("gemm", "gemm_mma", "gemm_wgmma")


def _referenced(name: str, env: jinja2.Environment, seen: set[str]) -> set[str]:
    """Every template ``name`` names, as Jinja's own parser reads them, recursively."""
    source = env.loader.get_source(env, name)[0]
    for ref in jinja2.meta.find_referenced_templates(env.parse(source)):
        assert ref is not None, f"{name} includes a template named at render time"
        if ref not in seen:
            seen.add(ref)
            _referenced(ref, env, seen)
    return seen


@pytest.mark.parametrize("family", FAMILIES)
def test_template_files_are_every_file_the_template_includes(family):
    spec = get_spec(family)
    main = templates_root() / spec.template
    env = jinja2.Environment(loader=jinja2.FileSystemLoader([str(main.parent), str(templates_root())]))
    included = {(templates_root() / ref).resolve() for ref in _referenced(main.name, env, set())}
    files = template_files(spec)
    assert files[0] == main and set(files[1:]) == included and len(files) == len(set(files))


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of the template tree that the digests read."""
    root = tmp_path / "templates"
    shutil.copytree(templates_root(), root)
    monkeypatch.setattr(kgen.render, "templates_root", lambda: root)
    return root


def _pieces(family: str, root) -> list:
    return [p.relative_to(root) for p in template_files(get_spec(family))[1:]]


@pytest.mark.parametrize("family", FAMILIES)
def test_editing_any_included_piece_changes_the_digest(family, tree):
    spec = get_spec(family)
    pieces = _pieces(family, tree)
    for piece in pieces:
        before = spec.template_digest()
        (tree / piece).write_text((tree / piece).read_text() + "\n// edited\n")
        assert spec.template_digest() != before, piece


def test_a_digest_is_remembered_until_a_file_changes(tree, monkeypatch):
    """A second call looks at the files' stats only; an edit that keeps a piece's size is seen
    by its modification time."""
    spec = get_spec("gemm_wgmma")
    before = spec.template_digest()
    listed = []
    real = kgen.render.template_files
    monkeypatch.setattr(kgen.render, "template_files", lambda s: listed.append(s) or real(s))
    assert spec.template_digest() == before and not listed
    piece = tree / _pieces("gemm_wgmma", tree)[0]
    text, stat = piece.read_text(), piece.stat()
    piece.write_text(text[:-1] + ("x" if text[-1] != "x" else "y"))
    os.utime(piece, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert piece.stat().st_size == stat.st_size
    assert spec.template_digest() != before and listed


def test_a_piece_no_template_includes_changes_no_digest(tree):
    before = {f: get_spec(f).template_digest() for f in FAMILIES}
    (tree / "common" / "unused_piece.cuh").write_text("// included by no template\n")
    assert {f: get_spec(f).template_digest() for f in FAMILIES} == before


def test_a_piece_included_by_a_piece_is_covered(tree):
    spec = get_spec("gemm")
    (tree / "common" / "inner.cuh").write_text("// one level down\n")
    (tree / "common" / "outer.cuh").write_text('{% include "common/inner.cuh" %}\n')
    main = tree / spec.template
    main.write_text('{% include "common/outer.cuh" %}\n' + main.read_text())
    before = spec.template_digest()
    assert tree / "common" / "inner.cuh" in template_files(spec)
    (tree / "common" / "inner.cuh").write_text("// one level down, edited\n")
    assert spec.template_digest() != before


def test_an_inline_template_covers_its_pieces_and_a_missing_piece_is_named(tree):
    class Inline(KernelSpec):
        family = "inline_with_piece"
        template_source = '{% include "common/convert.cuh" %}\nextern "C" __global__ void {{ entry }}() {}\n'

    before = Inline().template_digest()
    (tree / "common" / "convert.cuh").write_text("// edited\n")
    assert Inline().template_digest() != before

    class Missing(Inline):
        template_source = '{% include "common/no_such_piece.cuh" %}\n'

    with pytest.raises(TemplateError, match="no_such_piece"):
        Missing().template_digest()


def test_a_known_context_is_not_rendered_again_until_a_template_file_changes(tree, monkeypatch):
    """Two problems of one config share one render (a context holds what changes the binary,
    not the shape); an edited piece renders anew, with its edit."""
    from kgen.problem import Target
    from kgen.render import render

    spec, target = get_spec("gemm_wgmma"), Target.h200()
    first, second = (spec.problem(m, 1024, 1024, "bfloat16", "NN") for m in (1000, 1016))
    config = spec.default_config(first, target)
    assert spec.space(second, target).is_valid(config.as_dict())
    renders = []
    real = jinja2.Template.render
    monkeypatch.setattr(jinja2.Template, "render", lambda self, *a, **k: renders.append(1) or real(self, *a, **k))
    one, two = render(spec, first, config, target), render(spec, second, config, target)
    assert two is one and len(renders) == 1
    piece = tree / _pieces("gemm_wgmma", tree)[0]
    piece.write_text(piece.read_text() + "\n// edited\n")
    again = render(spec, second, config, target)
    assert len(renders) == 2 and again.digest != one.digest and "// edited" in again.code
