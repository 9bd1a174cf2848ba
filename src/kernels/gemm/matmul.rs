//! The cuBLASLt side of the GEMM: one handle per device, the descriptors of
//! one call, the algorithm choice (cached per problem) and the enqueue.
//!
//! Row-major `out[M, N] = x[M, K] · W[N, K]ᵀ` is column-major
//! `outᵀ[N, M] = W · xᵀ`: A is `W` read as a column-major `K × N` matrix
//! (leading dimension = W's row stride) and transposed, B is `x` read as
//! `K × M` (leading dimension = x's row stride), D (and C, with β = 0) is
//! `N × M` with leading dimension N. The bias epilogue adds `bias[N]` along D's
//! rows. fp32 compute and scale type, bf16/fp16 inputs and output.

use super::cublaslt::{self as lib, Api, HeuristicResult};
use super::Problem;
use crate::cuda::{self, memory, ContextGuard, DeviceState};
use crate::dtype::codes as dtype;
use crate::error::{Error, Result};
use cudarc::cublaslt::sys as lt;
use cudarc::driver::sys::CUstream;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex};

/// The most workspace an algorithm may ask for (NVIDIA's suggestion for Hopper). Only what
/// the chosen algorithm needs is allocated, per call, on the call's stream.
pub(crate) const MAX_WORKSPACE: u64 = 32 << 20;
/// `CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE`: split-K parts are kept and added in fp32 (the
/// other schemes add them in the output type, rounding each part).
const COMPUTE_TYPE_REDUCTION: u32 = 2;
/// Heuristic results asked for: the choice among them prefers fp32 split-K reductions.
const CANDIDATES: usize = 8;
/// Cached algorithm choices kept at most (the cache starts over beyond it).
const MAX_PLANS: usize = 4096;
/// `CUBLAS_OP_N`, `CUBLAS_OP_T` (`cublasOperation_t`).
const OP_N: i32 = 0;
const OP_T: i32 = 1;

/// A device's cuBLASLt handle: created in the device's primary context on first use and kept
/// for the life of the process, like that context (`cuda::device`). cuBLASLt's functions may
/// be called from several threads with one handle; the handle holds no stream or workspace.
struct Handle(lt::cublasLtHandle_t);
// SAFETY: a cuBLASLt handle may be used from any thread (see above).
unsafe impl Send for Handle {}

static HANDLES: Mutex<Vec<(i32, Handle)>> = Mutex::new(Vec::new());

fn handle(api: &Api, device: &DeviceState) -> Result<lt::cublasLtHandle_t> {
    let mut v = HANDLES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, h)) = v.iter().find(|(d, _)| *d == device.ordinal) {
        return Ok(h.0);
    }
    let mut h: lt::cublasLtHandle_t = std::ptr::null_mut();
    let _g = ContextGuard::device(device)?;
    // SAFETY: out-pointer to a local; the device's context is current.
    let st = unsafe { (api.create)(&mut h) };
    lib::check(st, || {
        format!("cublasLtCreate on device {}", device.ordinal)
    })?;
    v.push((device.ordinal, Handle(h)));
    Ok(h)
}

/// What decides the algorithm: the problem and the pointers' alignments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub(crate) device: i32,
    pub(crate) dtype: i32,
    pub(crate) m: i64,
    pub(crate) n: i64,
    pub(crate) k: i64,
    pub(crate) ldx: i64,
    pub(crate) ldw: i64,
    pub(crate) bias: bool,
    /// Alignment in bytes (a power of two, at most 256) of x, W and out.
    pub(crate) align: [u32; 3],
}

/// The largest power of two (at most 256) dividing `addr`: the alignment cuBLASLt may assume.
pub(crate) fn alignment(addr: u64) -> u32 {
    if addr == 0 {
        return 256;
    }
    1u32 << addr.trailing_zeros().min(8)
}

/// A chosen algorithm and the workspace it needs.
#[derive(Debug, Clone, Copy)]
struct Choice {
    algo: lt::cublasLtMatmulAlgo_t,
    workspace: usize,
    /// Split-K count and reduction scheme, as cuBLASLt reports them.
    reduction: (Option<u32>, Option<u32>),
}

static PLANS: LazyLock<Mutex<HashMap<Key, Choice>>> = LazyLock::new(Default::default);

