#!/usr/bin/env python3
"""Swarm against --guided over five campaign seeds: the table of issue 15's first done-when.

    scripts/guided_table.py BINARY [--runs 5000] [--jobs 2] [--profiles blind,sglang-0.5.16,...] [--seeds 5]
                            [--modes swarm,guided] [--out table.json]

For each profile, campaign seed k = 0..N-1 (N = `--seeds`, 5 by default; `--seed-start k*1000003`) and mode, runs
`BINARY fuzz --runs N --corpus DIR --no-shrink --confirm off --known none --jobs 1` and reads the
first run of every signature from DIR/campaign.json (`first_seed - seed_start + 1`). Prints, per
profile and mode, the signatures per seed and the mean new-signature curve, then the run counts
at which guided's mean is strictly above the swarm's on every profile. `--out` keeps the first
runs (JSON) so a later call with `--reuse` compares another binary's guided column to them, or,
with `--extend` and a larger `--seeds`, adds campaign seeds to the same binary's table.
"""
import argparse
import concurrent.futures as cf
import json
import os
import subprocess
import sys
import tempfile

PROFILES = ["blind", "sglang-0.5.16", "sglang-0.5.22", "vllm-nixl", "vllm-nixl --hardware-faults"]
CURVE = [100, 250, 500, 1000, 1500, 2000, 3000, 4000, 5000, 10000, 20000, 50000, 100000]


def one(binary, prof, k, mode, runs):
    seed_start = k * 1000003
    with tempfile.TemporaryDirectory() as d:
        corpus = os.path.join(d, "c")
        cmd = [binary, "fuzz", "--runs", str(runs), "--corpus", corpus, "--no-shrink", "--confirm", "off",
               "--known", "none", "--jobs", "1", "--seed-start", str(seed_start)]
        if prof != "blind":
            cmd += ["--profile"] + prof.split()
        if mode == "guided":
            cmd.append("--guided")
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        table = json.load(open(os.path.join(corpus, "campaign.json")))["table"]
        return sorted(v["first_seed"] - seed_start + 1 for v in table.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--runs", type=int, default=5000)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--modes", default="swarm,guided")
    ap.add_argument("--seeds", type=int, default=5, help="campaign seeds per profile and mode (the done-when uses 5)")
    ap.add_argument("--out")
    ap.add_argument("--reuse", help="a JSON from --out whose columns fill the modes not run")
    ap.add_argument("--extend", action="store_true",
                    help="with --reuse: run only the campaign seeds the JSON lacks (more seeds for the same binary)")
    a = ap.parse_args()
    seeds = a.seeds
    profiles = a.profiles.split(",")
    modes = a.modes.split(",")
    firsts = json.load(open(a.reuse)) if a.reuse else {}
    jobs = {}
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for p in profiles:
            for m in modes:
                for k in range(seeds):
                    if a.extend and str(k) in firsts.get(p, {}).get(m, {}):
                        continue
                    jobs[(p, m, k)] = ex.submit(one, os.path.abspath(a.binary), p, k, m, a.runs)
        for (p, m, k), f in jobs.items():
            firsts.setdefault(p, {}).setdefault(m, {})[str(k)] = f.result()
    if a.out:
        json.dump(firsts, open(a.out, "w"), indent=1)

    def mean_at(p, m, n):
        return sum(sum(1 for r in firsts[p][m][str(k)] if r <= n) for k in range(seeds)) / seeds

    print(f"| profile | mode | signatures (k = 0..{seeds - 1}) | " + " | ".join(f"{n:,}" for n in CURVE) + " |")
    for p in profiles:
        for m in ("swarm", "guided"):
            if m not in firsts.get(p, {}):
                continue
            per = ", ".join(str(len(firsts[p][m][str(k)])) for k in range(seeds))
            curve = " | ".join(f"{mean_at(p, m, n):.1f}" for n in CURVE if n <= a.runs)
            print(f"| `{p}` | {m} | {per} | {curve} |")
    both = [p for p in profiles if {"swarm", "guided"} <= set(firsts.get(p, {}))]
    lead = [n for n in range(1, a.runs + 1) if both and all(mean_at(p, "guided", n) > mean_at(p, "swarm", n) for p in both)]
    spans = []
    for n in lead:
        if spans and spans[-1][1] == n - 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    print("guided strictly ahead on every profile at N in:", ", ".join(f"{s}-{e}" for s, e in spans) or "none")
    for p in both:
        ahead = [n for n in range(1, a.runs + 1) if mean_at(p, "guided", n) > mean_at(p, "swarm", n)]
        behind = [n for n in range(1, a.runs + 1) if mean_at(p, "guided", n) < mean_at(p, "swarm", n)]
        print(f"  {p}: ahead at {len(ahead)} run counts, behind at {len(behind)}; last finds "
              f"swarm {[max(firsts[p]['swarm'][str(k)], default=0) for k in range(seeds)]} "
              f"guided {[max(firsts[p]['guided'][str(k)], default=0) for k in range(seeds)]}")


if __name__ == "__main__":
    sys.exit(main())
