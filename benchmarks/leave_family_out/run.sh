#!/usr/bin/env bash
# Leave-family-out search: architectures of a family no dataset holds, tuned on this machine's own platform (its
# head, its library), per model file and seed: MetaSchedule + XGBoost (1,000 trials) and `tlp tune`'s default
# (TLP_TRIALS, 200), or other search_efficiency.py models. Run it alone on the machine.
#   bash benchmarks/leave_family_out/run.sh MODEL_FILES SEEDS [MODELS]
#   e.g. bash benchmarks/leave_family_out/run.sh benchmarks/leave_platform_out/models/mixer.py 1,2 xgb,default
set -euo pipefail
files=$1 seeds=$2 models=${3:-xgb,default}
B=benchmarks/search_efficiency; R=benchmarks/leave_family_out/results
host=$(.venv/bin/python -c "from tlp.platform import host_cpu_name; print(host_cpu_name())")
target="{\"kind\": \"llvm\", \"mcpu\": \"$host\", \"num-cores\": 2}"
for f in ${files//,/ }; do w=$(basename "$f" .py); for s in ${seeds//,/ }; do for m in ${models//,/ }; do
  if [ "$m" = xgb ]; then sizes=(--trials 1000 --trials-per-iter 16 --population 256); else sizes=(--trials "${TLP_TRIALS:-200}"); fi
  .venv/bin/python $B/search_efficiency.py --target "$target" --workloads "$f" "${sizes[@]}" --models "$m" \
      --seeds "$s" --work-dir "runs/lfo-$host/$w" --out "$R/search_${host}_${w}_${m//-/_}.json"
done; done; done
