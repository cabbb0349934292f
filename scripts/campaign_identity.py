#!/usr/bin/env python3
"""Run the same fuzz campaigns with two kvsim binaries and compare what they print and write.

For a change meant to keep behaviour (a hash-neutral optimisation, a refactor): the snapshot suite
covers the shipped scenarios; this covers campaigns, whose drawn scenarios, guided corpora, sampled
oracle and invariant checks and saved examples the snapshots do not see.

    python3 scripts/campaign_identity.py OLD_BINARY NEW_BINARY [WORKDIR]

Per space (blind, sglang-0.5.16, sglang-0.5.22, vllm-nixl) it runs a 600-run swarm, a 300-run
`--guided` campaign and a 300-run `--check-oracle` campaign with each binary (`--no-shrink
--confirm off --jobs 1`), then compares the printed tables and every corpus file byte for byte
after masking what legitimately differs: the corpus path, wall times, rates, and the progress line
about queued example jobs, and the model stamp (a digest of the model's sources: any source change
changes it, behaviour or not). Exit 1 on any difference (listed), 0 when all twelve are identical.
"""

import pathlib
import re
import subprocess
import sys
import tempfile

SPACES = ["blind", "sglang-0.5.16", "sglang-0.5.22", "vllm-nixl"]
MODES = [["--runs", "600"], ["--guided", "--runs", "300"], ["--runs", "300", "--check-oracle"]]


def mask(text: str, corpus: str) -> str:
    text = text.replace(corpus, "CORPUS")
    text = re.sub(r"fuzz: runs done; finishing \d+ queued[^\n]*\n", "", text)
    text = re.sub(r"\d+(\.\d+)?\s*(ms|s|µs)\b", "T", text)
    text = re.sub(r"\d+ runs/s", "R", text)
    text = re.sub(r'"model"\s*:\s*"[0-9a-f]+"', '"model":"M"', text)
    return re.sub(r'"(wall|elapsed|secs|seconds|started|finished)[a-z_]*"\s*:\s*[-0-9.e]+', '"W":0', text)


def campaign(binary: str, work: pathlib.Path, name: str, args: list[str]) -> str:
    out = subprocess.run(
        [binary, "fuzz", "--corpus", name, "--no-shrink", "--confirm", "off", "--jobs", "1", *args],
        cwd=work,
        capture_output=True,
        text=True,
    )
    return mask(out.stdout + out.stderr + f"\nexit {out.returncode}\n", name)


def files(root: pathlib.Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): mask(p.read_text(errors="replace"), root.name)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    old, new = (str(pathlib.Path(b).resolve()) for b in sys.argv[1:3])
    work = pathlib.Path(sys.argv[3] if len(sys.argv) == 4 else tempfile.mkdtemp(prefix="identity-"))
    work.mkdir(parents=True, exist_ok=True)
    bad = []
    for space in SPACES:
        profile = [] if space == "blind" else ["--profile", space]
        for i, mode in enumerate(MODES):
            tag = f"{space}-{i}"
            a = campaign(old, work, f"old-{tag}", profile + mode)
            b = campaign(new, work, f"new-{tag}", profile + mode)
            if a != b:
                bad.append(f"{tag}: printed output differs")
            fa, fb = files(work / f"old-{tag}"), files(work / f"new-{tag}")
            if fa.keys() != fb.keys():
                bad.append(f"{tag}: files differ: {sorted(fa.keys() ^ fb.keys())}")
            bad += [f"{tag}: {f} differs" for f in fa.keys() & fb.keys() if fa[f] != fb[f]]
    print(f"{len(SPACES) * len(MODES)} campaigns in {work}: {len(bad)} difference(s)")
    for b in bad:
        print("  " + b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