/// Destroys a descriptor with `destroy` when dropped.
pub(super) struct Owned<T: Copy> {
    raw: T,
    destroy: unsafe extern "C" fn(T) -> lib::Status,
}

impl<T: Copy> Drop for Owned<T> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by the matching create function and is destroyed once.
        let _ = unsafe { (self.destroy)(self.raw) };
    }
}

/// Set one attribute of a descriptor (`set` is the descriptor kind's setter).
fn set_attr<D: Copy, T>(
    set: unsafe extern "C" fn(D, u32, *const c_void, usize) -> lib::Status,
    d: D,
    attr: u32,
    v: &T,
    what: &str,
) -> Result<()> {
    // SAFETY: a live descriptor; the value is readable for size_of::<T>() bytes, the size
    // cuBLASLt documents for `attr` (the callers pass the documented type).
    let st = unsafe { set(d, attr, (v as *const T).cast(), std::mem::size_of::<T>()) };
    lib::check(st, || format!("cuBLASLt: setting {what}"))
}

fn data_type(dt: i32) -> u32 {
    if dt == dtype::BFLOAT16 {
        lt::cudaDataType_t::CUDA_R_16BF as u32
    } else {
        lt::cudaDataType_t::CUDA_R_16F as u32
    }
}

fn layout(
    api: &Api,
    dt: u32,
    rows: i64,
    cols: i64,
    ld: i64,
) -> Result<Owned<lt::cublasLtMatrixLayout_t>> {
    let mut raw: lt::cublasLtMatrixLayout_t = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; sizes are positive and below 2^31 (checked).
    let st = unsafe { (api.layout_create)(&mut raw, dt, rows as u64, cols as u64, ld) };
    lib::check(st, || {
        format!("cublasLtMatrixLayoutCreate ({rows} x {cols}, ld {ld})")
    })?;
    Ok(Owned {
        raw,
        destroy: api.layout_destroy,
    })
}

/// The descriptors of one call: the operation and the layouts of A (W), B (x) and D (out).
pub(super) struct Descs {
    op: Owned<lt::cublasLtMatmulDesc_t>,
    a: Owned<lt::cublasLtMatrixLayout_t>,
    b: Owned<lt::cublasLtMatrixLayout_t>,
    d: Owned<lt::cublasLtMatrixLayout_t>,
}

pub(super) fn descriptors(api: &Api, p: &Problem, bias: Option<u64>) -> Result<Descs> {
    use lt::cublasLtMatmulDescAttributes_t as A;
    let mut raw: lt::cublasLtMatmulDesc_t = std::ptr::null_mut();
    let compute = lt::cublasComputeType_t::CUBLAS_COMPUTE_32F as u32;
    let scale = lt::cudaDataType_t::CUDA_R_32F as u32;
    // SAFETY: out-pointer to a local.
    let st = unsafe { (api.desc_create)(&mut raw, compute, scale) };
    lib::check(st, || "cublasLtMatmulDescCreate".into())?;
    let op = Owned {
        raw,
        destroy: api.desc_destroy,
    };
    let d = api.desc_set;
    set_attr(
        d,
        op.raw,
        A::CUBLASLT_MATMUL_DESC_TRANSA as u32,
        &OP_T,
        "TRANSA",
    )?;
    set_attr(
        d,
        op.raw,
        A::CUBLASLT_MATMUL_DESC_TRANSB as u32,
        &OP_N,
        "TRANSB",
    )?;
    if let Some(ptr) = bias {
        let epi = lt::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS as u32;
        set_attr(
            d,
            op.raw,
            A::CUBLASLT_MATMUL_DESC_EPILOGUE as u32,
            &epi,
            "EPILOGUE",
        )?;
        set_attr(
            d,
            op.raw,
            A::CUBLASLT_MATMUL_DESC_BIAS_POINTER as u32,
            &ptr,
            "BIAS_POINTER",
        )?;
    }
    let dt = data_type(p.dtype);
    Ok(Descs {
        a: layout(api, dt, p.k, p.n, p.ldw)?,
        b: layout(api, dt, p.k, p.m, p.ldx)?,
        d: layout(api, dt, p.n, p.m, p.n)?,
        op,
    })
}

