#!/usr/bin/env bash
# On the GPU machine, from the repository root: a time-boxed `tlp collect` on CUDA (or a short `tlp tune`) with the
# bundle of prepare_bundle.sh; what it measured comes back under $OUT.
#
# The bundle travels in parts (README.md): each call copies the parts it carried to /tmp/tlp_bundle_parts; once
# every part is there the bundle is unpacked into /tmp/tlp_bundle and the chunk runs, otherwise it says which part
# is missing and exits 3 (the machine keeps /tmp only while it stays warm between calls).
#
# Settings (environment): MODE (collect | tune; default collect), WORKLOADS, TARGET (JSON), BUDGET_S (the whole
# script's wall time, default 450: the chunk is stopped with Ctrl-C, which ends a collection cleanly, the
# batch in flight discarded), TRIALS (per task, default 64), PYTHON (default python3).
set -uo pipefail
started=$(date +%s)
MODE=${MODE:-collect}
WORKLOADS=${WORKLOADS:-dense_128x768x768,matmul_512x512x512,conv2d_nchw_1x64x56x56_o64_k3_s1_p1_d1,conv2d_nchw_1x128x28x28_o128_k3_s1_p1_d1,softmax_12x128x128,layer_norm_128x768}
TARGET=${TARGET:-'{"kind":"cuda","arch":"sm_90","max_threads_per_block":1024,"max_shared_memory_per_block":49152,"thread_warp_size":32}'}
BUDGET_S=${BUDGET_S:-450}
TRIALS=${TRIALS:-64}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/tlp_out}
mkdir -p "$OUT"
LOG="$OUT/run.log"
say() { echo "[$(( $(date +%s) - started ))s] $*" | tee -a "$LOG"; }

# ---- the bundle ---------------------------------------------------------------------------------------------
PARTS=/tmp/tlp_bundle_parts
mkdir -p "$PARTS"
for part in build/gpu_bundle/*/tlp_gpu_bundle.tar.xz.part-*; do
    [ -f "$part" ] && cp -f "$part" "$(dirname "$part")/MANIFEST" "$PARTS/"
done
if [ ! -f "$PARTS/MANIFEST" ]; then
    say "no bundle part here: carry build/gpu_bundle/a (then b, ...) made by benchmarks/gpu_platform/prepare_bundle.sh"
    exit 3
fi
wanted=$(sed -n 's/^parts //p' "$PARTS/MANIFEST")
missing=""
for part in $wanted; do [ -f "$PARTS/$part" ] || missing="$missing build/gpu_bundle/${part##*part-}"; done
if [ -n "$missing" ]; then
    say "bundle parts still missing:$missing; have: $(cd "$PARTS" && ls tlp_gpu_bundle.tar.xz.part-* | tr '\n' ' ')" \
        "-> run this script again at once (within the machine's warm time) carrying the missing part"
    exit 3
fi
if [ ! -f /tmp/tlp_bundle/site/BUNDLE_VERSION ]; then
    (cd "$PARTS" && cat $wanted) > /tmp/tlp_gpu_bundle.tar.xz
    if [ "$(sha256sum /tmp/tlp_gpu_bundle.tar.xz | cut -d' ' -f1)" != "$(sed -n 's/^sha256 //p' "$PARTS/MANIFEST")" ]; then
        say "bundle checksum mismatch: the parts come from different prepare_bundle.sh runs"
        exit 3
    fi
    rm -rf /tmp/tlp_bundle && mkdir -p /tmp/tlp_bundle
    xz -dc -T0 /tmp/tlp_gpu_bundle.tar.xz | tar -x -C /tmp/tlp_bundle && rm -f /tmp/tlp_gpu_bundle.tar.xz
    say "bundle unpacked: $(cat /tmp/tlp_bundle/site/BUNDLE_VERSION)"
fi

# ---- the environment ----------------------------------------------------------------------------------------
export PYTHONPATH="/tmp/tlp_bundle/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 TLP_CACHE_DIR=/tmp/tlp_cache TARGET
# TVM's CUDA runtime needs libcudart.so.13 (and the driver's libcuda.so.1): the toolkit's, else a wheel's
cudart=""
for dir in "${CUDA_HOME:-/nonexistent}/lib64" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
           $($PY -c 'import glob, site; print(" ".join(glob.glob(site.getsitepackages()[0] + "/nvidia/*/lib") + glob.glob(site.getsitepackages()[0] + "/nvidia/cu13/lib")))' 2>/dev/null); do
    if [ -z "$cudart" ] && ls "$dir"/libcudart.so.13* >/dev/null 2>&1; then cudart=$dir; fi
