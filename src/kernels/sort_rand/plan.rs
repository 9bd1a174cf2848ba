//! The sort's host-side plan: output strides, the kernels' geometry of a checked sort, launch shapes and merge widths.

use super::{SortGeom, MAX_OTHER_DIMS, SMALL_MAX, SORT_DTYPES};
use crate::dtype;
use crate::error::{invalid, Error, Result};

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
            dtype::describe(dtype)
        ));
    }
    let esize = dtype::checked_element_size(dtype)? as i32;
    let rank = sizes.len() as i64;
    let wrapped = wrap_dim(rank, dim)?;
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
    fill_other_dims(&mut g, sizes, strides, &out_strides, wrapped)?;
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

/// `dim` wrapped into `0..rank` (`None` for a 0-d tensor, where it must be 0 or -1).
fn wrap_dim(rank: i64, dim: i64) -> Result<Option<usize>> {
    Ok(if rank == 0 {
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
    })
}

/// The geometry of the dimensions other than the sorted one (size-1 dimensions skipped): sizes, strides and the row count.
fn fill_other_dims(
    g: &mut SortGeom,
    sizes: &[i64],
    strides: &[i64],
    out_strides: &[i64],
    wrapped: Option<usize>,
) -> Result<()> {
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
    Ok(())
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