/// The preference of a heuristic query: at most [`MAX_WORKSPACE`], and the pointers'
/// alignments (cuBLASLt assumes 256 bytes otherwise).
pub(super) fn preference(api: &Api, key: &Key) -> Result<Owned<lt::cublasLtMatmulPreference_t>> {
    use lt::cublasLtMatmulPreferenceAttributes_t as P;
    let mut raw: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
    // SAFETY: out-pointer to a local.
    let st = unsafe { (api.pref_create)(&mut raw) };
    lib::check(st, || "cublasLtMatmulPreferenceCreate".into())?;
    let pref = Owned {
        raw,
        destroy: api.pref_destroy,
    };
    let (s, r) = (api.pref_set, pref.raw);
    let ws = P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES as u32;
    set_attr(s, r, ws, &MAX_WORKSPACE, "MAX_WORKSPACE_BYTES")?;
    let [ax, aw, ao] = key.align;
    for (attr, v, what) in [
        (
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
            aw,
            "MIN_ALIGNMENT_A_BYTES",
        ),
        (
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
            ax,
            "MIN_ALIGNMENT_B_BYTES",
        ),
        (
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
            ao,
            "MIN_ALIGNMENT_C_BYTES",
        ),
        (
            P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ao,
            "MIN_ALIGNMENT_D_BYTES",
        ),
    ] {
        set_attr(s, r, attr as u32, &v, what)?;
    }
    Ok(pref)
}

/// The cached algorithm for `key`, or cuBLASLt's choice (then cached; see [`query`]).
fn choose(api: &Api, h: lt::cublasLtHandle_t, key: &Key, ds: &Descs) -> Result<Choice> {
    if let Some(c) = PLANS.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
        return Ok(*c);
    }
    let c = query(api, h, key, ds)?;
    log::debug!(
        "cuBLASLt for {}: workspace {} bytes, split-K {:?}, reduction scheme {:?}",
        describe(key),
        c.workspace,
        c.reduction.0,
        c.reduction.1
    );
    let mut plans = PLANS.lock().unwrap_or_else(|p| p.into_inner());
    if plans.len() >= MAX_PLANS {
        plans.clear();
    }
    plans.insert(*key, c);
    Ok(c)
}

/// cuBLASLt's fastest algorithms for `key` ([`CANDIDATES`] of them, best first): the first
/// that adds its split-K parts, if any, in fp32 ([`fp32_reduction`]), else the fastest.
fn query(api: &Api, h: lt::cublasLtHandle_t, key: &Key, ds: &Descs) -> Result<Choice> {
    let pref = preference(api, key)?;
    let mut results = [HeuristicResult::zeroed(); CANDIDATES];
    let mut found: i32 = 0;
    // SAFETY: live handle and descriptors; room for the CANDIDATES results asked for.
    let st = unsafe {
        (api.heuristic)(
            h,
            ds.op.raw,
            ds.a.raw,
            ds.b.raw,
            ds.d.raw,
            ds.d.raw,
            pref.raw,
            CANDIDATES as i32,
            results.as_mut_ptr(),
            &mut found,
        )
    };
    lib::check(st, || {
        format!("cublasLtMatmulAlgoGetHeuristic ({})", describe(key))
    })?;
    let usable: Vec<&HeuristicResult> = results
        .iter()
        .take(found.clamp(0, CANDIDATES as i32) as usize)
        .filter(|r| r.state == lib::SUCCESS)
        .collect();
    let Some(best) = usable
        .iter()
        .find(|r| fp32_reduction(reduction(api, &r.algo)))
        .or(usable.first())
    else {
        return Err(Error::cuda(format!(
            "cuBLASLt has no algorithm for {}",
            describe(key)
        )));
    };
    Ok(Choice {
        algo: best.algo,
        workspace: best.workspace_size,
        reduction: reduction(api, &best.algo),
    })
}

