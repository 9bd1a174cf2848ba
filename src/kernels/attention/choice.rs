//! Which attention kernel runs and on what grid: the split of the cache over blocks, the
//! short-context decode kernel's conditions, the kernels' names.

use super::{Module, Problem, ROWS, THREADS, TILE};
use crate::dtype::codes as dtype;
use crate::error::{invalid, Result};
use std::sync::atomic::{AtomicU32, Ordering};

/// The split, combine and cache-write entry points of `kernels/decode.cu`; with [`DECODE`]'s,
/// every attention entry point ([`kernels`], checked against the PTX by a test).
#[cfg(test)]
const KERNELS: &[&str] = &[
    "et_attn_bf16_d64",
    "et_attn_combine_bf16_d64",
    "et_attn_bf16_d128",
    "et_attn_combine_bf16_d128",
    "et_attn_f16_d64",
    "et_attn_combine_f16_d64",
    "et_attn_f16_d128",
    "et_attn_combine_f16_d128",
    "et_attn_bf16_d256",
    "et_attn_combine_bf16_d256",
    "et_attn_f16_d256",
    "et_attn_combine_f16_d256",
    "et_kv_write_bf16_d64",
    "et_kv_write_bf16_d128",
    "et_kv_write_bf16_d256",
    "et_kv_write_f16_d64",
    "et_kv_write_f16_d128",
    "et_kv_write_f16_d256",
];

/// Every attention entry point of `kernels/decode.cu`.
#[cfg(test)]
pub fn kernels() -> Vec<&'static str> {
    let decode = DECODE.iter().flat_map(|e| [e.3, e.4]);
    KERNELS.iter().copied().chain(decode).collect()
}

/// Keys a split takes at least: a cache of up to this many positions is read by one block
/// per row group (one kernel, no combine); longer ones are split, each split at least this long.
pub const MIN_SPLIT_KEYS: i64 = 1024;

/// Rows groups, chunk (keys per split) and number of splits for a GPU of `sms` SMs: about two
/// blocks per SM, with splits of at least [`MIN_SPLIT_KEYS`] (decode at short contexts is one
/// kernel; the host does not know how much of the cache is filled).
pub fn split(p: &Problem, sms: i64) -> (i64, i64, i64) {
    let rows = p.hq / p.hkv * p.lq;
    let rgroups = (rows + ROWS - 1) / ROWS;
    let base = p.b * p.hkv * rgroups;
    let tiles = (p.span + TILE - 1) / TILE;
    let want = (2 * sms.max(1) + base - 1) / base;
    let by_len = (p.span + MIN_SPLIT_KEYS - 1) / MIN_SPLIT_KEYS;
    let nsplit = want.clamp(1, tiles.max(1)).min(by_len.max(1));
    let chunk = ((p.span + nsplit - 1) / nsplit + TILE - 1) / TILE * TILE;
    let nsplit = (p.span + chunk - 1) / chunk;
    (rgroups, chunk, nsplit.max(1))
}

/// Whether the short-context kernel is used: as [`set_decode_kernel`] set it, else as
/// `ET_CUDA_ATTN_DECODE` says (`crate::switches`).
static DECODE_KERNEL: crate::switches::Override = crate::switches::Override::unset();

/// Use the short-context decode kernel where it applies (`Some(true)`, the default), never
/// (`Some(false)`), or as `ET_CUDA_ATTN_DECODE` says (`None`). For benchmarks (programs use
/// the environment variable).
#[cfg(test)]
pub fn set_decode_kernel(on: Option<bool>) {
    DECODE_KERNEL.set(on);
}

/// Threads per block of the short-context decode kernel (`DEC_WARPS` warps).
const DEC_THREADS: u32 = 256;

/// One built short-context decode kernel (`ATTN_DEC` in `kernels/decode.cu`): (bfloat16, D,
/// rows a block R, the kernel, its variant that writes `et_attention_rope`'s new keys and
/// values into the caches first).
macro_rules! dec {
    ($dt:literal, $d:literal, $r:literal) => {
        (
            matches!($dt.as_bytes(), b"bf16"),
            $d,
            $r,
            concat!(
                "et_attn_dec_",
                $dt,
                "_d",
                stringify!($d),
                "_r",
                stringify!($r)
            ),
            concat!(
                "et_attn_decw_",
                $dt,
                "_d",
                stringify!($d),
                "_r",
                stringify!($r)
            ),
        )
    };
}

