#!/usr/bin/env bash
# What CPUs cannot show, in one short run on a GPU machine (under 10 minutes on one H100/H200):
#  1. a bf16 DeepSpeed ZeRO-2 trial of dense-0.5b (gatesweep train, 40 steps, NCCL process group);
#  2. a 2-rank trial (Ray Train, NCCL) when two GPUs exist;
#  3. the MoE layer, per-expert loop vs grouped (torch._grouped_mm), at E64 and at the moe-15a2b layer shape;
#  4. MFU of dense-0.5b in bf16, with and without the G1 gate (benchmarks/gpu_mfu.py).
# Prints a note and exits 0 on a machine without a CUDA GPU.
#   bash benchmarks/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
export RAY_USAGE_STATS_ENABLED=0 MLFLOW_DISABLE_TELEMETRY=true DO_NOT_TRACK=1
GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())")
if [ "$GPUS" = 0 ]; then echo "gpu_check: no CUDA GPU here; nothing to check"; exit 0; fi
"$PY" -c "import torch; print('GPU:', torch.cuda.get_device_name(0), 'x', torch.cuda.device_count(), '| torch', torch.__version__)"
WORK=$(mktemp -d); trap 'rm -rf "$WORK"' EXIT
URI="sqlite:///$WORK/mlflow.db"
cat > "$WORK/trial.yaml" <<YAML
model: {size: dense-0.5b, gate: {position: G1}}
data: {source: shakespeare, tokenizer: gpt2, seq_len: 2048}
train: {steps: 40, batch_size: 8, eval_every: 0, log_every: 10, warmup_steps: 5}
deepspeed: {zero_stage: 2, precision: bf16}
eval: {batches: 1, batch_size: 4, probe_sequences: 4}
tracking: {experiment: gpu-check}
YAML
echo "== 1. bf16 ZeRO-2 trial, one GPU"
timeout 300 .venv/bin/gatesweep train "$WORK/trial.yaml" --runs-dir "$WORK/runs" --tracking-uri "$URI"
if [ "$GPUS" -ge 2 ]; then
  echo "== 2. two ranks (Ray Train, NCCL)"
  cat > "$WORK/sweep.yaml" <<YAML
name: gpu-check-2rank
base:
  model: {size: dense-0.5b, gate: {position: G1}}
  data: {source: shakespeare, tokenizer: gpt2, seq_len: 1024}
  train: {steps: 20, batch_size: 4, eval_every: 0, log_every: 10, warmup_steps: 2}
  deepspeed: {zero_stage: 2, precision: bf16}
  eval: {batches: 1, batch_size: 4, probe_sequences: 4}
grid: {model.gate.position: [G1]}
resources: {workers_per_trial: 2, cpus_per_worker: 4, gpus_per_worker: 1}
tracking: {experiment: gpu-check}
YAML
  timeout 300 .venv/bin/gatesweep run "$WORK/sweep.yaml" --runs-dir "$WORK/runs" --tracking-uri "$URI"
else
  echo "== 2. skipped: one GPU"
fi
echo "== 3. MoE layer, loop vs grouped (bf16)"
timeout 180 "$PY" benchmarks/moe_grouped.py --device cuda --tokens 8192 --rounds 3 --big
echo "== 4. MFU"
timeout 240 "$PY" benchmarks/gpu_mfu.py --steps 20
