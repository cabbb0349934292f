#!/usr/bin/env python3
"""Compare the snapshots of a git revision with the working tree's and report every changed line
that is not a trace hash, an event/record count, a latency number, a read time or a page number.

Used when a commit changes trace hashes on purpose (issue 14): after regenerating the snapshots,

    python3 scripts/snapdiff.py main            # old = main's snapshots/, new = ./snapshots/
    python3 scripts/snapdiff.py OLD NEW         # two revisions

prints, per file, each changed line whose difference survives masking those five kinds of value
(so a changed verdict, violation kind, count of affected requests, status or victim count shows
up), and a summary of how many changed lines each mask explained. Exit 1 when anything is left.
"""

import difflib
import pathlib
import re
import subprocess
import sys
from collections import Counter

HASH = re.compile(r"\b[0-9a-f]{16}\b")
COUNT = re.compile(r"\b[\d,]+ (events|records)\b")
READ_AT = re.compile(r"\(read at [\d.]+s\)|read at [\d.]+s")
PAGES = re.compile(r"\bpages? [\d,]+(\.\.[\d,]+)?")
LATENCY_ROW = re.compile(r"^\s+(TTFT|ITL|E2E|TPOT)\b")
NUMBER = re.compile(r"[\d,]*\d(\.\d+)?")


def mask(line, used):
    """The line with the allowed kinds of value replaced by placeholders; `used` counts them."""
    out = line
    if LATENCY_ROW.match(out):
        used["latency number"] += 1
        return LATENCY_ROW.match(out).group(0) + " <latency>"
    for name, pat, rep in (
        ("hash", HASH, "<hash>"),
        ("event/record count", COUNT, r"<n> \1"),
        ("read time", READ_AT, "read at <t>"),
        ("page number", PAGES, "page <p>"),
    ):
        out, n = pat.subn(rep, out)
        if n:
            used[name] += 1
    return out


def show(root, rev, name):
    try:
        return subprocess.check_output(
            ["git", "show", f"{rev}:{name}"], text=True, cwd=root, stderr=subprocess.DEVNULL
        ).splitlines()
    except subprocess.CalledProcessError:
        return []


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else "main"
    root = pathlib.Path(subprocess.check_output(["git", "rev-parse", "--show-toplevel"], text=True).strip())
    names = subprocess.check_output(["git", "ls-tree", "--name-only", rev, "snapshots/"], text=True, cwd=root).split()
    new_rev = sys.argv[2] if len(sys.argv) > 2 else None
    if new_rev:
        now = subprocess.check_output(["git", "ls-tree", "--name-only", new_rev, "snapshots/"], text=True, cwd=root).split()
    else:
        now = sorted(str(p.relative_to(root)) for p in (root / "snapshots").glob("*.snap"))
    used = Counter()
    left = 0
    changed_files = 0
    for name in sorted(set(names) | set(now)):
        old = show(root, rev, name)
        if new_rev:
            new = show(root, new_rev, name)
        else:
            path = root / name
            new = path.read_text().splitlines() if path.exists() else []
        if old == new:
            continue
        changed_files += 1
        report = []
        for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_opcodes():
            if op == "equal":
                continue
            a, b = old[i1:i2], new[j1:j2]
            if op == "replace" and len(a) == len(b):
                for x, y in zip(a, b):
                    mx, my = mask(x, used), mask(y, used)
                    if mx != my:
                        report.append(f"  - {x}\n  + {y}")
            else:
                report.extend(f"  - {x}" for x in a)
                report.extend(f"  + {y}" for y in b)
        if report:
            left += len(report)
            print(f"{name}:")
            print("\n".join(report))
    print(
        f"\n{changed_files} snapshot file(s) changed against {rev}; masked: "
        + ", ".join(f"{k} {v}" for k, v in sorted(used.items()))
        + f"; {left} change(s) left above"
    )
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main())
