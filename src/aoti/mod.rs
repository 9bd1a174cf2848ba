//! AOTInductor loading: validate the `.so` bytes ([`elf`]), make the process
//! ready for it and open it from memory, once per distinct `.so`
//! ([`loader`]), and drive its model container ([`container`]).

pub mod container;
pub mod elf;
pub mod loader;

pub use container::Container;
pub use loader::Library;
