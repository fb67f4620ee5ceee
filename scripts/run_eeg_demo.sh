#!/usr/bin/env bash
# The README's main job (`make run`), following M3G Sec. 4.3: pretrain on PhysioNet-2018-format
# polysomnography (k = 6 EEG channels as views), then few-shot sleep staging
#   (a) in-domain: held-out subjects of the pretraining data (the run's own split), and
#   (b) cross-dataset, the paper's protocol: Sleep-EDF-format nights (Fpz-Cz, Pz-Oz) from a disjoint
#       generator seed, split on their own (subject folds).
# Rows: trained encoder vs random-init encoder vs band-power and handcrafted baselines vs band power + trained
# encoder; balanced accuracy and kappa first. The supervised ceiling row (the same encoder trained on the pretraining
# nights' stage labels; ~90 s more) is opt-in: `make run-full` (DEMO_CEILING=true, or `ceiling: true` in the config).
# CPU-sized: nights are 6x compressed excerpts of full 9-h nights
# (same stage proportions), a small encoder, few steps. Environment knobs (defaults):
#   every setting is in configs/demo_eeg.yaml (DEMO_CONFIG=FILE for another file of the same keys); an environment
#   variable DEMO_<KEY> overrides a key, e.g. DEMO_STEPS=200 (empty: the file's value; DEMO_AUGMENT="" turns the
#   view augmentations off). Use a fresh DEMO_DATA folder per generator seed pair: existing files are reused.
# Speed (docs/eeg.md "Demo"): torch runs with one intra-op thread (OMP_NUM_THREADS=1 unless set:
# on 2 shared cores the default two threads made a training step ~8x slower; every mvapp process
# prints its choice, "torch threads: ..."); every stage but the PhysioNet-format synthesis (two writer processes)
# is one single-threaded process, so the second core runs the Sleep-EDF-format side (only the cross-dataset
# evaluation reads it) beside the PhysioNet-format prepare and the training, and the two evaluations run as two
# concurrent processes. DEMO_TRAIN_THREADS=N gives the training alone N threads (MVAPP_NUM_THREADS; unset: one),
# e.g. 2 on an otherwise idle 2-core machine (docs/eeg.md). glibc keeps freed memory for reuse
# (MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ unless set): the synthesis and evaluations otherwise spent a
# quarter of their CPU time in the kernel, mapping and faulting in fresh pages for every large temporary array.
set -euo pipefail
cd "$(dirname "$0")/.."
MVAPP="${MVAPP:-.venv/bin/mvapp}"
DEMO_CONFIG="${DEMO_CONFIG:-configs/demo_eeg.yaml}"
PY="$(dirname "$MVAPP")/python"; [ -x "$PY" ] || PY=python3
# the settings as the package resolves them (multiview_app/experiments/eeg_demo.py: the file's keys, DEMO_<KEY> winning)
# as KEY=value lines (DATA, SUBJECTS, ..., CEILING); one line naming the file and the keys when it does not fit
settings="$("$PY" -c 'import sys
from pathlib import Path
from multiview_app.experiments.eeg_demo import demo_settings
try:
    settings = demo_settings(path=Path(sys.argv[1]))
except OSError as error:
    sys.exit(f"{sys.argv[1]}: cannot read the demo config ({error.strerror})")
except ValueError as error:
    sys.exit(str(error))
print("\n".join(f"{key.upper()}={value}" for key, value in settings.items()))' "$DEMO_CONFIG")"
while IFS='=' read -r key value; do declare "$key=$value"; done <<< "$settings"
if [ "$PSG_SEED" = "$EDF_SEED" ]; then
  echo "DEMO_PSG_SEED and DEMO_EDF_SEED are both $PSG_SEED: the cross-dataset nights would be the pretraining people" >&2
  exit 2
fi
# s = 1000 (every window a class has) only in the full demo: with C chosen by cross-validation inside the drawn
# windows its fits cost as much as the three smaller columns together, and `make run` keeps to 5 minutes
# the full demo also stages whole (uncompressed) Sleep-EDF-format nights, adding YASA's zero-shot row: its rolling
# context needs real time order, and the compressed nights keep every 6th epoch
case "${CEILING,,}" in
  true|1|yes) CEILING_ARGS=(); SHOTS=(10 50 100 1000); EDF_COMPRESS=1; YASA_ARGS=(--yasa) ;;
  false|0|no) CEILING_ARGS=(--no-ceiling); SHOTS=(10 50 100); EDF_COMPRESS="$COMPRESS"; YASA_ARGS=() ;;
  *) echo "DEMO_CEILING / ceiling: expected true or false, got '$CEILING'" >&2; exit 2 ;;
