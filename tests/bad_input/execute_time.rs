#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn execute_time() {
    require_gpu("execute_time");
    let Inputs { fake, .. } = inputs();
    // Execute-time cases on a real model (GPU only).
    let mut exec_cases: Vec<ExecCase> = Vec::new();
    let case = cases_of("mlp_f32");
    let good_in = case.inputs[0].bytes.clone();
    let o = case.outputs[0].clone();
    exec_cases.extend(argument_count_cases(&good_in, &o));
    exec_cases.extend(input_descriptor_cases(&good_in, &o));
    exec_cases.extend(output_descriptor_cases(&good_in, &o));

    let mut ran = 0;
    let mut failures: Vec<String> = Vec::new();
    run_exec_cases(&exec_cases, &good_in, &o, &mut ran, &mut failures);
    if let Some(f) = fake {
        fake_model_runs(&f, &mut ran, &mut failures);
    }
    destroyed_handle_runs(&good_in, &o, &mut ran, &mut failures);
    // After all of it, a good program still loads and runs.
    let h = Handle::load("mlp_f32", 0, false).unwrap();
    good_run_matches(&h, &good_in, &o, "every bad-input case");
    println!(
        "execute_time: {ran} bad-input cases run, {} failed",
        failures.len()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A good execute of mlp_f32 on `h` (its input `good_in`) succeeds and gives `o`, after `what`.
fn good_run_matches(h: &Handle, good_in: &[u8], o: &TensorFile, what: &str) {
    let mut input = good_in.to_vec();
    let mut out = vec![0u8; o.bytes.len()];
    let (st, m) = exec_one(
        h,
        desc("float32", &[4, 64], input.as_mut_ptr().cast(), input.len()),
        desc(&o.dtype, &o.sizes, out.as_mut_ptr().cast(), out.len()),
        1,
    );
    assert_eq!(st, ET_CUDA_STATUS_OK, "good execute after {what}: {m}");
    assert!(compare("float32", &out, &o.bytes).1, "after {what}");
}

/// An input descriptor of `bytes` (host memory).
fn mk_in(dt: &str, sizes: &[i64], bytes: &[u8]) -> EtCudaTensor {
    desc(dt, sizes, bytes.as_ptr() as *mut c_void, bytes.len())
}

/// Execute with two inputs, and with no outputs.
fn argument_count_cases(good_in: &[u8], o: &TensorFile) -> Vec<ExecCase> {
    let good_in = good_in.to_vec();
    let mut exec_cases: Vec<ExecCase> = Vec::new();
    {
        let (gi, o2) = (good_in.clone(), o.clone());
        exec_cases.push((
            "wrong number of inputs",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "takes 1 inputs and 1 outputs, got 2",
            Box::new(move |h| {
                let ins = [
                    mk_in("float32", &[4, 64], &gi),
                    mk_in("float32", &[4, 64], &gi),
                ];
                let mut out = vec![0u8; o2.bytes.len()];
                let mut outs = [desc(
                    "float32",
                    &o2.sizes,
                    out.as_mut_ptr().cast(),
                    out.len(),
                )];
                // SAFETY: descriptors of live buffers.
                status(unsafe { (api().execute)(h.0, ins.as_ptr(), 2, outs.as_mut_ptr(), 1, 1) })
            }),
        ));
    }
    {
        let gi = good_in.clone();
        exec_cases.push((
            "wrong number of outputs",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "got 1 and 0",
            Box::new(move |h| {
                let ins = [mk_in("float32", &[4, 64], &gi)];
                // SAFETY: descriptors of live buffers.
                status(unsafe { (api().execute)(h.0, ins.as_ptr(), 1, std::ptr::null_mut(), 0, 1) })
            }),
        ));
    }
    exec_cases
}

/// One input descriptor field out of range each: rank, size, strides, byte count, data, dtype.
fn input_descriptor_cases(good_in: &[u8], o: &TensorFile) -> Vec<ExecCase> {
    let case = |name, st, frag, bad| input_case(name, st, frag, good_in, o, bad);
    vec![
        case(
            "input rank above 16",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "ndim 17 out of range",
            |d| d.ndim = 17,
        ),
        case(
            "negative input size",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "negative",
            |d| d.sizes[0] = -4,
        ),
        case(
            "non-contiguous input strides",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "non-contiguous strides",
            |d| {
                d.strides[0] = 1;
                d.strides[1] = 4;
            },
        ),
        case(
            "input buffer smaller than its sizes",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "needs 1024 bytes but the buffer has 1000",
            |d| d.nbytes = 1000,
        ),
        case(
            "null input data",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "data is null",
            |d| d.data = std::ptr::null_mut(),
        ),
        case(
            "unknown input dtype",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "unknown dtype code 99",
            |d| d.dtype = 99,
        ),
    ]
}

/// A case whose input is the good one's descriptor with `bad` applied, its output a good one.
fn input_case(
    name: &'static str,
    st: S,
    frag: &'static str,
    good_in: &[u8],
    o: &TensorFile,
    bad: fn(&mut EtCudaTensor),
) -> ExecCase {
    let gi = good_in.to_vec();
    let o = o.clone();
    (
        name,
        st,
        frag,
        Box::new(move |h| {
            let mut buf = vec![0u8; 160];
            let out = desc(&o.dtype, &o.sizes, buf.as_mut_ptr().cast(), buf.len());
            let mut input = mk_in("float32", &[4, 64], &gi);
            bad(&mut input);
            exec_one(h, input, out, 1)
        }),
    )
}

/// An output descriptor of another dtype than the model's, or too small.
fn output_descriptor_cases(good_in: &[u8], o: &TensorFile) -> Vec<ExecCase> {
    let good_in = good_in.to_vec();
    let mut exec_cases: Vec<ExecCase> = Vec::new();
    {
        let gi = good_in.clone();
        let o2 = o.clone();
        exec_cases.push((
            "output dtype differs from the model's",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "the caller expects dtype 15 but the model returns dtype 6",
            Box::new(move |h| {
                let mut buf = vec![0u8; 160];
                let mut od = desc(&o2.dtype, &o2.sizes, buf.as_mut_ptr().cast(), buf.len());
                od.dtype = 15;
                exec_one(h, mk_in("float32", &[4, 64], &gi), od, 1)
            }),
        ));
        let gi = good_in.clone();
        let o3 = o.clone();
        exec_cases.push((
            "output buffer too small",
            ET_CUDA_STATUS_INVALID_ARGUMENT,
            "output 0 needs 160 bytes but its buffer has 100",
            Box::new(move |h| {
                let mut buf = vec![0u8; 160];
                let mut od = desc(&o3.dtype, &o3.sizes, buf.as_mut_ptr().cast(), 100);
                od.nbytes = 100;
                exec_one(h, mk_in("float32", &[4, 64], &gi), od, 1)
            }),
        ));
    }
    exec_cases
}

/// Each execute-time case on one loaded handle, each followed by a good run on the same handle.
fn run_exec_cases(
    exec_cases: &[ExecCase],
    good_in: &[u8],
    o: &TensorFile,
    ran: &mut usize,
    failures: &mut Vec<String>,
) {
    let h = Handle::load("mlp_f32", 0, false).unwrap();
    for (name, want, frag, f) in exec_cases {
        let (got, msg) = f(&h);
        *ran += 1;
        let ok = got == *want && msg.contains(frag);
        println!(
            "[{}] {name}: {got:?} \"{msg}\"",
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failures.push(format!(
                "{name}: expected {want:?} with {frag:?}, got {got:?} {msg:?}"
            ));
        }
        // The same handle still runs a good case after every bad one.
        good_run_matches(&h, good_in, o, name);
    }
}

/// The fake model: a failing run, and an out-of-memory inside the run; the next run works.
fn fake_model_runs(f: &[u8], ran: &mut usize, failures: &mut Vec<String>) {
    let h = Handle::from_bytes(f, &[0; 16], None, 0, false).unwrap();
    for (name, dt, want, frag) in [
        (
            "model run fails",
            "int32",
            ET_CUDA_STATUS_EXECUTION_FAILED,
            "AOTInductorModelContainerRun failed",
        ),
        (
            "allocation larger than the GPU inside a run",
            "int64",
            ET_CUDA_STATUS_EXECUTION_FAILED,
            "CUDA_ERROR_OUT_OF_MEMORY",
        ),
    ] {
        let src = [1u8; 64];
        let mut dst = vec![0u8; 64];
        let (got, msg) = exec_one(
            &h,
            desc(
                dt,
                &[16 / if dt == "int64" { 2 } else { 1 }],
                src.as_ptr() as *mut c_void,
                64,
            ),
            desc(
                dt,
                &[16 / if dt == "int64" { 2 } else { 1 }],
                dst.as_mut_ptr().cast(),
                64,
            ),
            1,
        );
        *ran += 1;
        let ok = got == want && msg.contains(frag);
        println!(
            "[{}] fake model: {name}: {got:?} \"{msg}\"",
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failures.push(format!("fake {name}: got {got:?} {msg:?}"));
        }
        let src: Vec<u8> = (0..64).collect();
        let mut dst = vec![0u8; 64];
        let (st, m) = exec_one(
            &h,
            desc("float32", &[16], src.as_ptr() as *mut c_void, 64),
            desc("float32", &[16], dst.as_mut_ptr().cast(), 64),
            1,
        );
        assert_eq!(st, ET_CUDA_STATUS_OK, "fake model after {name}: {m}");
        assert_eq!(src, dst, "the fake model copies its input");
    }
}

/// A destroyed handle: execute, a second destroy and stats are errors, not use-after-free.
fn destroyed_handle_runs(
    good_in: &[u8],
    o: &TensorFile,
    ran: &mut usize,
    failures: &mut Vec<String>,
) {
    let dead = Handle::load("mlp_f32", 0, false).unwrap();
    let p = dead.0;
    std::mem::forget(dead);
    // SAFETY: a live handle, destroyed once here.
    assert_eq!(unsafe { (api().destroy)(p) }, ET_CUDA_STATUS_OK);
    let mut input = good_in.to_vec();
    let mut out = vec![0u8; o.bytes.len()];
    for (name, (got, msg)) in [
        (
            "execute after destroy",
            exec_one(
                &std::mem::ManuallyDrop::new(Handle(p)),
                desc("float32", &[4, 64], input.as_mut_ptr().cast(), input.len()),
                desc(&o.dtype, &o.sizes, out.as_mut_ptr().cast(), out.len()),
                1,
            ),
        ),
        // SAFETY: the destroyed handle is only looked up.
        ("double destroy", status(unsafe { (api().destroy)(p) })),
    ] {
        *ran += 1;
        let ok = got == ET_CUDA_STATUS_INVALID_ARGUMENT && msg.contains("not a live handle");
        println!(
            "[{}] {name}: {got:?} \"{msg}\"",
            if ok { "ok" } else { "FAIL" }
        );
        if !ok {
            failures.push(format!("{name}: got {got:?} {msg:?}"));
        }
    }
}
