//! The per-FQN matcher with the upload's view check: every constant the
//! matcher accepts must be a view the upload accepts.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    executorch_cuda::fuzzing::per_fqn_match(data);
});
