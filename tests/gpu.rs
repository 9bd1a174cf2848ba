//! GPU integration tests through the C API: every fixture case with host and
//! device inputs, host-wait counters, and init/execute/destroy cycles.
//! They need a CUDA device: a plain `cargo test` reports them as ignored;
//! on a GPU machine run them with `--include-ignored`.

mod common;
use common::*;
use cudarc::driver::result;
use executorch_cuda::ffi::ET_CUDA_STATUS_OK;
use std::ffi::c_void;

const COPY: i32 = 1;
const DEVICE: i32 = 2;

fn run_case(h: &Handle, case: &Case, device_inputs: bool, placement: i32) -> Vec<Vec<u8>> {
    let mut ins_host: Vec<Vec<u8>> = case.inputs.iter().map(|t| t.bytes.clone()).collect();
    let devs: Vec<DevBuf> = if device_inputs {
        case.inputs
            .iter()
            .map(|t| DevBuf::from_host(&t.bytes))
            .collect()
    } else {
        Vec::new()
    };
    let ins: Vec<_> = case
        .inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = if device_inputs {
                devs[i].ptr()
            } else {
                ins_host[i].as_mut_ptr().cast()
            };
            desc(&t.dtype, &t.sizes, p, t.bytes.len())
        })
        .collect();
    let mut outs_host: Vec<Vec<u8>> = case
        .outputs
        .iter()
        .map(|t| vec![0xAAu8; t.bytes.len()])
        .collect();
    let mut outs: Vec<_> = case
        .outputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            desc(
                &t.dtype,
                &t.sizes,
                outs_host[i].as_mut_ptr().cast(),
                t.bytes.len(),
            )
        })
        .collect();
    h.execute(&ins, &mut outs, placement).unwrap();
    for (o, t) in outs.iter().zip(&case.outputs) {
        assert_eq!(&o.sizes[..o.ndim as usize], &t.sizes[..], "output sizes");
    }
    if placement == DEVICE {
        outs.iter()
            .zip(&case.outputs)
            .map(|(o, t)| to_host(o.data, t.bytes.len()))
            .collect()
    } else {
        std::mem::take(&mut outs_host)
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn fixtures_match_reference_host_and_device_io() {
    require_gpu("fixtures_match_reference_host_and_device_io");
    let mut failures = Vec::new();
    let only = std::env::var("ET_CUDA_ONLY").ok();
    for fx in FIXTURES
        .iter()
        .copied()
        .filter(|f| only.as_deref().is_none_or(|o| o == *f))
    {
        let h = Handle::load(fx, 0, false).unwrap_or_else(|e| panic!("{fx}: {e:?}"));
        for (ci, case) in cases(fx, "forward").iter().enumerate() {
            for (label, dev_in, placement) in [
                ("host-in/host-out", false, COPY),
                ("device-in/host-out", true, COPY),
                ("device-in/device-out", true, DEVICE),
            ] {
                let got = run_case(&h, case, dev_in, placement);
                for (k, (g, want)) in got.iter().zip(&case.outputs).enumerate() {
                    let (err, ok) = compare(&want.dtype, g, &want.bytes);
                    println!(
                        "{fx} forward case{ci} out{k} [{label}]: max_abs_err={err:.3e} {}",
                        if ok { "PASS" } else { "FAIL" }
                    );
                    if !ok {
                        failures.push(format!("{fx} case{ci} out{k} {label}"));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "failed: {failures:?}");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn host_waits_zero_on_device_path_one_on_host_outputs() {
    require_gpu("host_waits_zero_on_device_path_one_on_host_outputs");
    for fx in FIXTURES {
        let h = Handle::load(fx, 0, false).unwrap();
        let case = &cases(fx, "forward")[0];
        // Warm-up (first run may fold constants and load kernels).
        run_case(&h, case, true, DEVICE);
        let (_dev_in, ins, mut outs) = device_io(case);
        let before = stats(h.0);
        for _ in 0..20 {
            h.execute(&ins, &mut outs, DEVICE).unwrap();
        }
        let mid = stats(h.0);
        println!("{fx}: 20 device-resident executes: host_waits +{}, driver_allocs +{}, pool_allocs +{}, htod +{} dtoh +{}", mid.host_waits - before.host_waits, mid.driver_allocs - before.driver_allocs, mid.pool_allocs - before.pool_allocs, mid.bytes_htod - before.bytes_htod, mid.bytes_dtoh - before.bytes_dtoh);
        assert_eq!(
            mid.host_waits, before.host_waits,
            "{fx}: device-resident executes waited"
        );
        assert_eq!(mid.bytes_dtoh, before.bytes_dtoh);
        let mut host_out: Vec<Vec<u8>> = case
            .outputs
            .iter()
            .map(|t| vec![0u8; t.bytes.len()])
            .collect();
        let mut outs: Vec<_> = case
            .outputs
            .iter()
            .zip(host_out.iter_mut())
            .map(|(t, b)| desc(&t.dtype, &t.sizes, b.as_mut_ptr().cast(), b.len()))
            .collect();
        let mut host_in: Vec<Vec<u8>> = case.inputs.iter().map(|t| t.bytes.clone()).collect();
        let hins: Vec<_> = case
            .inputs
            .iter()
            .zip(host_in.iter_mut())
            .map(|(t, b)| desc(&t.dtype, &t.sizes, b.as_mut_ptr().cast(), b.len()))
            .collect();
        h.execute(&hins, &mut outs, COPY).unwrap(); // grow staging once
        let a = stats(h.0);
        for _ in 0..20 {
            h.execute(&hins, &mut outs, COPY).unwrap();
        }
        let b = stats(h.0);
        println!(
            "{fx}: 20 host-IO executes: host_waits +{}, driver_allocs +{}",
            b.host_waits - a.host_waits,
            b.driver_allocs - a.driver_allocs
        );
        assert_eq!(
            b.host_waits - a.host_waits,
            20,
            "{fx}: expected exactly one wait per host-output execute"
        );
        assert_eq!(
            b.driver_allocs, a.driver_allocs,
            "{fx}: staging buffers must be reused"
        );
        let (err, ok) = compare(&case.outputs[0].dtype, &host_out[0], &case.outputs[0].bytes);
        assert!(ok, "{fx}: max_abs_err {err}");
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn init_execute_destroy_cycles() {
    require_gpu("init_execute_destroy_cycles");
    let cycles: usize = std::env::var("ET_CUDA_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let fx = "mlp_f32";
    let case = &cases(fx, "forward")[0];
    let base = stats(std::ptr::null());
    let mut first_free = 0usize;
    let mut first_rss = 0u64;
    for c in 0..cycles {
        let h = Handle::load(fx, 0, false).unwrap();
        let out = run_case(&h, case, false, COPY);
        assert!(compare("float32", &out[0], &case.outputs[0].bytes).1);
        drop(h);
        let s = stats(std::ptr::null());
        let (free, total) =
            executorch_cuda::mem_info(executorch_cuda::Device::cuda(0).unwrap()).unwrap();
        let rss = rss_bytes();
        // Drift is measured from a warm cycle on (first-use costs of the process excluded).
        let warm = (cycles / 10).clamp(1, 10);
        if c <= warm {
            first_free = free;
            first_rss = rss;
        }
        if c < 3 || c % (cycles / 20).max(1) == 0 || c + 1 == cycles {
            println!(
                "cycle {c:5}: own live allocs {} ({} bytes), generated-code modules {}, driver free {} MiB of {} MiB (drift {:+} KiB), RSS {} MiB (drift {:+} KiB)",
                s.live_allocs - base.live_allocs,
                s.live_bytes - base.live_bytes,
                s.generated_modules,
                free >> 20,
                total >> 20,
                (free as i64 - first_free as i64) / 1024,
                rss >> 20,
                (rss as i64 - first_rss as i64) / 1024
            );
        }
        assert_eq!(
            s.live_allocs, base.live_allocs,
            "cycle {c}: library allocations left after destroy"
        );
        assert_eq!(
            s.generated_modules, 0,
            "cycle {c}: modules of the generated code left after destroy"
        );
        if c + 1 == cycles && cycles > warm + 1 {
            let n = (cycles - 1 - warm) as f64;
            println!(
                "summary: {cycles} cycles of {fx}, own live allocs 0 and generated-code modules 0 after every destroy; per cycle from cycle {warm}: driver free memory {:+.2} KiB, RSS {:+.2} KiB",
                (free as f64 - first_free as f64) / 1024.0 / n,
                (rss as f64 - first_rss as f64) / 1024.0 / n
            );
        }
    }
}

fn launch_spin(stream: *mut c_void, ns: u64) {
    use cudarc::driver::sys;
    // SAFETY: the device's primary context (the one the library uses), retained for the process.
    unsafe {
        let dev = result::device::get(0).unwrap();
        let ctx = result::primary_ctx::retain(dev).unwrap();
        result::ctx::set_current(ctx).unwrap();
    }
    static FUNC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let f = *FUNC.get_or_init(|| {
        let ptx = std::ffi::CString::new(SPIN_PTX).unwrap();
        // SAFETY: NUL-terminated PTX image; module and function kept for the process.
        unsafe {
            let m = result::module::load_data(ptx.as_ptr().cast()).unwrap();
            let name = std::ffi::CString::new("spin").unwrap();
            result::module::get_function(m, name).unwrap() as usize
        }
    });
    let mut arg = ns;
    let mut params = [(&mut arg as *mut u64).cast::<c_void>()];
    // SAFETY: a 1x1 launch of a kernel taking one u64, on a live stream.
    let r = unsafe {
        sys::cuLaunchKernel(
            f as sys::CUfunction,
            1,
            1,
            1,
            1,
            1,
            1,
            0,
            stream as sys::CUstream,
            params.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, sys::CUresult::CUDA_SUCCESS);
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn execute_does_not_wait_for_queued_gpu_work() {
    require_gpu("execute_does_not_wait_for_queued_gpu_work");
    let spin_ns: u64 = 50_000_000;
    {
        let fx = "mlp_f32";
        let h = Handle::load(fx, 0, false).unwrap();
        let case = &cases(fx, "forward")[0];
        run_case(&h, case, true, DEVICE); // warm-up
        let (_dev_in, ins, mut outs) = device_io(case);
        // SAFETY: live handle.
        assert_eq!(unsafe { (api().synchronize)(h.0) }, ET_CUDA_STATUS_OK);
        launch_spin(h.stream(), spin_ns);
        let t0 = std::time::Instant::now();
        h.execute(&ins, &mut outs, DEVICE).unwrap();
        h.execute(&ins, &mut outs, DEVICE).unwrap();
        let host = t0.elapsed();
        // SAFETY: live handle.
        assert_eq!(unsafe { (api().synchronize)(h.0) }, ET_CUDA_STATUS_OK);
        let total = t0.elapsed();
        println!("2 device-resident executes behind a {} ms kernel returned after {:.3} ms (stream drained after {:.3} ms)", spin_ns / 1_000_000, host.as_secs_f64() * 1e3, total.as_secs_f64() * 1e3);
        assert!(
            host.as_nanos() < (spin_ns / 5) as u128,
            "execute waited for queued GPU work: {host:?}"
        );
        assert!(total.as_nanos() >= spin_ns as u128);
    }
}

fn scaled_input(case: &Case, k: usize) -> Vec<u8> {
    // Different inputs per thread: scale the float32 input by (1 + k/8).
    case.inputs[0]
        .bytes
        .chunks_exact(4)
        .flat_map(|c| {
            (f32::from_le_bytes([c[0], c[1], c[2], c[3]]) * (1.0 + k as f32 / 8.0)).to_le_bytes()
        })
        .collect()
}

fn run_bytes(h: &Handle, case: &Case, input: &mut [u8]) -> Vec<u8> {
    let t = &case.inputs[0];
    let o = &case.outputs[0];
    let ins = [desc(
        &t.dtype,
        &t.sizes,
        input.as_mut_ptr().cast(),
        input.len(),
    )];
    let mut out = vec![0u8; o.bytes.len()];
    let mut outs = [desc(&o.dtype, &o.sizes, out.as_mut_ptr().cast(), out.len())];
    h.execute(&ins, &mut outs, COPY).unwrap();
    out
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn threads_with_own_handles_match_single_threaded_bit_for_bit() {
    require_gpu("threads_with_own_handles_match_single_threaded_bit_for_bit");
    let fx = "mlp_f32";
    let case = cases(fx, "forward")[0].clone();
    let reference: Vec<Vec<u8>> = {
        let h = Handle::load(fx, 0, false).unwrap();
        (0..8)
            .map(|k| run_bytes(&h, &case, &mut scaled_input(&case, k)))
            .collect()
    };
    for shared in [false, true] {
        let t0 = std::time::Instant::now();
        std::thread::scope(|sc| {
            for (k, want) in reference.iter().enumerate() {
                let case = &case;
                sc.spawn(move || {
                    let h = Handle::load(fx, 0, shared).unwrap();
                    let mut inp = scaled_input(case, k);
                    for it in 0..200 {
                        assert_eq!(
                            &run_bytes(&h, case, &mut inp),
                            want,
                            "thread {k} iteration {it} shared={shared}"
                        );
                    }
                });
            }
        });
        println!(
            "8 threads x 200 executes (shared stream: {shared}): all outputs bit-exact, {:.1} ms",
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    // Two threads on one handle: serialized by the handle's lock.
    let h = Handle::load(fx, 0, false).unwrap();
    let hp = h.0 as usize;
    std::thread::scope(|sc| {
        for (k, want) in reference.iter().enumerate().take(2) {
            let case = &case;
            sc.spawn(move || {
                let h = std::mem::ManuallyDrop::new(Handle(hp as *mut c_void));
                let mut inp = scaled_input(case, k);
                for _ in 0..200 {
                    assert_eq!(&run_bytes(&h, case, &mut inp), want);
                }
            });
        }
    });
    println!("2 threads x 200 executes on one handle: bit-exact");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn two_programs_loaded_at_once_and_one_destroyed() {
    require_gpu("two_programs_loaded_at_once_and_one_destroyed");
    let a = Handle::load("mlp_f32", 0, false).unwrap();
    let b = Handle::load("conv_f32", 0, false).unwrap();
    let c = Handle::load("attn_bf16", 0, false).unwrap();
    for (h, fx) in [(&a, "mlp_f32"), (&b, "conv_f32"), (&c, "attn_bf16")] {
        let case = &cases(fx, "forward")[0];
        let out = run_case(h, case, false, COPY);
        assert!(
            compare(&case.outputs[0].dtype, &out[0], &case.outputs[0].bytes).1,
            "{fx}"
        );
    }
    // Destroy two programs while the third keeps executing on another thread.
    let case = cases("mlp_f32", "forward")[0].clone();
    let ap = a.0 as usize;
    std::thread::scope(|sc| {
        let t = sc.spawn(|| {
            let a = std::mem::ManuallyDrop::new(Handle(ap as *mut c_void));
            for _ in 0..200 {
                let out = run_case(&a, &case, false, COPY);
                assert!(
                    compare("float32", &out[0], &case.outputs[0].bytes).1,
                    "mlp while the others are destroyed"
                );
            }
        });
        drop(b);
        drop(c);
        t.join().unwrap();
    });
    println!("three programs loaded at once; destroying two while the third executed 200 times left it correct");
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn fake_model_cycles_keep_rss_and_device_memory_flat() {
    require_gpu("fake_model_cycles_keep_rss_and_device_memory_flat");
    let Some(so) = c_shared_object(
        "fake_aoti",
        include_str!("../c_tests/fake_aoti.c"),
        "ET_CUDA_FAKE_AOTI",
    ) else {
        println!("SKIPPED fake_model_cycles: no C compiler to build the fake model");
        return;
    };
    // The fake model loads no CUDA modules: whatever drifts here is the library's own.
    let cycles = 1000;
    let base = stats(std::ptr::null());
    let (mut rss0, mut free0) = (0u64, 0usize);
    for c in 0..cycles {
        let h = Handle::from_bytes(&so, &[0; 16], None, 0, false).unwrap();
        let src: Vec<u8> = (0..64).collect();
        let mut dst = vec![0u8; 64];
        let mut outs = [desc("float32", &[16], dst.as_mut_ptr().cast(), 64)];
        h.execute(
            &[desc("float32", &[16], src.as_ptr() as *mut c_void, 64)],
            &mut outs,
            COPY,
        )
        .unwrap();
        assert_eq!(src, dst);
        drop(h);
        let s = stats(std::ptr::null());
        assert_eq!(s.live_allocs, base.live_allocs, "cycle {c}");
        if c == 99 {
            rss0 = rss_bytes();
            free0 = executorch_cuda::mem_info(executorch_cuda::Device::cuda(0).unwrap())
                .unwrap()
                .0;
        }
    }
    let rss1 = rss_bytes();
    let free1 = executorch_cuda::mem_info(executorch_cuda::Device::cuda(0).unwrap())
        .unwrap()
        .0;
    println!(
        "fake model, {cycles} init/execute/destroy cycles: own live allocs back to {} each cycle; from cycle 100 to {cycles}: RSS {:+} KiB, driver free memory {:+} KiB",
        base.live_allocs,
        (rss1 as i64 - rss0 as i64) / 1024,
        (free1 as i64 - free0 as i64) / 1024
    );
}
