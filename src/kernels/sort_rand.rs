//! `aten.sort.stable`, `aten.rand` and `aten.randint` on CUDA: argument
//! checks, output layout, launch of `kernels/sort_rand.cu`, and the per-device
//! generator state. The C entry points are in `src/ffi/shim/sort_rand.rs`;
//! the design is in `kernels/README.md` ("sort_rand.cu").
//!
//! Module lifetime: unlike the int4 module (released with its last
//! [`super::Lease`]), this one is loaded once per device on first use and
//! kept until the process exits, because it holds the device's generator
//! state (`et_rng_state`, a `__device__` variable): unloading it would reset
//! the seed and the offset behind the caller's back. It is small (~45 KB).

use super::{aligned_copy, attribute, Module};
use crate::cuda::{self, check, ContextGuard};
use crate::dtype::{self, codes};
use crate::error::{invalid, Error, Result};
use crate::tensor::{contiguous_strides, Device, Tensor};
use cudarc::driver::sys;
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex};

/// sm_90 SASS + compute_80 PTX of `kernels/sort_rand.cu`, from `kernels/build.sh`.
pub static FATBIN: &[u8] = include_bytes!("../../kernels/sort_rand.fatbin");
/// The compute_80 PTX (tests only: the fatbin carries it too).
#[cfg(test)]
pub static PTX: &[u8] = include_bytes!("../../kernels/sort_rand.ptx");
/// The hashes `kernels/build.sh` recorded.
#[cfg(test)]
static RECORD: &str = include_str!("../../kernels/sort_rand.sha256");

/// Longest row one block sorts in shared memory; the tile of the long-row path.
pub const SMALL_MAX: i64 = 2048;
/// Dimensions besides the sorted one that a row's address can depend on.
const MAX_OTHER_DIMS: usize = 15;
/// PyTorch's seed of a fresh generator (`c10::default_rng_seed_val`); the
/// device code starts from it (checked against the PTX by a test).
#[cfg(test)]
pub const DEFAULT_SEED: u64 = 67_280_421_310_721;

static MODULES: Mutex<Vec<Option<Arc<Module>>>> = Mutex::new(Vec::new());

fn load(ordinal: i32) -> Result<Module> {
    let device = cuda::device(ordinal)?;
    let _g = ContextGuard::device(&device)?;
    let major = attribute(
        device.device,
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
        "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
    )?;
    if major < 8 {
        return Err(Error::cuda(format!(
            "the sort/random kernels are built for compute capability 8.0 or newer; cuda:{ordinal} is {major}.x"
        )));
    }
    let sm_count = attribute(
        device.device,
        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)",
    )?;
    let buf = aligned_copy(FATBIN, false);
    let mut raw: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: a complete fatbin image in 8-byte aligned memory, alive for the call; the
    // device's primary context is current.
    let r = unsafe { sys::cuModuleLoadData(&mut raw, buf.as_ptr().cast()) };
    check(r, "cuModuleLoadData(sort_rand fatbin)")?;
    log::info!("sort/random kernels loaded on cuda:{ordinal}");
    Ok(Module {
        raw,
        // The sort/random image only (the decode kernels are in the per-device int4 module).
        decode: std::ptr::null_mut(),
        device,
        sm_count,
        functions: Mutex::new(HashMap::new()),
    })
}

/// The module of device `ordinal`, loaded on first use and kept for the process.
/// Loaded under the lock, so that a device never has two generator states.
pub fn module(ordinal: i32) -> Result<Arc<Module>> {
    let i = usize::try_from(ordinal)
        .map_err(|_| Error::invalid_argument(format!("device index {ordinal} is negative")))?;
    let mut v = MODULES.lock().unwrap_or_else(|p| p.into_inner());
    if v.len() <= i {
        v.resize_with(i + 1, || None);
    }
    if let Some(m) = &v[i] {
        return Ok(m.clone());
    }
    let m = Arc::new(load(ordinal)?);
    v[i] = Some(m.clone());
    Ok(m)
}

fn dtype_name(code: i32) -> String {
    dtype::name(code).map_or_else(|| format!("dtype code {code}"), str::to_string)
}

fn cuda_ordinal(t: &Tensor, what: &str) -> Result<i32> {
    match t.device() {
        Device::Cuda(i) => Ok(i),
        Device::Cpu => invalid(format!(
            "{what} is on the CPU; this op runs on CUDA tensors"
        )),
    }
}

