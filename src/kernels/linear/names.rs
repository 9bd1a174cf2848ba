//! The names of the fused linear's kernels in `kernels/decode.cu` (`LIN_DT`).

/// The fused kernels: [dtype (bf16, f16) x variant][rows 8, 16][act].
pub(super) const FUSED: [[[&str; 3]; 2]; 6] = [
    [
        [
            "et_lin_bf16_v0_m8_a0",
            "et_lin_bf16_v0_m8_a1",
            "et_lin_bf16_v0_m8_a2",
        ],
        [
            "et_lin_bf16_v0_m16_a0",
            "et_lin_bf16_v0_m16_a1",
            "et_lin_bf16_v0_m16_a2",
        ],
    ],
    [
        [
            "et_lin_bf16_v1_m8_a0",
            "et_lin_bf16_v1_m8_a1",
            "et_lin_bf16_v1_m8_a2",
        ],
        [
            "et_lin_bf16_v1_m16_a0",
            "et_lin_bf16_v1_m16_a1",
            "et_lin_bf16_v1_m16_a2",
        ],
    ],
    [
        [
            "et_lin_bf16_v2_m8_a0",
            "et_lin_bf16_v2_m8_a1",
            "et_lin_bf16_v2_m8_a2",
        ],
        [
            "et_lin_bf16_v2_m16_a0",
            "et_lin_bf16_v2_m16_a1",
            "et_lin_bf16_v2_m16_a2",
        ],
    ],
    [
        [
            "et_lin_f16_v0_m8_a0",
            "et_lin_f16_v0_m8_a1",
            "et_lin_f16_v0_m8_a2",
        ],
        [
            "et_lin_f16_v0_m16_a0",
            "et_lin_f16_v0_m16_a1",
            "et_lin_f16_v0_m16_a2",
        ],
    ],
    [
        [
            "et_lin_f16_v1_m8_a0",
            "et_lin_f16_v1_m8_a1",
            "et_lin_f16_v1_m8_a2",
        ],
        [
            "et_lin_f16_v1_m16_a0",
            "et_lin_f16_v1_m16_a1",
            "et_lin_f16_v1_m16_a2",
        ],
    ],
    [
        [
            "et_lin_f16_v2_m8_a0",
            "et_lin_f16_v2_m8_a1",
            "et_lin_f16_v2_m8_a2",
        ],
        [
            "et_lin_f16_v2_m16_a0",
            "et_lin_f16_v2_m16_a1",
            "et_lin_f16_v2_m16_a2",
        ],
    ],
];
/// The fused kernels of `add_rmsnorm_linear` (bf16, 8-row blocks): [variant][act].
pub(super) const FUSED_PRE: [[&str; 3]; 3] = [
    [
        "et_lin_bf16_v0_m8_a0_pre",
        "et_lin_bf16_v0_m8_a1_pre",
        "et_lin_bf16_v0_m8_a2_pre",
    ],
    [
        "et_lin_bf16_v1_m8_a0_pre",
        "et_lin_bf16_v1_m8_a1_pre",
        "et_lin_bf16_v1_m8_a2_pre",
    ],
    [
        "et_lin_bf16_v2_m8_a0_pre",
        "et_lin_bf16_v2_m8_a1_pre",
        "et_lin_bf16_v2_m8_a2_pre",
    ],
];
/// The act/residual kernels of the prefill path: [bf16, f16][act].
pub(super) const EPILOGUE: [[&str; 3]; 2] = [
    [
        "et_lin_epi_bf16_a0",
        "et_lin_epi_bf16_a1",
        "et_lin_epi_bf16_a2",
    ],
    [
        "et_lin_epi_f16_a0",
        "et_lin_epi_f16_a1",
        "et_lin_epi_f16_a2",
    ],
];

/// The norm kernels of the prefill path: [bf16, f16].
pub(super) const NORM: [&str; 2] = ["et_lin_norm_bf16", "et_lin_norm_f16"];

/// The residual-plus-norm kernels of `add_rmsnorm`: [bf16, f16].
pub(super) const ADD_NORM: [&str; 2] = ["et_add_norm_bf16", "et_add_norm_f16"];

/// Every entry point of the fused linear in `kernels/decode.cu` (checked against the PTX).
#[cfg(test)]
pub fn kernels() -> Vec<&'static str> {
    let fused = FUSED.iter().flatten().flatten();
    fused
        .chain(FUSED_PRE.iter().flatten())
        .chain(&NORM)
        .chain(&ADD_NORM)
        .chain(EPILOGUE.iter().flatten())
        .copied()
        .collect()
}
