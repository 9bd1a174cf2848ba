#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn weights_shared_across_methods() {
    require_gpu("weights_shared_across_methods");
    for (fx, mutable) in [("mlp_f32", false), ("conv_f32", false), ("conv_f32", true)] {
        reset_options();
        set_bool("weight_sharing_across_methods", true);
        set_bool("share_mutable_buffers_across_methods", mutable);
        let a = load_fixture(fx, 42);
        let b = load_fixture(fx, 42);
        reset_options();
        let (sa, sb) = (stats(a.0), stats(b.0));
        let weights = blob(fx, "forward_weights_blob.bin").len() as u64;
        println!(
            "{fx} (mutable buffers shared: {mutable}): first method shares {} bytes, second {} of {weights} weight bytes",
            sa.shared_constant_bytes, sb.shared_constant_bytes
        );
        assert_eq!(sa.shared_constant_bytes, 0);
        assert!(
            sb.shared_constant_bytes > 0,
            "{fx}: the second method shares its weights"
        );
        assert!(sb.shared_constant_bytes <= weights);
        let case = &cases(fx, "forward")[0];
        for h in [&a, &b] {
            let out = run_host(h, case);
            let (e, ok) = compare(&case.outputs[0].dtype, &out[0], &case.outputs[0].bytes);
            assert!(ok, "{fx}: shared-weights output off by {e}");
        }
        // The first method goes; the second keeps working (the buffers it uses stay alive).
        drop(a);
        let out = run_host(&b, case);
        assert!(
            compare(&case.outputs[0].dtype, &out[0], &case.outputs[0].bytes).1,
            "{fx} after the owner was destroyed"
        );
    }
    // The sharing rules for registered buffers, on conv_f32 (its BatchNorm is folded into the
    // convolution by the export: every constant is a parameter, none a buffer): parameters are
    // shared whatever the mutable-buffer option and across programs. (Buffers proper — a KV
    // cache — are checked by the model suite: qwen3_pd_bf16's generate in its "share" mode.)
    reset_options();
    set_bool("weight_sharing_across_methods", true);
    let a = load_fixture("conv_f32", 42);
    let b = load_fixture("conv_f32", 42);
    let no_mut = stats(b.0).shared_constant_bytes;
    drop((a, b));
    set_bool("share_mutable_buffers_across_methods", true);
    let a = load_fixture("conv_f32", 43);
    let b = load_fixture("conv_f32", 43);
    let with_mut = stats(b.0).shared_constant_bytes;
    drop((a, b));
    let a = load_fixture("conv_f32", 44);
    let b = load_fixture("conv_f32", 45);
    let other_group = stats(b.0).shared_constant_bytes;
    reset_options();
    println!("conv_f32 shared bytes: parameters only {no_mut}, with buffers {with_mut}, other program {other_group}");
    let weights = blob("conv_f32", "forward_weights_blob.bin").len() as u64;
    assert_eq!(no_mut, weights, "every parameter is shared");
    assert_eq!(with_mut, no_mut, "the option only concerns buffers");
    assert_eq!(other_group, no_mut, "parameters are shared across programs");
    drop((a, b));
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn caller_stream_orders_the_execute() {
    use cudarc::driver::{result, sys};
    require_gpu("caller_stream_orders_the_execute");
    reset_options();
    let h = load_fixture("mlp_f32", 0);
    let case = &cases("mlp_f32", "forward")[0];
    let want = run_host(&h, case); // warm-up and reference
    let (stream, event, ctx) = stream_with_a_spinning_kernel();
    let (_dev, ins, mut outs) = device_io(case);
    assert_eq!(
        // SAFETY: a live stream of device 0, cleared below.
        unsafe { (api().set_caller_stream)(stream.cast()) },
        ET_CUDA_STATUS_OK
    );
    let t0 = std::time::Instant::now();
    h.execute(&ins, &mut outs, DEVICE).unwrap();
    let host = t0.elapsed();
    // SAFETY: no arguments.
    assert_eq!(unsafe { (api().clear_caller_stream)() }, ET_CUDA_STATUS_OK);
    // SAFETY: live event and stream.
    unsafe { result::event::record(event, stream).unwrap() };
    // The method's stream waits for the caller's queued 50 ms kernel...
    // SAFETY: the handle's stream is live.
    let method_busy =
        unsafe { sys::cuStreamQuery(h.stream().cast()) } == sys::CUresult::CUDA_ERROR_NOT_READY;
    // ... and the caller's event after the execute completes only after the outputs are written.
    // SAFETY: live event.
    let event_busy = unsafe { sys::cuEventQuery(event) } == sys::CUresult::CUDA_ERROR_NOT_READY;
    // SAFETY: live event.
    unsafe { result::event::synchronize(event).unwrap() };
    let waited = t0.elapsed();
    // SAFETY: the method's stream is idle now (the event waited for it).
    let method_done =
        unsafe { sys::cuStreamQuery(h.stream().cast()) } == sys::CUresult::CUDA_SUCCESS;
    let got = to_host(outs[0].data, case.outputs[0].bytes.len());
    println!(
        "caller stream: execute returned after {:.3} ms; method stream busy {method_busy}, caller event pending {event_busy}; event done after {:.1} ms, method stream then idle {method_done}",
        host.as_secs_f64() * 1e3,
        waited.as_secs_f64() * 1e3
    );
    assert!(
        host.as_millis() < 10,
        "the execute must not wait on the host"
    );
    assert!(
        method_busy && event_busy,
        "work must be ordered after the caller's queued kernel"
    );
    assert!(
        method_done,
        "the caller's event must come after the method's work"
    );
    // The kernel spins 50 ms from its start, which came before t0 (launch latency).
    assert!(waited.as_millis() >= 45, "waited {waited:?}");
    assert_eq!(got, want[0], "outputs under a caller stream");
    other_context_stream_is_refused(&h, &ins, &mut outs, ctx);
    // SAFETY: destroyed once.
    unsafe {
        result::event::destroy(event).unwrap();
        result::stream::destroy(stream).unwrap();
    }
}