/// Grid for a grid-stride kernel over `items` with 256 threads per block.
fn grid_for(items: i64) -> u32 {
    ((items + 255) / 256).clamp(1, 4 * 65535) as u32
}

/// A parameter slot for `cuLaunchKernel`.
fn param<T>(v: &mut T) -> *mut c_void {
    (v as *mut T).cast()
}

// ---------------------------------------------------------------- sort

/// Dtypes the sort handles.
pub const SORT_DTYPES: [i32; 10] = [
    codes::UINT8,
    codes::INT8,
    codes::INT16,
    codes::INT32,
    codes::INT64,
    codes::FLOAT16,
    codes::FLOAT32,
    codes::FLOAT64,
    codes::BOOL,
    codes::BFLOAT16,
];

/// The kernels' view of a sort; the exact layout of `SortGeom` in `kernels/sort_rand.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SortGeom {
    pub ndim: i32,
    pub dtype: i32,
    pub esize: i32,
    pub descending: i32,
    pub n: i64,
    pub rows: i64,
    pub in_sd: i64,
    pub val_sd: i64,
    pub idx_sd: i64,
    pub sizes: [i64; MAX_OTHER_DIMS],
    pub in_st: [i64; MAX_OTHER_DIMS],
    pub val_st: [i64; MAX_OTHER_DIMS],
    pub idx_st: [i64; MAX_OTHER_DIMS],
}

/// PyTorch's `is_non_overlapping_and_dense`: the dimensions of size > 1,
/// ordered by stride, tile memory without gaps or overlaps.
pub fn non_overlapping_and_dense(sizes: &[i64], strides: &[i64]) -> bool {
    let mut dims: Vec<usize> = (0..sizes.len()).filter(|&d| sizes[d] > 1).collect();
    dims.sort_by_key(|&d| strides[d]);
    let mut want = 1i64;
    for d in dims {
        if strides[d] != want {
            return false;
        }
        want = want.saturating_mul(sizes[d]);
    }
    true
}

/// Strides of the sort's outputs, as PyTorch's meta function for
/// `sort.stable` gives them: the input's own strides when it is
/// non-overlapping and dense, else dense strides in the input's stride
/// order (smaller stride = inner; equal strides: the later dimension inner).
pub fn sort_output_strides(sizes: &[i64], strides: &[i64]) -> Vec<i64> {
    if non_overlapping_and_dense(sizes, strides) {
        return strides.to_vec();
    }
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    // Innermost first.
    order.sort_by(|&a, &b| strides[a].cmp(&strides[b]).then(b.cmp(&a)));
    let mut out = vec![0i64; sizes.len()];
    let mut s = 1i64;
    for d in order {
        out[d] = s;
        s = s.saturating_mul(sizes[d].max(1));
    }
    out
}

/// The checked sort: kernel geometry and output strides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortPlan {
    pub geom: SortGeom,
    pub out_strides: Vec<i64>,
}