/// The short-context decode kernels built.
const DECODE: &[(bool, i64, i64, &str, &str)] = &[
    dec!("bf16", 64, 1),
    dec!("bf16", 64, 2),
    dec!("bf16", 64, 4),
    dec!("bf16", 64, 8),
    dec!("bf16", 128, 1),
    dec!("bf16", 128, 2),
    dec!("bf16", 128, 4),
    dec!("bf16", 128, 8),
    dec!("bf16", 256, 1),
    dec!("bf16", 256, 4),
    dec!("f16", 64, 2),
    dec!("f16", 64, 4),
    dec!("f16", 64, 8),
    dec!("f16", 128, 2),
    dec!("f16", 128, 4),
    dec!("f16", 128, 8),
    dec!("f16", 256, 4),
];

/// The short-context decode kernel chosen for a problem: its two entry points, the rows a block
/// takes at most (R) and the row groups of a KV head (blocks along y per KV head).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Decode {
    pub plain: &'static str,
    pub writing: &'static str,
    pub rows: i64,
    pub rgroups: i64,
}

/// The rows per block [`set_decode_rows`] forced (0: not forced).
static ROWS_FORCED: AtomicU32 = AtomicU32::new(0);

/// Force the short-context decode kernel's rows per block of later launches (`Some(1 | 2 | 4 |
/// 8)`, used where a kernel of that many rows is built and holds the step's new rows: at least
/// Lq), or go back to the environment's value or the built-in choice (`None`). For tests and
/// benchmarks.
pub fn set_decode_rows(n: Option<u32>) -> Result<()> {
    match n {
        None => ROWS_FORCED.store(0, Ordering::Relaxed),
        Some(n @ (1 | 2 | 4 | 8)) => ROWS_FORCED.store(n, Ordering::Relaxed),
        Some(n) => return invalid(format!("decode attention rows: {n} is not 1, 2, 4 or 8")),
    }
    Ok(())
}

/// The short-context decode kernel for `p` when it takes it: one split (the whole cache in one
/// kernel) and at most 8 rows per KV head (`Hq/Hkv * Lq`; 4 with D = 256, whose warps' partial
/// outputs of 8 rows would not fit the block's 48 KB of shared memory); it reads a warp's whole
/// tile of keys at once and splits the keys over its 8 warps. A one-token step (Lq = 1) takes one
/// row a block where that kernel is built (bf16): a KV head's g query rows in g blocks (H100,
/// whole programs with graphs: Llama-3.2-1B +3.6 %, Qwen3-0.6B +2.4 %, Gemma-3-1B +10.4 %
/// against one block a KV head, bench/results/2026-12-07-84cf497-attn-rows-ab.md). Otherwise a
/// block takes all of a KV head's rows (R: the smallest kernel that holds them; two rows take
/// the two-row kernel, as the kernel's work grows with R whether the rows are used or not).
/// [`set_decode_rows`] or `ET_CUDA_ATTN_ROWS` ask for another R up to that one (one that is not
/// built, holds fewer than Lq rows or is larger leaves the built-in choice).
/// `ET_CUDA_ATTN_DECODE=0` (`crate::switches`) or [`set_decode_kernel`] turn it off (the benchmark's
/// comparison row).
pub(super) fn decode_kernel(p: &Problem, nsplit: i64) -> Option<Decode> {
    let on = DECODE_KERNEL.get(crate::switches::get().decode_attention);
    let rows = p.hq / p.hkv * p.lq;
    let most = if p.d == 256 { 4 } else { 8 };
    if !on || nsplit != 1 || rows > most {
        return None;
    }
    let bf = p.dtype == dtype::BFLOAT16;
    let built = |r: i64| DECODE.iter().find(|e| e.0 == bf && e.1 == p.d && e.2 == r);
    let all = if p.d == 256 {
        4
    } else {
        [2, 4, 8].into_iter().find(|&r| r >= rows)?
    };
    // An R other than `all` holds the step's new rows (the block keeps a copy of each), is built
    // and leaves the grid within 65535 blocks along y.
    let fits = |r: i64| {
        r <= all
            && r >= p.lq
            && built(r).is_some()
            && p.hkv.saturating_mul((rows + r - 1) / r) <= 65535
    };
    let forced = forced_or(&ROWS_FORCED, crate::switches::get().attn_rows).map(i64::from);
    let r = match forced {
        Some(r) if fits(r) => r,
        _ if p.lq == 1 && fits(1) => 1,
        _ => all,
    };
    let &(.., plain, writing) = built(r)?;
    Some(Decode {
        plain,
        writing,
        rows: r,
        rgroups: (rows + r - 1) / r,
    })
}

/// The split count [`set_decode_splits`] forced (0: not forced).
static SPLITS: AtomicU32 = AtomicU32::new(0);

