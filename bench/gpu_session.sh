#!/usr/bin/env bash
# One prepared device session (docs/testing.md "On a GPU"): each phase of bench/measure_gpu.py under its own time
# limit, so a slow or failing phase leaves the others their time; every result file lands in $OUT.
#   bash bench/gpu_session.sh                   (on the device machine, with the wheels of pydantic & co. in .whl/)
#   PHASES=profile bash bench/gpu_session.sh    (one phase: kernels, step, memory, profile)
set -u
OUT=${OUT:-artifacts/gpu}
PHASES=${PHASES:-kernels step memory}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
M=bench/measure_gpu.py
{
  nvidia-smi --query-gpu=name,memory.total,power.limit,clocks.max.sm,driver_version --format=csv
  python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
  for phase in $PHASES; do
    echo "== $phase"
    case $phase in
      kernels) timeout "${KERNELS_S:-90}" python3 $M "$OUT/kernels_gpu.json" --mode kernels ;;
      step) timeout "${STEP_S:-150}" python3 $M "$OUT/step_time_gpu.json" --mode step-time ;;
      memory)
        timeout "${MEMORY_S:-120}" python3 $M "$OUT/memory_gpu_pytorch.json" --framework pytorch
        timeout "${FSDP2_S:-60}" python3 $M "$OUT/memory_gpu_fsdp2.json" --framework fsdp2
        timeout "${HF_S:-90}" python3 $M "$OUT/memory_gpu_hf.json" --framework hf ;;
      profile) timeout "${PROFILE_S:-200}" python3 $M "$OUT/profile_gpu.json" --mode profile ;;
      *) echo "gpu_session: unknown phase $phase (kernels, step, memory, profile)" ;;
    esac
  done
  echo "== done"
} 2>&1 | tee "$OUT/session_${PHASES// /_}.log"
