#!/usr/bin/env python3
"""Runs one command for bench/side_by_side.sh and records what the command itself cannot:

  sbs_exec.py TIMEOUT_S LOG -- COMMAND...

LOG gets the command line, then its output (stdout and stderr together), then one line
  sbs: rc=<rc> launch_ms=<t> wall_s=<s> cpu_s=<s> timed_out=<0|1>
launch_ms: the monotonic clock (CLOCK_MONOTONIC, the clock of the runner's steady_clock and so of
its PyTorchObserver times) just before the process was started, in ms: cold start = first_token_ms
- launch_ms. cpu_s: user + system CPU time of the process and its children (getrusage).
Exit status: the command's (124 when it timed out). A SIGTERM or SIGINT to this script (the
command runs in a session of its own, so it gets none) ends the command's session too, then this
script with 143.
"""
import os
import resource
import signal
import subprocess
import sys
import time


class Stopped(Exception):
    pass


def stop(signum, frame):
    raise Stopped()


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        print(__doc__, file=sys.stderr)
        return 2
    timeout, log, cmd = float(argv[0]), argv[1], argv[3:]
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(log, "w") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        launch = time.monotonic() * 1000.0
        t0 = time.monotonic()
        timed_out = 0
        try:
            p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            f.write(f"sbs: cannot start: {e}\n")
            f.write(f"sbs: rc=127 launch_ms={launch:.3f} wall_s=0 cpu_s=0 timed_out=0\n")
            return 127
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        try:
            rc = p.wait(timeout=timeout)
        except (subprocess.TimeoutExpired, Stopped) as e:
            timed_out = int(isinstance(e, subprocess.TimeoutExpired))
            try:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            except ProcessLookupError:
                p.wait()
            rc = 124 if isinstance(e, subprocess.TimeoutExpired) else 143
        wall = time.monotonic() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        f.flush()
    with open(log, "a") as f:
        f.write(f"sbs: rc={rc} launch_ms={launch:.3f} wall_s={wall:.3f} cpu_s={cpu:.3f} timed_out={timed_out}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