/// Check a sort of a tensor of `sizes`/`strides`/`dtype` along `dim`
/// (negative counts from the end) and lay it out for the kernels.
pub fn plan_sort(
    sizes: &[i64],
    strides: &[i64],
    dtype: i32,
    dim: i64,
    descending: bool,
) -> Result<SortPlan> {
    if !SORT_DTYPES.contains(&dtype) {
        return invalid(format!(
            "sort: dtype {} is not supported (uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64, bool)",
            dtype_name(dtype)
        ));
    }
    let esize = dtype::checked_element_size(dtype)? as i32;
    let rank = sizes.len() as i64;
    let wrapped = if rank == 0 {
        // A 0-d tensor sorts as one row of one element; dim must be 0 or -1.
        if dim != 0 && dim != -1 {
            return invalid(format!(
                "sort: dimension {dim} out of range for a 0-d tensor (expected -1 or 0)"
            ));
        }
        None
    } else {
        let d = if dim < 0 { dim + rank } else { dim };
        if d < 0 || d >= rank {
            return invalid(format!(
                "sort: dimension {dim} out of range for a {rank}-d tensor"
            ));
        }
        Some(d as usize)
    };
    if sizes.iter().any(|&s| s < 0) {
        return invalid(format!("sort: negative size in {sizes:?}"));
    }
    let out_strides = sort_output_strides(sizes, strides);
    let mut g = SortGeom {
        dtype,
        esize,
        descending: i32::from(descending),
        n: 1,
        rows: 1,
        ..SortGeom::default()
    };
    if let Some(d) = wrapped {
        g.n = sizes[d];
        g.in_sd = strides[d];
        g.val_sd = out_strides[d];
        g.idx_sd = out_strides[d];
    }
    // Positions are 32-bit in the kernels, with 0xFFFFFFFF as padding.
    if g.n > i64::from(i32::MAX) {
        return invalid(format!(
            "sort: rows of {} elements are longer than this kernel allows (2^31 - 1)",
            g.n
        ));
    }
    let mut k = 0usize;
    for d in 0..sizes.len() {
        if Some(d) == wrapped || sizes[d] == 1 {
            continue;
        }
        if k == MAX_OTHER_DIMS {
            return invalid(format!("sort: too many dimensions in {sizes:?}"));
        }
        g.sizes[k] = sizes[d];
        g.in_st[k] = strides[d];
        g.val_st[k] = out_strides[d];
        g.idx_st[k] = out_strides[d];
        g.rows = g
            .rows
            .checked_mul(sizes[d])
            .ok_or_else(|| Error::invalid_argument(format!("sort: sizes {sizes:?} overflow")))?;
        k += 1;
    }
    g.ndim = k as i32;
    if sizes.contains(&0) {
        g.rows = 0;
    }
    g.rows
        .checked_mul(g.n)
        .and_then(|t| t.checked_mul(12))
        .ok_or_else(|| Error::invalid_argument(format!("sort: sizes {sizes:?} overflow")))?;
    Ok(SortPlan {
        geom: g,
        out_strides,
    })
}

/// Launch shape of the one-block-per-row kernel: (padded row p, threads, grid, shared bytes).
pub fn small_launch(g: &SortGeom) -> (u32, u32, u32, usize) {
    let p = (g.n.max(1) as u32).next_power_of_two();
    let threads = (p / 2).clamp(32, 512);
    let grid = g.rows.clamp(1, 1 << 20) as u32;
    (p, threads, grid, 12 * p as usize)
}

/// Merge widths of the long-row path: SMALL_MAX, 2 SMALL_MAX, ... while below n.
pub fn merge_widths(n: i64) -> Vec<i64> {
    let mut v = Vec::new();
    let mut w = SMALL_MAX;
    while w < n {
        v.push(w);
        w *= 2;
    }
    v
}

