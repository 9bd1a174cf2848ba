#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn device_init() {
    require_gpu("device_init");
    let Inputs {
        so,
        w,
        fake,
        no_container,
        nodev,
        ..
    } = inputs();
    let mut cases = device_and_weights_cases(&so, &w, nodev);
    cases.extend(compiled_object_cases(no_container, fake, nodev));
    run_cases("device_init", cases);
}

/// Device indices, weights of the wrong size, a newer glibc, an allocation larger than the GPU.
fn device_and_weights_cases(so: &[u8], w: &[u8], nodev: (S, &'static str)) -> Vec<Case> {
    vec![
        Case {
            name: "device index beyond the machine",
            expect_gpu: (ET_CUDA_STATUS_NO_DEVICE, "device(s)"),
            expect_cpu: nodev,
            run: init_bytes(so.to_vec(), w.to_vec(), None, 7),
        },
        Case {
            name: "negative device index",
            expect_gpu: (
                ET_CUDA_STATUS_INVALID_ARGUMENT,
                "device index -1 is negative",
            ),
            expect_cpu: (
                ET_CUDA_STATUS_INVALID_ARGUMENT,
                "device index -1 is negative",
            ),
            run: init_bytes(so.to_vec(), w.to_vec(), None, -1),
        },
        Case {
            name: "weights blob too short",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "the model expects 38440"),
            expect_cpu: nodev,
            run: init_bytes(so.to_vec(), w[..100].to_vec(), None, 0),
        },
        Case {
            name: "weights blob too long",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "the model expects 38440"),
            expect_cpu: nodev,
            run: init_bytes(so.to_vec(), [w.to_vec(), vec![0; 8]].concat(), None, 0),
        },
        Case {
            name: "needs a newer glibc",
            expect_gpu: (ET_CUDA_STATUS_LOAD_FAILED, "GLIBC_2.99"),
            expect_cpu: nodev,
            run: init_bytes(
                replace_all(so.to_vec(), b"GLIBC_2.38", b"GLIBC_2.99"),
                w.to_vec(),
                None,
                0,
            ),
        },
        Case {
            name: "device allocation larger than the GPU",
            expect_gpu: (ET_CUDA_STATUS_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"),
            expect_cpu: nodev,
            run: Box::new(|| {
                let mut p = std::ptr::null_mut();
                // SAFETY: out-pointer to a local.
                status(unsafe { (api().alloc_device)(0, 1 << 42, &mut p) })
            }),
        },
    ]
}

/// The C objects compiled here (when a C compiler is there): an ELF without the container's
/// symbols, and the fake model with weights of the wrong size or a failing container creation.
fn compiled_object_cases(
    no_container: Option<Vec<u8>>,
    fake: Option<Vec<u8>>,
    nodev: (S, &'static str),
) -> Vec<Case> {
    let mut cases = Vec::new();
    if let Some(nc) = no_container {
        cases.push(Case {
            name: "ELF without container symbols",
            expect_gpu: (
                ET_CUDA_STATUS_INVALID_PROGRAM,
                "does not export AOTInductorModelContainerCreateWithDevice",
            ),
            expect_cpu: nodev,
            run: init_bytes(nc, vec![], None, 0),
        });
    }
    if let Some(f) = fake.clone() {
        std::env::set_var("FAKE_AOTI_BLOB_SIZE", "16");
        cases.push(Case {
            name: "fake model: weights of the wrong size",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "expects 16"),
            expect_cpu: nodev,
            run: init_bytes(f.clone(), vec![0; 15], None, 0),
        });
        let f2 = f.clone();
        cases.push(Case {
            name: "fake model: container creation throws",
            expect_gpu: (
                ET_CUDA_STATUS_LOAD_FAILED,
                "CreateWithDevice(cuda:0) failed",
            ),
            expect_cpu: nodev,
            run: Box::new(move || {
                std::env::set_var("FAKE_AOTI_CREATE_FAILS", "1");
                let r = init_bytes(f2.clone(), vec![0; 16], None, 0)();
                std::env::remove_var("FAKE_AOTI_CREATE_FAILS");
                r
            }),
        });
    }
    cases
}
