#!/usr/bin/env python3
"""Time two kvsim binaries against each other, alternating, on a machine whose speed drifts.

On a shared VM one invocation of `kvsim bench` can be a third slower than the next (one build's
`blis-fair-10k` took 73.7 and 98.0 ms in two rounds of the fifty-eighth session), so comparing
one run of each binary says more about the machine than about the change. This runs `BINARY bench
--only … --repeat R --json` for each binary in turn for a number of rounds, flipping which binary
goes first every round, and prints per scenario each binary's median CPU time per round, the median
of those medians, its fastest single repetition (wall time: the bench keeps every repetition's wall
time, not its CPU time), in how many rounds the second binary was faster, and whether the two gave
different trace hashes (a change meant to keep behaviour must not). When both `mixed-10k` and
`mixed-10k-x1000` run, it also prints each invocation's ratio of the two (the x1,000 target).

    python3 scripts/bench_ab.py A_BINARY B_BINARY [--rounds 5] [--repeat 5] [--only NAME ...]

The default scenarios are the bench's timed targets but `blis-fair-1m` (minutes a run): name it
with `--only`. Exit 0 when every invocation ran, 1 otherwise.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

DEFAULT = ["glm53-incident", "mixed-10k", "mixed-10k-x1000", "fuzz-small", "blis-fair-10k", "swarm-0.5.16"]


def bench(binary: str, only: list[str], repeat: int) -> dict[str, dict]:
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        args = [binary, "bench", "--repeat", str(repeat), "--json", out.name]
        for name in only:
            args += ["--only", name]
        try:
            p = subprocess.run(args, capture_output=True, text=True)
        except OSError as e:
            raise RuntimeError(f"`{' '.join(args)}`: {e}") from None
        try:
            rows = json.load(open(out.name))["rows"]
        except (OSError, ValueError, KeyError) as e:
            raise RuntimeError(f"`{' '.join(args)}` exited {p.returncode}: {e}\n{p.stderr[-2000:]}") from None
    return {r["scenario"]: r for r in rows}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions per invocation (default 5)")
    ap.add_argument("--only", action="append", help="a scenario (repeatable; default: the timed targets)")
    a = ap.parse_args()
    only = a.only or DEFAULT
    got: dict[str, list[dict]] = {a.a: [], a.b: []}
    try:
        for i in range(a.rounds):
            order = [a.a, a.b] if i % 2 == 0 else [a.b, a.a]
            for binary in order:
                got[binary].append(bench(binary, only, a.repeat))
            print(f"round {i + 1} of {a.rounds} done", file=sys.stderr)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for name in only:
        print(name)
        meds = {}
        for label, binary in (("A", a.a), ("B", a.b)):
            rounds = [r[name] for r in got[binary] if name in r]
            if not rounds:
                continue
            med = [r["cpu_s"] for r in rounds]
            fastest = min(min(r["wall_s_all"]) for r in rounds)
            meds[label] = med
            per_round = " ".join(f"{m:.4f}" for m in med)
            print(f"  {label} {binary}: {per_round} | median {statistics.median(med):.4f} s | fastest wall {fastest:.4f} s")
        if len(meds) == 2:
            wins = sum(1 for x, y in zip(meds["A"], meds["B"]) if y < x)
            print(f"  B faster in {wins} of {len(meds['B'])} rounds")
            hashes = {r[name].get("trace_hash") for b in (a.a, a.b) for r in got[b] if name in r}
            if len(hashes) > 1:
                print(f"  trace hashes differ: {', '.join(sorted(str(h) for h in hashes))}")
    print_ratio(got, a.a, a.b)
    return 0


def print_ratio(got: dict[str, list[dict]], a: str, b: str) -> None:
    """The x1,000 target's ratio (`mixed-10k-x1000` over `mixed-10k`, CPU time) within each
    invocation, when both rows ran: the machine's speed can change between invocations (the
    fifty-ninth session saw one build's `mixed-10k` at 0.43 s or 0.68-0.86 s), and a ratio of two
    rows timed back to back in one invocation is the comparison that drifts least."""
    for label, binary in (("A", a), ("B", b)):
        ratios = [
            r["mixed-10k-x1000"]["cpu_s"] / r["mixed-10k"]["cpu_s"]
            for r in got[binary]
            if "mixed-10k" in r and "mixed-10k-x1000" in r and r["mixed-10k"]["cpu_s"]
        ]
        if ratios:
            per_round = " ".join(f"{x:.3f}" for x in ratios)
            print(f"x1,000 ratio {label} {binary}: {per_round} | median {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    sys.exit(main())
