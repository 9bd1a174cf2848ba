#[test]
fn options() {
    let mut cases = option_type_and_length_cases();
    cases.extend(option_value_cases());
    run_cases("options", cases);
    // SAFETY: no arguments.
    unsafe { (api().reset_options)() };
}

/// Options set with the wrong type, or with a string over 255 bytes.
fn option_type_and_length_cases() -> Vec<Case> {
    vec![
        Case {
            name: "option of the wrong type (bool as int)",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "must be a bool"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "must be a bool"),
            run: Box::new(|| {
                let k = CString::new("use_shared_cuda_stream").unwrap();
                // SAFETY: NUL-terminated key.
                status(unsafe { (api().set_option_int)(k.as_ptr(), 1) })
            }),
        },
        Case {
            name: "option of the wrong type (string as bool)",
            expect_gpu: (
                ET_CUDA_STATUS_INVALID_ARGUMENT,
                "must be a method name string",
            ),
            expect_cpu: (
                ET_CUDA_STATUS_INVALID_ARGUMENT,
                "must be a method name string",
            ),
            run: Box::new(|| {
                let k = CString::new("skip_copy_output_to_cpu_for_method").unwrap();
                // SAFETY: NUL-terminated key.
                status(unsafe { (api().set_option_bool)(k.as_ptr(), true) })
            }),
        },
        Case {
            name: "method list over 255 bytes",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
            run: Box::new(|| {
                let (k, v) = (
                    CString::new("enable_cuda_graph_for_method").unwrap(),
                    CString::new("x".repeat(300)).unwrap(),
                );
                // SAFETY: NUL-terminated strings.
                status(unsafe { (api().set_option_str)(k.as_ptr(), v.as_ptr()) })
            }),
        },
    ]
}

/// A negative device index, an over-long option string, a zero-length output buffer.
fn option_value_cases() -> Vec<Case> {
    vec![
        Case {
            name: "negative device_index option",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a valid device index"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "not a valid device index"),
            run: Box::new(|| {
                let k = CString::new("device_index").unwrap();
                // SAFETY: NUL-terminated key.
                status(unsafe { (api().set_option_int)(k.as_ptr(), -3) })
            }),
        },
        Case {
            name: "option string too long",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "at most 255"),
            run: Box::new(|| {
                let (k, v) = (
                    CString::new("skip_copy_output_to_cpu_for_method").unwrap(),
                    CString::new("m".repeat(400)).unwrap(),
                );
                // SAFETY: NUL-terminated strings.
                status(unsafe { (api().set_option_str)(k.as_ptr(), v.as_ptr()) })
            }),
        },
        Case {
            name: "get_option_str into a zero-length buffer",
            expect_gpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "buf_len is 0"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_ARGUMENT, "buf_len is 0"),
            run: Box::new(|| {
                let k = CString::new("enable_cuda_graph_for_method").unwrap();
                let mut b = [0 as std::ffi::c_char; 1];
                // SAFETY: NUL-terminated key; a zero length is the case under test.
                status(unsafe { (api().get_option_str)(k.as_ptr(), b.as_mut_ptr(), 0) })
            }),
        },
    ]
}
