//! Unit tests of the int4 matmul's kernel choice: every plan and tuning names a built kernel, decode shapes fill the GPU.

use super::*;

/// Names of the kernels in the embedded PTX.
fn built() -> std::collections::HashSet<String> {
    crate::kernels::images::INT4
        .ptx_text()
        .lines()
        .filter_map(|l| l.split(".entry ").nth(1))
        .map(|r| r.trim_end_matches('(').trim().to_string())
        .collect()
}

fn prob(m: i64, n: i64, k: i64, ikt: i64) -> Problem {
    Problem {
        m,
        n,
        k,
        group: 128,
        inner_k_tiles: ikt,
        device: 0,
    }
}

#[test]
fn every_plan_names_a_built_kernel() {
    let built = built();
    assert_eq!(built.len(), 24, "{built:?}");
    for ikt in [2, 4, 8] {
        for m in [1, 3, 8, 9, 16, 17, 32, 33, 64, 256, 4096] {
            for n in [8, 64, 4096, 8192, 28672] {
                for k in [32, 256, 4096, 14336] {
                    if k % (ikt * 16) != 0 {
                        continue;
                    }
                    let p = prob(m, n, k, ikt);
                    for sms in [1, 108, 132] {
                        let plan = choose(&p, sms);
                        let (name, grid, block, smem) = launch_shape(&p, plan);
                        assert!(built.contains(name), "{name} for {p:?}");
                        assert!(grid.0 >= 1 && grid.1 >= 1 && (32..=512).contains(&block));
                        assert!(smem <= 96 * 1024, "{plan:?} needs {smem} bytes");
                        if let Plan::Skinny { rows, .. } = plan {
                            assert!(m <= 4 * rows && grid.0 as i64 * rows >= m);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn every_tuning_names_a_built_kernel() {
    let built = built();
    assert_eq!(built.len(), 24, "{built:?}");
    let p = prob(5, 4096, 4096, 8);
    for rows in [8, 16] {
        for nt in [2, 4] {
            for warps in [1, 2, 4, 8, 16] {
                let plan = Plan::Skinny { rows, nt, warps };
                if rows * warps > 128 {
                    continue;
                }
                let (name, _, _, smem) = launch_shape(&p, plan);
                assert!(built.contains(name), "{name}");
                assert!(smem <= 96 * 1024);
            }
        }
    }
    for mt in [2, 4] {
        for nt in [2, 4] {
            let (name, ..) = launch_shape(&p, Plan::Tiled { mt, nt });
            assert!(built.contains(name), "{name}");
        }
    }
    assert!(set_tuning(Some(Plan::Skinny {
        rows: 16,
        nt: 4,
        warps: 16
    }))
    .is_err());
    assert!(set_tuning(Some(Plan::Tiled { mt: 3, nt: 2 })).is_err());
}

#[test]
fn decode_shapes_fill_the_gpu() {
    // K = N = 4096 on 132 SMs: 2 n-tiles per block (256 blocks) and 8 warps each.
    assert_eq!(
        choose(&prob(1, 4096, 4096, 8), 132),
        Plan::Skinny {
            rows: 8,
            nt: 2,
            warps: 8
        }
    );
    // 256 blocks of 4 n-tiles: 8 warps, two blocks per SM (the H200 sweep's best).
    assert_eq!(
        choose(&prob(4, 8192, 8192, 8), 132),
        Plan::Skinny {
            rows: 8,
            nt: 4,
            warps: 8
        }
    );
    assert_eq!(
        choose(&prob(16, 8192, 8192, 8), 132),
        Plan::Skinny {
            rows: 16,
            nt: 4,
            warps: 8
        }
    );
    // Tiny K: no more warps than steps.
    assert_eq!(
        choose(&prob(2, 64, 256, 8), 132),
        Plan::Skinny {
            rows: 8,
            nt: 2,
            warps: 2
        }
    );
    // Two row chunks: 4 n-tiles already give 256 blocks.
    assert_eq!(
        choose(&prob(17, 4096, 4096, 8), 132),
        Plan::Skinny {
            rows: 16,
            nt: 4,
            warps: 8
        }
    );
    assert_eq!(
        choose(&prob(64, 4096, 4096, 8), 132),
        Plan::Skinny {
            rows: 16,
            nt: 4,
            warps: 8
        }
    );
    // Few blocks (N = 1024): 2 n-tiles, 8 warps.
    assert_eq!(
        choose(&prob(1, 1024, 8192, 8), 132),
        Plan::Skinny {
            rows: 8,
            nt: 2,
            warps: 8
        }
    );
    assert_eq!(
        choose(&prob(65, 4096, 4096, 8), 132),
        Plan::Tiled { mt: 4, nt: 2 }
    );
}
