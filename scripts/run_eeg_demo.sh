#!/usr/bin/env bash
# The README's main job (`make run`): synthetic polysomnography in the real PhysioNet 2018 format
# -> prepared window cache -> short M3G training of the channel-aware EEG encoder (k = 6 channels)
# -> few-shot sleep-staging table (trained vs random-init encoder vs band-power baseline).
# CPU-sized: small encoder width, short nights, few steps. Environment knobs (defaults):
#   DEMO_DATA=demo_data  DEMO_SUBJECTS=8  DEMO_HOURS=2.5  DEMO_STEPS=400  DEMO_BATCH=16  DEMO_WIDTH=32  DEMO_EPSILON=0.2
set -euo pipefail
cd "$(dirname "$0")/.."
MVAPP="${MVAPP:-.venv/bin/mvapp}"
DATA="${DEMO_DATA:-demo_data}"
SUBJECTS="${DEMO_SUBJECTS:-8}"
HOURS="${DEMO_HOURS:-2.5}"
STEPS="${DEMO_STEPS:-400}"
BATCH="${DEMO_BATCH:-16}"
WIDTH="${DEMO_WIDTH:-32}"
EPSILON="${DEMO_EPSILON:-0.2}"  # M3G entropic regularization (the paper's default)
RUN_NAME="eeg_synthetic_m3g_demo"
RAW="$DATA/physionet2018_raw"
CACHE="$DATA/physionet2018_cache"
start=$SECONDS

echo "== 1/4 synthesize $SUBJECTS nights of $HOURS h in PhysioNet 2018 format (WFDB) -> $RAW"
if compgen -G "$RAW/*.hea" > /dev/null; then
  echo "   (found existing records in $RAW; delete the folder to regenerate)"
else
  "$MVAPP" data synth-psg --subjects "$SUBJECTS" --nights 1 --format physionet2018 --hours "$HOURS" --out "$RAW" --seed 0
fi

echo "== 2/4 prepare (read, resample 200->100 Hz, band-pass, 30-s windows) -> $CACHE"
"$MVAPP" data prepare physionet2018 --source "$RAW" --out "$CACHE" | tail -n 1
"$MVAPP" data info "$CACHE" > "$DATA/physionet2018_cache_info.json"
"${PYTHON:-.venv/bin/python}" -c 'import json, sys; i = json.load(open(sys.argv[1])); print("   cache:", i["recordings"], "recordings,", i["subjects"], "subjects,", i["windows"], "windows per stage", i["windows_per_stage"], "; full summary:", sys.argv[1])' "$DATA/physionet2018_cache_info.json"

echo "== 3/4 train M3G, k = 6 channels as views, $STEPS steps, batch $BATCH, encoder width $WIDTH"
rm -rf "runs/$RUN_NAME"  # the demo always starts a fresh run
"$MVAPP" train --config configs/eeg_synthetic_m3g.yaml --name "$RUN_NAME" \
  data.options.cache="$CACHE" train.max_steps="$STEPS" train.batch_size="$BATCH" \
  model.encoders.eeg.width="$WIDTH" model.encoders.eeg.dropout=0.0 train.checkpoint_every=0 train.log_every=10 \
  loss.epsilon="$EPSILON" loss.max_iter=300

echo "== 4/4 few-shot sleep staging on held-out subjects"
"$MVAPP" eval sleep-staging --run "runs/$RUN_NAME" --shots 10 50 100 1000 --seeds 3

echo "demo finished in $((SECONDS - start)) s; outputs in runs/$RUN_NAME (eval/sleep_staging.json, plots/)"