/// `algo`'s split-K count and reduction scheme (`None` when cuBLASLt does not say).
fn reduction(api: &Api, algo: &lt::cublasLtMatmulAlgo_t) -> (Option<u32>, Option<u32>) {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
    let get = |attr: C| -> Option<u32> {
        let mut v: u32 = 0;
        let mut written: usize = 0;
        // SAFETY: an algorithm from the heuristic; a 4-byte buffer for a uint32_t/int32_t
        // attribute and an out-pointer to a local.
        let st = unsafe {
            (api.algo_get)(
                algo,
                attr as u32,
                (&mut v as *mut u32).cast(),
                4,
                &mut written,
            )
        };
        (st == lib::SUCCESS && written == 4).then_some(v)
    };
    (
        get(C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
        get(C::CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME),
    )
}

/// Whether an algorithm with this split-K count and reduction scheme does not split K or adds
/// the parts in the compute type, fp32 (the other schemes add them in the output type).
fn fp32_reduction((splits, scheme): (Option<u32>, Option<u32>)) -> bool {
    matches!(splits, Some(0 | 1)) || matches!(scheme, Some(0 | COMPUTE_TYPE_REDUCTION))
}

/// The cached choices in words (tests): the problem, the workspace, the split-K count and the
/// reduction scheme.
#[cfg(test)]
pub(crate) fn plans_summary() -> Vec<String> {
    let plans = PLANS.lock().unwrap_or_else(|p| p.into_inner());
    let mut v: Vec<String> = plans
        .iter()
        .map(|(k, c)| {
            format!(
                "{}: workspace {} bytes, split-K {:?}, reduction scheme {:?}",
                describe(k),
                c.workspace,
                c.reduction.0,
                c.reduction.1
            )
        })
        .collect();
    v.sort();
    v
}

/// The problem in words, for errors.
pub(crate) fn describe(k: &Key) -> String {
    let dt = if k.dtype == dtype::BFLOAT16 {
        "bf16"
    } else {
        "fp16"
    };
    format!(
        "M={} N={} K={} {dt}, x row stride {}, W row stride {}, {}, alignments x/W/out {:?} bytes",
        k.m,
        k.n,
        k.k,
        k.ldx,
        k.ldw,
        if k.bias { "bias" } else { "no bias" },
        k.align
    )
}

/// The device addresses of one call (`bias` 16-byte aligned, see `super::gemm`).
pub(crate) struct Operands {
    pub(crate) x: u64,
    pub(crate) w: u64,
    pub(crate) bias: Option<u64>,
    pub(crate) out: u64,
}

/// Enqueue `out = x · Wᵀ (+ bias)` on `stream`, the device's current stream (the workspace,
/// when the algorithm needs one, is allocated there and freed after the call, stream-ordered;
/// inside a capture that makes allocation and free nodes of the graph).
pub(crate) fn enqueue(p: &Problem, ops: &Operands, stream: CUstream) -> Result<()> {
    let api = lib::api()?;
    let device = cuda::device(p.device)?;
    let _ctx = ContextGuard::device(&device)?;
    let h = handle(api, &device)?;
    let key = Key {
        device: p.device,
        dtype: p.dtype,
        m: p.m,
        n: p.n,
        k: p.k,
        ldx: p.ldx,
        ldw: p.ldw,
        bias: ops.bias.is_some(),
        align: [alignment(ops.x), alignment(ops.w), alignment(ops.out)],
    };
    let ds = descriptors(api, p, ops.bias).map_err(|e| e.context(&describe(&key)))?;
    let choice = choose(api, h, &key, &ds)?;
    let ws = match choice.workspace {
        0 => None,
        n => Some(memory::alloc_on_current_stream(p.device, n)?),
    };
    let ws_ptr = ws
        .as_ref()
        .map_or(std::ptr::null_mut(), |a| a.ptr() as *mut c_void);
    let (alpha, beta) = (1f32, 0f32);
    // SAFETY: live handle and descriptors matching the operands: `super::check` proved the
    // sizes and strides of x, W and out (every read and write stays inside their views), the
    // bias holds N elements, the workspace holds `choice.workspace` bytes until its
    // stream-ordered free after this call; alpha and beta are host fp32 (the default pointer
    // mode and the fp32 scale type); `stream` is the device's current stream.
    let st = unsafe {
        (api.matmul)(
            h,
            ds.op.raw,
            (&alpha as *const f32).cast(),
            ops.w as *const c_void,
            ds.a.raw,
            ops.x as *const c_void,
            ds.b.raw,
            (&beta as *const f32).cast(),
            ops.out as *const c_void,
            ds.d.raw,
            ops.out as *mut c_void,
            ds.d.raw,
            &choice.algo,
            ws_ptr,
            choice.workspace,
            stream.cast(),
        )
    };
    lib::check(st, || format!("cublasLtMatmul ({})", describe(&key)))
}
