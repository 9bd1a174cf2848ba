//! The `init_named_data` fuzz target's body (`fuzz/fuzz_targets/`) over its
//! seeds and their truncations, so CI runs it without cargo-fuzz: every
//! input gives a status with a message, never a panic or a crash, and
//! without a GPU never success.

#[path = "../fuzz/fuzz_targets/init_named_data_body.rs"]
mod body;
mod common;

use executorch_cuda::ffi::{ET_CUDA_STATUS_NO_DEVICE, ET_CUDA_STATUS_OK};

fn seeds() -> Vec<(String, Vec<u8>)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/init_named_data");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|f| {
            let p = f.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    assert!(v.len() >= 4, "{} seeds in {}", v.len(), dir.display());
    v
}

fn real_so() -> Option<Vec<u8>> {
    let p = common::fixtures_dir().join("mlp_f32/forward_so_blob.bin");
    let so = std::fs::read(&p).ok();
    if so.is_none() {
        println!(
            "NOTE: no {} : the seeds run without a real .so",
            p.display()
        );
    }
    so
}

fn has_gpu() -> bool {
    executorch_cuda::device_count().is_ok_and(|n| n > 0)
}

#[test]
fn the_fuzz_body_over_the_seeds() {
    let so = real_so();
    let gpu = has_gpu();
    let mut runs = 0;
    for (name, seed) in seeds() {
        for real in [None, so.as_deref()] {
            for cut in (0..=seed.len()).rev().step_by(5) {
                let st = body::run(&seed[..cut], real);
                if !gpu && cut > 0 {
                    assert_ne!(
                        st, ET_CUDA_STATUS_OK,
                        "{name} cut at {cut} loaded without a GPU"
                    );
                }
                runs += 1;
            }
        }
    }
    println!("{runs} runs");
}

/// The well-formed seed gets past the parse and the blobs to the device check.
#[test]
fn a_well_formed_seed_reaches_the_device_check() {
    let Some(so) = real_so() else { return };
    if has_gpu() {
        println!("SKIPPED: a GPU is present (this checks the CPU-only path)");
        return;
    }
    let seed = seeds().into_iter().find(|(n, _)| n == "fqn_ok").unwrap().1;
    let st = body::run(&seed, Some(&so));
    let msg = executorch_cuda::ffi::last_error_message();
    assert_eq!(st, ET_CUDA_STATUS_NO_DEVICE, "{msg}");
}