esac
read -r -a AUGMENT_ARGS <<< "$AUGMENT"  # word-split without globbing ("[0.5,2.0]" stays literal)
RUN_NAME="eeg_synthetic_m3g_demo"
RAW="$DATA/physionet2018_raw"
CACHE="$DATA/physionet2018_cache"
EDF_STEM="sleep_edf$([ "$EDF_COMPRESS" = "$COMPRESS" ] || echo "_compress$EDF_COMPRESS")"
EDF_RAW="$DATA/${EDF_STEM}_raw"
EDF_CACHE="$DATA/${EDF_STEM}_cache"
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
export MALLOC_MMAP_THRESHOLD_="${MALLOC_MMAP_THRESHOLD_:-1073741824}" MALLOC_TRIM_THRESHOLD_="${MALLOC_TRIM_THRESHOLD_:-4294967296}"
start=$SECONDS
PHASES=()  # "name seconds" of every phase, printed at the end
phase_done() {  # phase_done NAME SINCE: record and print the wall seconds of a phase that began at SINCE
  PHASES+=("$1 $((SECONDS - $2)) s")
  echo "   [$1: $((SECONDS - $2)) s wall]"
}

synth() {  # synth FORMAT SUBJECTS OUT SEED WORKERS COMPRESS
  if compgen -G "$3/*" > /dev/null; then
    echo "   (found existing files in $3; delete the folder to regenerate)"
  else
    "$MVAPP" data synth-psg --subjects "$2" --nights 1 --format "$1" --hours "$HOURS" --compress "$6" \
      --out "$3" --seed "$4" --workers "$5"
  fi
}

echo "== 1/5 synthesize $SUBJECTS PhysioNet-2018-format nights (WFDB; pretraining) and $EDF_SUBJECTS Sleep-EDF-format"
echo "       nights (EDF; cross-dataset staging, disjoint seed): ${HOURS}-h nights as ${COMPRESS}x compressed excerpts"
[ "$EDF_COMPRESS" = "$COMPRESS" ] || echo "       (the Sleep-EDF-format nights whole, --compress $EDF_COMPRESS, for YASA's zero-shot row)"
echo "== 2/5 prepare (read, resample to 100 Hz, band-pass 0.5-30 Hz, 30-s windows), each dataset as soon as it is written"
# the PhysioNet side (the critical path: its synthesis with two writer processes, then its prepare, then the
# training); the Sleep-EDF side starts once the PhysioNet nights are written and runs beside the PhysioNet prepare
# and the training on the core they leave free; its output is printed after the training's
mkdir -p "$DATA"
# M3G's CPU solver at the demo's size (the numba k > 3 sweeps, multiview_app/losses/sinkhorn_fast.py) compiles on
# first use (~20-70 s CPU, then cached on disk): warm numba's cache beside the synthesis, so the training does not
# wait for it (best effort: without it the training compiles them itself; same results either way)
warm_job=""
if [ -x "$(dirname "$MVAPP")/python" ]; then
  "$(dirname "$MVAPP")/python" -m multiview_app.losses.warmup "$BATCH" 6 > "$DATA/numba_warmup.log" 2>&1 &
  warm_job=$!
fi
edf_side() {  # the Sleep-EDF-format nights, synthesized then prepared (its wall time on the last line)
  local since=$SECONDS
  synth sleep-edf "$EDF_SUBJECTS" "$EDF_RAW" "$EDF_SEED" 1 "$EDF_COMPRESS" && "$MVAPP" data prepare sleep-edf --source "$EDF_RAW" --out "$EDF_CACHE"
  echo "   [Sleep-EDF-format synthesize + prepare, concurrent: $((SECONDS - since)) s wall]"
}
t=$SECONDS
synth physionet2018 "$SUBJECTS" "$RAW" "$PSG_SEED" 2 "$COMPRESS"  # two writer processes (the same files): the critical path
phase_done "synthesize PhysioNet-format" "$t"; t=$SECONDS
edf_side > "$DATA/sleep_edf.log" 2>&1 &
edf_job=$!
"$MVAPP" data prepare physionet2018 --source "$RAW" --out "$CACHE"
phase_done "prepare PhysioNet-format" "$t"

