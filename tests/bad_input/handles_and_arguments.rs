#[test]
fn handles_and_arguments() {
    let Inputs { so, w, .. } = inputs();
    let mut cases = null_and_made_up_handle_cases();
    cases.extend(null_pointer_cases());
    cases.extend(out_of_range_cases());
    run_cases("handles_and_arguments", cases);
    // Without a device the library still answers cleanly after all of them.
    if !gpu() {
        let (st, m) = init_bytes(so.clone(), w.clone(), None, 0)();
        assert_eq!(st, ET_CUDA_STATUS_NO_DEVICE, "{m}");
    }
}

/// Null init arguments and handles, a handle the library never made.
fn null_and_made_up_handle_cases() -> Vec<Case> {
    vec![
        Case {
            name: "null init args",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "args is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "args is null"),
            run: Box::new(|| {
                let mut h = std::ptr::null_mut();
                // SAFETY: null args is the case under test.
                status(unsafe { (api().init)(std::ptr::null(), &mut h) })
            }),
        },
        Case {
            name: "null out_handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "out_handle is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "out_handle is null"),
            run: Box::new(|| {
                // SAFETY: null out-pointer is the case under test.
                status(unsafe { (api().init)(std::ptr::dangling(), std::ptr::null_mut()) })
            }),
        },
        Case {
            name: "execute on a null handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "handle is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "handle is null"),
            run: Box::new(|| {
                // SAFETY: null handle is the case under test.
                status(unsafe {
                    (api().execute)(
                        std::ptr::null_mut(),
                        std::ptr::null(),
                        0,
                        std::ptr::null_mut(),
                        0,
                        1,
                    )
                })
            }),
        },
        Case {
            name: "made-up handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            run: Box::new(|| {
                let mut n = 0usize;
                // SAFETY: a pointer the library never handed out; it is only looked up.
                status(unsafe { (api().num_inputs)(0xdead_bee0usize as *const c_void, &mut n) })
            }),
        },
        Case {
            name: "destroy of a made-up handle",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a live handle"),
            run: Box::new(|| {
                // SAFETY: as above.
                status(unsafe { (api().destroy)(0xdead_bee0usize as *mut c_void) })
            }),
        },
    ]
}

/// Null out-pointers and destinations; a shim allocation larger than any GPU.
fn null_pointer_cases() -> Vec<Case> {
    vec![
        Case {
            name: "num_inputs with a null out-pointer",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "is null"),
            run: Box::new(|| {
                // SAFETY: null pointers are the case under test.
                status(unsafe { (api().num_inputs)(std::ptr::null(), std::ptr::null_mut()) })
            }),
        },
        Case {
            name: "memcpy to a null destination",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "dst is null"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "dst is null"),
            run: Box::new(|| {
                let x = 1u32;
                // SAFETY: null dst is the case under test.
                status(unsafe {
                    (api().memcpy)(
                        std::ptr::null(),
                        std::ptr::null_mut(),
                        (&x as *const u32).cast(),
                        4,
                    )
                })
            }),
        },
        Case {
            name: "shim empty_strided larger than the GPU",
            expect_gpu: (ET_CUDA_STATUS_INTERNAL, "cuMemAllocFromPoolAsync"),
            expect_cpu: (ET_CUDA_STATUS_INTERNAL, "no CUDA"),
            run: Box::new(|| {
                let mut h = std::ptr::null_mut();
                // SAFETY: arrays of one element; out-pointer to a local.
                let rc = unsafe {
                    (api().empty_strided)(
                        1,
                        [1i64 << 40].as_ptr(),
                        [1i64].as_ptr(),
                        6,
                        1,
                        0,
                        &mut h,
                    )
                };
                assert!(h.is_null());
                (
                    if rc == 1 {
                        ET_CUDA_STATUS_INTERNAL
                    } else {
                        ET_CUDA_STATUS_OK
                    },
                    last_error(),
                )
            }),
        },
    ]
}

/// Enumerations cross the boundary as integers: out-of-range values are errors.
fn out_of_range_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    cases.push(Case {
        name: "execute with output placement 7",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement 7"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement 7"),
        run: Box::new(|| {
            // SAFETY: no arrays are read; the placement is checked first.
            status(unsafe {
                (api().execute)(
                    0xdead_bee0usize as *mut c_void,
                    std::ptr::null(),
                    0,
                    std::ptr::null_mut(),
                    0,
                    7,
                )
            })
        }),
    });
    cases.push(Case {
        name: "execute with output placement -1",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement -1"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "output placement -1"),
        run: Box::new(|| {
            // SAFETY: as above.
            status(unsafe {
                (api().execute)(
                    0xdead_bee0usize as *mut c_void,
                    std::ptr::null(),
                    0,
                    std::ptr::null_mut(),
                    0,
                    -1,
                )
            })
        }),
    });
    cases.push(Case {
        name: "init with a graph cache of 0",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "graph cache size 0"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "graph cache size 0"),
        run: Box::new(|| init_with_config(0, 0)),
    });
    cases.push(Case {
        name: "init with device -2",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "device index -2"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "device index -2"),
        run: Box::new(|| init_with_config(8, -2)),
    });
    cases.push(Case {
        name: "log callback with level 9",
        expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "log level 9"),
        expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "log level 9"),
        run: Box::new(|| {
            // SAFETY: a null callback and user pointer are never called.
            status(unsafe { (api().set_log_callback)(None, std::ptr::null_mut(), 9) })
        }),
    });
    cases
}
