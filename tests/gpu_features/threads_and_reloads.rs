#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn two_threads_two_handles_shared_stream_graphs() {
    require_gpu("two_threads_two_handles_shared_stream_graphs");
    let runs: usize = std::env::var("ET_CUDA_THREAD_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    reset_options();
    set_bool("use_shared_cuda_stream", true);
    set_str("enable_cuda_graph_for_method", "forward");
    let fx = ["mlp_f32", "attn_bf16"];
    let handles: Vec<Handle> = fx
        .iter()
        .map(|f| {
            load_with_options(
                &blob(f, "forward_so_blob.bin"),
                &blob(f, "forward_weights_blob.bin"),
                0,
            )
        })
        .collect();
    let cs: Vec<Case> = fx.iter().map(|f| cases(f, "forward").remove(0)).collect();
    // Single-threaded reference (the first execute of each runs eagerly).
    let refs: Vec<Vec<Vec<u8>>> = handles
        .iter()
        .zip(&cs)
        .map(|(h, c)| run_host_raw(RawHandle(h.0), c))
        .collect();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|s| {
        // A third thread allocates and frees device memory on the legacy stream meanwhile
        // (what ExecuTorch's device allocator does through et_cuda_device_allocate).
        let stop2 = stop.clone();
        let alloc = s.spawn(move || {
            let mut n = 0u64;
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                let mut p = std::ptr::null_mut();
                // SAFETY: out-pointer to a local.
                let st = unsafe { (api().device_allocate)(0, 4096, 256, &mut p) };
                assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
                // SAFETY: a pointer from et_cuda_device_allocate, freed once.
                let st = unsafe { (api().device_deallocate)(p) };
                assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
                n += 1;
            }
            n
        });
        let workers: Vec<_> = handles
            .iter()
            .zip(&cs)
            .zip(&refs)
            .map(|((h, c), r)| {
                let rh = RawHandle(h.0);
                s.spawn(move || {
                    for i in 0..runs {
                        let got = run_host_raw(rh, c);
                        assert!(
                            got == *r,
                            "run {i}: output differs from the single-threaded run"
                        );
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let n = alloc.join().unwrap();
        println!("2 threads x {runs} graph executes on one shared stream (mlp_f32, attn_bf16), with {n} device allocate/free pairs on a third thread: every output bitwise equal to the single-threaded run");
    });
    for h in &handles {
        let st = stats(h.0);
        assert!(st.graph_replays > 0, "no graph replays: {st:?}");
    }
    drop(handles);
    reset_options();
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn share_group_reload_does_not_reuse_the_old_programs_buffers() {
    require_gpu("share_group_reload_does_not_reuse_the_old_programs_buffers");
    // Load, destroy and load again with the same share group (an address may be reused after an
    // unload): the second load must share nothing with the gone first one, and run correctly.
    reset_options();
    set_bool("weight_sharing_across_methods", true);
    set_bool("share_mutable_buffers_across_methods", true);
    let so = blob("attn_bf16", "forward_so_blob.bin");
    let w = blob("attn_bf16", "forward_weights_blob.bin");
    let case = &cases("attn_bf16", "forward")[0];
    for round in 0..3 {
        let h = load_with_options(&so, &w, 0x1234);
        assert_eq!(
            stats(h.0).shared_constant_bytes,
            0,
            "round {round}: constants shared with a destroyed program"
        );
        let got = run_host_raw(RawHandle(h.0), case);
        assert!(
            compare("bfloat16", &got[0], &case.outputs[0].bytes).1,
            "round {round}"
        );
        drop(h);
    }
    println!("share group reused over 3 load/destroy rounds: nothing shared with destroyed programs, outputs pass");
    reset_options();
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn replay_checks_inputs_read_in_place() {
    require_gpu("replay_checks_inputs_read_in_place");
    // A graph captured over a device input at address A is replayed while the caller passes A
    // again; the replay must check the call as an eager run does: fewer readable bytes than the
    // shape needs, or other strides, are refused (before: only the address was compared).
    reset_options();
    set_str("enable_cuda_graph_for_method", "forward");
    let (so, w) = (
        blob("mlp_f32", "forward_so_blob.bin"),
        blob("mlp_f32", "forward_weights_blob.bin"),
    );
    let h = load_with_options(&so, &w, 0);
    let case = &cases("mlp_f32", "forward")[0];
    let (dev_in, ins, _) = device_io(case);
    let n = case.inputs[0].bytes.len();
    let out = |h: &Handle, input: EtCudaTensor| {
        let mut outs = [desc(
            "float32",
            &case.outputs[0].sizes,
            std::ptr::null_mut(),
            0,
        )];
        h.execute(&[input], &mut outs, DEVICE)
    };
    for _ in 0..3 {
        out(&h, ins[0]).unwrap(); // eager, capture, replay
    }
    assert!(stats(h.0).graph_replays >= 1, "no replay: {:?}", stats(h.0));
    // Same address and shape, fewer bytes than the shape needs.
    let mut short = ins[0];
    short.nbytes = (n / 2) as u64;
    let e = out(&h, short).unwrap_err();
    assert!(e.contains("needs") && e.contains("bytes"), "{e}");
    // Same address and sizes, zero strides: another signature, and refused like eagerly.
    let mut zero = ins[0];
    zero.strides = [0; executorch_cuda::ffi::ET_CUDA_MAX_DIMS];
    let e = out(&h, zero).unwrap_err();
    assert!(e.contains("non-contiguous"), "{e}");
    // The graph still serves the well-formed call.
    out(&h, ins[0]).unwrap();
    println!("replay refused a short buffer and zero strides at the captured address; the graph still serves the good call");
    drop(dev_in);
    drop(h);
    reset_options();
}

static REENTERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A log callback that calls back into the library: an allocation and a free of the
/// device allocator, which take the device's legacy-stream gate.
///
/// # Safety
/// Called by the library with a NUL-terminated message.
unsafe extern "C" fn reentering_log(
    _level: i32,
    _msg: *const std::ffi::c_char,
    _user: *mut c_void,
) {
    let mut p = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the pointer is freed once.
    unsafe {
        if (api().device_allocate)(0, 256, 256, &mut p) == ET_CUDA_STATUS_OK {
            (api().device_deallocate)(p);
        }
    }
    REENTERED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// Issue 31: a log callback re-enters the library (taking the legacy-stream gate) during
/// loads that log under the gate (weight sharing with a `.so` that has no constants API
/// warns), while another thread captures CUDA graphs without pause (two shapes and a
/// graph cache of one: every execute captures, taking the gate exclusively). With the
/// callback run under the load's hold of the gate, std's writer-preferring lock makes
/// the callback wait for the capture, which waits for the load: a deadlock, reported here
/// after 120 s instead of a hang.
#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn a_callback_reentering_during_a_load_while_another_thread_captures() {
    require_gpu("a_callback_reentering_during_a_load_while_another_thread_captures");
    let Some(so) = fake_model() else {
        panic!("no C compiler to build the fake model");
    };
    reset_options();
    set_str("enable_cuda_graph_for_method", "forward");
    set_int("cuda_graph_cache_size", 1);
    let capturing = load_with_options(&so, &[0; 16], 0);
    reset_options();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let raw = RawHandle(capturing.0);
    let st = stop.clone();
    let captures = std::thread::spawn(move || {
        let raw = raw;
        let h = std::mem::ManuallyDrop::new(Handle(raw.0));
        let mut k = 0;
        while !st.load(std::sync::atomic::Ordering::SeqCst) {
            fake_run(&h, if k % 2 == 0 { 16 } else { 32 }, k as f32, "float32").unwrap();
            k += 1;
        }
        k
    });
    // SAFETY: a function with the callback's signature, callable from any thread.
    let set = unsafe { (api().set_log_callback)(Some(reentering_log), std::ptr::null_mut(), 3) };
    assert_eq!(set, ET_CUDA_STATUS_OK, "{}", last_error());
    REENTERED.store(0, std::sync::atomic::Ordering::SeqCst);
    let (tx, rx) = std::sync::mpsc::channel();
    let so2 = so.clone();
    std::thread::spawn(move || {
        let loads = std::panic::catch_unwind(|| {
            set_bool("weight_sharing_across_methods", true);
            for _ in 0..50 {
                drop(load_with_options(&so2, &[0; 16], 7));
            }
        });
        let _ = tx.send(loads.is_ok());
    });
    let done = rx.recv_timeout(std::time::Duration::from_secs(120));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    match done {
        Ok(true) => {}
        Ok(false) => panic!("a load failed (its message is above)"),
        Err(_) => {
            // The threads are stuck: destroying the handle would wait for them too.
            std::mem::forget(capturing);
            panic!("deadlock: 50 loads did not finish in 120 s while another thread captured");
        }
    }
    let runs = captures.join().unwrap();
    // SAFETY: clearing the callback.
    unsafe { (api().set_log_callback)(None, std::ptr::null_mut(), 2) };
    reset_options();
    let s = stats(capturing.0);
    let reentered = REENTERED.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "{runs} executes, {} captures; the callback re-entered {reentered} times",
        s.graph_captures
    );
    assert!(reentered >= 50, "the loads did not log: {reentered}");
    assert!(s.graph_captures >= 2, "no captures: {}", s.graph_captures);
}

/// The fake model with one per-FQN constant (`tests/fake_fqn_constants.c` appended).
fn fake_fqn_model() -> Option<Vec<u8>> {
    let src = format!(
        "{}\n{}",
        include_str!("../../c_tests/fake_aoti.c"),
        include_str!("../fake_fqn_constants.c")
    );
    c_shared_object("fake_fqn_aoti", &src, "ET_CUDA_FAKE_FQN_AOTI")
}

/// An `ETCUDAFQN3` payload (the documented layout) for the fake's one constant: `.so` key
/// "fake_so_blob", storage "w_storage", float32 [4] on CUDA.
fn fake_fqn_payload() -> Vec<u8> {
    let mut o = b"ETCUDAFQN3".to_vec();
    let s = |o: &mut Vec<u8>, v: &str| {
        o.extend((v.len() as u32).to_le_bytes());
        o.extend(v.as_bytes());
    };
    s(&mut o, "fake_so_blob");
    o.extend(1u32.to_le_bytes());
    s(&mut o, "w");
    s(&mut o, "w_storage");
    o.extend(16u64.to_le_bytes());
    o.extend(6i32.to_le_bytes());
    o.extend(1i32.to_le_bytes());
    o.extend(0i64.to_le_bytes());
    o.extend(1u32.to_le_bytes());
    o.extend(4i64.to_le_bytes());
    o.extend(1i64.to_le_bytes());
    o
}

struct FqnNamed {
    so: Vec<u8>,
    w: [u8; 16],
}

static NAMED_REENTERED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Re-enter the library as a callback: an allocation and a free of the device allocator,
/// which take the device's legacy-stream gate.
fn reenter() {
    let mut p = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; the pointer is freed once.
    unsafe {
        if (api().device_allocate)(0, 256, 256, &mut p) == ET_CUDA_STATUS_OK {
            (api().device_deallocate)(p);
        }
    }
    NAMED_REENTERED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// # Safety
/// `user` is a live `FqnNamed`, `key` NUL-terminated, the out-pointers writable.
unsafe extern "C" fn fqn_lookup(
    user: *mut c_void,
    key: *const std::ffi::c_char,
    out_data: *mut *const u8,
    out_len: *mut usize,
) -> i32 {
    reenter();
    // SAFETY: the contract above.
    let (n, k) = unsafe { (&*(user as *const FqnNamed), std::ffi::CStr::from_ptr(key)) };
    let b: &[u8] = match k.to_bytes() {
        b"fake_so_blob" => &n.so,
        b"w_storage" => &n.w,
        _ => return 1,
    };
    // SAFETY: writable out-pointers (the contract).
    unsafe {
        *out_data = b.as_ptr();
        *out_len = b.len();
    }
    0
}

/// # Safety
/// Called by the library with its user pointer and a NUL-terminated key.
unsafe extern "C" fn fqn_release(_user: *mut c_void, _key: *const std::ffi::c_char) {
    reenter();
}

/// Issue 31: the named-data functions of a per-FQN load re-enter the library (taking the
/// legacy-stream gate) while another thread captures CUDA graphs without pause. The load
/// used to hold the gate around them: with std's writer-preferring lock, the callback's
/// second hold waited for the waiting capture, which waited for the load (a deadlock,
/// reported here after 120 s).
#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn named_data_callbacks_reentering_while_another_thread_captures() {
    require_gpu("named_data_callbacks_reentering_while_another_thread_captures");
    let (Some(plain), Some(fqn)) = (fake_model(), fake_fqn_model()) else {
        panic!("no C compiler to build the fake models");
    };
    reset_options();
    set_str("enable_cuda_graph_for_method", "forward");
    set_int("cuda_graph_cache_size", 1);
    let capturing = load_with_options(&plain, &[0; 16], 0);
    reset_options();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let raw = RawHandle(capturing.0);
    let st = stop.clone();
    let captures = std::thread::spawn(move || {
        let raw = raw;
        let h = std::mem::ManuallyDrop::new(Handle(raw.0));
        let mut k = 0;
        while !st.load(std::sync::atomic::Ordering::SeqCst) {
            fake_run(&h, if k % 2 == 0 { 16 } else { 32 }, k as f32, "float32").unwrap();
            k += 1;
        }
        k
    });
    NAMED_REENTERED.store(0, std::sync::atomic::Ordering::SeqCst);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let named = FqnNamed {
            so: fqn,
            w: [0; 16],
        };
        let payload = fake_fqn_payload();
        let name = CString::new("forward").unwrap();
        let loads = std::panic::catch_unwind(|| {
            for _ in 0..50 {
                let args = EtCudaInitArgs {
                    payload_data: payload.as_ptr(),
                    payload_len: payload.len(),
                    named_data: Some(fqn_lookup),
                    named_data_user: &named as *const FqnNamed as *mut c_void,
                    named_data_release: Some(fqn_release),
                    ..init_args(&[], &[], &name)
                };
                let mut h = std::ptr::null_mut();
                // SAFETY: the payload, `named` and `name` outlive the call; the callbacks
                // follow their contracts with `named` as their user pointer.
                let st = unsafe { (api().init)(&args, &mut h) };
                assert_eq!(st, ET_CUDA_STATUS_OK, "per-FQN init: {}", last_error());
                drop(Handle(h));
            }
        });
        let _ = tx.send(loads.is_ok());
    });
    let done = rx.recv_timeout(std::time::Duration::from_secs(120));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    match done {
        Ok(true) => {}
        Ok(false) => panic!("a load failed (its message is above)"),
        Err(_) => {
            // The threads are stuck: destroying the handle would wait for them too.
            std::mem::forget(capturing);
            panic!(
                "deadlock: 50 per-FQN loads did not finish in 120 s while another thread captured"
            );
        }
    }
    let runs = captures.join().unwrap();
    let s = stats(capturing.0);
    let reentered = NAMED_REENTERED.load(std::sync::atomic::Ordering::SeqCst);
    println!(
        "{runs} executes, {} captures; the named-data callbacks re-entered {reentered} times",
        s.graph_captures
    );
    // Per load: the .so and the storage looked up, the storage released.
    assert!(reentered >= 150, "{reentered}");
    assert!(s.graph_captures >= 2, "no captures: {}", s.graph_captures);
}
