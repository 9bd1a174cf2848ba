//! The delegate's processed payload (empty, text keys, binary `ETCUDAFQN3`)
//! through its parser; what parses must keep the parser's promises.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| executorch_cuda::fuzzing::payload(data));
