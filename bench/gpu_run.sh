#!/usr/bin/env bash
# The GPU benchmark as one call of the lent `device` machine (bench/RESULTS.md, "GPU"). Prepared here:
#   .venv/bin/python bench/gpu_weights.py pack .gpu/minilm16       # the bundled model, fp16 weights (45 MB)
#   cp ../shared/data/stsb/sts-test.csv .gpu/                      # STS-B test (not shipped in examples/)
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 -d .whl datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 \
#     sentence-transformers==6.2.0                                  # the peer's trainer needs datasets
# then the device call, carrying .gpu and .whl:  bash bench/gpu_run.sh [speed|weights|all|pairs|anchor]
# Everything it measures goes to $OUT (bench/out/gpu here), written as it goes: a call cut short keeps what it did.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench/out/gpu}
PY=${PY:-python3}
what=${1:-all}
# a smoke run anywhere (CPU): MAX_STEPS=2 LIMIT=60 PY=/some/python bash bench/gpu_run.sh
steps=${MAX_STEPS:+--max-steps $MAX_STEPS}
limit=${LIMIT:+--limit $LIMIT}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
start=$(date +%s)
say() { echo "== [$(($(date +%s) - start)) s] $*"; }

say "device"
{ nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit --format=csv || true
  "$PY" -c "import sys, torch, transformers; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  nproc; } 2>&1 | tee "$OUT/device.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
  "$PY" -c "import sentence_transformers, datasets; print('sentence-transformers', sentence_transformers.__version__, 'datasets', datasets.__version__)" | tee -a "$OUT/device.txt"
fi
MODEL=/tmp/minilm
"$PY" bench/gpu_weights.py unpack .gpu/minilm16 "$MODEL" | tee -a "$OUT/device.txt"

if [ "$what" = all ] || [ "$what" = weights ]; then
  # real weights, end to end: both defaults through the CLI on CUDA, then the project's evaluation
  STS_TEST=.gpu/sts-test.csv
  for mode in words sentences; do
    input=examples/en_top10k.txt; [ $mode = sentences ] && input=examples/stsb_train_sentences.txt
    say "train $mode (the CLI, defaults, real weights)"
    "$PY" -m mirror train "$input" --out "/tmp/tuned-$mode" --model "$MODEL" --quiet $steps 2>&1 | tee "$OUT/train-$mode.txt"
  done
  say "evaluate"
  for m in "$MODEL" /tmp/tuned-words /tmp/tuned-sentences; do
    "$PY" -m mirror eval "$m" examples/gold/simlex999.txt examples/gold/wordsim353.tsv examples/gold/sts-dev.csv \
      "$STS_TEST" --json
  done 2>&1 | tee "$OUT/eval.jsonl"
fi

if [ "$what" = all ] || [ "$what" = speed ]; then
  say "speed: default (+ the peer, a profile), no-bucket, fp32, compile"
  "$PY" bench/bench_gpu.py --shapes "$MODEL" --variants default,no-bucket,fp32,compile --peer --profile 12 \
    --out "$OUT" $limit 2>&1 | tee "$OUT/speed.txt"
fi
if [ "$what" = pairs ]; then
  # issue 50: the pairs sweep on the dev halves (each run's general checks' dev halves, blends), the choice by the
  # presets' rule, then the check halves (the chosen run, the default, mirror-only and the peer) in the same call
  variants="unblended,L2-SP 1,L2-SP 10,distill 10,general mix 0.25,lr 1e-5,min steps 100,LoRA 8 lr 1e-3"
  say "pairs: dev halves, the sweep"
  BENCH_OUT=$OUT "$PY" bench/bench_pairs.py --half dev --model "$MODEL" --device "${DEVICE:-cuda}" --sweep \
    --variants "$variants" --checks --alphas 0.75,0.5,0.25 --choose $limit $steps 2>&1 | tee "$OUT/pairs-dev.txt"
  say "pairs: check halves, the chosen run beside the default, mirror-only and the peer"
  BENCH_OUT=$OUT "$PY" bench/bench_pairs.py --half check --model "$MODEL" --device "${DEVICE:-cuda}" --checks --peer \
    --from-choice "$OUT/pairs-dev.json" $limit $steps 2>&1 | tee "$OUT/pairs-check.txt"
fi
if [ "$what" = anchor ]; then
  # issue 60: does a general anchor (distillation on bundled Wikipedia text: mirror.terms.GeneralAnchor) move the
  # frontier of in-domain gain against forgetting? Dev halves first (the preset, anchors with and without the preset's
  # distillation, the peer; each at the app's four α, the checks' dev halves), then the check halves of three sources
  # for the preset, the anchor variant the dev halves serve the most gain with, and the peer (checks' dev halves for
  # the choice, check halves reported)
  blend="$PY bench/bench_layer_blend.py --model $MODEL --device ${DEVICE:-cuda} --families app --memory-mb 60000 --limit ${LIMIT:-0} $steps"
  variants="preset;general_anchor=10;general_anchor=30;distill=0,general_anchor=10;distill=0,general_anchor=30;peer"
  say "anchor: dev halves"
  BENCH_OUT=$OUT $blend --sets foldoc,stdlib --half dev --no-check-halves --variants "$variants" --out anchor-dev.json \
    2>&1 | tee "$OUT/anchor-dev.txt"
  best=$("$PY" bench/bench_layer_blend.py --best-variant "$OUT/anchor-dev.json" --exclude "preset;peer")
  say "anchor: check halves, the preset, $best and the peer"
  BENCH_OUT=$OUT $blend --sets foldoc,stdlib,go --half check --variants "preset;$best;peer" --out anchor-check.json \
    2>&1 | tee "$OUT/anchor-check.txt"
fi
say "done"
