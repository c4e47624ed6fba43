#!/usr/bin/env bash
# Leave-platform-out search on a CPU the dataset does not hold, emulated on this machine by an mcpu code no platform
# of datasets/tlp-cpu uses: per workload and seed, MetaSchedule + XGBoost (1,000 trials) and `tlp tune`'s default
# (TLP_TRIALS, 200), or other search_efficiency.py models. Runs and results are named MCPU-on-HOST (this machine's
# LLVM CPU name), or LPO_PLATFORM on a machine the dataset lacks tuned for its own mcpu. Run it alone on the machine.
#   bash benchmarks/leave_platform_out/run.sh MCPU WORKLOADS SEEDS [MODELS]
#   e.g. bash benchmarks/leave_platform_out/run.sh haswell bert_tiny,mobilenet_v2 1,2 xgb,default
set -euo pipefail
mcpu=$1 workloads=$2 seeds=$3 models=${4:-xgb,default}
B=benchmarks/search_efficiency; R=benchmarks/leave_platform_out/results
host=$(.venv/bin/python -c "from tlp.platform import host_cpu_name; print(host_cpu_name())")
platform=${LPO_PLATFORM:-$mcpu-on-$host}
target="{\"kind\": \"llvm\", \"mcpu\": \"$mcpu\", \"num-cores\": 2}"
for w in ${workloads//,/ }; do for s in ${seeds//,/ }; do for m in ${models//,/ }; do
  if [ "$m" = xgb ]; then sizes=(--trials 1000 --trials-per-iter 16 --population 256); else sizes=(--trials "${TLP_TRIALS:-200}"); fi
  .venv/bin/python $B/search_efficiency.py --target "$target" --workloads "$w" "${sizes[@]}" --models "$m" \
      --seeds "$s" --work-dir "runs/lpo-$platform/$w" --out "$R/search_${platform}_${w}_${m//-/_}.json"
done; done; done
