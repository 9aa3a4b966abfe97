"""Re-measure the model and the checklist on every sample run (the figures of
sample_traces/README.md).

For each bundle in sample_traces/: the model's predicted comm time against the
measured one, per collective (predicted / measured: the median and the worst, the
one farthest from 1 either way) and per step (the median of the step's predicted
over measured comm), the step's measured against predicted exposed comm (medians),
the steps whose measurement disagrees with the model and the term that explains most
of them; then, for every rule, in how many samples it fails and warns.

    python benchmarks/remeasure_samples.py [--samples DIR]   (prints Markdown tables)
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections import Counter
from pathlib import Path

from overlapscope.analyzer import checklist
from overlapscope.analyzer.checklist import RULES
from overlapscope.analyzer.engine.load import load
from overlapscope.analyzer.predict import buckets as buckets_report

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_traces"


def _worst(ratios: list[float]) -> float | None:
    return max(ratios, key=lambda r: abs(math.log(r))) if ratios else None


def measure(bundle: Path) -> tuple[dict, list[dict]]:
    loaded = load([str(bundle)], detail="attribution", workers=2)
    a = buckets_report.analysis(loaded.con, loaded.run_id)
    per_coll = [r.predicted_comm_ms / r.comm_ms for r in a.collectives
                if r.predicted_comm_ms and r.comm_ms and r.step is not None]
    per_step = [s["predicted_comm_ms"] / s["comm_ms"] for s in a.steps if s["predicted_comm_ms"] and s["comm_ms"]]
    exposed = [s["exposed_comm_ms"] for s in a.steps if s["predicted_exposed_ms"] is not None]
    predicted = [s["predicted_exposed_ms"] for s in a.steps if s["predicted_exposed_ms"] is not None]
    disagree = [m["disagreement"]["term"] for m in a.model if m["disagreement"]]
    verdicts = Counter(m["verdict"] for m in a.model)
    row = {
        "sample": bundle.name, "collectives": len(per_coll),
        "coll_median": statistics.median(per_coll) if per_coll else None, "coll_worst": _worst(per_coll),
        "step_median": statistics.median(per_step) if per_step else None,
        "exposed_ms": statistics.median(exposed) if exposed else None,
        "predicted_exposed_ms": statistics.median(predicted) if predicted else None,
        "verdict": verdicts.most_common(1)[0][0] if verdicts else None,
        "disagree": f"{len(disagree)}/{len(a.model)}",
        "term": Counter(disagree).most_common(1)[0][0] if disagree else "-",
    }
    findings = checklist.diagnose(loaded.con, a)["findings"]
    loaded.con.close()
    return row, findings


def _fmt(v, digits: int = 2) -> str:
    return "-" if v is None else (f"{v:.{digits}f}" if isinstance(v, float) else str(v))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", default=str(SAMPLES))
    args = p.parse_args(argv)
    bundles = sorted(b for b in Path(args.samples).iterdir() if b.is_dir() and any(b.glob("rank-*")))
    rows, fires = [], {rid: Counter() for rid in RULES}
    for b in bundles:
        row, findings = measure(b)
        rows.append(row)
        for f in findings:
            fires[f["id"]][f["status"]] += 1
    print("| sample | collectives | predicted/measured comm per collective: median | worst | per step: median "
          "| exposed per step, measured / predicted (ms, medians) | verdict | steps disagreeing | explained by |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| `{r['sample']}` | {r['collectives']} | {_fmt(r['coll_median'])} | {_fmt(r['coll_worst'])} | "
              f"{_fmt(r['step_median'])} | {_fmt(r['exposed_ms'], 1)} / {_fmt(r['predicted_exposed_ms'], 1)} | "
              f"{r['verdict'] or '-'} | {r['disagree']} | {r['term']} |")
    print()
    print(f"| rule | fails (of {len(rows)} samples) | warns | passes | n/a |")
    print("|---|---|---|---|---|")
    for rid in sorted(fires, key=lambda k: (-fires[k]["fail"], -fires[k]["warn"], k)):
        c = fires[rid]
        print(f"| `{rid}` | {c['fail']} | {c['warn']} | {c['pass']} | {c['n/a']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
