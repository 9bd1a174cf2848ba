# bench/side_by_side.sh's runs, sourced by it (its variables and functions): one runner call
# (one), the partial results file (partial), a program's configuration (run_config), a program
# that was not exported (not_exported), and a program (run_program).
one() { # one PROGRAM BACKEND CONFIG KIND N ROUNDS ARGS...; returns the runner's status
  local prog=$1 backend=$2 config=$3 kind=$4 n=$5 rounds=$6
  shift 6
  local log lim
  log=$LOGS/$prog.$(printf '%s' "$backend" | tr -c 'A-Za-z0-9.-' '_').$config.$kind.log
  lim=$(left)
  if [ "$lim" -lt 5 ]; then
    row "$prog" "$backend" "$config" "$kind" skipped "" "$n" "$rounds"
    return 0
  fi
  [ "$lim" -gt "$CALL_TIMEOUT" ] && lim=$CALL_TIMEOUT
  local env=()
  [ "$backend" != ours ] && [ -n "$UP_LD" ] && env=(env "LD_LIBRARY_PATH=$UP_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  # in the background, so that a SIGTERM to this script is handled at once (bash runs a trap only
  # after the foreground command, but interrupts `wait`)
  python3 "$BENCH/sbs_exec.py" "$lim" "$log" -- "${env[@]}" "$RUNNER" "$@" --json &
  CUR=$! CUR_ROW=("$prog" "$backend" "$config" "$kind" 143 "logs/$(basename "$log")" "$n" "$rounds")
  wait "$CUR"
  local rc=$?
  CUR=
  row "$prog" "$backend" "$config" "$kind" "$rc" "logs/$(basename "$log")" "$n" "$rounds"
  say "rc=$rc $prog / $backend / $config / $kind: $(python3 -S "$RUNNER_JSON" brief "$log" case generate 2>/dev/null | tail -1 | cut -c1-140)"
  return $rc
}
partial() {
  local t=$RUN/partial.$(date +%s%N).md
  table "$t" && mv -f "$t" "$OUT/sbs_partial.md"
}
# run_config PROGRAM CONFIG: every backend's calls of one configuration (status 1: not exported)
run_config() {
  local prog=$1 c=$2 man=$MODELS/$1/manifest.json
  local backends=(ours) bi i b k lib extra opts rc args
  # upstream cannot load a companion program (its .so imports aoti_torch_cuda_et_*, ours only)
  if [ -z "$RS" ] || [[ $prog != *_companion ]]; then
    for i in "${!UP_NAMES[@]}"; do backends+=("$i"); done
  fi
  if [ ! -f "$man" ]; then
    if [ -n "$RS" ]; then # the rows say so, so that the comparisons name the reason
      for bi in "${backends[@]}"; do
        b=ours
        [ "$bi" != ours ] && b=$(label "${UP_NAMES[$bi]}")
        for k in "${KINDS[@]}"; do row "$prog" "$b" "$c" "$k" "not exported" "" "$GEN_N" 1; done
      done
    fi
    return 1
  fi
  local dec pre
  dec=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(g.get("decode_method","forward"))' "$man" 2>/dev/null)
  pre=$(python3 -c 'import json,sys; g=json.load(open(sys.argv[1])).get("generate") or {}; print(g.get("prefill_method","forward"))' "$man" 2>/dev/null)
  local best=(--option "enable_cuda_graph_for_method=${dec:-forward}" --option use_shared_cuda_stream=true
    --option weight_sharing_across_methods=true)
  for bi in "${backends[@]}"; do
    if [ "$bi" = ours ]; then
      b=ours lib=() extra=(--stats)
    else
      b=$(label "${UP_NAMES[$bi]}") lib=(--backend-lib "${UP_LIBS[$bi]}") extra=()
      if [ ! -f "${UP_LIBS[$bi]}" ]; then
        for k in "${KINDS[@]}"; do row "$prog" "$b" "$c" "$k" "not run" "" "$GEN_N" 1; done
        continue
      fi
    fi
    opts=()
    if [ "$c" = best ]; then
      opts=("${best[@]}")
      # ours keeps the KV cache of a prefill+decode program in one place only with this option
      [ "$b" = ours ] && [ "$pre" != "$dec" ] && opts+=(--option share_mutable_buffers_across_methods=true)
    fi
    rc=0
    for k in "${KINDS[@]}"; do
      if [ "$rc" = 124 ]; then # a call that timed out: the rest of this backend and configuration is skipped
        row "$prog" "$b" "$c" "$k" skipped "" "$GEN_N" 1
        continue
      fi
      case $k in
        cases) args=(--manifest "$man" --mem) ;;
        cold) args=(--manifest "$man" --generate "$GEN_N" --generate-rounds 1 --mem) ;;
        steady) args=(--manifest "$man" --generate "$GEN_N" --generate-rounds "$ROUNDS" --mem) ;;
      esac
      local n=$GEN_N r=1
      [ "$k" = cases ] && n=0
      [ "$k" = steady ] && r=$ROUNDS
      one "$prog" "$b" "$c" "$k" "$n" "$r" "${lib[@]}" "${args[@]}" "${extra[@]}" "${opts[@]}"
      rc=$?
      [ "$rc" = 124 ] && note "$prog / $b / $c / $k: timed out (${CALL_TIMEOUT}s a call, or the end of the budget)$([ $k != steady ] && echo "; the rest of $b / $c skipped")"
    done
  done
  return 0
}
not_exported() {
  local why
  why=$(head -c 300 "$MODELS/.$1.failed.txt" 2>/dev/null)
  note "$1: not exported${why:+: $why} (see logs/export.*.log)"
}
run_program() {
  local prog=$1 c
  [ -f "$MODELS/$prog/manifest.json" ] || { not_exported "$prog"; return; }
  # best first: when the budget runs out, the comparison with graphs on both sides is what is left
  for c in best plain; do run_config "$prog" "$c"; done
  DONE+=("$prog")
  partial
}
