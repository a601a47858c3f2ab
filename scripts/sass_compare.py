"""Did a template change leave the kernels as they were? Source, tokens and SASS of a fixed list.

    python scripts/sass_compare.py cases docs/evidence/templates_cases.json
    python scripts/sass_compare.py digests docs/evidence/templates_cases.json before.json [--sources DIR]
    (change the templates)
    python scripts/sass_compare.py digests docs/evidence/templates_cases.json after.json
    python scripts/sass_compare.py diff before.json after.json

``cases`` writes the list once: every shipped record's (family, problem, config) and, per
family, a sample of its space over several problems (dtypes, layouts, epilogues, output
types), chosen so that every value of every parameter and every problem field shows up at
least once, then filled at random (seeded). ``digests`` renders each case with the
checkout's templates and writes three sha256 per case: of the source, of its C++ tokens
(comments and whitespace dropped: equal tokens, equal kernel), and of the SASS the source
compiles to for the H200 (NVRTC, no disk cache; disassembled with cuobjdump); with
``--reuse BEFORE.json``, a case whose tokens are those of BEFORE.json takes its SASS digest
from there, uncompiled (marked ``sass_of``: the compiler would read the same input). ``diff``
counts the cases whose source, tokens and SASS are the same, and names the others.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("nvidia-h200_gemm.jsonl", "nvidia-h200_gemm_mma.jsonl", "nvidia-h200_gemm_wgmma.jsonl")
PER_FAMILY = 30
SEED = 7


def _problems(family: str):
    """The problems each family's sample is drawn over."""
    from kgen.kernels.gemm.problem import gemm_problem, tc_problem

    if family == "gemm":
        return [gemm_problem(m, n, k, dtype, layout) for dtype, layout, (m, n, k) in [
            ("float32", "NN", (4096, 4096, 4096)), ("float32", "TT", (1000, 1000, 1000)),
            ("float64", "NT", (2048, 2048, 2048)), ("float16", "TN", (4096, 4096, 4096)),
            ("float32", "NT", (64, 4096, 8192)), ("float64", "TN", (256, 256, 256))]]
    shapes = [(4096, 4096, 4096), (64, 4096, 8192), (1000, 2000, 700)]
    tc = {
        "gemm_mma": [("float16", "NN", "float16", "none"), ("bfloat16", "TT", "float32", "bias_gelu"),
                     ("float32", "NT", "float32", "relu"), ("float64", "NN", "float64", "none"),
                     ("float64", "TN", "float64", "bias"), ("bfloat16", "NT", "bfloat16", "gelu")],
        "gemm_wgmma": [("bfloat16", "NN", "bfloat16", "bias_gelu"), ("float16", "TT", "float32", "none"),
                       ("float16", "NT", "float16", "relu"), ("float32", "NN", "float32", "none"),
                       ("float32", "TT", "float32", "bias_relu"), ("float32", "TN", "float32", "gelu"),
                       ("bfloat16", "TN", "float32", "bias")],
    }[family]
    return [tc_problem(family, *shape, dtype, layout, out_dtype=out, epilogue=epi)
            for i, (dtype, layout, out, epi) in enumerate(tc) for shape in (shapes[i % 3], shapes[(i + 1) % 3])]


def _sample(family: str, target) -> list[tuple[str, str]]:
    """(problem key, config name) pairs: every (param, value) and problem field value covered
    once where the spaces allow, then random ones up to PER_FAMILY."""
    from kgen.registry import get_spec

    spec, rng = get_spec(family), random.Random(SEED)
    pool = []
    for problem in _problems(family):
        for config in spec.space(problem, target).sample(60, seed=SEED):
            features = {f"{k}={v}" for k, v in config.as_dict().items()}
            features |= {f"{k}={problem[k]}" for k in ("dtype", "layout", "epilogue", "out_dtype")
                         if k in problem.as_dict()}
            pool.append((problem.key, config.name, features))
    rng.shuffle(pool)
    chosen, covered = [], set()
    for key, name, features in pool:
        if features - covered:
            chosen.append((key, name))
            covered |= features
    rest = [(k, n) for k, n, _ in pool if (k, n) not in chosen]
    chosen += rng.sample(rest, max(0, PER_FAMILY - len(chosen)))
    return chosen


def cases(out: str) -> None:
    from kgen.problem import Target

    shipped = []
    for name in SHIPPED:
        for line in (ROOT / "tuning_db" / name).read_text().splitlines():
            r = json.loads(line)
            shipped.append([r["family"], r["problem_key"], r["config_name"]])
    target = Target.h200()
    sample = [[family, key, name] for family in ("gemm", "gemm_mma", "gemm_wgmma")
              for key, name in _sample(family, target)]
    Path(out).write_text(json.dumps({"shipped": shipped, "sample": sample}, indent=0) + "\n")
    print(f"{len(shipped)} shipped, {len(sample)} sampled")


