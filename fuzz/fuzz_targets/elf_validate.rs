//! Untrusted `.so` bytes through the ELF validation that guards `dlopen`.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(info) = executorch_cuda::aoti::elf::validate(data) {
        assert!(info.loadable_segments > 0 && info.has_dynamic);
    }
});