/// `torch.sort(x, dim, descending, stable=True)`: new values (x's dtype) and
/// int64 indices with the strides of [`sort_output_strides`], computed on the
/// device's current stream. No host wait.
pub fn sort_stable(x: &Tensor, dim: i64, descending: bool) -> Result<(Tensor, Tensor)> {
    let plan = plan_sort(&x.sizes, &x.strides, x.dtype, dim, descending)?;
    let ordinal = cuda_ordinal(x, "self")?;
    let dev = Device::Cuda(ordinal);
    let vals = Tensor::empty_strided(x.sizes.clone(), plan.out_strides.clone(), x.dtype, dev)?;
    let idx = Tensor::empty_strided(x.sizes.clone(), plan.out_strides.clone(), codes::INT64, dev)?;
    let mut g = plan.geom;
    if g.rows == 0 || g.n == 0 {
        return Ok((vals, idx));
    }
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let mut in_p = x.data_ptr() as u64;
    let mut val_p = vals.data_ptr() as u64;
    let mut idx_p = idx.data_ptr() as u64;
    if g.n <= SMALL_MAX {
        let (mut p, threads, grid, smem) = small_launch(&g);
        let mut params = [
            param(&mut in_p),
            param(&mut val_p),
            param(&mut idx_p),
            param(&mut g),
            param(&mut p),
        ];
        // SAFETY: (ptr, ptr, ptr, SortGeom, u32) is the kernel's parameter list; the geometry
        // was derived from the input's and the fresh outputs' sizes and strides, so every
        // element address it forms lies in those tensors; `smem` is 12 * p bytes.
        unsafe {
            m.launch(
                "sort_rows_small",
                (grid, 1, 1),
                threads,
                smem,
                stream,
                &mut params,
            )?
        };
        return Ok((vals, idx));
    }
    let total = g.rows * g.n; // checked by plan_sort
    let scratch = |dt: i32| Tensor::empty_strided(vec![total], vec![1], dt, dev);
    let (keys_a, keys_b) = (scratch(codes::INT64)?, scratch(codes::INT64)?);
    let (pos_a, pos_b) = (scratch(codes::INT32)?, scratch(codes::INT32)?);
    let mut ka = keys_a.data_ptr() as u64;
    let mut pa = pos_a.data_ptr() as u64;
    let mut kb = keys_b.data_ptr() as u64;
    let mut pb = pos_b.data_ptr() as u64;
    let (mut n, mut rows) = (g.n, g.rows);
    let grid = grid_for(total);
    // SAFETY: (all launches below) each parameter list matches its kernel's signature in
    // kernels/sort_rand.cu; the scratch tensors hold `total` = rows * n keys (8 bytes) and
    // positions (4 bytes) each, the kernels touch only indices below `total`, and the input
    // and output addresses come from the checked geometry as above. All on one stream, in
    // order; the scratch memory is freed in stream order after them.
    unsafe {
        let mut params = [
            param(&mut in_p),
            param(&mut ka),
            param(&mut pa),
            param(&mut g),
        ];
        m.launch("sort_prep", (grid, 1, 1), 256, 0, stream, &mut params)?;
        let tiles = (n + SMALL_MAX - 1) / SMALL_MAX;
        let tgrid = (rows * tiles).clamp(1, 1 << 20) as u32;
        let mut params = [
            param(&mut ka),
            param(&mut pa),
            param(&mut n),
            param(&mut rows),
        ];
        m.launch("sort_tiles", (tgrid, 1, 1), 512, 0, stream, &mut params)?;
        for mut w in merge_widths(n) {
            let mut params = [
                param(&mut ka),
                param(&mut pa),
                param(&mut kb),
                param(&mut pb),
                param(&mut n),
                param(&mut rows),
                param(&mut w),
            ];
            m.launch("sort_merge", (grid, 1, 1), 256, 0, stream, &mut params)?;
            std::mem::swap(&mut ka, &mut kb);
            std::mem::swap(&mut pa, &mut pb);
        }
        let mut params = [
            param(&mut in_p),
            param(&mut pa),
            param(&mut val_p),
            param(&mut idx_p),
            param(&mut g),
        ];
        m.launch("sort_finish", (grid, 1, 1), 256, 0, stream, &mut params)?;
    }
    Ok((vals, idx))
}

// ---------------------------------------------------------------- generator

/// Dtypes `rand` writes.
pub const RAND_DTYPES: [i32; 4] = [
    codes::FLOAT32,
    codes::FLOAT64,
    codes::FLOAT16,
    codes::BFLOAT16,
];
/// Elements per Philox block (4 words) for a `rand` of `dtype`.
pub fn rand_per_block(dtype: i32) -> u64 {
    if dtype == codes::FLOAT64 {
        2
    } else {
        4
    }
}

/// Check `rand`'s dtype.
pub fn check_rand_dtype(dtype: i32) -> Result<()> {
    if RAND_DTYPES.contains(&dtype) {
        Ok(())
    } else {
        invalid(format!(
            "rand: dtype {} is not supported (float32, float64, float16, bfloat16)",
            dtype_name(dtype)
        ))
    }
}

/// Check `randint(low, high)` into `dtype` as PyTorch does (low < high, both
/// within the dtype); the number of values, `high - low`, as an unsigned
/// 64-bit number (`[i64::MIN, i64::MAX)` gives `u64::MAX`).
pub fn check_randint(low: i64, high: i64, dtype: i32) -> Result<u64> {
    let (lo, hi) = match dtype {
        codes::INT64 => (i64::MIN, i64::MAX),
        codes::INT32 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        codes::INT16 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        codes::INT8 => (i64::from(i8::MIN), i64::from(i8::MAX)),
        codes::UINT8 => (0, i64::from(u8::MAX)),
        other => {
            return invalid(format!(
                "randint: dtype {} is not supported (int64, int32, int16, int8, uint8)",
                dtype_name(other)
            ))
        }
    };
    if low >= high {
        return invalid(format!(
            "randint: low must be less than high, but got low={low} >= high={high}"
        ));
    }
    // high is exclusive: its largest value is high - 1 (no overflow: high > low >= i64::MIN).
    if low < lo || high - 1 > hi {
        return invalid(format!(
            "randint: [{low}, {high}) is out of bounds for {}",
            dtype_name(dtype)
        ));
    }
    Ok((high as u64).wrapping_sub(low as u64))
}

