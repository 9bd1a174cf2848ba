//! `out = x · Wᵀ (+ bias)` on the tensor cores through cuBLASLt: the prefill
//! (large `M`) path of the export companion's linear ops, beside the GEMV
//! kernels of `gemv` for decode.
//!
//! `x` is `[..., K]` (rank ≥ 1; the leading dimensions are the `M` rows and
//! must collapse into one row stride, which may exceed `K`), `W` is `[N, K]`,
//! `bias` is `[N]`; all bf16 or all fp16 on one CUDA device, unit stride along
//! `K`. The result is `[..., N]`, contiguous, of the same dtype, accumulated in
//! fp32 and rounded once. Any `M ≥ 0` and `N ≥ 0` work, `K ≥ 1`. The work is
//! enqueued on the device's current stream (`cuda::stream::current`), with no
//! host wait; it may be captured into a CUDA graph.
//!
//! cuBLASLt is opened on first use (`cublaslt`: `ET_CUDA_CUBLASLT`, then the
//! usual names and places); when it is missing every call fails with an error
//! naming the library and what was tried, and [`require_cublaslt`] lets the
//! loader of a program that imports the companion's linear ops
//! ([`needs_cublaslt`]) fail at load with that error instead.
//!
//! Per device: one cuBLASLt handle, kept for the process. Per problem (shape,
//! strides, dtype, bias, pointer alignments): the algorithm cuBLASLt's
//! heuristic picks, cached, so a repeated shape costs no heuristic query: of
//! its eight fastest, the first that does not split K or adds the parts in
//! fp32 (so the result is rounded once), else its fastest. The
//! workspace the chosen algorithm needs (at most `matmul::MAX_WORKSPACE`) is
//! allocated on the current stream for the call and freed after it,
//! stream-ordered: no workspace is shared between streams, and inside a graph
//! capture it is an allocation node like the output (nothing is allocated
//! outside the library's capture-aware allocator). A bias that is not 16-byte
//! aligned (cuBLASLt's bias epilogue needs that) is first copied, on the same
//! stream, to a fresh aligned buffer.

#[cfg(test)]
pub(crate) mod bench;
mod cublaslt;
#[cfg(test)]
pub(crate) mod gpu_tests;
mod matmul;
#[cfg(test)]
mod tests;

use super::gemv::{check_device, check_dtypes, check_shapes, row_stride};
use crate::error::{Error, Result};
use crate::tensor::{self, Device, Tensor};

/// Prefixes of the companion's op names whose programs need cuBLASLt (checked at load).
const CUBLASLT_OPS: [&str; 1] = ["aoti_torch_cuda_et_linear"];

/// Whether a program importing the shim `import` needs cuBLASLt (the loader's check).
pub fn needs_cublaslt(import: &str) -> bool {
    CUBLASLT_OPS.iter().any(|p| import.starts_with(p))
}

/// Open cuBLASLt now (once per process); a `LoadFailed` error naming the library and every
/// name and path tried when it is missing or unusable.
pub fn require_cublaslt() -> Result<()> {
    cublaslt::api().map(|_| ())
}

/// For a program's imports: when one needs cuBLASLt ([`needs_cublaslt`]), require it, with
/// the import named in the error.
pub fn require_for_imports<'a>(imports: impl IntoIterator<Item = &'a str>) -> Result<()> {
    match imports.into_iter().find(|i| needs_cublaslt(i)) {
        Some(op) => require_cublaslt()
            .map_err(|e| e.context(&format!("the program calls {op}, which needs cuBLASLt"))),
        None => Ok(()),
    }
}

/// The checked problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub dtype: i32,
    /// Row strides (leading dimensions) of `x` and `W`, in elements (≥ K).
    pub ldx: i64,
    pub ldw: i64,
    pub has_bias: bool,
    /// Sizes of the result: `x`'s leading sizes and `N`.
    pub out_sizes: Vec<i64>,
    pub device: i32,
}

/// The op named in the GEMM's messages.
const OP: &str = "et_cuda gemm";

fn err(msg: impl std::fmt::Display) -> Error {
    Error::invalid_argument(format!("{OP}: {msg}"))
}

/// Check `x`, `W` and the optional `bias` (see the module docs for the rules).
/// Shapes, dtypes and strides come first, then the devices, so that CPU tensors
/// exercise every other check.
pub fn check(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Problem> {
    check_dtypes(OP, x, w, bias)?;
    let (m, n, k) = check_shapes(OP, x, w, bias, "cuBLASLt's")?;
    if k < 1 {
        return Err(err(format!("K = {k}: the weight has no columns")));
    }
    let r = x.sizes.len();
    if x.strides.iter().chain(&w.strides).any(|&s| s < 0) {
        return Err(err("negative strides are not supported"));
    }
    let (sxk, swk) = (x.strides[r - 1], w.strides[1]);
    if k > 1 && (sxk != 1 || swk != 1) {
        return Err(err(format!(
            "x and the weight need unit stride along K (x's is {sxk}, the weight's {swk})"
        )));
    }
    let ldx = match row_stride(&x.sizes[..r - 1], &x.strides[..r - 1], 1, k) {
        _ if m <= 1 => k,
        Some(s) => s,
        None => {
            return Err(err(format!(
                "x's leading dimensions (sizes {:?}, strides {:?}) do not collapse into rows",
                x.sizes, x.strides
            )))
        }
    };
    let ldw = if n <= 1 { k } else { w.strides[0] };
    if ldx < k || ldw < k {
        return Err(err(format!(
            "rows overlap: x's row stride {ldx} and the weight's {ldw} must be at least K = {k}"
        )));
    }
    for (t, what) in [(Some(x), "x"), (Some(w), "the weight"), (bias, "the bias")] {
        if let Some(t) = t {
            if (t.data_ptr() as usize) % 2 != 0 {
                return Err(err(format!("{what} is not aligned to its 2-byte elements")));
            }
        }
    }
    let device = check_device(OP, x, w, bias)?;
    let mut out_sizes = x.sizes[..r - 1].to_vec();
    out_sizes.push(n);
    Ok(Problem {
        m,
        n,
        k,
        dtype: x.dtype,
        ldx,
        ldw,
        has_bias: bias.is_some(),
        out_sizes,
        device,
    })
}

/// Check, allocate the result on the device's current stream (stream-ordered pool)
/// and enqueue the GEMM there. No host wait.
pub fn gemm(x: &Tensor, w: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    let p = check(x, w, bias)?;
    let out = crate::cuda::memory::empty_strided(
        p.out_sizes.clone(),
        tensor::contiguous_strides(&p.out_sizes),
        p.dtype,
        Device::Cuda(p.device),
    )?;
    run(&p, x, w, bias, &out)?;
    Ok(out)
}

fn run(p: &Problem, x: &Tensor, w: &Tensor, bias: Option<&Tensor>, out: &Tensor) -> Result<()> {
    if p.m == 0 || p.n == 0 {
        return Ok(());
    }
    // cuBLASLt's bias epilogue needs a 16-byte aligned bias: copy one that is not.
    let aligned_bias = match bias {
        Some(b) if (b.data_ptr() as usize) % 16 != 0 => {
            Some(crate::cuda::copy::clone_contiguous(b)?)
        }
        _ => None,
    };
    let ops = matmul::Operands {
        x: x.data_ptr() as u64,
        w: w.data_ptr() as u64,
        bias: aligned_bias.as_ref().or(bias).map(|b| b.data_ptr() as u64),
        out: out.data_ptr() as u64,
    };
    let stream = crate::cuda::stream::current(p.device).raw;
    matmul::enqueue(p, &ops, stream)
}
