// ------------------------------------------------------------------ CUDA graphs, timing

/// The primary context of device 0 made current on this thread.
fn context() {
    let mut dev = 0;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: driver calls with out-pointers to locals.
    unsafe {
        assert_eq!(sys::cuInit(0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(sys::cuDeviceGet(&mut dev, 0), sys::CUresult::CUDA_SUCCESS);
        assert_eq!(
            sys::cuDevicePrimaryCtxRetain(&mut ctx, dev),
            sys::CUresult::CUDA_SUCCESS
        );
        assert_eq!(sys::cuCtxSetCurrent(ctx), sys::CUresult::CUDA_SUCCESS);
    }
}

fn ok(r: sys::CUresult, what: &str) {
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS, "{what}");
}

/// Capture `f` (which enqueues work through the shims on the guarded stream) into a graph.
fn capture(stream: sys::CUstream, f: &mut dyn FnMut()) -> sys::CUgraphExec {
    let mut guard = std::ptr::null_mut();
    // SAFETY: a live stream of device 0; out-pointer to a local.
    let st = unsafe { (shims().stream_guard)(stream.cast(), 0, &mut guard) };
    assert_eq!(st, 0, "{}", last_error());
    // SAFETY: a live stream, not capturing yet.
    ok(
        unsafe {
            sys::cuStreamBeginCapture_v2(
                stream,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        },
        "cuStreamBeginCapture",
    );
    f();
    let mut graph = std::ptr::null_mut();
    // SAFETY: ends the capture begun above.
    ok(
        unsafe { sys::cuStreamEndCapture(stream, &mut graph) },
        "cuStreamEndCapture",
    );
    // SAFETY: the guard made above, deleted once.
    unsafe { (shims().delete_guard)(guard) };
    let mut exec = std::ptr::null_mut();
    // SAFETY: a complete graph; out-pointer to a local.
    ok(
        unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
        "cuGraphInstantiate",
    );
    // SAFETY: the graph is no longer needed once instantiated.
    unsafe { sys::cuGraphDestroy(graph) };
    exec
}

fn new_stream() -> sys::CUstream {
    context();
    let mut s = std::ptr::null_mut();
    // SAFETY: out-pointer to a local; context current.
    ok(unsafe { sys::cuStreamCreate(&mut s, 1) }, "cuStreamCreate");
    s
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn kernels_run_inside_a_cuda_graph() {
    require_gpu("kernels_run_inside_a_cuda_graph");
    let stream = new_stream();
    let mut rng = Rng(99);
    let (m, n, k) = (3usize, 300usize, 2048usize);
    let x = rng.vec(m * k);
    let w = rng.vec(n * k);
    let (xd, wd) = (
        DevBuf::from_host(&encode(&x, BF16)),
        DevBuf::from_host(&encode(&w, BF16)),
    );
    let xh = wrap(&xd, 0, &[m as i64, k as i64], &[k as i64, 1], BF16);
    let wh = wrap(&wd, 0, &[n as i64, k as i64], &[k as i64, 1], BF16);
    // Attention: Llama-like, device position (read at replay time).
    let shape = (1usize, 8usize, 2usize, 1usize, 256usize, 64usize);
    let (b, hq, hkv, lq, lmax, d) = shape;
    let q = rng.vec(b * hq * lq * d);
    let kc = rng.vec(b * hkv * lmax * d);
    let vc = rng.vec(b * hkv * lmax * d);
    let (qd, kd, vd) = (
        DevBuf::from_host(&encode(&q, BF16)),
        DevBuf::from_host(&encode(&kc, BF16)),
        DevBuf::from_host(&encode(&vc, BF16)),
    );
    let pd = DevBuf::from_host(&0i64.to_le_bytes());
    let qs = [b as i64, hq as i64, lq as i64, d as i64];
    let cs = [b as i64, hkv as i64, lmax as i64, d as i64];
    let (qh, kh, vh) = (
        wrap(&qd, 0, &qs, &contiguous(&qs), BF16),
        wrap(&kd, 0, &cs, &contiguous(&cs), BF16),
        wrap(&vd, 0, &cs, &contiguous(&cs), BF16),
    );
    let ph = wrap(&pd, 0, &[1], &[1], I64);
    let mut y = std::ptr::null_mut();
    let mut o = std::ptr::null_mut();
    let exec = capture(stream, &mut || {
        // SAFETY: live handles; out-pointers to locals.
        unsafe {
            assert_eq!((shims().gemv)(xh.0, wh.0, &mut y), 0, "{}", last_error());
            assert_eq!(
                (shims().attn)(qh.0, kh.0, vh.0, ph.0, 0.125, &mut o),
                0,
                "{}",
                last_error()
            );
        }
    });
    let (y, o) = (Handle(y), Handle(o));
    // Replay with the position set to 200 after the capture: the graph reads it then.
    let p200 = 200i64.to_le_bytes();
    // SAFETY: blocking copy of 8 bytes into the position buffer.
    let st = unsafe { (api().memcpy)(std::ptr::null(), pd.ptr(), p200.as_ptr().cast(), 8) };
    assert_eq!(st, 0);
    // SAFETY: an instantiated graph and a live stream.
    ok(unsafe { sys::cuGraphLaunch(exec, stream) }, "cuGraphLaunch");
    // SAFETY: live stream.
    ok(
        unsafe { sys::cuStreamSynchronize(stream) },
        "cuStreamSynchronize",
    );
    let (ey, gy) = check_close(
        &read(&y, m * n, BF16),
        &gemv_ref(&x, &w, None, m, n, k),
        BF16,
    );
    let want = attn_ref(&q, &kc, &vc, &[200], shape, 0.125);
    let (eo, go) = check_close(&read(&o, b * hq * lq * d, BF16), &want, BF16);
    println!("graph replay: gemv max err {ey:.3e}, attention (position 200 set after capture) max err {eo:.3e}");
    assert!(gy && go);
    // SAFETY: the graph is not running (stream synchronized).
    unsafe { sys::cuGraphExecDestroy(exec) };
}

/// GPU time per call of `f` (enqueued `reps` times in one graph), median of 5 replays.
fn time_graph(stream: sys::CUstream, reps: usize, f: &mut dyn FnMut(usize)) -> f64 {
    let mut i = 0;
    let exec = capture(stream, &mut || {
        for _ in 0..reps {
            f(i);
            i += 1;
        }
    });
    let (mut e0, mut e1) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: out-pointers to locals, context current.
    unsafe {
        ok(sys::cuEventCreate(&mut e0, 0), "cuEventCreate");
        ok(sys::cuEventCreate(&mut e1, 0), "cuEventCreate");
    }
    let mut times = Vec::new();
    for it in 0..6 {
        // SAFETY: live events, graph and stream.
        unsafe {
            ok(sys::cuEventRecord(e0, stream), "cuEventRecord");
            ok(sys::cuGraphLaunch(exec, stream), "cuGraphLaunch");
            ok(sys::cuEventRecord(e1, stream), "cuEventRecord");
            ok(sys::cuEventSynchronize(e1), "cuEventSynchronize");
        }
        let mut ms = 0f32;
        // SAFETY: both events completed.
        ok(
            unsafe { sys::cuEventElapsedTime_v2(&mut ms, e0, e1) },
            "cuEventElapsedTime",
        );
        if it > 0 {
            times.push(f64::from(ms) * 1000.0 / reps as f64);
        }
    }
    // SAFETY: nothing uses them any more.
    unsafe {
        sys::cuEventDestroy_v2(e0);
        sys::cuEventDestroy_v2(e1);
        sys::cuGraphExecDestroy(exec);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    times[times.len() / 2]
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn decode_bench() {
    require_gpu("decode_bench");
    let stream = new_stream();
    let mut rng = Rng(5);
    println!(
        "GEMV (bf16, y = x W^T): GPU time per call from CUDA events around a graph of calls; the"
    );
    println!("weights rotate over copies totalling >= 256 MiB so that they come from HBM, not L2.");
    println!(
        "Each call is an allocation node, the kernel and a free node of the graph: the time per"
    );
    println!(
        "call includes the gaps between them (the floor below), which CUPTI kernel time does not."
    );
    gemv_floor_bench(stream, &mut rng);
    gemv_shapes_bench(stream, &mut rng);
    attention_bench(stream, &mut rng);
}

/// The per-call floor of a GEMV in a graph: the smallest one.
fn gemv_floor_bench(stream: sys::CUstream, rng: &mut Rng) {
    // The per-call floor: the smallest GEMV, same graph structure.
    let xd = DevBuf::from_host(&encode(&rng.vec(8), BF16));
    let wd = DevBuf::from_host(&encode(&rng.vec(64), BF16));
    let xh = wrap(&xd, 0, &[1, 8], &[8, 1], BF16);
    let wh = wrap(&wd, 0, &[8, 8], &[8, 1], BF16);
    let us = time_graph(stream, 200, &mut |_| {
        let mut y = std::ptr::null_mut();
        // SAFETY: live handles; out-pointer to a local; the output is freed in the graph.
        unsafe {
            assert_eq!((shims().gemv)(xh.0, wh.0, &mut y), 0, "{}", last_error());
            (api().delete_tensor)(y);
        }
    });
    println!("GEMV floor: M=1 N=8 K=8 takes {us:.2} us per call");
}

/// Each GEMV variant on the Llama-3.2-1B decoder's shapes, M = 1..16; the fastest forced one.
fn gemv_shapes_bench(stream: sys::CUstream, rng: &mut Rng) {
    let header = GEMV_VARIANTS
        .iter()
        .map(|&v| format!("{:>8} {:>6} {:>5}", variant_name(v) + " us", "GB/s", "%"))
        .collect::<Vec<_>>()
        .join(" |");
    println!("GEMV {:>7} {:>6} {:>3} | {header} | best", "N", "K", "M");
    let mut best_rows = Vec::new();
    for (n, k) in MODEL_SHAPES {
        let wbytes = n * k * 2;
        let copies = (256usize << 20).div_ceil(wbytes).max(1);
        // Weights: random bits of bf16 magnitude (values do not matter for timing).
        let wbuf: Vec<u8> = encode(&rng.vec(n * k), BF16);
        let ws: Vec<DevBuf> = (0..copies).map(|_| DevBuf::from_host(&wbuf)).collect();
        let wh: Vec<Handle> = ws
            .iter()
            .map(|d| wrap(d, 0, &[n as i64, k as i64], &[k as i64, 1], BF16))
            .collect();
        for m in [1usize, 2, 3, 4, 8, 16] {
            let xd = DevBuf::from_host(&encode(&rng.vec(m * k), BF16));
            let xh = wrap(&xd, 0, &[m as i64, k as i64], &[k as i64, 1], BF16);
            let reps = (copies * 4).clamp(20, 200);
            let bytes = (n * k + m * k + m * n) as f64 * 2.0;
            let mut cols = Vec::new();
            let mut best = (f64::INFINITY, -1);
            for v in GEMV_VARIANTS {
                set_gemv_variant(v);
                let us = time_graph(stream, reps, &mut |i| {
                    let mut y = std::ptr::null_mut();
                    // SAFETY: live handles; out-pointer to a local; the output is freed in the graph.
                    unsafe {
                        assert_eq!(
                            (shims().gemv)(xh.0, wh[i % copies].0, &mut y),
                            0,
                            "{}",
                            last_error()
                        );
                        (api().delete_tensor)(y);
                    }
                });
                let gbs = bytes / us / 1e3;
                cols.push(format!(
                    "{us:>8.2} {gbs:>6.0} {:>4.0}%",
                    gbs / 4800.0 * 100.0
                ));
                if v >= 0 && us < best.0 {
                    best = (us, v);
                }
            }
            println!(
                "     {n:>7} {k:>6} {m:>3} | {} | {}",
                cols.join(" |"),
                variant_name(best.1)
            );
            best_rows.push((n, k, m, best.1));
        }
    }
    set_gemv_variant(-1);
    println!(
        "GEMV fastest forced variant (M = 1..4): {}",
        best_rows
            .iter()
            .filter(|r| r.2 <= 4)
            .map(|(n, k, m, v)| format!("{n}x{k}/M{m}={}", variant_name(*v)))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// Decode attention (bf16, D = 64) on a few batch, head, query and cache shapes.
fn attention_bench(stream: sys::CUstream, rng: &mut Rng) {
    println!("decode attention (bf16, D=64): GPU time per call, same method");
    println!(
        "{:>3} {:>4} {:>4} {:>4} {:>6} {:>9} {:>8}",
        "B", "Hq", "Hkv", "Lq", "fill", "us", "GB/s"
    );
    for (b, hq, hkv, lq, lmax, fill) in [
        (1usize, 32usize, 8usize, 1usize, 1024usize, 1024usize),
        (1, 32, 8, 1, 1024, 128),
        (1, 32, 8, 16, 1024, 1024),
        (4, 32, 8, 1, 1024, 1024),
        (1, 32, 8, 1, 8192, 8192),
    ] {
        let d = 64;
        let q = DevBuf::from_host(&encode(&rng.vec(b * hq * lq * d), BF16));
        let kv: Vec<u8> = encode(&rng.vec(b * hkv * lmax * d), BF16);
        let (kd, vd) = (DevBuf::from_host(&kv), DevBuf::from_host(&kv));
        let qs = [b as i64, hq as i64, lq as i64, d as i64];
        let cs = [b as i64, hkv as i64, lmax as i64, d as i64];
        let (qh, kh, vh) = (
            wrap(&q, 0, &qs, &contiguous(&qs), BF16),
            wrap(&kd, 0, &cs, &contiguous(&cs), BF16),
            wrap(&vd, 0, &cs, &contiguous(&cs), BF16),
        );
        let pd = DevBuf::from_host(&((fill - lq) as i64).to_le_bytes());
        let ph = wrap(&pd, 0, &[1], &[1], I64);
        let us = time_graph(stream, 100, &mut |_| {
            let mut o = std::ptr::null_mut();
            // SAFETY: live handles; out-pointer to a local; the output is freed in the graph.
            unsafe {
                assert_eq!(
                    (shims().attn)(qh.0, kh.0, vh.0, ph.0, 0.125, &mut o),
                    0,
                    "{}",
                    last_error()
                );
                (api().delete_tensor)(o);
            }
        });
        let bytes = (2 * b * hkv * fill * d) as f64 * 2.0;
        println!(
            "{b:>3} {hq:>4} {hkv:>4} {lq:>4} {fill:>6} {us:>9.2} {:>8.0}",
            bytes / us / 1e3
        );
    }
}
