type AsyncFn =
    unsafe extern "C" fn(*const c_void, i32, i64, i32, f64, f64, u64, u64, *mut u64) -> i32;
type WaitFn = unsafe extern "C" fn(i32, u64, *mut i64) -> i32;

/// `et_cuda_sample_async` on cuda:0: the ticket.
fn queue(buf: &DevBuf, dtype: i32, vocab: usize, t: f64, top_p: f64, seed: u64, step: u64) -> u64 {
    let f = sym::<AsyncFn>("et_cuda_sample_async");
    let mut ticket = u64::MAX;
    // SAFETY: the buffer holds `vocab` elements of `dtype`; out-pointer to a local.
    let st = unsafe {
        f(
            buf.ptr(),
            dtype,
            vocab as i64,
            0,
            t,
            top_p,
            seed,
            step,
            &mut ticket,
        )
    };
    assert_eq!(
        st,
        ET_CUDA_STATUS_OK,
        "et_cuda_sample_async: {}",
        last_error()
    );
    ticket
}

/// `et_cuda_sample_wait` on cuda:0: the token, or the status and message.
fn wait_token(ticket: u64) -> Result<i64, (i32, String)> {
    let f = sym::<WaitFn>("et_cuda_sample_wait");
    let mut token = i64::MIN;
    // SAFETY: out-pointer to a local.
    match unsafe { f(0, ticket, &mut token) } {
        ET_CUDA_STATUS_OK => Ok(token),
        st => Err((st, last_error())),
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn asynchronous_choices_equal_waiting_ones() {
    require_gpu("asynchronous_choices_equal_waiting_ones");
    // Greedy rows of every kind and sampled ones (with and without top-p), three dtypes: the
    // queued choice is the waited one, ticket by ticket.
    let mut cases = 0;
    for dtype in [F32, BF16, F16] {
        for (name, v) in greedy_rows(40_000) {
            let (bytes, _) = encode(&v, dtype);
            let buf = DevBuf::from_host(&bytes);
            for (t, top_p) in [(0.0, 1.0), (0.8, 1.0), (1.0, 0.9)] {
                for step in 0..3 {
                    let want = device_sample(&buf, dtype, v.len(), t, top_p, 11, step);
                    let ticket = queue(&buf, dtype, v.len(), t, top_p, 11, step);
                    let got = wait_token(ticket).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                    assert_eq!(
                        got, want,
                        "{name} dtype {dtype} T={t} top_p={top_p} step {step}"
                    );
                    cases += 1;
                }
            }
        }
    }
    println!("asynchronous sampling: {cases} choices equal to et_cuda_sample's");

    // Twelve queued before any wait: the last 8 are kept (read in any order, each any number
    // of times), the older ones are gone, a later one was never issued.
    let v = logits(32_000, 3, 3.0);
    let (bytes, _) = encode(&v, BF16);
    let buf = DevBuf::from_host(&bytes);
    let want: Vec<i64> = (0..12)
        .map(|step| device_sample(&buf, BF16, v.len(), 1.0, 1.0, 5, step))
        .collect();
    let tickets: Vec<u64> = (0..12)
        .map(|step| queue(&buf, BF16, v.len(), 1.0, 1.0, 5, step))
        .collect();
    for k in (4..12).rev().chain(4..12) {
        assert_eq!(wait_token(tickets[k]), Ok(want[k]), "ticket {k} of 12");
    }
    for ticket in tickets.iter().take(4) {
        let (st, msg) = wait_token(*ticket).expect_err("an old ticket");
        assert_ne!(st, ET_CUDA_STATUS_OK);
        assert!(msg.contains("is gone"), "{msg}");
    }
    let (_, msg) = wait_token(tickets[11] + 1).expect_err("a ticket not issued");
    assert!(msg.contains("was not issued"), "{msg}");
}

type FedFn = unsafe extern "C" fn(i32, u64, *mut bool) -> i32;
type CopyInFn = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32) -> i32;

/// `et_cuda_sample_fed` on cuda:0.
fn fed(ticket: u64) -> Result<bool, (i32, String)> {
    let f = sym::<FedFn>("et_cuda_sample_fed");
    let mut out = false;
    // SAFETY: out-pointer to a local.
    match unsafe { f(0, ticket, &mut out) } {
        ET_CUDA_STATUS_OK => Ok(out),
        st => Err((st, last_error())),
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --include-ignored on a GPU machine"]
fn the_fed_token_is_reported_taken_once_a_copy_took_it() {
    require_gpu("the_fed_token_is_reported_taken_once_a_copy_took_it");
    let copy_in = sym::<CopyInFn>("et_cuda_copy_host_to_device");
    let v = logits(4_096, 7, 3.0);
    let (bytes, _) = encode(&v, BF16);
    let buf = DevBuf::from_host(&bytes);
    let dst = DevBuf::from_host(&[0u8; 8]);
    let asks = i64::MIN.to_le_bytes();
    // An ordered host-to-device copy of ET_CUDA_SAMPLED_TOKEN (ExecuTorch's `_h2d_copy` of an
    // input planned in device memory) takes the token once: the ticket is fed from then on,
    // the next such copy copies the bytes as they are, and a new call is not fed until a copy
    // takes its token.
    for step in 0..3 {
        let ticket = queue(&buf, BF16, v.len(), 0.0, 1.0, 0, step);
        assert_eq!(fed(ticket), Ok(false), "step {step}: fed before any copy");
        for (n, want_taken) in [(0, true), (1, false)] {
            // SAFETY: dst has 8 device bytes of cuda:0, `asks` 8 host bytes.
            let st = unsafe { copy_in(dst.ptr(), asks.as_ptr().cast(), 8, 0) };
            assert_eq!(st, ET_CUDA_STATUS_OK, "{}", last_error());
            let got = i64::from_le_bytes(to_host(dst.ptr(), 8).try_into().expect("8 bytes"));
            let want = if want_taken {
                wait_token(ticket).expect("token")
            } else {
                i64::MIN
            };
            assert_eq!(got, want, "step {step}, copy {n}");
            assert_eq!(fed(ticket), Ok(true), "step {step}, copy {n}: fed");
        }
    }
    let (_, msg) = fed(u64::MAX - 1).expect_err("a ticket not issued");
    assert!(msg.contains("was not issued"), "{msg}");
}
