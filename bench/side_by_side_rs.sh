# bench/side_by_side.sh's real-scale steps, sourced by it (its variables and functions): an
# export's summary and collection, waiting for the exports (stopped at SBS_BIG_RESERVE before the
# end), and the eager reference's timing slot alone on the GPU.
RS_RUNS_S=${SBS_RS_RUNS_S:-90} # what the runs take (16 calls of ~3-5 s): the reference's slot only beyond it
export_summary() { # PROGRAM: one line from decode_llama.py's export.json, else the log's last line
  python3 - "$MODELS/$1/export.json" <<'PY' 2>/dev/null || grep -vE '^\s*$' "$LOGS/export.$1.log" 2>/dev/null | tail -1 | cut -c1-200
import json, sys
e = json.load(open(sys.argv[1]))
c = e.get("companion") or {}
print(f"{e.get('export_s')} s (torch.export {e.get('torch_export_s')} s, lowering {e.get('lower_s')} s), "
      f".ptd {e.get('ptd_bytes', 0) / 1e9:.3f} GB, {e.get('parameters', 0) / 1e9:.3f} B parameters"
      + (f", companion rewrite {json.dumps(c)}" if c else "") + f"; {e.get('versions', {})}")
PY
}
rs_collect() { # PROGRAM RC: the finished export into place, or why there is none
  local p=$1 rc=$2 v=${1##*_} src
  src=$MODELS/.rs/$p/$v
  [ "$RS" = llama1b ] || src=$MODELS/.rs/$p/${RS}_$v
  if [ -f "$src/manifest.json" ]; then
    rm -rf "${MODELS:?}/$p" && mv "$src" "$MODELS/$p" && rm -rf "$MODELS/.rs/$p"
  fi
  if [ -f "$MODELS/$p/manifest.json" ]; then
    rm -f "$MODELS/.$p.failed.txt"
    note "export $p: done (rc $rc) at +$(($(date +%s) - START))s: $(export_summary "$p")"
  else
    local why
    why=$(grep -vE '^\s*$' "$LOGS/export.$p.log" 2>/dev/null | tail -1 | cut -c1-250)
    echo "export failed (rc $rc): ${why:-no output}" >"$MODELS/.$p.failed.txt"
    note "export $p: FAILED (rc $rc) at +$(($(date +%s) - START))s: ${why:-no output}"
  fi
}
rs_wait_exports() { # until every export ended, or SBS_BIG_RESERVE seconds before the end (then stopped)
  local stop_at=$((DEADLINE - BIG_RESERVE)) i any rc
  while :; do
    any=0
    for i in "${!RS_PIDS[@]}"; do
      [ -n "${RS_PIDS[$i]}" ] || continue
      if alive "${RS_PIDS[$i]}"; then
        any=1
        continue
      fi
      wait "${RS_PIDS[$i]}"
      rc=$?
      RS_PIDS[i]=
      rs_collect "${RS_WAIT[$i]}" "$rc"
    done
    [ "$any" = 0 ] && break
    if [ "$(date +%s)" -ge "$stop_at" ]; then
      for i in "${!RS_PIDS[@]}"; do [ -n "${RS_PIDS[$i]}" ] && sig_tree TERM "${RS_PIDS[$i]}"; done
      sleep 3
      for i in "${!RS_PIDS[@]}"; do
        [ -n "${RS_PIDS[$i]}" ] || continue
        sig_tree KILL "${RS_PIDS[$i]}"
        wait "${RS_PIDS[$i]}" 2>/dev/null
        RS_PIDS[i]=
        echo "stopped at +$(($(date +%s) - START))s after $(($(date +%s) - BIG_T0))s of work (SBS_BIG_RESERVE=${BIG_RESERVE}s kept for the runs); last line: $(grep -vE '^\s*$' "$LOGS/export.${RS_WAIT[$i]}.log" 2>/dev/null | tail -1 | cut -c1-160)" \
          >"$MODELS/.${RS_WAIT[$i]}.failed.txt"
        note "export ${RS_WAIT[$i]}: stopped at its deadline (+$(($(date +%s) - START))s): not exported"
      done
      break
    fi
    sleep 1
  done
}
rs_ref_slot() { # the reference's timing slot (eager decode, host-to-device bandwidth), alone on the GPU
  [ -n "$REF_PID" ] || return 0
  local f=$RUN/ref/ref_$RS t0
  t0=$(date +%s)
  while alive "$REF_PID" && [ ! -f "$f.ready" ] && [ $(($(date +%s) - t0)) -lt 90 ] &&
    [ "$(left)" -gt $((RS_RUNS_S + 20)) ]; do sleep 0.5; done
  if [ -f "$f.ready" ] && alive "$REF_PID" && [ "$(left)" -gt $((RS_RUNS_S + 10)) ]; then
    touch "$RUN/go_ref"
    t0=$(date +%s)
    while alive "$REF_PID" && [ ! -f "$f.done" ] && [ $(($(date +%s) - t0)) -lt 30 ]; do sleep 0.2; done
  else
    note "reference: no timing slot ($([ -f "$f.ready" ] && echo "$(left)s left" || echo "not ready"))"
  fi
  if alive "$REF_PID"; then
    sig_tree TERM "$REF_PID"
    sleep 1
    sig_tree KILL "$REF_PID"
  fi
  wait "$REF_PID" 2>/dev/null
  REF_PID=
  note "reference: $(python3 - "$f.json" <<'PY' 2>&1 | tail -1
import json, sys
r = json.load(open(sys.argv[1]))
s = r.get("slot") or {}
h = (s.get("h2d") or {}).get("pinned") or {}
print(f"eager greedy tokens {len(r.get('tokens') or [])} (smallest top-1/top-2 margin {r.get('min_margin')}); "
      f"eager decode {(s.get('eager') or {}).get('decode_tok_s', 'n/a')} tok/s; pinned H2D {h.get('best_gb_s', 'n/a')} GB/s; "
      f"pageable {((s.get('h2d') or {}).get('pageable') or {}).get('best_gb_s', 'n/a')} GB/s")
PY
)"
}
