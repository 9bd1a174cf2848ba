"""Writes ncu_sample.csv: what `ncu --csv --print-units base --metrics gpu__time_duration.sum,
dram__bytes_read.sum,dram__bytes_write.sum` prints for a prefill and 3 decode steps of a 4-layer
decoder (made-up kernels: Triton GEMM templates, a fused SDPA, pointwise kernels). One decode step
has 1 + 4 * 6 + 2 = 27 kernels: 4 * 4 + 1 = 17 GEMMs; numbers with thousands separators like ncu's."""
import csv
import os
import sys

HEAD = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size", "Grid Size",
        "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]


def step(prefill):
    ks = [("triton_poi_fused_embedding_0", 2000, 8192, 4096)]
    for _ in range(4):
        ks += [("triton_red_fused__to_copy_mean_pow_rsqrt_1", 3000, 8192, 4096),
               ("triton_tem_fused_mm_2", 9000, 12_582_912, 6144),
               ("triton_tem_fused_mm_3", 5000, 8_388_608, 4096),
               ("sdpa_fused_kernel_4", 15000, 2_097_152 * (4 if prefill else 1), 4096),
               ("triton_tem_fused_add_mm_5", 20000, 100_663_296, 4096),
               ("triton_tem_fused_mm_silu_6", 11000, 33_554_432, 4096)]
    ks += [("triton_red_fused_mean_7", 3000, 8192, 4096), ("triton_tem_fused_mm_8", 130000, 525_336_576, 256_512)]
    if prefill:
        ks.insert(1, ("triton_poi_fused_index_copy_9", 1000, 0, 4096))
    return ks


def fmt(v):
    return f"{v:,.0f}" if v >= 1000 else str(v)


def main(out):
    w = csv.writer(open(out, "w", newline=""), quoting=csv.QUOTE_ALL, lineterminator="\n")
    w.writerow(HEAD)
    kid = 0
    for s in range(4):
        for name, ns, rd, wr in step(prefill=(s == 0)):
            for metric, unit, val in (("dram__bytes_read.sum", "byte", rd), ("dram__bytes_write.sum", "byte", wr),
                                      ("gpu__time_duration.sum", "nsecond", ns)):
                w.writerow([kid, 1234, "et_cuda_run", "127.0.0.1", name, 1, 13, "(128, 1, 1)", "(64, 1, 1)", 0, "9.0",
                            "Command line profiler metrics", metric, unit, fmt(val)])
            kid += 1


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "ncu_sample.csv"))
