#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn graph_replay_equals_eager_bit_for_bit() {
    require_gpu("graph_replay_equals_eager_bit_for_bit");
    let _ = IGNORE;
    for fx in FIXTURES {
        reset_options();
        let eager = load_fixture(fx, 0);
        set_str("enable_cuda_graph_for_method", "forward");
        let graphs = load_fixture(fx, 0);
        reset_options();
        let case = &cases(fx, "forward")[0];
        let want = run_host(&eager, case);
        let s0 = stats(graphs.0);
        for it in 0..6 {
            let got = run_host(&graphs, case);
            assert_eq!(
                got, want,
                "{fx}: execute {it} with graphs differs from eager"
            );
        }
        let s1 = stats(graphs.0);
        let (cap, rep, fb, waits) = delta(&s0, &s1);
        println!("{fx}: 6 host-IO executes with graphs: captures {cap}, replays {rep}, fallbacks {fb}, host waits {waits}; outputs bitwise equal to eager");
        assert_eq!(
            (cap, rep, fb),
            (1, 4, 0),
            "{fx}: warm-up, capture, then replays"
        );
        assert_eq!(waits, 6, "{fx}: one wait per host-output execute");
        assert_eq!(graph_count(&graphs), 1);
        let (e, ok) = compare(&case.outputs[0].dtype, &want[0], &case.outputs[0].bytes);
        assert!(ok, "{fx}: eager vs reference {e}");
        // Device-resident replays: no host wait, outputs are the graph's own buffers.
        let (_dev, ins, mut outs) = device_io(case);
        let a = stats(graphs.0);
        for _ in 0..20 {
            graphs.execute(&ins, &mut outs, DEVICE).unwrap();
        }
        let b = stats(graphs.0);
        let (_, rep, _, waits) = delta(&a, &b);
        assert_eq!(
            (rep, waits),
            (20, 0),
            "{fx}: device-resident replays must not wait"
        );
        let got = to_host(outs[0].data, case.outputs[0].bytes.len());
        assert_eq!(
            got, want[0],
            "{fx}: device-resident replay differs from eager"
        );
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn graph_device_inputs_in_place_then_moved() {
    require_gpu("graph_device_inputs_in_place_then_moved");
    for private in [true, false] {
        for fx in FIXTURES {
            reset_options();
            let eager = load_fixture(fx, 0);
            let case = &cases(fx, "forward")[0];
            let want = run_host(&eager, case);
            set_str("enable_cuda_graph_for_method", "forward");
            set_bool("cuda_graph_private_memory", private);
            let g = load_fixture(fx, 0);
            reset_options();
            let (_b1, ins1, mut outs1) = device_io(case);
            let (_b2, ins2, mut outs2) = device_io(case);
            let s0 = stats(g.0);
            // Warm-up, capture reading the caller's buffer in place, two replays.
            for it in 0..4 {
                g.execute(&ins1, &mut outs1, DEVICE).unwrap();
                let got = to_host(outs1[0].data, case.outputs[0].bytes.len());
                assert_eq!(
                    got, want[0],
                    "{fx} (private {private}): execute {it}, first buffer"
                );
            }
            let s1 = stats(g.0);
            assert_eq!(delta(&s0, &s1).0, 1, "{fx}: one capture");
            assert_eq!(
                s1.bytes_dtod - s0.bytes_dtod,
                0,
                "{fx}: in-place replays copy nothing"
            );
            // The same shape at another address: captured again over buffers of its own.
            for it in 0..3 {
                g.execute(&ins2, &mut outs2, DEVICE).unwrap();
                let got = to_host(outs2[0].data, case.outputs[0].bytes.len());
                assert_eq!(
                    got, want[0],
                    "{fx} (private {private}): execute {it}, second buffer"
                );
            }
            g.execute(&ins1, &mut outs1, DEVICE).unwrap();
            let got = to_host(outs1[0].data, case.outputs[0].bytes.len());
            assert_eq!(
                got, want[0],
                "{fx} (private {private}): back to the first buffer"
            );
            let s2 = stats(g.0);
            let (cap, rep, fb, waits) = delta(&s0, &s2);
            println!(
                "{fx} (private memory {private}): device inputs in place then moved: captures {cap}, replays {rep}, fallbacks {fb}, waits {waits}, copied {} bytes",
                s2.bytes_dtod - s1.bytes_dtod
            );
            assert_eq!(
                (cap, rep, fb),
                (2, 2 + 2 + 1, 0),
                "{fx}: capture, replays, recapture, replays"
            );
            assert_eq!(
                graph_count(&g),
                1,
                "{fx}: the moved shape replaced its graph"
            );
            assert!(
                s2.bytes_dtod > s1.bytes_dtod,
                "{fx}: moved inputs are copied"
            );
        }
    }
}

fn fake_model() -> Option<Vec<u8>> {
    c_shared_object(
        "fake_aoti",
        include_str!("../../c_tests/fake_aoti.c"),
        "ET_CUDA_FAKE_AOTI",
    )
}

/// Run the fake model (output = input) on `n` float32 values starting at `seed`.
fn fake_run(h: &Handle, n: usize, seed: f32, dtype: &str) -> Result<(), String> {
    let elem = if dtype == "float16" { 2 } else { 4 };
    let src: Vec<u8> = (0..n)
        .flat_map(|i| {
            let v = seed + i as f32;
            if elem == 2 {
                ((v as u16) & 0x3ff).to_le_bytes().to_vec()
            } else {
                v.to_le_bytes().to_vec()
            }
        })
        .collect();
    let mut dst = vec![0u8; n * elem];
    let mut outs = [desc(dtype, &[n as i64], dst.as_mut_ptr().cast(), dst.len())];
    h.execute(
        &[desc(
            dtype,
            &[n as i64],
            src.as_ptr() as *mut c_void,
            src.len(),
        )],
        &mut outs,
        COPY,
    )?;
    assert_eq!(
        src, dst,
        "the fake model copies its input ({n} x {dtype}, seed {seed})"
    );
    Ok(())
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored --test-threads=1 on a GPU machine"]
fn graph_cache_is_keyed_by_shape_bounded_and_falls_back() {
    require_gpu("graph_cache_is_keyed_by_shape_bounded_and_falls_back");
    let Some(so) = fake_model() else {
        panic!("no C compiler to build the fake model");
    };
    reset_options();
    set_str("enable_cuda_graph_for_method", "forward");
    set_int("cuda_graph_cache_size", 2);
    let h = load_with_options(&so, &[0; 16], 0);
    reset_options();
    let s0 = stats(h.0);
    // Shape 16: warm-up, capture, replay with new values each time.
    for k in 0..4 {
        fake_run(&h, 16, k as f32 * 100.0, "float32").unwrap();
    }
    let s1 = stats(h.0);
    let (cap, rep, _, _) = delta(&s0, &s1);
    assert_eq!((cap, rep), (1, 2), "16: warm-up, one capture, two replays");
    // Shapes 32 and 48 get their own graphs; the cache holds two, so 16 (least recently used) goes.
    for n in [32, 32, 48, 48] {
        fake_run(&h, n, n as f32, "float32").unwrap();
    }
    assert_eq!(graph_count(&h), 2, "the cache is bounded");
    let s2 = stats(h.0);
    assert_eq!(delta(&s1, &s2).0, 2, "32 and 48 captured");
    // 16 again: evicted; its kernels are warm, so it is captured again at once.
    fake_run(&h, 16, 7.0, "float32").unwrap();
    let s3 = stats(h.0);
    assert_eq!(delta(&s2, &s3).0, 1, "the evicted shape is captured again");
    fake_run(&h, 48, 9.0, "float32").unwrap();
    let s4 = stats(h.0);
    assert_eq!(delta(&s3, &s4).1, 1, "48 is still cached");
    // A shape whose run cannot be captured (a host read inside): eager, no error, one fallback.
    for k in 0..4 {
        fake_run(&h, 8, k as f32, "float16").unwrap();
    }
    let s5 = stats(h.0);
    let (cap, rep, fb, _) = delta(&s4, &s5);
    println!("fake model: shape-keyed cache ok; uncapturable shape: captures {cap}, replays {rep}, fallbacks {fb}");
    assert_eq!((cap, rep, fb), (0, 0, 1), "one failed capture, then eager");
    // Replay after destroy and reload.
    drop(h);
    set_str("enable_cuda_graph_for_method", "forward");
    let h = load_with_options(&so, &[0; 16], 0);
    reset_options();
    for k in 0..3 {
        fake_run(&h, 16, k as f32, "float32").unwrap();
    }
    let s = stats(h.0);
    assert_eq!(
        (s.graph_captures, s.graph_replays),
        (1, 1),
        "fresh graphs after a reload"
    );
}