echo "== 3/5 train M3G, k = 6 channels as views, $STEPS steps, batch $BATCH, lr $LR, encoder $ENCODER (one set of weights for every channel)"
echo "       view augmentations: ${AUGMENT:-none}"
rm -rf "runs/$RUN_NAME"  # the demo always starts a fresh run
t=$SECONDS
if [ -n "$warm_job" ]; then
  wait "$warm_job" && cat "$DATA/numba_warmup.log" || echo "   (numba warm-up failed, see $DATA/numba_warmup.log: the training compiles the kernels)"
fi
MVAPP_NUM_THREADS="${DEMO_TRAIN_THREADS:-${MVAPP_NUM_THREADS:-}}" \
  "$MVAPP" train --config configs/eeg_synthetic_m3g.yaml --name "$RUN_NAME" \
  data.options.cache="$CACHE" train.max_steps="$STEPS" train.batch_size="$BATCH" optim.lr="$LR" \
  model.encoders.eeg="$ENCODER" train.checkpoint_every=0 train.log_every=10 \
  loss.epsilon="$EPSILON" loss.max_iter=300 ${AUGMENT_ARGS[@]+"${AUGMENT_ARGS[@]}"}
phase_done "train" "$t"; t=$SECONDS
edf_status=0; wait "$edf_job" || edf_status=$?
cat "$DATA/sleep_edf.log"; rm -f "$DATA/sleep_edf.log"
phase_done "wait for the Sleep-EDF-format side" "$t"; t=$SECONDS
[ "$edf_status" -eq 0 ] || { echo "Sleep-EDF-format synthesis/prepare failed (exit $edf_status)" >&2; exit "$edf_status"; }
if [ ${#CEILING_ARGS[@]} -eq 0 ]; then
  echo "       supervised ceiling: the same encoder trained end to end on the pretraining nights' stages (cross-entropy,"
  echo "       steps chosen on validation subjects of the pretraining data), probed like the pretrained encoder"
  "$MVAPP" experiment supervised-ceiling --run "runs/$RUN_NAME"
  phase_done "supervised ceiling" "$t"; t=$SECONDS
else
  echo "       (supervised ceiling row skipped: \`make run-full\` or DEMO_CEILING=true trains and probes it, ~90 s more)"
fi

# the two evaluations in two concurrent processes (separate output files); tables printed in order. Each fits its
# subject folds in two processes (--workers 2: the same result), so neither core idles once the shorter one ends
CROSS_LOG="runs/$RUN_NAME/eval_cross_dataset.log"
cross_eval() {
  local since=$SECONDS
  "$MVAPP" eval sleep-staging --run "runs/$RUN_NAME" --cache "$EDF_CACHE" --shots "${SHOTS[@]}" --draws "$DRAWS" \
    --folds 5 --combine "$COMBINE" --workers 2 ${CEILING_ARGS[@]+"${CEILING_ARGS[@]}"} ${YASA_ARGS[@]+"${YASA_ARGS[@]}"}
  echo "   [cross-dataset evaluation, concurrent with the in-domain one: $((SECONDS - since)) s wall]"
}
cross_eval > "$CROSS_LOG" 2>&1 &
cross_job=$!
echo "== 4/5 in-domain few-shot sleep staging: the run's 4 held-out subjects in 2 test folds of 2"
"$MVAPP" eval sleep-staging --run "runs/$RUN_NAME" --shots "${SHOTS[@]}" --draws "$DRAWS" --folds 2 --combine "$COMBINE" \
  --workers 2 ${CEILING_ARGS[@]+"${CEILING_ARGS[@]}"}
phase_done "in-domain evaluation" "$t"
cross_status=0; wait "$cross_job" || cross_status=$?
phase_done "both evaluations" "$t"
echo "== 5/5 cross-dataset (M3G Sec. 4.3): PhysioNet-format pretraining -> Sleep-EDF-format staging, 5 subject folds"
cat "$CROSS_LOG"
[ "$cross_status" -eq 0 ] || { echo "cross-dataset staging failed (exit $cross_status)" >&2; exit "$cross_status"; }

echo "phases (wall seconds; load average now: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)):"
printf '   %s\n' "${PHASES[@]}"
echo "demo finished in $((SECONDS - start)) s; outputs in runs/$RUN_NAME (eval/sleep_staging*.json, plots/)"
