#!/usr/bin/env bash
# A profile-guided build of the `kvsim` command (the `dist` profile, optimised with a profile of
# its own runs): same model, same traces and trace hashes, less CPU per run (BENCHMARKS.md,
# "Fifty-second session"). Writes target/pgo/kvsim.
#
#   scripts/pgo-build.sh            # two `dist` builds and about 20 s of training runs
#
# Needs `llvm-profdata` of the compiler's own LLVM: `rustup component add llvm-tools` (or set
# LLVM_PROFDATA). The training runs are the catalogue's and the small scenarios and 1,500-run
# fuzz campaigns of the three profiles (seeds from 1,000,000): none of the runs `kvsim bench`
# times (not the incident's scenario, not the bench workloads, not the swarm's seeds 0..2,000).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work="$root/target/pgo"
host=$(rustc -vV | sed -n 's/^host: //p')
profdata=${LLVM_PROFDATA:-$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata}
if [ ! -x "$profdata" ]; then
  echo "error: no llvm-profdata at $profdata: run \`rustup component add llvm-tools\` (or set LLVM_PROFDATA)" >&2
  exit 2
fi
rm -rf "$work/raw" "$work/train"
mkdir -p "$work/raw" "$work/train"

echo "pgo: 1/3 instrumented build" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-generate=$work/raw" CARGO_TARGET_DIR="$work/gen-target" \
  cargo build --profile dist -p kvsim-cli
gen="$work/gen-target/dist/kvsim"

echo "pgo: 2/3 training runs" >&2
train() {
  # Exit statuses 10 and 11 are verdicts (a leak found, a refusal), not failures.
  local rc=0
  "$gen" "$@" > /dev/null 2>&1 || rc=$?
  case $rc in 0 | 1 | 10 | 11 | 13) ;; *) echo "error: training run \`kvsim $*\` exited $rc" >&2; exit 1 ;; esac
}
for s in scenarios/catalogue/*.toml scenarios/small/*.toml; do
  train run "$s" --seed 7
done
for p in sglang-0.5.22 vllm-nixl sglang-0.5.16; do
  train fuzz --profile "$p" --runs 1500 --seed-start 1000000 --jobs 1 --corpus "$work/train/$p"
done

"$profdata" merge -o "$work/kvsim.profdata" "$work/raw"

echo "pgo: 3/3 optimised build" >&2
RUSTFLAGS="${RUSTFLAGS:-} -Cprofile-use=$work/kvsim.profdata" CARGO_TARGET_DIR="$work/use-target" \
  cargo build --profile dist -p kvsim-cli
cp "$work/use-target/dist/kvsim" "$work/kvsim"
echo "pgo: wrote $work/kvsim" >&2