_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|[A-Za-z_0-9.]+|\S')
_COMMENT = re.compile(r'//[^\n]*|/\*.*?\*/|("(?:\\.|[^"\\])*")', re.S)


def tokens(code: str) -> str:
    """The C++ tokens of ``code``, comments dropped, one space apart; a preprocessor line ends
    with a newline token (its end is part of its meaning)."""
    code = _COMMENT.sub(lambda m: m.group(1) or " ", code)
    out = []
    for line in code.splitlines():
        toks = _TOKEN.findall(line)
        if toks:
            out.extend(toks)
            if toks[0] == "#":
                out.append("\\n")
    return " ".join(out)


def _digest(case: tuple[str, str, str], sources: str | None, sass: bool, known: dict | None = None) -> tuple[str, dict]:
    from kgen.compile import compile_source
    from kgen.problem import Problem, Target
    from kgen.registry import get_spec
    from kgen.render import render
    from kgen.sass import sass_of

    family, key, name = case
    spec, problem, target = get_spec(family), Problem.from_key(key), Target.h200()
    space = spec.space(problem, target)
    config = space.find([name])[name]
    source = render(spec, problem, config, target, space)
    sha = lambda text: hashlib.sha256(text.encode()).hexdigest()   # noqa: E731
    row = {"source": sha(source.code), "tokens": sha(tokens(source.code))}
    if sources:
        Path(sources, f"{sha(key + ' ' + name)[:16]}_{name}.cu").write_text(source.code)
    if sass and known and known.get("tokens") == row["tokens"] and "sass" in known:
        row["sass"], row["sass_of"] = known["sass"], "the same tokens"    # the compiler reads the same input
    elif sass:
        result = compile_source(source, use_cache=False)
        row["sass"] = sha(sass_of(result.binary.cubin)) if result.failure is None else "compile failed"
    return f"{key} {name}", row


def digests(case_file: str, out: str, sources: str | None, sass: bool, workers: int, reuse: str | None) -> None:
    listed = json.loads(Path(case_file).read_text())
    every = [tuple(c) for part in ("shipped", "sample") for c in listed[part]]
    before = json.loads(Path(reuse).read_text()) if reuse else {}
    known = [before.get(part, {}).get(f"{c[1]} {c[2]}") for part in ("shipped", "sample") for c in listed[part]]
    if sources:
        Path(sources).mkdir(parents=True, exist_ok=True)
    rows = {}
    with ProcessPoolExecutor(workers) as pool:
        for i, (key, row) in enumerate(pool.map(_digest, every, [sources] * len(every), [sass] * len(every), known)):
            rows[key] = row
            print(i + 1, len(every), key.split()[-1], row.get("sass", row["tokens"])[:12], flush=True)
    result = {part: {f"{c[1]} {c[2]}": rows[f"{c[1]} {c[2]}"] for c in listed[part]} for part in ("shipped", "sample")}
    Path(out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def diff(before: str, after: str) -> None:
    old, new = json.loads(Path(before).read_text()), json.loads(Path(after).read_text())
    for part in ("shipped", "sample"):
        keys = sorted(old[part])
        for what in ("source", "tokens", "sass"):
            have = [k for k in keys if what in old[part][k] and what in new[part].get(k, {})]
            same = [k for k in have if old[part][k][what] == new[part][k][what]]
            if have:
                print(f"{part}: {what} identical {len(same)} of {len(have)}")
            if what == "sass":
                compiled = [k for k in have if "sass_of" not in new[part][k]]
                print(f"{part}: sass compiled {len(compiled)}, identical {len([k for k in compiled if k in same])}; "
                      f"taken from the same tokens {len(have) - len(compiled)}")
                for k in sorted(set(have) - set(same)):
                    print(f"  SASS differs: {k}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("cases").add_argument("out")
    d = sub.add_parser("digests")
    d.add_argument("cases")
    d.add_argument("out")
    d.add_argument("--sources", help="also write each rendered source into this folder")
    d.add_argument("--no-sass", action="store_true", help="source and tokens only (no compile)")
    d.add_argument("--workers", type=int, default=2)
    d.add_argument("--reuse", metavar="BEFORE.json",
                   help="take the SASS digest from BEFORE.json where the tokens are the same there (no compile)")
    f = sub.add_parser("diff")
    f.add_argument("before")
    f.add_argument("after")
    a = ap.parse_args()
    if a.cmd == "cases":
        cases(a.out)
    elif a.cmd == "digests":
        digests(a.cases, a.out, a.sources, not a.no_sass, a.workers, a.reuse)
    else:
        diff(a.before, a.after)
