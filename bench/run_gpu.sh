# bench/run.sh's step 2, sourced by it (its variables and functions): the GPU runs, one at a time,
# section by section (ours, upstream, tokens, torch, int4, aoti).

# ------------------------------------------------------------------ 2. GPU runs, one at a time
# Each section may run until its end: the deadline less what the later sections are promised.
declare -A RESERVE=([ours]=165 [upstream]=115 [tokens]=65 [torch]=35 [int4]=0 [aoti]=0)
# BENCH_RESERVE="ours=125,tokens=40": other shares for a shorter budget.
IFS=, read -r -a _res <<<"${BENCH_RESERVE:-}"
for kv in "${_res[@]}"; do
  [[ "$kv" =~ ^([a-z0-9]+)=([0-9]+)$ ]] && RESERVE[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done
SECTION=setup SECTION_END=$DEADLINE
begin() {
  SECTION=$1
  SECTION_END=$((DEADLINE - ${RESERVE[$1]:-0}))
  say "== section $1 (until +$((SECTION_END - START))s)"
}
sleft() { echo $((SECTION_END - $(date +%s))); }
BACKEND=ours # the backend of the next et() calls: "ours" or "upstream:<build folder>"
# et ROW_MODEL VARIANT CAP ARGS...: one et_cuda_run, logged and indexed.
et() {
  local model=$1 variant=$2 limit=$3
  shift 3
  local log manifest="" a prev=""
  for a in "$@"; do
    [ "$prev" = --manifest ] && manifest=$a
    prev=$a
  done
  log=$LOGS/et.$model.$(printf '%s' "$variant" | tr -c 'A-Za-z0-9.-' '_').log
  if [ "$(sleft)" -lt 6 ]; then
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$variant" "skipped" "" "$SECTION" "$BACKEND" "$manifest" 0 >>"$INDEX"
    say "skip  $model / $variant (time)"
    return
  fi
  [ "$limit" -gt "$(sleft)" ] && limit=$(sleft)
  local extra=(--json "${MEM_FLAG[@]}") env=()
  [ "$BACKEND" = ours ] && extra+=(--stats)
  [ "$BACKEND" != ours ] && [ -n "$UP_LD" ] && env=(env "LD_LIBRARY_PATH=$UP_LD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  echo "\$ et_cuda_run $* ${extra[*]}" >"$log"
  local t0 t1
  t0=$(date +%s.%N)
  timeout -k 5 "$(cap "$limit")" "${env[@]}" "$RUNNER" "$@" "${extra[@]}" >>"$log" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  local wall
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$model" "$variant" "$rc" "$log" "$SECTION" "$BACKEND" "$manifest" "$wall" >>"$INDEX"
  local summary
  summary=$(python3 -S "$RUNNER_JSON" brief "$log" bench bench-wait generate 2>/dev/null | tail -2 | tr '\n' ' ')
  [ -n "$summary" ] || summary=$(grep -E 'enqueue: |^pipeline (speedup|check)' "$log" | head -2 | tr '\n' ' ')
  [ -n "$summary" ] || summary=$(tail -1 "$log")
  say "rc=$rc ${wall}s $model / $variant: ${summary:0:150}"
}
# bench_args MODEL -> N and W for the model
bench_n() { if [ "$1" = heavy_bf16 ]; then echo "--bench $N_HEAVY --warmup $W_HEAVY"; else echo "--bench $N --warmup $W"; fi; }
# Program paths: host = what the host-IO rows run, dev = the program without planned inputs.
host_of() { if [[ " ${FIXTURE_MODELS[*]} " == *" $1 "* ]]; then echo "$FIXTURES/$1/manifest.json"; else echo "$MODELS/$1/manifest.json"; fi; }
dev_of() {
  if [ -f "$MODELS/$1/manifest.json" ]; then echo "$MODELS/$1/manifest.json"; else host_of "$1"; fi
}

# ---------------------------------------------------------------- ours
if on ours; then
  begin ours
  BACKEND=ours
  for m in "${BENCH_MODELS_LIST[@]}"; do
    read -r -a bench <<<"$(bench_n "$m")"
    host=$(host_of "$m") dev=$(dev_of "$m")
    if [ ! -f "$host" ]; then
      note "no program for $m: its et_cuda_run rows are skipped"
      continue
    fi
    et "$m" "et default device-io" 60 --manifest "$dev" "${bench[@]}" --device-io
    if [[ " ${GRAPH_LIST[*]} " == *" $m "* ]]; then
      et "$m" "et default device-io + graphs" 60 --manifest "$dev" "${bench[@]}" --device-io \
        --option enable_cuda_graph_for_method=forward
    fi
    et "$m" "et default host-io" 60 --manifest "$host" "${bench[@]}"
    if [ "$dev" != "$host" ]; then
      et "$m" "et default host-io (re-export)" 60 --manifest "$dev" "${bench[@]}"
    fi
  done
  # The runner refuses device IO on a program whose inputs are memory-planned.
  et mlp_f32 "check: device-io refused on planned inputs" 30 \
    --manifest "$FIXTURES/mlp_f32/manifest.json" --bench 10 --device-io
  if [ -f "$MODELS/encdec/manifest.json" ]; then
    et encdec "pipeline encoder,decoder" 60 --manifest "$MODELS/encdec/manifest.json" \
      --pipeline encoder,decoder --bench "$N_PIPE" --warmup "$W"
  else
    note "no encdec program: pipeline skipped"
  fi
  for m in heavy_bf16 deep_bf16; do
    [[ " ${BENCH_MODELS_LIST[*]} " == *" $m "* ]] || continue
    if [ -f "$MODELS/$m/manifest.json" ]; then
      et "$m" "enqueue 50" 60 --manifest "$MODELS/$m/manifest.json" --enqueue 50 --warmup "$W_HEAVY"
    else
      note "no $m program: enqueue skipped"
    fi
  done
fi

# ---------------------------------------------------------------- upstream
# ExecuTorch 1.2 programs through every build; ExecuTorch 1.5.1 device-IO exports (ours:
# et15dev_*, the suite's et15_mlp_f32 / et15_mlp_devio_f32) through ours and every build that
# has CUDA graphs (v1.2.0 does not read 1.5.1 programs' blob keys).
if on upstream && [ "${#UP_LIBS[@]}" -gt 0 ]; then
  begin upstream
  for i in "${!UP_LIBS[@]}"; do
    lib=${UP_LIBS[$i]} label="upstream $(up_label "${UP_NAMES[$i]}") (C++)"
    BACKEND="upstream:${UP_NAMES[$i]}"
    refused=
    for m in "${BENCH_MODELS_LIST[@]}"; do
      host=$(host_of "$m") dev=$(dev_of "$m")
      [ -f "$host" ] || continue
      if [ -n "$refused" ]; then
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$m" "$label host-io" "not run" "" "$SECTION" "$BACKEND" "$host" 0 >>"$INDEX"
        continue
      fi
      if [ "$m" = heavy_bf16 ]; then bench=(--bench 20 --warmup 3); else bench=(--bench "$N_UP" --warmup "$W"); fi
      et "$m" "$label host-io" 60 --backend-lib "$lib" --manifest "$host" "${bench[@]}"
      et "$m" "$label device-io" 60 --backend-lib "$lib" --manifest "$dev" "${bench[@]}" --device-io
      # A build that refuses ExecuTorch 1.2 programs (main, v1.4.x: tensors must be typed CUDA in
      # the program) refuses them all: one program records the message, the rest are not run.
      if grep -q 'expected device_type=CUDA' "$LOGS/et.$m.$(printf '%s' "$label host-io" | tr -c 'A-Za-z0-9.-' '_').log" 2>/dev/null &&
        grep -q 'expected device_type=CUDA' "$LOGS/et.$m.$(printf '%s' "$label device-io" | tr -c 'A-Za-z0-9.-' '_').log" 2>/dev/null; then
        refused=$m
        note "$label refuses ExecuTorch 1.2 programs (host and device IO, on $m): the other 1.2 programs are not run through it"
      fi
    done
  done
  progs=()
  for m in "${ET15_MODELS[@]}"; do [ -f "$MODELS/$m/manifest.json" ] && progs+=("$MODELS/$m/manifest.json"); done
  # The suite's ExecuTorch 1.5.1 MLP: host IO (h2d/d2h copies inside the program), and its device-IO
  # twin when the bench's own et15dev_mlp_f32 is missing.
  [ -f "$SUITE/et15_mlp_f32/manifest.json" ] && progs+=("$SUITE/et15_mlp_f32/manifest.json")
  [ ! -f "$MODELS/et15dev_mlp_f32/manifest.json" ] && [ -f "$SUITE/et15_mlp_devio_f32/manifest.json" ] &&
    progs+=("$SUITE/et15_mlp_devio_f32/manifest.json")
  [ "${#progs[@]}" -gt 0 ] || note "no ExecuTorch 1.5.1 program (et15dev_* exports, suite et15_mlp_f32): no upstream graph rows"
  for p in "${progs[@]}"; do
    name=$(basename "$(dirname "$p")")
    # Device IO, the cases' inputs in device memory too: upstream refuses host memory for
    # inputs these programs type as CUDA.
    io=(--device-io)
    [[ "$RUNNER_HELP" == *--cases-on-device* ]] && io+=(--cases-on-device)
    [ "$name" = et15_mlp_f32 ] && io=() # host IO: the program copies in and out itself
    iol=device-io
    [ "${#io[@]}" -eq 0 ] && iol=host-io
    BACKEND=ours
    et "$name" "et default $iol" 60 --manifest "$p" --bench "$N_UP" --warmup "$W" "${io[@]}"
    et "$name" "et default $iol + graphs" 60 --manifest "$p" --bench "$N_UP" --warmup "$W" "${io[@]}" \
      --option enable_cuda_graph_for_method=forward
    for i in "${!UP_LIBS[@]}"; do
      lib=${UP_LIBS[$i]} label="upstream $(up_label "${UP_NAMES[$i]}") (C++)"
      up_graphs "$lib" || continue
      BACKEND="upstream:${UP_NAMES[$i]}"
      et "$name" "$label $iol" 60 --backend-lib "$lib" --manifest "$p" --bench "$N_UP" --warmup "$W" "${io[@]}"
      et "$name" "$label $iol + graphs" 60 --backend-lib "$lib" --manifest "$p" --bench "$N_UP" --warmup "$W" "${io[@]}" \
        --option enable_cuda_graph_for_method=forward
    done
  done
  BACKEND=ours
elif on upstream; then
  note "upstream section skipped: no upstream build"
fi

# ---------------------------------------------------------------- tokens (and the sharing memory rows)
if on tokens; then
  begin tokens
  for d in "${DECODERS[@]}"; do
    man=$SUITE/$d/manifest.json
    if [ ! -f "$man" ]; then
      note "token loop: no $d in $SUITE (BENCH_SUITE_TAR / BENCH_SUITE_DIR)"
      continue
    fi
    gen=(--manifest "$man" --generate "$GEN_N" --generate-rounds "$GEN_ROUNDS")
    BACKEND=ours
    if [ "$d" = qwen3_pd_bf16 ]; then
      gen+=(--prefill-method prefill --decode-method decode)
      ws=(--option weight_sharing_across_methods=true)
      wm=("${ws[@]}" --option share_mutable_buffers_across_methods=true)
      et "$d" "gen et" 60 "${gen[@]}"
      et "$d" "gen et + weight sharing" 60 "${gen[@]}" "${ws[@]}"
      et "$d" "gen et + weight+cache sharing" 60 "${gen[@]}" "${wm[@]}"
      et "$d" "gen et + weight+cache sharing + graphs" 60 "${gen[@]}" "${wm[@]}" \
        --option enable_cuda_graph_for_method=decode
      # One method alone: the device memory of one copy of the weights and one method's code.
      et "$d" "mem et prefill only" 60 --manifest "$man" --method prefill
      decode_m=decode
    else
      et "$d" "gen et" 60 "${gen[@]}"
      et "$d" "gen et + graphs" 60 "${gen[@]}" --option enable_cuda_graph_for_method=forward
      decode_m=forward
    fi
    for i in "${!UP_LIBS[@]}"; do
      lib=${UP_LIBS[$i]} label="upstream $(up_label "${UP_NAMES[$i]}") (C++)"
      BACKEND="upstream:${UP_NAMES[$i]}"
      if [[ "$d" == et15_* ]] && ! up_graphs "$lib"; then continue; fi # v1.2.0: 1.2 blob keys only
      if [[ "$d" != et15_* ]] && up_graphs "$lib" && [ "$d" != "${DECODERS[0]}" ]; then
        continue # main / v1.4.1 refuse ExecuTorch 1.2 programs: the first decoder records it
      fi
      extra=()
      [ "$d" = qwen3_pd_bf16 ] && up_graphs "$lib" && extra=("${ws[@]}")
      et "$d" "gen $label" 60 "${gen[@]}" --backend-lib "$lib" "${extra[@]}"
      if up_graphs "$lib" && [[ "$d" == et15_* ]]; then
        et "$d" "gen $label + graphs" 60 "${gen[@]}" --backend-lib "$lib" "${extra[@]}" \
          --option "enable_cuda_graph_for_method=$decode_m"
      fi
    done
    BACKEND=ours
  done
fi

# ---------------------------------------------------------------- torch eager + CUDA graph
if on torch && [ "$torch_ok" = 1 ]; then
  begin torch
  if [ "$(sleft)" -gt 20 ]; then
    say "torch eager + CUDA graph"
    timeout -k 5 "$(cap "$(sleft)")" python3 "$BENCH/torch_bench.py" eager \
      --models "$(csv "${BENCH_MODELS_LIST[@]}")" --fixtures "$FIXTURES" --models-dir "$MODELS" \
      --out "$TORCH_ROWS" "${TORCH_FLAGS[@]}" >"$LOGS/torch_eager.log" 2>&1 || note "torch_bench eager: exit status $? (see logs/torch_eager.log)"
    say "torch eager done"
  else
    note "torch eager + CUDA graph skipped: $(sleft)s left"
  fi
fi

# ---------------------------------------------------------------- int4 kernel
if on int4; then
  begin int4
  if [ -n "${BENCH_INT4_JSON:-}" ]; then
    if cp "$BENCH_INT4_JSON" "$INT4_JSON" 2>/dev/null; then note "int4: rows from $BENCH_INT4_JSON (not measured in this run)"; else note "ERROR: int4: cannot read $BENCH_INT4_JSON"; fi
  elif [ "$torch_ok" = 0 ] || [ -z "$REPO" ]; then
    note "int4 bench skipped: ${REPO:+no torch}${REPO:-kernels/check_int4.py not found}"
  else
    LIB=${BENCH_LIB:-}
    for c in "$BUNDLE/rs/libexecutorch_cuda.so" "$BUNDLE/libexecutorch_cuda.so.0"; do
      [ -z "$LIB" ] && [ -f "$c" ] && LIB=$c
    done
    if [ -z "$LIB" ]; then
      note "int4 bench skipped: no libexecutorch_cuda.so in the bundle (BENCH_LIB)"
    elif [ "$(sleft)" -lt 30 ]; then
      note "int4 bench skipped: $(sleft)s left"
    else
      say "int4 bench: kernels/check_int4.py --phase bench --quick"
      mkdir -p "$RUN/int4"
      timeout -k 5 "$(cap $(($(sleft) < 150 ? $(sleft) : 150)))" python3 "$REPO/kernels/check_int4.py" "$LIB" \
        --phase bench --quick --out "$RUN/int4" >"$LOGS/int4_bench.log" 2>&1
      rc=$?
      if [ -f "$RUN/int4/int4_part_bench.json" ]; then
        mv "$RUN/int4/int4_part_bench.json" "$INT4_JSON"
        say "int4 bench: rc=$rc"
      else
        note "int4 bench: no results (rc=$rc): $(tail -2 "$LOGS/int4_bench.log" | tr '\n' ' ')"
      fi
    fi
  fi
fi

# ---------------------------------------------------------------- torch AOTI
if on aoti && [ "$torch_ok" = 1 ]; then
  begin aoti
  if [ "$(sleft)" -gt 30 ]; then
    say "torch AOTI (load + run in subprocesses; cuda-gdb on the first crash)"
    timeout -k 5 "$(cap "$(sleft)")" python3 "$BENCH/torch_bench.py" aoti --gdb \
      --models "$(csv "${BENCH_MODELS_LIST[@]}")" --pkg-dir "$AOTI" --fixtures "$FIXTURES" --models-dir "$MODELS" \
      --deadline $((DEADLINE - 5)) --run-timeout 60 --gdb-timeout 90 --out "$TORCH_ROWS" \
      --log "$LOGS/aoti_children.log" "${TORCH_FLAGS[@]}" \
      >"$LOGS/torch_aoti.log" 2>&1 ||
      note "torch_bench aoti: exit status $? (see logs/torch_aoti.log)"
    grep -E '^(aoti-run|cuda-gdb) ' "$LOGS/torch_aoti.log" | head -8 | while read -r line; do say "$line"; done
  else
    note "torch AOTI skipped: $(sleft)s left"
  fi
fi
