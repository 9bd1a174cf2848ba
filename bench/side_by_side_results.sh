# bench/side_by_side.sh's ending, sourced by it (its variables and functions): finish writes the
# dated results file from what ran and packs the logs; stopped (trapped on TERM and INT) ends the
# run that is under way, records it, and finishes.
finish() {
  trap - TERM INT
  note "elapsed: $(($(date +%s) - START))s"
  RESULT=$(python3 "$BENCH/results.py" name --dir "$OUT" --tag "$TAG")
  table "$RESULT" || { echo "side_by_side_table.py failed:"; tail -20 "$LOGS/table.log"; }
  [ -f "$RESULT" ] && rm -f "$OUT/sbs_partial.md"
  cp "$RESULT" "$RUN/" 2>/dev/null
  cp -r "$MODELS/.logs" "$RUN/export_logs" 2>/dev/null
  for p in "${PROGRAMS[@]}"; do
    [ -f "$MODELS/$p/export.json" ] && cp "$MODELS/$p/export.json" "$RUN/export_$p.json"
    [ -f "$MODELS/$p/manifest.json" ] && cp "$MODELS/$p/manifest.json" "$RUN/manifest_$p.json"
  done
  local T=$OUT/sbs_logs.tar.xz
  [ -e "$T" ] && T=$OUT/sbs_logs.$(basename "$RESULT" .md).tar.xz
  tar -C "$RUN" -cf - . | xz -T0 -6 >"$T" 2>/dev/null || echo "could not pack the logs"
  if [ -n "${PACK_PID:-}" ]; then
    wait "$PACK_PID" || echo "pack.py failed: $(tail -2 "$RUN/pack.log")"
  fi
  if [ -n "${BENCH_RESULTS_DIR:-}" ] && [ -f "$RESULT" ]; then
    python3 "$BENCH/results.py" add "$RESULT" --dir "$BENCH_RESULTS_DIR" --index "${BENCH_RESULTS_INDEX:-$BENCH/RESULTS.md}" \
      --what "${SBS_WHAT:-side by side$([ -n "$RS" ] && echo " at real scale"): ExecuTorch 1.4.1 programs (${PROGRAMS[*]}), ours vs upstream ${UP_NAMES[*]}, plain and best}"
  fi
  echo
  echo "==================== $RESULT ($(($(date +%s) - START))s)"
  cat "$RESULT" 2>/dev/null || echo "(no results file)"
}
# stopped from outside (the device tool's time limit): the dated file from what ran
stopped() {
  note "stopped by a signal at +$(($(date +%s) - START))s; programs not run to the end: $(for p in "${SMALL_P[@]}" "${BIG_P[@]}"; do
    [[ " ${DONE[*]} " == *" $p "* ]] || printf '%s ' "$p"; done)"
  if [ -n "$CUR" ]; then
    kill -TERM "$CUR" 2>/dev/null
    wait "$CUR"
    row "${CUR_ROW[@]}"
  fi
  finish
  exit 143
}
