#[test]
fn blobs() {
    let Inputs {
        so,
        w,
        random,
        with_magic,
        ..
    } = inputs();
    let mut cases = unreadable_blob_cases(&so, &w, &random, with_magic);
    cases.extend(bad_header_cases(&so, &w));
    run_cases("blobs", cases);
}

/// The `.so` is empty, truncated, random bytes (with or without an ELF magic).
fn unreadable_blob_cases(so: &[u8], w: &[u8], random: &[u8], with_magic: Vec<u8>) -> Vec<Case> {
    vec![
        Case {
            name: "empty .so",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "empty"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "empty"),
            run: init_bytes(vec![], w.to_vec(), None, 0),
        },
        Case {
            name: "truncated to 10%",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
            run: init_bytes(so[..so.len() / 10].to_vec(), w.to_vec(), None, 0),
        },
        Case {
            name: "truncated to 50%",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
            run: init_bytes(so[..so.len() / 2].to_vec(), w.to_vec(), None, 0),
        },
        Case {
            name: "truncated to 90%",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "truncated"),
            run: init_bytes(so[..so.len() * 9 / 10].to_vec(), w.to_vec(), None, 0),
        },
        Case {
            name: "truncated to 63 bytes",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
            run: init_bytes(so[..63].to_vec(), w.to_vec(), None, 0),
        },
        Case {
            name: "random bytes",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "no ELF header"),
            run: init_bytes(random.to_vec(), w.to_vec(), None, 0),
        },
        Case {
            name: "random bytes after an ELF magic",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a loadable ELF"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a loadable ELF"),
            run: init_bytes(with_magic, w.to_vec(), None, 0),
        },
    ]
}

/// The `.so` is a real one with one ELF header field changed, or its key does not match.
fn bad_header_cases(so: &[u8], w: &[u8]) -> Vec<Case> {
    vec![
        Case {
            name: "32-bit ELF",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not 64-bit"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not 64-bit"),
            run: init_bytes(patched(so.to_vec(), 4, &[1]), w.to_vec(), None, 0),
        },
        Case {
            name: "big-endian ELF",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "little-endian"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "little-endian"),
            run: init_bytes(patched(so.to_vec(), 5, &[2]), w.to_vec(), None, 0),
        },
        Case {
            name: "AArch64 ELF",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "ELF machine 183"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "ELF machine 183"),
            run: init_bytes(
                patched(so.to_vec(), 18, &183u16.to_le_bytes()),
                w.to_vec(),
                None,
                0,
            ),
        },
        Case {
            name: "ELF executable, not a shared object",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a shared object"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "not a shared object"),
            run: init_bytes(
                patched(so.to_vec(), 16, &2u16.to_le_bytes()),
                w.to_vec(),
                None,
                0,
            ),
        },
        Case {
            name: "program headers past the end",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "program header table"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "program header table"),
            run: init_bytes(
                patched(so.to_vec(), 32, &(so.len() as u64).to_le_bytes()),
                w.to_vec(),
                None,
                0,
            ),
        },
        Case {
            name: "SHA-256 key mismatch",
            expect_gpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "do not match"),
            expect_cpu: (ET_CUDA_STATUS_INVALID_PROGRAM, "do not match"),
            run: init_bytes(
                so.to_vec(),
                w.to_vec(),
                Some("0000000000000000000000000000000000000000000000000000000000000000_so_blob"),
                0,
            ),
        },
    ]
}