done

[ -n "$cudart" ] && export LD_LIBRARY_PATH="$cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
{
    echo "python: $($PY -V 2>&1)  cudart: ${cudart:-not found}  nvcc: $(command -v nvcc || echo none)"
    nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader 2>&1
    nvcc --version 2>&1 | tail -1
    nproc
} | tee -a "$LOG"
$PY - <<'EOF' 2>&1 | tee "$OUT/platform.json" | tee -a "$LOG"
import json, os, time
t = time.time()
from tlp._tvm import tvm
from tlp.gpu import cuda_compiler, cuda_runtime_problem, detect_gpu
from tlp.platform import Platform, parse_target
target = parse_target(json.loads(os.environ.get("TARGET") or "{}") or {"kind": "cuda"})
platform = Platform.host(target)
print(json.dumps({"platform": platform.id, "hardware": platform.hardware, "tvm_cuda": tvm.cuda(0).exist,
                  "compute_version": tvm.cuda(0).compute_version if tvm.cuda(0).exist else None,
                  "compiler": cuda_compiler()[0], "import_s": round(time.time() - t, 1)}))
EOF
[ "${PIPESTATUS[0]}" = 0 ] || { say "platform check failed (above)"; exit 4; }


# ---- the chunk ----------------------------------------------------------------------------------------------
left=$(( BUDGET_S - ( $(date +%s) - started ) - 25 ))  # 25 s to pack what was measured
say "$MODE for ${left}s: $WORKLOADS"
if [ "$MODE" = tune ]; then
    timeout -s INT -k 30 "$left" $PY -m tlp tune "${WORKLOADS%%,*}" --target "$TARGET" --trials "$TRIALS" \
        --work-dir /tmp/tlp_tune --dataset /tmp/tlp_ds > "$OUT/tune.out" 2> "$OUT/tune.err"
    rc=$?
    cp /tmp/tlp_tune/report.json "$OUT/" 2>/dev/null
else
    timeout -s INT -k 30 "$left" $PY -m tlp collect --workloads "$WORKLOADS" --dataset /tmp/tlp_ds \
        --target "$TARGET" --trials-per-task "$TRIALS" --set random_fraction=1.0 --set batch_size=32 -q \
        > "$OUT/collect.json" 2> "$OUT/collect.err"
    rc=$?
fi
say "$MODE exit $rc (124/130: stopped by the time box, which is expected)"
tail -5 "$OUT/$MODE.err" 2>/dev/null | tee -a "$LOG"

# ---- what comes back ----------------------------------------------------------------------------------------
$PY - <<'EOF' 2>&1 | tee "$OUT/summary.json" | tail -40 >> "$LOG"
import json
from collections import Counter
from tlp.dataset.store import Dataset
dataset = Dataset("/tmp/tlp_ds")
summary = {}
for pid in dataset.platform_ids():
    programs = list(dataset.store(pid).latest_programs().values())
    names = {k: v.get("name", k) for k, v in dataset.catalogue().items()}
    per_task = {}
    for p in programs:
        entry = per_task.setdefault(names.get(p.workload_key, p.workload_key), {"valid": 0, "failed": 0, "best_us": None})
        if p.latency is None:
            entry["failed"] += 1
        else:
            entry["valid"] += 1
            best = p.latency * 1e6
            entry["best_us"] = round(min(best, entry["best_us"] or best), 3)
    errors = Counter((p.error or "").strip().splitlines()[-1][:160] for p in programs if p.latency is None and p.error)
    summary[pid] = {"programs": len(programs), "tasks": per_task, "top_errors": errors.most_common(5)}
print(json.dumps(summary, indent=1))
EOF
if [ -d /tmp/tlp_ds ]; then
    $PY -m tlp dataset seal --dataset /tmp/tlp_ds >/dev/null 2>&1 || true
    tar -C /tmp -czf "$OUT/tlp_ds.tar.gz" tlp_ds
fi
say "done: $(ls "$OUT" | tr '\n' ' ')"
