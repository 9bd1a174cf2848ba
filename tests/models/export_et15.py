"""Export programs with ExecuTorch 1.5.1's exporter (PyTorch 2.11 + torchao 0.18), issue 14:
what today's ExecuTorch writes, in the same manifest format as export_suite.py.

  PYTHONPATH=<site with executorch 1.5.1 + torchao 0.18> python3 tests/models/export_et15.py OUTDIR [--only ...]

Same flags as export_suite.py (--dry-run, --fake-aoti, --jobs, --force, --list).
ExecuTorch 1.5.1 differs from 1.2 in what it writes (see README.md, "ExecuTorch 1.5.1"):
device memory planning is on by default (delegate IO planned as CUDA tensors,
et_copy._h2d_copy / _d2h_copy around the delegate, method IO stays on the host),
blob keys are content hashes, and the processed payload is ETCUDAFQN3 per-FQN
weight metadata; each manifest records the decoded payload under "delegates".
The programs keep ExecuTorch 1.5.1's default ExecutorchBackendConfig(), except
et15_mlp_devio_f32 (method inputs/outputs left on the device:
PropagateDeviceConfig(skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True)
with MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False)).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import programs as P  # noqa: E402
import suite_driver  # noqa: E402


def _named(build, name, **fields):
    def make():
        p = build()
        p.name = name
        for k, v in fields.items():
            setattr(p, k, v)
        return p

    return make


REGISTRY = {
    "et15_mlp_f32": lambda: P.mlp_f32("et15_mlp_f32"),
    "et15_encdec": lambda: P.encdec("et15_encdec"),
    "et15_dyn_f32": _named(P.mlp_dyn_f32, "et15_dyn_f32"),
    "et15_qwen3_bf16": lambda: P.qwen3("et15_qwen3_bf16"),
    "et15_mlp_devio_f32": _named(lambda: P.mlp_f32("et15_mlp_devio_f32"), "et15_mlp_devio_f32",
                                 et_config={"device_io": True}),
    # issue 23: programs importing aoti_torch_cuda_sort_stable / _randint_low_out / _rand
    "et15_moe_bf16": lambda: P.moe("et15_moe_bf16"),
    "et15_sampler_bf16": lambda: P.sampler("et15_sampler_bf16"),
    "et15_sampler_fallback_bf16": lambda: P.sampler("et15_sampler_fallback_bf16", fallback_random=True),
}


def backend_config(p):
    from executorch.exir import ExecutorchBackendConfig
    from executorch.exir.passes import MemoryPlanningPass

    if p.et_config.get("device_io"):
        from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig

        return ExecutorchBackendConfig(
            propagate_device_config=PropagateDeviceConfig(
                skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True),
            enable_non_cpu_memory_planning=True,
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
        )
    return ExecutorchBackendConfig()


if __name__ == "__main__":
    sys.exit(suite_driver.main(REGISTRY, backend_config, "executorch 1.5.1"))