/// Force the short-context decode kernel's key splits of later launches (`Some(1..=8)`: blocks
/// per KV head, one thread block cluster; 1 never splits), or go back to the environment's
/// value or the built-in choice (`None`). For tests and benchmarks.
pub fn set_decode_splits(n: Option<u32>) -> Result<()> {
    match n {
        None => SPLITS.store(0, Ordering::Relaxed),
        Some(n @ 1..=8) => SPLITS.store(n, Ordering::Relaxed),
        Some(n) => return invalid(format!("decode attention splits: {n} is not 1 to 8")),
    }
    Ok(())
}

/// Blocks per KV head (one cluster) the short-context decode kernel may split its keys over: as
/// [`set_decode_splits`] forced, else as `ET_CUDA_ATTN_SPLITS` says, else as many as keep the
/// (batch, KV head) pairs within 32 blocks in all, at most 8: 4 for Llama-3.2-1B's and
/// Qwen3-0.6B's 8 KV heads, 8 for Gemma-3-1B's one (H100, linear_attention_bench: 8 blocks a
/// head were up to 1.1 µs a layer slower than 4 for the 8-head shapes, at 81 and 401 keys). The
/// kernel itself lets one block in `DEC_KPB` (96) keys work, so a short context runs on one.
/// `rgroups`: the blocks of a KV head's rows (each such group is one (batch, KV head) pair here).
pub fn wanted_splits(p: &Problem, rgroups: i64) -> u32 {
    forced_or(&SPLITS, crate::switches::get().attn_splits).unwrap_or_else(|| {
        let pairs = p.b.saturating_mul(p.hkv).saturating_mul(rgroups).max(1);
        (32 / pairs).clamp(1, 8) as u32
    })
}

/// What a setter forced into `slot` (0: nothing), else the environment's value `env`.
fn forced_or(slot: &AtomicU32, env: Option<u32>) -> Option<u32> {
    match slot.load(Ordering::Relaxed) {
        0 => env,
        n => Some(n),
    }
}

/// The cache-write kernel run before the split kernel for `et_attention_rope`.
pub(super) fn kv_write_name(p: &Problem) -> &'static str {
    match (p.dtype == dtype::BFLOAT16, p.d) {
        (true, 64) => "et_kv_write_bf16_d64",
        (true, 128) => "et_kv_write_bf16_d128",
        (true, _) => "et_kv_write_bf16_d256",
        (false, 64) => "et_kv_write_f16_d64",
        (false, 128) => "et_kv_write_f16_d128",
        (false, _) => "et_kv_write_f16_d256",
    }
}

pub(super) fn names(p: &Problem) -> (&'static str, &'static str) {
    match (p.dtype == dtype::BFLOAT16, p.d) {
        (true, 64) => ("et_attn_bf16_d64", "et_attn_combine_bf16_d64"),
        (true, 128) => ("et_attn_bf16_d128", "et_attn_combine_bf16_d128"),
        (true, _) => ("et_attn_bf16_d256", "et_attn_combine_bf16_d256"),
        (false, 64) => ("et_attn_f16_d64", "et_attn_combine_f16_d64"),
        (false, 128) => ("et_attn_f16_d128", "et_attn_combine_f16_d128"),
        (false, _) => ("et_attn_f16_d256", "et_attn_combine_f16_d256"),
    }
}

/// How one attention launch runs: the kernel, its grid and block, whether it writes the caches
/// itself (only the short-context kernel does), the blocks of one cluster along x (1: no
/// clusters) and the row groups of a KV head along y (the kernel's `rgroups`).
pub(super) struct Shape {
    pub name: &'static str,
    pub grid: (u32, u32, u32),
    pub threads: u32,
    pub writes: bool,
    pub cluster: u32,
    pub rgroups: i64,
}

/// The attention launch for `p` split as [`split`] says: the short-context kernel where it
/// applies (its writing variant when `write`), its keys split over [`wanted_splits`] blocks
/// when such clusters fit `module`'s device, else one block per KV head; else the split kernel
/// (then its combine, if `nsplit > 1`).
pub(super) fn launch_shape(
    p: &Problem,
    module: &Module,
    (rgroups, nsplit): (i64, i64),
    write: bool,
) -> Shape {
    match decode_kernel(p, nsplit) {
        Some(Decode {
            plain,
            writing,
            rgroups: rg,
            ..
        }) => {
            let name = if write { writing } else { plain };
            let want = wanted_splits(p, rg);
            let cluster = if want > 1 && module.clusters_fit(name, DEC_THREADS, want) {
                want
            } else {
                1
            };
            Shape {
                name,
                grid: (cluster, (p.hkv * rg) as u32, p.b as u32),
                threads: DEC_THREADS,
                writes: write,
                cluster,
                rgroups: rg,
            }
        }
        None => Shape {
            name: names(p).0,
            grid: (nsplit as u32, (p.hkv * rgroups) as u32, p.b as u32),
            threads: THREADS,
            writes: false,
            cluster: 1,
            rgroups,
        },
    }
}