/// Sizes of a new tensor from the caller (no negative sizes).
pub fn check_sizes(sizes: &[i64], what: &str) -> Result<()> {
    if let Some(s) = sizes.iter().find(|&&s| s < 0) {
        return invalid(format!("{what}: negative size {s} in {sizes:?}"));
    }
    Ok(())
}

/// Enqueue the advance of the device's offset by `words` (after a draw, same stream).
fn advance(m: &Module, stream: sys::CUstream, words: u64) -> Result<()> {
    let mut w = words;
    let mut params = [param(&mut w)];
    // SAFETY: rng_advance(u64) touches only the module's own state variable.
    unsafe { m.launch("rng_advance", (1, 1, 1), 32, 0, stream, &mut params) }
}

/// `torch.rand(sizes, dtype)` on device `ordinal`: a new contiguous tensor of
/// uniform values in [0, 1), drawn from the device's generator on the current
/// stream (which then advances by the words drawn). No host wait.
pub fn rand(sizes: Vec<i64>, dtype: i32, ordinal: i32) -> Result<Tensor> {
    check_sizes(&sizes, "rand")?;
    check_rand_dtype(dtype)?;
    let strides = contiguous_strides(&sizes);
    let t = Tensor::empty_strided(sizes, strides, dtype, Device::Cuda(ordinal))?;
    let n = t.numel();
    if n == 0 {
        return Ok(t);
    }
    let per = rand_per_block(dtype);
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let mut out = t.data_ptr() as u64;
    let mut n64 = n;
    let mut dt = dtype;
    let blocks = (n as u64).div_ceil(per);
    let mut params = [param(&mut out), param(&mut n64), param(&mut dt)];
    // SAFETY: rng_uniform(ptr, i64, int); the output holds n contiguous elements of `dtype`,
    // the kernel writes indices below n only.
    unsafe {
        m.launch(
            "rng_uniform",
            (grid_for(blocks as i64), 1, 1),
            256,
            0,
            stream,
            &mut params,
        )?
    };
    advance(&m, stream, blocks * 4)?;
    Ok(t)
}

/// Fill `out` (contiguous, integer dtype, on CUDA) with integers uniform in
/// `[low, high)` from the device's generator, on the current stream.
pub fn randint_into(out: &Tensor, low: i64, high: i64) -> Result<()> {
    let range = check_randint(low, high, out.dtype)?;
    let ordinal = cuda_ordinal(out, "out")?;
    if !out.is_contiguous() {
        return invalid(format!(
            "randint: out must be contiguous (sizes {:?}, strides {:?})",
            out.sizes, out.strides
        ));
    }
    let n = out.numel();
    if n == 0 {
        return Ok(());
    }
    let per: u64 = if range > 1 << 32 { 2 } else { 4 };
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let mut p = out.data_ptr() as u64;
    let mut n64 = n;
    let mut dt = out.dtype;
    let mut lo = low;
    let mut r = range;
    let blocks = (n as u64).div_ceil(per);
    let mut params = [
        param(&mut p),
        param(&mut n64),
        param(&mut dt),
        param(&mut lo),
        param(&mut r),
    ];
    // SAFETY: rng_randint(ptr, i64, int, i64, u64); `out` holds n contiguous elements of its
    // integer dtype, the kernel writes indices below n only; range > 0 (low < high).
    unsafe {
        m.launch(
            "rng_randint",
            (grid_for(blocks as i64), 1, 1),
            256,
            0,
            stream,
            &mut params,
        )?
    };
    advance(&m, stream, blocks * 4)
}

/// `torch.randint(low, high, sizes, dtype)` on device `ordinal`: a new contiguous tensor.
pub fn randint(low: i64, high: i64, sizes: Vec<i64>, dtype: i32, ordinal: i32) -> Result<Tensor> {
    check_sizes(&sizes, "randint")?;
    check_randint(low, high, dtype)?;
    let strides = contiguous_strides(&sizes);
    let t = Tensor::empty_strided(sizes, strides, dtype, Device::Cuda(ordinal))?;
    randint_into(&t, low, high)?;
    Ok(t)
}

