"""Measure again, under the checkout's template, the shipped records a template change left stale.

    python3 scripts/experiments/remeasure_records.py tuning_db/nvidia-h200_gemm_wgmma.jsonl

Every record of the file whose template digest is not the family's current one is rendered,
compiled and measured again on this machine's GPU as the tuner measures (checked against
the reference on fresh inputs, CUDA events, L2 flushed, the tuner's timing), and replaced in
place by the new measurement with this machine's provenance, its origin naming the digest it
replaces. A record that now fails keeps its failure as data, so ``best`` passes it over.
Current records are left as they are, except those named by ``--again NAME`` (repeatable:
a config name, measured again wherever it is in the file). Where the binary is unchanged,
scripts/sass_digests.py carries records without a GPU.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str]) -> None:
    import argparse
    from dataclasses import replace

    from kgen.compile import CompilePool
    from kgen.knobs import knobs
    from kgen.measure.task import MeasureTask
    from kgen.measurement import Record, Timing, record_from_dict, record_to_dict
    from kgen.problem import Problem, Target
    from kgen.provenance import provenance_for
    from kgen.render import render
    from kgen.runners import LocalGPURunner
    from kgen.registry import get_spec

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("records", help="a family's JSON-lines file of tuning_db/")
    ap.add_argument("--again", action="append", default=[], help="measure this config's records again too")
    args = ap.parse_args(argv)
    path = args.records
    target = Target.detect(0)
    lines = Path(path).read_text().splitlines()
    records = [record_from_dict(json.loads(line)) for line in lines]
    stale = [i for i, r in enumerate(records)
             if r.provenance.template_digest != get_spec(r.family).template_digest()
             or r.measurement.config_name in args.again]
    print(f"{len(stale)} of {len(records)} records to measure", flush=True)
    with CompilePool() as pool:          # knobs.compile_workers processes
        jobs = []
        for i in stale:
            r = records[i]
            spec = get_spec(r.family)
            problem = Problem.from_key(r.measurement.problem_key)
            space = spec.space(problem, target)
            config = space.find([r.measurement.config_name])[r.measurement.config_name]
            jobs.append((i, spec, problem, config, pool.submit(render(spec, problem, config, target, space))))
        runner = LocalGPURunner(devices=(target.device_id,), l2_bytes=target.l2_bytes)
        try:
            for i, spec, problem, config, future in jobs:
                result = future.result()
                old = records[i]
                if result.failure is not None:
                    print(f"{config.name}: does not compile ({result.failure.detail[:200]})", flush=True)
                    continue
                task = MeasureTask.of(spec, problem, config, result, timing=Timing(**old.measurement.timing.as_dict()),
                                      seed=knobs.seed)
                measured = runner.submit(task).result()
                why = ("again" if old.provenance.template_digest == spec.template_digest()
                       else f"template {old.provenance.template_digest} changed")
                provenance = replace(provenance_for(target, spec.template_digest()),
                                     origin=f"remeasured: {why} (scripts/experiments/remeasure_records.py)")
                records[i] = Record(old.family, measured, provenance)
                was = old.measurement.time_ms if old.measurement.ok else None
                now = measured.time_ms if measured.ok else None
                print(f"{config.name} ({problem.key[:60]}): {was} -> {now} ms"
                      + ("" if measured.ok else f" FAILED {measured.failure.kind}"), flush=True)
        finally:
            runner.close()
    Path(path).write_text("\n".join(json.dumps(record_to_dict(r), sort_keys=True) for r in records) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
