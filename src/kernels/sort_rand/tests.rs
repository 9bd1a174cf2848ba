//! Unit tests of the sort/random module's host side: the kernels and state variable in its PTX, the sort plans and launch shapes, the generator's checks.

use super::generator::*;
use super::plan::*;
use super::*;
#[test]
fn ptx_has_every_kernel_the_launches_name_and_the_state_variable() {
    // Its hashes, target and ISA: `kernels::images`' test, as for every image.
    let ptx = crate::kernels::images::SORT_RAND.ptx_text();
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
    let src = include_str!("../../../kernels/sort_rand.cu");
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
    let t =
        crate::cuda::memory::empty_strided(vec![3], vec![1], codes::FLOAT32, Device::Cpu).unwrap();
    let e = sort_stable(&t, 0, false).unwrap_err();
    assert!(e.to_string().contains("CPU"), "{e}");
    let t =
        crate::cuda::memory::empty_strided(vec![3], vec![1], codes::INT64, Device::Cpu).unwrap();
    assert!(randint_into(&t, 0, 5)
        .unwrap_err()
        .to_string()
        .contains("CPU"));
}
