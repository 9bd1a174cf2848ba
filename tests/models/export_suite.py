"""Export the model suite with ExecuTorch 1.2 (CudaPartitioner, AOTInductor) + PyTorch 2.11
+ torchao 0.17, in the fixture format plus the manifest extensions (README.md here).

  python3 tests/models/export_suite.py OUTDIR [--only a,b] [--jobs 6] [--force]
  python3 tests/models/export_suite.py OUTDIR --dry-run     # CPU: build, torch.export, references
  python3 tests/models/export_suite.py OUTDIR --fake-aoti   # CPU: lower with a stub AOTInductor
  python3 tests/models/export_suite.py --list x

One subprocess per program (--jobs at a time); a program whose OUTDIR/<name>/manifest.json
exists is skipped (cache) unless --force. A failure is recorded (OUTDIR/.<name>.failed.txt,
OUTDIR/.logs/<name>.log, the 'export <name>: FAILED ...' line) and the others go on.
All programs are lowered with graph inputs left out of memory planning
(MemoryPlanningPass(alloc_graph_input=False)) so device pointers can be passed as inputs.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import programs as P  # noqa: E402
import suite_driver  # noqa: E402

# In export order (the first ones matter most: issue 9, then the decoders and int4 of issues 13/15).
REGISTRY = {
    "whisper_bf16": lambda: P.whisper("whisper_bf16", triton=True),
    "whisper_bf16_notriton": lambda: P.whisper("whisper_bf16_notriton", triton=False),
    "attn_blocks_triton": lambda: P.attn_blocks("attn_blocks_triton", triton=True),
    "attn_blocks_notriton": lambda: P.attn_blocks("attn_blocks_notriton", triton=False),
    "qwen3_bf16": lambda: P.qwen3("qwen3_bf16"),
    "linear_int4tp_bf16": lambda: P.linear_int4("linear_int4tp_bf16", "int4tp"),
    "qwen3_pd_bf16": lambda: P.qwen3("qwen3_pd_bf16", split=True),
    "qwen3_int4tp_bf16": lambda: P.qwen3("qwen3_int4tp_bf16", quant="int4tp"),
    "mlp_dyn_f32": P.mlp_dyn_f32,
    "resnet18_f32": lambda: P.resnet18("resnet18_f32", P.F32),
    "gemma3_bf16": lambda: P.gemma3("gemma3_bf16"),
    "dinov2_f32": lambda: P.dinov2("dinov2_f32", P.F32),
    "conformer_bf16": P.conformer,
    "linear_int4wo_bf16": lambda: P.linear_int4("linear_int4wo_bf16", "int4wo"),
    "qwen3_int4wo_bf16": lambda: P.qwen3("qwen3_int4wo_bf16", quant="int4wo"),
    "resnet18_fp16": lambda: P.resnet18("resnet18_fp16", P.F16),
    "dinov2_fp16": lambda: P.dinov2("dinov2_fp16", P.F16),
}


def backend_config(p):
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    return ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False))


if __name__ == "__main__":
    sys.exit(suite_driver.main(REGISTRY, backend_config, "executorch 1.2"))
