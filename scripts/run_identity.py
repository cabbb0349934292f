#!/usr/bin/env python3
"""Run every shipped and bench scenario with two kvsim binaries and compare what they print.

For a change meant to keep behaviour (a hash-neutral optimisation, a refactor): the "264 runs" of
BENCHMARKS.md's identity checks. Every `*.toml` under `scenarios/` and `sim/bench-scenarios/`,
with seeds 1 and 7, plain and with each of `--check invariants`, `--check-oracle` and `--check
noninterference`, is run as `kvsim run FILE --seed S [CHECK] --json` by each binary (from the
repository root, five minutes at most a run); standard output, standard error and the exit status
must be the same bytes. `scripts/campaign_identity.py` covers campaigns the same way.

    python3 scripts/run_identity.py OLD_BINARY NEW_BINARY [--jobs N] [--match TEXT]

Exit 1 on any difference (listed), 0 when every run is identical (and 2 when no scenario
matches). About two and a half minutes of CPU for each binary (`release` builds).
"""

import argparse
import concurrent.futures
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SEEDS = ["1", "7"]
CHECKS = [[], ["--check", "invariants"], ["--check-oracle"], ["--check", "noninterference"]]


def cases(match: str) -> list[list[str]]:
    files = sorted(
        str(p.relative_to(ROOT))
        for folder in ("scenarios", "sim/bench-scenarios")
        for p in (ROOT / folder).rglob("*.toml")
        if match in str(p.relative_to(ROOT))
    )
    return [[f, "--seed", seed, *check] for f in files for seed in SEEDS for check in CHECKS]


def run(binary: str, args: list[str]) -> bytes:
    try:
        p = subprocess.run([binary, "run", *args, "--json"], cwd=ROOT, capture_output=True, timeout=300)
    except subprocess.TimeoutExpired:
        return b"timed out after 300 s"
    return p.stdout + b"\n--- stderr\n" + p.stderr + f"\n--- exit {p.returncode}\n".encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    ap.add_argument("--match", default="", help="only the scenario files whose path contains this")
    a = ap.parse_args()
    todo = cases(a.match)
    if not todo:
        print("no scenarios found", file=sys.stderr)
        return 2
    differ = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        olds = pool.map(lambda c: run(a.old, c), todo)
        news = pool.map(lambda c: run(a.new, c), todo)
        for case, old, new in zip(todo, olds, news):
            if old != new:
                differ.append(" ".join(case))
    for d in differ:
        print(f"differs: kvsim run {d} --json")
    print(f"{len(todo)} runs of each binary: {len(differ)} difference(s)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