/// Set device `ordinal`'s generator to (`seed`, offset 0), in order on the
/// current stream (draws enqueued before it use the old state).
pub fn manual_seed(ordinal: i32, seed: u64) -> Result<()> {
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    let (mut s, mut o) = (seed, 0u64);
    let mut params = [param(&mut s), param(&mut o)];
    // SAFETY: rng_set(u64, u64) touches only the module's own state variable.
    unsafe { m.launch("rng_set", (1, 1, 1), 32, 0, stream, &mut params) }
}

/// Device `ordinal`'s generator state (seed, offset in 32-bit words), after
/// waiting for the current stream.
pub fn rng_state(ordinal: i32) -> Result<(u64, u64)> {
    let m = module(ordinal)?;
    let _ctx = ContextGuard::device(m.device())?;
    let stream = cuda::stream::current(ordinal).raw;
    check(
        // SAFETY: a live stream of this context (or the legacy stream, null).
        unsafe { sys::cuStreamSynchronize(stream) },
        "cuStreamSynchronize",
    )?;
    let name = CString::new("et_rng_state").map_err(|_| Error::internal("state variable name"))?;
    let mut ptr: sys::CUdeviceptr = 0;
    let mut bytes: usize = 0;
    check(
        // SAFETY: a live module and a NUL-terminated name; out-pointers to locals.
        unsafe { sys::cuModuleGetGlobal_v2(&mut ptr, &mut bytes, m.raw, name.as_ptr()) },
        "cuModuleGetGlobal(et_rng_state)",
    )?;
    if bytes != 16 {
        return Err(Error::internal(format!(
            "et_rng_state has {bytes} bytes, not 16"
        )));
    }
    let mut state = [0u64; 2];
    check(
        // SAFETY: 16 bytes from the module's variable into a local array of 16 bytes.
        unsafe { sys::cuMemcpyDtoH_v2(state.as_mut_ptr().cast(), ptr, 16) },
        "cuMemcpyDtoH(et_rng_state)",
    )?;
    Ok((state[0], state[1]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest, Sha256};

    fn hex(d: &[u8]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn recorded(what: &str) -> &'static str {
        RECORD
            .lines()
            .find_map(|l| {
                let mut it = l.split_whitespace();
                (it.next() == Some(what)).then(|| it.next()).flatten()
            })
            .unwrap_or("")
    }

    #[test]
    fn committed_device_code_matches_its_source() {
        let src = include_bytes!("../../kernels/sort_rand.cu");
        assert_eq!(
            hex(&Sha256::digest(src)),
            recorded("source"),
            "kernels/sort_rand.cu changed since kernels/build.sh last ran: rebuild (kernels/build.sh sort_rand) and commit"
        );
        assert_eq!(hex(&Sha256::digest(FATBIN)), recorded("fatbin"));
        assert_eq!(hex(&Sha256::digest(PTX)), recorded("ptx"));
        assert!(RECORD.contains("nvcc 13.0 "), "{RECORD}");
        assert_eq!(&FATBIN[..4], &[0x50, 0xED, 0x55, 0xBA], "fatbin magic");
    }

    #[test]
    fn ptx_has_every_kernel_the_launches_name_and_the_state_variable() {
        let ptx = std::str::from_utf8(PTX).expect("PTX is text");
        assert!(ptx.lines().any(|l| l.trim() == ".target sm_80"));
        let version = ptx
            .lines()
            .find_map(|l| l.trim().strip_prefix(".version "))
            .expect(".version line");
        let (major, minor) = version.split_once('.').expect("major.minor");
        let v: (u32, u32) = (major.parse().expect("major"), minor.parse().expect("minor"));
        assert!(
            v <= (9, 0),
            "PTX ISA {version} is newer than CUDA 13.0's 9.0"
        );
        for k in [
            "sort_rows_small",
            "sort_prep",
            "sort_tiles",
            "sort_merge",
            "sort_finish",
            "rng_uniform",
            "rng_randint",
            "rng_advance",
            "rng_set",
        ] {
            assert!(
                ptx.contains(&format!(".entry {k}(")),
                "kernel {k} missing from the PTX"
            );
        }
        // The generator state: 16 bytes, initialised to (DEFAULT_SEED, 0) little-endian.
        let line = ptx
            .lines()
            .find(|l| l.contains("et_rng_state[16]"))
            .expect("et_rng_state in the PTX");
        let seed = DEFAULT_SEED.to_le_bytes();
        let want: Vec<String> = seed
            .iter()
            .rev()
            .skip_while(|&&b| b == 0)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .map(|b| b.to_string())
            .collect();
        assert!(
            line.contains(&format!("{{{}}}", want.join(", "))),
            "{line} (want the bytes of {DEFAULT_SEED})"
        );
    }

    #[test]
    fn sort_geom_matches_the_device_struct() {
        // 4 ints, 5 int64, 4 arrays of 15 int64, no padding.
        assert_eq!(std::mem::size_of::<SortGeom>(), 16 + 5 * 8 + 4 * 15 * 8);
        let src = include_str!("../../kernels/sort_rand.cu");
        assert!(src.contains(&format!("#define MAX_OTHER_DIMS {MAX_OTHER_DIMS}\n")));
        assert!(src.contains(&format!("#define SMALL_MAX {SMALL_MAX}\n")));
    }

    #[test]
    fn dense_inputs_keep_their_strides_others_get_dense_ones() {
        // Contiguous, transposed (dense), and size-1 dims with odd strides: kept.
        assert_eq!(sort_output_strides(&[2, 3], &[3, 1]), vec![3, 1]);
        assert_eq!(sort_output_strides(&[2, 3], &[1, 2]), vec![1, 2]);
        assert_eq!(sort_output_strides(&[2, 1, 3], &[3, 99, 1]), vec![3, 99, 1]);
        // A column slice of [4, 6] (strides [6, 1], sizes [4, 2]): not dense -> [2, 1].
        assert!(!non_overlapping_and_dense(&[4, 2], &[6, 1]));
        assert_eq!(sort_output_strides(&[4, 2], &[6, 1]), vec![2, 1]);
        // A slice of a transposed tensor keeps the column-major order.
        assert_eq!(sort_output_strides(&[3, 4], &[1, 6]), vec![1, 3]);
        // Broadcast (stride 0): dense strides, the later dimension inner on ties.
        assert_eq!(sort_output_strides(&[3, 4], &[0, 0]), vec![4, 1]);
        assert_eq!(sort_output_strides(&[], &[]), Vec::<i64>::new());
    }

    #[test]
    fn plan_of_a_strided_sort_names_every_other_dimension() {
        // [2, 5, 3] with strides of a permuted [3, 2, 5] buffer, sorted along dim 1.
        let sizes = [2, 5, 3];
        let strides = [5, 1, 10];
        let p = plan_sort(&sizes, &strides, codes::FLOAT32, 1, true).unwrap();
        assert_eq!(p.out_strides, vec![5, 1, 10]); // dense: kept
        let g = p.geom;
        assert_eq!(
            (g.n, g.rows, g.ndim, g.descending, g.esize),
            (5, 6, 2, 1, 4)
        );
        assert_eq!((g.in_sd, g.val_sd, g.idx_sd), (1, 1, 1));
        assert_eq!(&g.sizes[..2], &[2, 3]);
        assert_eq!(&g.in_st[..2], &[5, 10]);
        // Negative dims wrap; size-1 dims are left out.
        let g = plan_sort(&[4, 1, 7], &[7, 7, 1], codes::INT64, -1, false)
            .unwrap()
            .geom;
        assert_eq!((g.n, g.rows, g.ndim, g.in_sd), (7, 4, 1, 1));
        // 0-d: one element.
        let g = plan_sort(&[], &[], codes::BFLOAT16, -1, false)
            .unwrap()
            .geom;
        assert_eq!((g.n, g.rows, g.ndim), (1, 1, 0));
        // Empty: no rows.
        let g = plan_sort(&[0, 5], &[5, 1], codes::INT32, 1, false)
            .unwrap()
            .geom;
        assert_eq!(g.rows, 0);
    }

    #[test]
    fn plan_refuses_what_the_kernels_cannot_do() {
        let e = plan_sort(&[4], &[1], codes::COMPLEX64, 0, false).unwrap_err();
        assert!(e.to_string().contains("not supported"), "{e}");
        for d in [1, -2] {
            let e = plan_sort(&[4], &[1], codes::FLOAT32, d, false).unwrap_err();
            assert!(e.to_string().contains("out of range"), "{e}");
        }
        assert!(plan_sort(&[], &[], codes::FLOAT32, 1, false).is_err());
        let e = plan_sort(&[1 << 31], &[1], codes::UINT8, 0, false).unwrap_err();
        assert!(e.to_string().contains("longer"), "{e}");
        let e = plan_sort(&[i64::MAX / 2, 4], &[4, 1], codes::UINT8, 1, false).unwrap_err();
        assert!(e.to_string().contains("overflow"), "{e}");
    }

    #[test]
    fn launch_shapes_cover_the_row_and_merges_reach_it() {
        for n in [1i64, 2, 3, 31, 32, 33, 1000, 2047, 2048] {
            let g = SortGeom {
                n,
                rows: 3,
                ..SortGeom::default()
            };
            let (p, threads, grid, smem) = small_launch(&g);
            assert!(i64::from(p) >= n && p.is_power_of_two() && i64::from(p) < 2 * n.max(1));
            assert!((32..=512).contains(&threads) && threads % 32 == 0);
            assert_eq!(grid, 3);
            assert!(smem <= 24 * 1024);
        }
        assert!(merge_widths(2048).is_empty());
        assert_eq!(merge_widths(2049), vec![2048]);
        assert_eq!(merge_widths(8192), vec![2048, 4096]);
        assert_eq!(merge_widths(8193), vec![2048, 4096, 8192]);
        // After the merges, one run covers the row.
        for n in [2049i64, 5000, 100_000] {
            let last = merge_widths(n).last().copied().unwrap_or(SMALL_MAX);
            assert!(2 * last >= n);
        }
    }

    #[test]
    fn randint_checks_follow_pytorch() {
        assert_eq!(check_randint(0, 10, codes::INT64).unwrap(), 10);
        assert_eq!(check_randint(-3, 3, codes::INT8).unwrap(), 6);
        assert_eq!(
            check_randint(i64::MIN, i64::MAX, codes::INT64).unwrap(),
            u64::MAX
        );
        assert_eq!(check_randint(0, 256, codes::UINT8).unwrap(), 256);
        for (lo, hi, dt, what) in [
            (5, 5, codes::INT64, "less than"),
            (6, 5, codes::INT64, "less than"),
            (0, 257, codes::UINT8, "out of bounds"),
            (-1, 3, codes::UINT8, "out of bounds"),
            (0, 1 << 31, codes::INT32, "ok"),
            (0, (1 << 31) + 1, codes::INT32, "out of bounds"),
            (0, 2, codes::FLOAT32, "not supported"),
        ] {
            let r = check_randint(lo, hi, dt);
            if what == "ok" {
                assert!(r.is_ok(), "{lo} {hi}: {r:?}");
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains(what), "{lo} {hi} {dt}: {e}");
            }
        }
        assert!(check_rand_dtype(codes::BFLOAT16).is_ok());
        assert!(check_rand_dtype(codes::INT64).is_err());
        assert!(check_sizes(&[2, -1], "rand").is_err());
        assert_eq!(rand_per_block(codes::FLOAT64), 2);
        assert_eq!(rand_per_block(codes::FLOAT16), 4);
    }

    #[test]
    fn cpu_tensors_and_missing_devices_fail_cleanly() {
        assert!(module(-1).unwrap_err().to_string().contains("negative"));
        if crate::cuda::device_count().is_err() {
            // No driver here: loading is an error, not a panic.
            assert!(module(0).is_err());
            assert!(rand(vec![4], codes::FLOAT32, 0).is_err());
        }
        // A CPU tensor is refused before any device work.
        let t = Tensor::empty_strided(vec![3], vec![1], codes::FLOAT32, Device::Cpu).unwrap();
        let e = sort_stable(&t, 0, false).unwrap_err();
        assert!(e.to_string().contains("CPU"), "{e}");
        let t = Tensor::empty_strided(vec![3], vec![1], codes::INT64, Device::Cpu).unwrap();
        assert!(randint_into(&t, 0, 5)
            .unwrap_err()
            .to_string()
            .contains("CPU"));
    }
}
