#!/usr/bin/env bash
# device-check.sh — runs kvsim-gpu's bench on a machine with an NVIDIA GPU, no network needed.
#
# Usage: bash gpu-replay/device-check.sh [BENCH_BINARY] [bench args...]
#   BENCH_BINARY defaults to device-carry/kvsim-gpu-bench, built beforehand (on x86-64) with
#     CARGO_TARGET_DIR=/work/target-gpu cargo build --release -p kvsim-gpu --bin kvsim-gpu-bench
#     mkdir -p device-carry && cp /work/target-gpu/release/kvsim-gpu-bench device-carry/
#   Extra arguments go to the bench (e.g. --no-full, --reps 10).
#   KVSIM_DEVICE_CHECK_BACKEND=cpu dry-runs the whole check without a GPU (every row on the CPU
#   reference, the sampled check on partials from the slot map, no libnvrtc needed).
#
# What it does: finds libnvrtc.so.13 (system CUDA, ldconfig, or the nvidia-cuda-nvrtc
# Python wheel's nvidia/cu13/lib), puts it and the driver's library folder on
# LD_LIBRARY_PATH (cudarc opens them at run time through the system loader), and runs the
# bench on CUDA: every bench program on CUDA and on the CPU reference — own-only,
# stale-foreign, never-written, copy-then-free, zeroed-on-free (the Zero op's memset path),
# a wide GQA page-1 read, 32k-token reads in f16/bf16/f32 and at GQA group 16 with
# head_dim 128, and the full-scale 1M-token read, replayed again with the sampled CPU check
# (full-1M-sampled: sampled partitions recomputed from the symbolic slot map, the merge
# recomputed from the device's partials) — printed as one table: program, tokens,
# foreign share CUDA and CPU, max |cuda - cpu|, kernel ms, kernel GB/s, measured copy GB/s,
# % of copy bandwidth, PASS/FAIL. A row passes when CUDA agrees with the CPU, the shares are
# the program's, and a long read reaches its bandwidth target (80% of the measured copy
# bandwidth at 1M tokens, 60% at 32k). Before the table, one line times the CPU reference on
# the 1M-token program with 1 thread and with every core (--cpu-speedup; it fails unless the
# results are bit-identical). It is sized to finish well inside the 480 s limit.
#
# Exit code: the bench's (0 all passed, 1 a check failed, 2 error, 3 CUDA unavailable),
# 4 if the binary or libnvrtc is missing, 124 if it ran past its time limit.

set -uo pipefail

BIN="${1:-device-carry/kvsim-gpu-bench}"
[ "$#" -gt 0 ] && shift
LIMIT_S="${KVSIM_DEVICE_CHECK_LIMIT_S:-480}"
BACKEND="${KVSIM_DEVICE_CHECK_BACKEND:-cuda}"
THREADS="$(nproc 2>/dev/null || echo 1)"
[ "$THREADS" -gt 16 ] && THREADS=16

if [ ! -x "$BIN" ]; then
    echo "device-check: no executable bench binary at '$BIN' (see the header of $0 to build it)" >&2
    exit 4
fi

has_nvrtc() { compgen -G "$1/libnvrtc.so.13*" >/dev/null 2>&1; }

find_nvrtc_dir() {
    local d p py
    for d in "${CUDA_HOME:-/nonexistent}/lib64" /usr/local/cuda/lib64 \
        /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64 \
        /usr/lib/x86_64-linux-gnu; do
        if has_nvrtc "$d"; then echo "$d"; return 0; fi
    done
    p="$(ldconfig -p 2>/dev/null | awk '/libnvrtc\.so\.13 /{print $NF; exit}')"
    if [ -n "$p" ]; then dirname "$p"; return 0; fi
    for py in python3 /opt/torch/.venv/bin/python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        while read -r d; do
            if [ -n "$d" ] && has_nvrtc "$d"; then echo "$d"; return 0; fi
        done < <("$py" - <<'EOF' 2>/dev/null
import importlib.util, os
s = importlib.util.find_spec("nvidia")
for root in (list(s.submodule_search_locations) if s else []):
    print(os.path.join(root, "cu13", "lib"))
    print(os.path.join(root, "cuda_nvrtc", "lib"))
EOF
)
    done
    return 1
}

if [ "$BACKEND" = cpu ]; then
    echo "device-check: dry run on the CPU reference ($THREADS threads); no GPU figures"
    timeout "$LIMIT_S" "$BIN" --backend cpu --cpu-speedup --cpu-threads "$THREADS" "$@"
    rc=$?
    echo "device-check: bench exit code $rc"
    exit "$rc"
fi

NVRTC_DIR="$(find_nvrtc_dir)" || {
    echo "device-check: libnvrtc.so.13 not found (no system CUDA 13, no nvidia-cuda-nvrtc wheel)" >&2
    exit 4
}
LIBS="$NVRTC_DIR"
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/local/cuda/compat; do
    [ -d "$d" ] && LIBS="$LIBS:$d"
done
export LD_LIBRARY_PATH="$LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "device-check: nvrtc from $NVRTC_DIR ($(basename "$(ls "$NVRTC_DIR"/libnvrtc.so.13* | head -n 1)"))"
if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
        sed 's/^/device-check: gpu /'
fi

timeout "$LIMIT_S" "$BIN" --backend cuda --cpu-speedup --cpu-threads "$THREADS" "$@"
rc=$?
echo "device-check: bench exit code $rc"
exit "$rc"
