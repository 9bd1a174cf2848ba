//! Untrusted `.so` bytes through the ELF validation that guards `dlopen`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((loadable, dynamic)) = executorch_cuda::fuzzing::elf_validate(data) {
        assert!(loadable > 0 && dynamic);
    }
});
