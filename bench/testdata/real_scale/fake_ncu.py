#!/usr/bin/env python3
"""Stands in for ncu in bench/real_scale.sh's CPU test (REAL_NCU): prints the canned CSV
(ncu_sample.csv beside this file) as ncu --csv prints its report, after the profiled program's
own lines; runs nothing."""
import os
import sys

if sys.argv[1:] == ["--version"]:
    print("NVIDIA (R) Nsight Compute Command Line Profiler (fake)")
    sys.exit(0)

print("==PROF== Connected to process 1234 (/tmp/et_cuda_run)")
print("generate: prefill=forward decode=forward prompt_tokens=32 new_tokens=4 ... UNCHECKED")
print("==PROF== Disconnected from process 1234")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncu_sample.csv")) as f:
    sys.stdout.write(f.read())
