"""Export programs with ExecuTorch 1.4.1's exporter (torchao 0.18), issue 22: the programs that
upstream's C++ backend at v1.4.1 (and main up to the commit bench/upstream/README.md names) can
load, in the same manifest format as export_suite.py.

  PYTHONPATH=<site with executorch 1.4.1 + torchao 0.18> python3 tests/models/export_et14.py OUTDIR [--only ...]

Same flags as export_suite.py (--dry-run, --fake-aoti, --jobs, --force, --list).
What ExecuTorch 1.4.1 writes (read in its wheel): blob keys are content hashes
(`<sha256>_so_blob`, `<sha256>_weights_blob`) and the processed payload names them as text,
"<so_key>\\n<weights_key>" (1.5 replaced that with the binary ETCUDAFQN3 payload, which v1.4.1 and
that main cannot read); device memory planning is on by default (`enable_non_cpu_memory_planning`,
delegate IO planned as CUDA tensors, et_copy._h2d_copy / _d2h_copy around the delegate), as in
1.5.1, so the programs keep the default ExecutorchBackendConfig(). The wheel declares
torch >= 2.13.0a0; the GPU machine's torch is 2.11 (installed with --no-deps): an import or
export failure there is a result, recorded in the export log.

Programs: the suite's decoders (qwen3-style, gemma3, the prefill+decode program, the int4 one),
a real-scale Llama-3.2-1B-shaped bf16 decoder (models.LLAMA1B_CFG; ~3 GB of weights, exported
on the GPU machine only, never carried), and the small MLP for a quick smoke test.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import programs as P  # noqa: E402
import suite_driver  # noqa: E402

REGISTRY = {
    "et14_mlp_f32": lambda: P.mlp_f32("et14_mlp_f32"),
    "et14_qwen3_bf16": lambda: P.qwen3("et14_qwen3_bf16"),
    "et14_gemma3_bf16": lambda: P.gemma3("et14_gemma3_bf16"),
    "et14_qwen3_pd_bf16": lambda: P.qwen3("et14_qwen3_pd_bf16", split=True),
    "et14_qwen3_int4tp_bf16": lambda: P.qwen3("et14_qwen3_int4tp_bf16", quant="int4tp"),
    "et14_llama1b_bf16": lambda: P.llama1b("et14_llama1b_bf16"),
}


def backend_config(p):
    from executorch.exir import ExecutorchBackendConfig

    return ExecutorchBackendConfig()


if __name__ == "__main__":
    sys.exit(suite_driver.main(REGISTRY, backend_config, "executorch 1.4.1"))
