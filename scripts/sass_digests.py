"""SASS digests of the configs of shipped records, to carry records across a template change.

    python scripts/sass_digests.py tuning_db/nvidia-h200_gemm_wgmma.jsonl c572c58b54f39840 new.json
    (in a checkout of the older template:) python scripts/sass_digests.py ... c572c58b54f39840 old.json

For every record of the family's file measured with template digest DIGEST, the config is
rendered and compiled (no disk cache) with the checkout's template, disassembled with
cuobjdump, and the sha256 of its SASS written to OUT (JSON: "problem_key config" -> digest).
Where two checkouts give the same digest for a record, its kernel is the same binary under
both templates, and its measurement holds for the newer one:

    python scripts/sass_digests.py carry tuning_db/nvidia-h200_gemm_wgmma.jsonl OLD NEW old.json new.json

restamps exactly those records with template digest NEW, their origin saying from which.

With ``--source`` (before the other arguments) the digest is the rendered CUDA source's
(``Source.digest``: code, options and arch), which needs no compiler: a record whose source is
the same under both templates is the same binary a fortiori. A template change that renders
the shipped configs byte for byte as before (a hook its other users fill) is carried this way
in seconds.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(records: str, digest: str, out: str, source_only: bool = False) -> None:
    from kgen.compile import compile_source
    from kgen.problem import Problem, Target
    from kgen.render import render
    from kgen.sass import disassembler, sass_of
    from kgen.registry import get_spec

    if not source_only and disassembler() is None:
        raise SystemExit("no SASS disassembler: pip install nvidia-cuda-cuobjdump")
    target, digests = Target.h200(), {}
    for line in Path(records).read_text().splitlines():
        r = json.loads(line)
        if r["provenance"]["template_digest"] != digest:
            continue
        spec, problem = get_spec(r["family"]), Problem.from_key(r["problem_key"])
        space = spec.space(problem, target)
        config = space.find([r["config_name"]])[r["config_name"]]
        source = render(spec, problem, config, target, space)
        if source_only:
            digests[f"{r['problem_key']} {r['config_name']}"] = "source:" + source.digest
        else:
            sass = sass_of(compile_source(source, use_cache=False).binary.cubin)
            digests[f"{r['problem_key']} {r['config_name']}"] = hashlib.sha256(sass.encode()).hexdigest()
        print(r["config_name"], digests[f"{r['problem_key']} {r['config_name']}"][:16], flush=True)
    Path(out).write_text(json.dumps(digests, indent=0) + "\n")


def carry(records: str, old: str, new: str, old_sass: str, new_sass: str) -> None:
    before, after = json.loads(Path(old_sass).read_text()), json.loads(Path(new_sass).read_text())
    lines, carried, what = [], 0, "source" if next(iter(after.values()), "").startswith("source:") else "SASS"
    for line in Path(records).read_text().splitlines():
        r = json.loads(line)
        key = f"{r['problem_key']} {r['config_name']}"
        if r["provenance"]["template_digest"] == old and key in before and before[key] == after.get(key):
            was = r["provenance"].get("origin", "")
            r["provenance"]["template_digest"] = new
            r["provenance"]["origin"] = (was + ", " if was.startswith("carried:") else "carried:") + \
                f"{old} (same {what}, scripts/sass_digests.py)"
            carried += 1
        lines.append(json.dumps(r, sort_keys=True))
    Path(records).write_text("\n".join(lines) + "\n")
    print(f"carried {carried} records from {old} to {new}")


if __name__ == "__main__":
    if sys.argv[1] == "carry":
        carry(*sys.argv[2:7])
    elif sys.argv[1] == "--source":
        main(*sys.argv[2:5], source_only=True)
    else:
        main(*sys.argv[1:4])
