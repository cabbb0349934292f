#!/usr/bin/env python3
"""Writes the hand-made seeds of the scenario_run and cross_tenant corpora and, given a kvsim
binary, the trace seeds of parse_trace and its corrupt variants under regressions/parse_trace.

The bytes follow how `arbitrary` 1.x decodes `kvsim::fuzz_targets::FuzzInput` (fields in
declaration order; u8 one byte; u16/i16 little-endian; bool and Option flags the low bit of a
byte; an enum a little-endian u32 whose variant is (x * variants) >> 32, then its fields; a Vec a
flag byte before each element). Change this file together with `FuzzInput`; the stable test
`fuzz_corpus` checks that `stub-leak` still leaks under sglang-0.5.16.

    python3 fuzz/seeds.py                                  # fuzz/corpus/{scenario_run,cross_tenant}
    python3 fuzz/seeds.py --traces target/release/kvsim    # also the traces (after a format change)

The corrupt traces each break one assumption of `confirm::lower` or `Filter::kept` (written
from a reading of the code; each panicked, ran out of memory or hung in parse_trace built without
its guard); `parse_trace` must reject them without panicking.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

PROMPT_VARIANTS = ["share", "near_prefill_pool", "near_decode_pool", "near_context", "tokens"]
SCRIPT_VARIANTS = ["crash", "transfer_fail", "delay", "visibility_lag"]
MORE_SCRIPT_VARIANTS = ["metadata_lag", "transfer_fail_at", "delay_at", "visibility_lag_at"]


def variant(index, count):
    """The smallest u32 that `arbitrary` maps to variant `index` of `count`."""
    x = -(-(index << 32) // count)
    return struct.pack("<I", x)


def u8(x):
    return bytes([x & 0xFF])


def u16(x):
    return struct.pack("<H", x)


def i16(x):
    return struct.pack("<h", x)


def vec(items):
    return b"".join(b"\x01" + it for it in items) + b"\x00"


def request(tenant, prompt, output=7, gap_100us=0, abort_100us=None):
    kind, value = prompt
    k = PROMPT_VARIANTS.index(kind)
    payload = u8(value) if kind == "tokens" else (u16(value) if kind == "share" else i16(value))
    abort = b"\x00" if abort_100us is None else b"\x01" + u16(abort_100us)
    return u8(tenant) + variant(k, len(PROMPT_VARIANTS)) + payload + u8(output) + u16(gap_100us) + abort


def script(kind, *fields):
    k = SCRIPT_VARIANTS.index(kind)
    body = b""
    if kind == "crash":
        at_ms, node, restart = fields
        body = u16(at_ms) + u8(node) + u8(restart)
    else:
        body = b"".join(u8(f) for f in fields)
    return variant(k, len(SCRIPT_VARIANTS)) + body


def more_script(kind, *fields):
    """An entry of `FuzzInput::more_script`: every field one byte (request, [batch,] value index)."""
    k = MORE_SCRIPT_VARIANTS.index(kind)
    return variant(k, len(MORE_SCRIPT_VARIANTS)) + b"".join(u8(f) for f in fields)


def share(tokens, context):
    """The `Share` value giving `tokens` for this context (exact for the values used here)."""
    return ("share", (tokens << 16) // (context + context // 4))


def scenario(
    seed=1,
    context=4,  # index: 512, 1024, 2048, 4096, 8192, 16384, 32768
    page=2,  # index: 1, 4, 16, 64
    prefill_nodes=0,  # 1 + (x % 2) nodes
    decode_nodes=0,
    prefill_pool=2,  # index into eighths 2, 3, 4, 6, 8, 12, 16
    decode_pool=3,  # index into eighths 3, 4, 6, 8, 12, 16, 24, 32
    metadata_slots=2,  # index: 1, 2, 8, 64
    max_running=3,  # index: 1, 2, 8, 64
    router=0,
    chunked_prefill=3,  # index: 256, 1024, 4096, 8192
    transfer_batch=0,  # index: 0, 1, 4, 64, 4096
    transfer_sync_timeout=2,  # index: 500, 5000, 60000 ms
    slow_transfers=False,
    profile=0,
    knobs=(),
    faults=(0,) * 8,
    scripts=(),
    requests=(),
    more_scripts=(),
):
    head = u16(seed) + bytes(
        [
            context,
            page,
            prefill_nodes,
            decode_nodes,
            prefill_pool,
            decode_pool,
            metadata_slots,
            max_running,
            router,
            chunked_prefill,
            transfer_batch,
            transfer_sync_timeout,
            1 if slow_transfers else 0,
            profile,
        ]
    )
    body = head + vec([u8(k) for k in knobs]) + bytes(faults) + vec(list(scripts)) + vec(list(requests))
    # `more_script` came later: the seeds written before it end with the requests' list.
    return body + vec(list(more_scripts)) if more_scripts else body


def main():
    ctx = 8192
    # scenarios/small/stub-leak.toml: tenant 1 warms the decode pool, tenant 2's 6,000-token
    # prompt (over the 4,096-token prefill pool, under the 8,192 context) is stubbed and reads it.
    stub_leak = scenario(
        seed=7,
        requests=[
            request(1, share(4000, ctx), gap_100us=0),
            request(1, share(3900, ctx), gap_100us=10),
            request(2, share(6000, ctx), output=3, gap_100us=19990),
        ],
    )
    seeds = {
        "cross_tenant": {
            "stub-leak": stub_leak,
            "one-short-request": scenario(requests=[request(0, ("tokens", 100))]),
            "two-tenants-fit": scenario(
                requests=[request(1, share(2000, ctx)), request(2, share(3000, ctx), gap_100us=20000)]
            ),
            "empty": b"",
        },
        "scenario_run": {
            "stub-leak": stub_leak,
            "stub-leak-fixed-profile": scenario(
                seed=7,
                profile=1,
                requests=[
                    request(1, share(4000, ctx)),
                    request(1, share(3900, ctx), gap_100us=10),
                    request(2, share(6000, ctx), output=3, gap_100us=19990),
                ],
            ),
            "vllm-two-nodes-each": scenario(
                profile=2,
                prefill_nodes=1,
                decode_nodes=1,
                router=2,
                requests=[request(t % 4, share(1000 + 700 * t, ctx), gap_100us=3) for t in range(8)],
            ),
            "faults-and-aborts": scenario(
                seed=3,
                page=1,
                transfer_batch=2,
                slow_transfers=True,
                faults=(3, 4, 5, 6, 0, 1, 1, 2),
                scripts=[script("crash", 50, 1, 0), script("transfer_fail", 1), script("delay", 2, 3)],
                requests=[
                    request(0, ("near_prefill_pool", -600), abort_100us=30),
                    request(1, ("near_context", 1), gap_100us=1),
                    request(2, ("near_decode_pool", -10), gap_100us=2),
                    request(3, ("tokens", 200), gap_100us=2, abort_100us=1),
                ],
            ),
            "one-batch-faults": scenario(
                seed=5,
                page=1,
                transfer_batch=2,
                more_scripts=[
                    more_script("transfer_fail_at", 0, 1),
                    more_script("delay_at", 1, 2, 3),
                    more_script("visibility_lag_at", 2, 1, 2),
                    more_script("metadata_lag", 3, 3),
                ],
                requests=[request(t, share(1500 + 500 * t, ctx), gap_100us=5) for t in range(4)],
            ),
            "every-knob-changed": scenario(
                knobs=[1 + (i % 3) for i in range(40)],
                page=0,
                context=2,
                requests=[request(t, share(300 * (t + 1), 2048), gap_100us=t) for t in range(6)],
            ),
            "empty": b"",
        },
    }
    for target, files in seeds.items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name, data in files.items():
            with open(os.path.join(d, name), "wb") as f:
                f.write(data)


def compact(d):
    return json.dumps(d, separators=(",", ":"))


def traces(kvsim):
    """Real traces of the shipped small scenarios, cut and corrupt variants."""
    root = os.path.dirname(HERE)
    corpus = os.path.join(HERE, "corpus", "parse_trace")
    regressions = os.path.join(HERE, "regressions", "parse_trace")
    os.makedirs(corpus, exist_ok=True)
    os.makedirs(regressions, exist_ok=True)

    def run(scenario, out, *extra):
        subprocess.run(
            [kvsim, "run", os.path.join(root, "scenarios", scenario), "--trace", out, *extra],
            check=False,
            stdout=subprocess.DEVNULL,
        )

    leak = os.path.join(corpus, "stub-leak.jsonl")
    run("small/stub-leak.toml", leak)
    run("small/stub-leak.toml", os.path.join(corpus, "stub-leak-filtered.jsonl"), "--trace-filter")
    run("small/stub-cold.toml", os.path.join(corpus, "stub-cold.jsonl"))
    text = open(leak).read()
    lines = text.splitlines()
    with open(os.path.join(corpus, "stub-leak-truncated.jsonl"), "w") as f:
        f.write("\n".join(lines[: len(lines) // 2]) + "\n")
    with open(os.path.join(corpus, "stub-leak-cut-mid-line.jsonl"), "w") as f:
        f.write(text[:3000])
    with open(os.path.join(corpus, "header-only.jsonl"), "w") as f:
        f.write(lines[0] + "\n")
    with open(os.path.join(corpus, "garbage.jsonl"), "w") as f:
        f.write("not json\n")

    header, body, footer = json.loads(lines[0]), lines[1:-1], lines[-1]

    def write(name, h, rows):
        with open(os.path.join(regressions, name), "w") as f:
            f.write("\n".join([compact(h)] + rows + [footer]) + "\n")

    def modify(name, pred, fn, count=1):
        rows, done = [], 0
        for row in body:
            d = json.loads(row)
            if done < count and pred(d):
                fn(d)
                row, done = compact(d), done + 1
            rows.append(row)
        assert done, name
        write(name, header, rows)

    def with_header(name, fn):
        h = json.loads(lines[0])
        fn(h)
        write(name, h, body)

    def dec(d, op, r=None):
        pool = d.get("pool", {})
        return d.get("kind") == "mem" and d.get("op") == op and pool.get("role") == "decode" and r in (None, d["r"])

    def step(d, r=None):
        """A decode-step record (one per decode batch step, trace format /3), with an entry of `r`."""
        pool = d.get("pool", {})
        return (
            d.get("kind") == "mem"
            and d.get("op") == "decode_step"
            and pool.get("role") == "decode"
            and (r is None or any(e["r"] == r for e in d["entries"]))
        )

    def set_entries(d, r, key, value):
        for e in d["entries"]:
            if r is None or e["r"] == r:
                e[key] = value

    def is_copy(d):
        return d.get("kind") == "mem" and d.get("op") == "copy"

    def set_page_size(h, n):
        h["config"]["knobs"]["page_size"] = n

    big = 2**31
    with_header("page-size-zero.jsonl", lambda h: set_page_size(h, 0))
    with_header(
        "filter-page-size-zero.jsonl",
        lambda h: (set_page_size(h, 0), h.__setitem__("filter", {"requests": [], "pages": {"decode-0": [[1, 5]]}})),
    )
    with_header(
        "filter-run-overflow.jsonl",
        lambda h: h.__setitem__("filter", {"requests": [], "pages": {"decode-0": [[2**32 - 1, 5]]}}),
    )
    modify("alloc-run-end-overflow.jsonl", lambda d: dec(d, "alloc", 2), lambda d: d.__setitem__("pages", [{"first": 2**32 - 1, "count": 2}]))
    modify("copy-dst-overflow.jsonl", is_copy, lambda d: d.__setitem__("pages", [[1, 2**32 - 1, 3]]))
    modify("copy-huge-count.jsonl", is_copy, lambda d: d.__setitem__("pages", [[1, 1, 4_000_000_000]]))
    # Decode tokens' writes and reads are decode-step entries (an entry's write is one slot).
    modify("write-slot-end-overflow.jsonl", step, lambda d: set_entries(d, None, "slot", 2**64 - 1))
    modify("write-slot-page-truncation.jsonl", step, lambda d: set_entries(d, None, "slot", (2**32 - 1) * 16))
    modify("read-unknown-pool.jsonl", lambda d: step(d, 2), lambda d: d["pool"].__setitem__("index", 7))
    # A 2^31-page run read in full: lowering flattens it into a page list (out of memory).
    rows = []
    for row in body:
        d = json.loads(row)
        if dec(d, "alloc", 2):
            d["pages"] = [{"first": 1, "count": big}]
        elif step(d, 2):
            set_entries(d, 2, "seq_len", big * 16)
        rows.append(compact(d))
    write("alloc-huge-run.jsonl", header, rows)


if __name__ == "__main__":
    main()
    if len(sys.argv) == 3 and sys.argv[1] == "--traces":
        traces(os.path.abspath(sys.argv[2]))
    elif len(sys.argv) != 1:
        sys.exit(__doc__)
