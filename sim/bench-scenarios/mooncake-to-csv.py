#!/usr/bin/env python3
"""Converts a Mooncake JSON Lines trace to the CSV format of trace-replay simulators
(arrived_at in seconds, num_prefill_tokens, num_decode_tokens), for BENCHMARKS.md."""
import json
import sys

src, dst = sys.argv[1], sys.argv[2]
with open(src) as f, open(dst, "w") as out:
    out.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
    for line in f:
        d = json.loads(line)
        out.write(f"{d['timestamp'] / 1000:.3f},{d['input_length']},{d['output_length']}\n")