/// A fresh non-blocking stream of device 0's primary context (made current here) with a 50 ms
/// spin kernel queued on it, an event, and the context.
fn stream_with_a_spinning_kernel() -> (
    cudarc::driver::sys::CUstream,
    cudarc::driver::sys::CUevent,
    cudarc::driver::sys::CUcontext,
) {
    use cudarc::driver::{result, sys};
    // SAFETY: the device's primary context (the library's), a fresh stream, a module of our own
    // PTX, and a 1x1 launch of its one-u64-argument kernel.
    unsafe {
        let dev = result::device::get(0).unwrap();
        let ctx = result::primary_ctx::retain(dev).unwrap();
        result::ctx::set_current(ctx).unwrap();
        let s = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
        let ptx = CString::new(SPIN_PTX).unwrap();
        let m = result::module::load_data(ptx.as_ptr().cast()).unwrap();
        let f = result::module::get_function(m, CString::new("spin").unwrap()).unwrap();
        let mut ns: u64 = 50_000_000;
        let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
        let r = sys::cuLaunchKernel(
            f,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            s,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        );
        assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).unwrap();
        (s, e, ctx)
    }
}

/// A stream of another context than `ctx` (the method's) set as the caller's stream: the execute
/// refuses it with an error.
fn other_context_stream_is_refused(
    h: &Handle,
    ins: &[EtCudaTensor],
    outs: &mut [EtCudaTensor],
    ctx: cudarc::driver::sys::CUcontext,
) {
    use cudarc::driver::{result, sys};
    // A stream of another context (a second context on the same device, not the primary one
    // the method runs in) is refused by the execute with a clear error, not a crash.
    // SAFETY: plain driver calls on objects made here, destroyed below; the primary context is
    // made current again before the execute.
    let (other_ctx, other_stream) = unsafe {
        let dev = result::device::get(0).unwrap();
        let mut c = std::ptr::null_mut();
        assert_eq!(
            sys::cuCtxCreate_v4(&mut c, std::ptr::null_mut(), 0, dev),
            sys::CUresult::CUDA_SUCCESS
        );
        let s = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
        result::ctx::set_current(ctx).unwrap();
        (c, s)
    };
    assert_eq!(
        // SAFETY: a live stream, cleared below.
        unsafe { (api().set_caller_stream)(other_stream.cast()) },
        ET_CUDA_STATUS_OK
    );
    let r = h.execute(ins, outs, DEVICE);
    // SAFETY: no arguments.
    unsafe { (api().clear_caller_stream)() };
    let e = r.expect_err("a caller stream of another context must be an error");
    println!("caller stream of another context: {e}");
    assert!(e.contains("another CUDA context"), "{e}");
    // SAFETY: destroyed once, in their own context.
    unsafe {
        result::ctx::set_current(other_ctx).unwrap();
        result::stream::destroy(other_stream).unwrap();
        assert_eq!(sys::cuCtxDestroy_v2(other_ctx), sys::CUresult::CUDA_SUCCESS);
        result::ctx::set_current(ctx).unwrap();
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn device_allocator_allocations_return_to_zero() {
    require_gpu("device_allocator_allocations_return_to_zero");
    let count = || {
        let mut n = 0;
        assert_eq!(
            // SAFETY: out-pointer to a local.
            unsafe { (api().device_allocations)(&mut n) },
            ET_CUDA_STATUS_OK
        );
        n
    };
    let before = count();
    let mut ptrs = Vec::new();
    for n in [1usize, 64, 4096, 1 << 20] {
        let mut p = std::ptr::null_mut();
        assert_eq!(
            // SAFETY: out-pointer to a local.
            unsafe { (api().device_allocate)(0, n, 16, &mut p) },
            ET_CUDA_STATUS_OK,
            "{}",
            last_error()
        );
        assert_eq!(p as usize % 16, 0);
        ptrs.push(p);
    }
    assert_eq!(count(), before + 4);
    let mut p = std::ptr::null_mut();
    assert_eq!(
        // SAFETY: out-pointer to a local; a bad alignment is the case under test.
        unsafe { (api().device_allocate)(0, 64, 3, &mut p) },
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    for p in ptrs {
        // SAFETY: a pointer from et_cuda_device_allocate, freed once.
        assert_eq!(unsafe { (api().device_deallocate)(p) }, ET_CUDA_STATUS_OK);
    }
    assert_eq!(count(), before);
    // A pointer it did not hand out is an error, not a crash.
    let x = 0u64;
    assert_eq!(
        // SAFETY: only looked up.
        unsafe { (api().device_deallocate)((&x as *const u64).cast_mut().cast()) },
        ET_CUDA_STATUS_INVALID_ARGUMENT
    );
    println!("device allocator: 4 allocations made and freed, count back to {before}; bad alignment and foreign pointer refused");
}

/// An execute on a handle from any thread (the test keeps the handles alive meanwhile).
#[derive(Clone, Copy)]
struct RawHandle(*mut c_void);
// SAFETY: the library serializes calls per handle; the pointer is only a key.
unsafe impl Send for RawHandle {}

/// Run `case`'s inputs from host memory, outputs copied to host memory (prefilled with 0xAB,
/// so an output the run does not write shows).
fn run_host_raw(h: RawHandle, case: &Case) -> Vec<Vec<u8>> {
    let ins: Vec<EtCudaTensor> = case
        .inputs
        .iter()
        .map(|t| {
            desc(
                &t.dtype,
                &t.sizes,
                t.bytes.as_ptr() as *mut c_void,
                t.bytes.len(),
            )
        })
        .collect();
    let mut bufs: Vec<Vec<u8>> = case
        .outputs
        .iter()
        .map(|t| vec![0xAB; t.bytes.len()])
        .collect();
    let mut outs: Vec<EtCudaTensor> = case
        .outputs
        .iter()
        .zip(bufs.iter_mut())
        .map(|(t, b)| desc(&t.dtype, &t.sizes, b.as_mut_ptr().cast(), b.len()))
        .collect();
    // SAFETY: descriptors point at live host buffers of their stated sizes.
    let st = unsafe {
        (api().execute)(
            h.0,
            ins.as_ptr(),
            ins.len(),
            outs.as_mut_ptr(),
            outs.len(),
            COPY,
        )
    };
    assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
    bufs
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn device_output_fed_back_as_input_of_the_same_handle() {
    require_gpu("device_output_fed_back_as_input_of_the_same_handle");
    // attn_bf16 maps [2, 16, 64] to [2, 16, 64]: x_{n+1} = f(x_n), with x_n the output the
    // handle left on the device at the previous execute (valid until this execute).
    let case = &cases("attn_bf16", "forward")[0];
    let shape = &case.inputs[0].sizes;
    let n = case.inputs[0].bytes.len();
    for graphs in [false, true] {
        reset_options();
        if graphs {
            set_str("enable_cuda_graph_for_method", "forward");
        }
        let so = blob("attn_bf16", "forward_so_blob.bin");
        let w = blob("attn_bf16", "forward_weights_blob.bin");
        let h = load_with_options(&so, &w, 0);
        let rh = RawHandle(h.0);
        // Reference chain: every step from host memory.
        let mut want = Vec::new();
        let mut x = case.inputs[0].bytes.clone();
        for _ in 0..5 {
            let step = Case {
                inputs: vec![TensorFile {
                    bytes: x.clone(),
                    ..case.inputs[0].clone()
                }],
                outputs: case.outputs.clone(),
            };
            x = run_host_raw(rh, &step).remove(0);
            want.push(x.clone());
        }
        // The same chain with each output fed back from the device.
        let first = DevBuf::from_host(&case.inputs[0].bytes);
        let mut input = desc("bfloat16", shape, first.ptr(), n);
        for (k, expect) in want.iter().enumerate() {
            let mut outs = [desc("bfloat16", shape, std::ptr::null_mut(), 0)];
            h.execute(&[input], &mut outs, DEVICE).unwrap();
            let got = to_host(outs[0].data, n);
            assert!(
                got == *expect,
                "graphs={graphs}: step {k}: the output fed back as input differs from the host chain"
            );
            input = desc("bfloat16", shape, outs[0].data, n);
        }
        println!("graphs={graphs}: 5 steps with the device output fed back: bitwise equal to the host chain");
        drop(h);
    }
    reset_options();
}
