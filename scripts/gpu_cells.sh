#!/usr/bin/env bash
# On a lent GPU machine: train reproduction cells side by side until a deadline, one process per row,
# and leave their records and small run files (no weights) in one archive.
#
#   PYTHON=python3 DEADLINE=420 bash scripts/gpu_cells.sh OUT_ARCHIVE_DIR TABLE SEEDS ROW [ROW ...] [-- REPRODUCE_ARGS ...]
#
# e.g. DEADLINE=420 bash scripts/gpu_cells.sh "$OUT" eulerformer-t4 5 base sinusoidal xlnet -- \
#          --datasets ML-1M --use-data ML-1M=base/ml100k.yaml --budget paper
#      SERIAL=1 DEADLINE=540 RECORDS_FROM=docs/results bash scripts/gpu_cells.sh "$OUT" linrec-t4 1 \
#          sasrec sasrec+linrec bert4rec bert4rec+linrec -- --datasets ML-1M --budget paper
#
# Each row runs `recbole-ext reproduce TABLE --models ROW --seeds SEEDS ...` in its own process (THREADS CPU
# threads each, default 2) with its own --out, holding a copy of RECORDS_FROM/records (RECORDS_FROM
# default docs/results/ml100k) so finished seeds there, from any device, are not trained again; the run
# cache is shared. Rows still training at
# DEADLINE seconds are interrupted (SIGINT): their finished seeds keep their run directories. Afterwards
# OUT_ARCHIVE_DIR/cells.tar.gz holds every out folder and run directory without weights; copy its
# records/*.json into the committed records folder and rebuild the table with --report-only.
# SERIAL=1 runs the rows one after another, in the order given, each alone on the GPU, within the same
# DEADLINE: for efficiency tables (linrec-t4), whose seconds and peak memory mean nothing on a shared GPU.
# Why processes, not `reproduce --parallel`: Ray is not among the wheels a lent machine is given, and a
# row per process keeps one slow row from holding the others' seeds back.
set -uo pipefail
cd "$(dirname "$0")/.."
archive=$1 table=$2 seeds=$3
shift 3
rows=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do rows+=("$1"); shift; done
[ $# -gt 0 ] && shift
python=${PYTHON:-.venv/bin/python}
deadline=${DEADLINE:-420}
records_from=${RECORDS_FROM:-docs/results/ml100k}
work=${WORK:-/tmp/gpu_cells}
[ ${#rows[@]} -gt 0 ] || { echo "gpu_cells: name at least one row" >&2; exit 2; }
mkdir -p "$work" "$archive"
serial=${SERIAL:-0}
end=$((SECONDS + deadline))
for row in "${rows[@]}"; do
  left=$((end - SECONDS))
  [ "$left" -gt 0 ] || { echo "gpu_cells: deadline reached before row $row"; break; }
  rm -rf "$work/out-$row"
  mkdir -p "$work/out-$row"
  [ -d "$records_from/records" ] && cp -r "$records_from/records" "$work/out-$row/"
  OMP_NUM_THREADS=${THREADS:-2} timeout -s INT "$left" "$python" -m recbole_ext.cli reproduce "$table" --models "$row" \
    --seeds "$seeds" --cache "$work/runs" --out "$work/out-$row" "$@" > "$work/$row.log" 2>&1 &
  if [ "$serial" = 1 ]; then wait; echo "gpu_cells: row $row ended at ${SECONDS}s"; fi
done
wait
tar czf "$archive/cells.tar.gz" --exclude='*.pth' --exclude=tensorboard -C "$work" .
echo "gpu_cells: $(ls "$work"/out-*/records 2>/dev/null | grep -c json) record files; archive $archive/cells.tar.gz"
