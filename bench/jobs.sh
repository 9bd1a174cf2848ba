# Background jobs of bench/real_scale.sh and bench/hf_scale.sh (sourced): each job is a process
# group of its own (setsid) so that it can be stopped (SIGSTOP while the GPU is being timed),
# continued and ended as a whole, with its Inductor compile threads and niceness set.
#   job_start NAME NICE THREADS LOG PYTHONPATH_PREFIX CMD...   (PID[NAME] = its pid)
#   alive NAME; signal_group SIG NAME...; end_job NAME (CONT, TERM, 2 s, KILL)
declare -A PID
HAVE_SETSID=1
command -v setsid >/dev/null || HAVE_SETSID=0
job_start() {
  local name=$1 nice=$2 threads=$3 log=$4 pp=$5
  shift 5
  local pre=()
  [ "$HAVE_SETSID" = 1 ] && pre=(setsid)
  PYTHONPATH=$pp${PYTHONPATH:+:$PYTHONPATH} TORCHINDUCTOR_COMPILE_THREADS=$threads \
    "${pre[@]}" nice -n "$nice" "$@" >>"$log" 2>&1 &
  PID[$name]=$!
}
alive() { [ -n "${PID[$1]:-}" ] && kill -0 "${PID[$1]}" 2>/dev/null; }
signal_group() { # SIG name...
  local sig=$1 n
  shift
  for n in "$@"; do
    alive "$n" || continue
    if [ "$HAVE_SETSID" = 1 ]; then kill "-$sig" -- "-${PID[$n]}" 2>/dev/null; else kill "-$sig" "${PID[$n]}" 2>/dev/null; fi
  done
}
end_job() { signal_group CONT "$1"; signal_group TERM "$1"; sleep 2; signal_group KILL "$1"; }
