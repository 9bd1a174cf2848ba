//! The library's environment switches, in one place and read once per process (the first time
//! any of them is asked for; later changes to the environment are not seen). README.md,
//! "Environment switches", lists them. PDL and the decode attention kernel also have setters
//! for benchmarks (`kernels::set_pdl`, `kernels::attention::set_decode_kernel`).
//!
//! The variables that say where a library is (`ET_CUDA_CUBLASLT`, `ET_CUDA_CUDART`) are read
//! where the library is looked for, once per process too.

use std::ffi::OsString;
use std::sync::OnceLock;

/// `0` turns programmatic dependent launches of the decode kernels off (default on).
pub const PDL: &str = "ET_CUDA_PDL";
/// `0` turns the short-context decode attention kernel off (the benchmark's comparison row).
pub const ATTN_DECODE: &str = "ET_CUDA_ATTN_DECODE";
/// `1` to `8`: the short-context decode attention kernel splits each KV head's keys over that many
/// blocks (a thread block cluster, sm_90) instead of the built-in choice; `1` never splits.
pub const ATTN_SPLITS: &str = "ET_CUDA_ATTN_SPLITS";
/// `1`, `2`, `4` or `8`: the short-context decode attention kernel takes at most that many of a
/// KV head's query rows a block (the rest in further blocks) instead of the built-in choice.
pub const ATTN_ROWS: &str = "ET_CUDA_ATTN_ROWS";
/// A PTX file loaded instead of the int4 kernels' fatbin (`kernels/int4mm.ptx`: JIT tests).
pub const KERNELS_PTX: &str = "ET_CUDA_KERNELS_PTX";
/// A PTX (or fatbin) file loaded instead of the decode kernels' fatbin (A/B runs of kernels).
pub const DECODE_KERNELS_PTX: &str = "ET_CUDA_DECODE_KERNELS_PTX";
/// `1` runs `et_add_rmsnorm_linear` as one fused kernel in decode (default off: its two ops, two
/// kernels, which measured faster on whole Gemma-3 programs).
pub const FUSED_ADD_NORM: &str = "ET_CUDA_FUSED_ADD_NORM";
/// `1`: a packed weights blob is checked against the SHA-256 in its key (default off).
pub const VERIFY_WEIGHTS: &str = "ET_CUDA_VERIFY_WEIGHTS";
/// `1`: a packed weights blob is page-locked while the generated code copies it (default off).
pub const PIN_WEIGHTS_BLOB: &str = "ET_CUDA_PIN_WEIGHTS_BLOB";

/// The switches' values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switches {
    pub pdl: bool,
    pub decode_attention: bool,
    pub fused_add_norm_linear: bool,
    /// The value of [`ATTN_SPLITS`], when it is 1 to 8.
    pub attn_splits: Option<u32>,
    /// The value of [`ATTN_ROWS`], when it is 1, 2, 4 or 8.
    pub attn_rows: Option<u32>,
    /// The path of [`KERNELS_PTX`], when set and not empty.
    pub kernels_ptx: Option<OsString>,
    /// The path of [`DECODE_KERNELS_PTX`], when set and not empty.
    pub decode_kernels_ptx: Option<OsString>,
    pub verify_weights: bool,
    pub pin_weights_blob: bool,
}

impl Switches {
    /// The values `var` gives (the environment's in [`get`]): `0` turns a default-on switch off,
    /// `1` turns a default-off one on, anything else leaves the default.
    pub fn from_lookup(var: impl Fn(&str) -> Option<OsString>) -> Switches {
        let off = |k: &str| var(k).is_some_and(|v| v == "0");
        let on = |k: &str| var(k).is_some_and(|v| v == "1");
        let path = |k: &str| var(k).filter(|v| !v.is_empty());
        let number = |k: &str| var(k).and_then(|v| v.to_str().and_then(|v| v.parse::<u32>().ok()));
        Switches {
            pdl: !off(PDL),
            decode_attention: !off(ATTN_DECODE),
            fused_add_norm_linear: on(FUSED_ADD_NORM),
            attn_splits: number(ATTN_SPLITS).filter(|n| (1..=8).contains(n)),
            attn_rows: number(ATTN_ROWS).filter(|n| [1, 2, 4, 8].contains(n)),
            kernels_ptx: path(KERNELS_PTX),
            decode_kernels_ptx: path(DECODE_KERNELS_PTX),
            verify_weights: on(VERIFY_WEIGHTS),
            pin_weights_blob: on(PIN_WEIGHTS_BLOB),
        }
    }
}

/// A switch that tests and benchmarks can set for the process, over the environment's value:
/// unset ([`Override::unset`]) it gives what the environment says.
#[derive(Debug)]
pub struct Override(std::sync::atomic::AtomicI8);

impl Override {
    /// Not set: [`Override::get`] gives the environment's value.
    pub const fn unset() -> Override {
        Override(std::sync::atomic::AtomicI8::new(-1))
    }

    /// The value set, else `env` (the switch's value in [`get`]).
    pub fn get(&self, env: bool) -> bool {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            -1 => env,
            v => v == 1,
        }
    }

    /// Set the switch (`Some`) or hand it back to the environment (`None`).
    pub fn set(&self, on: Option<bool>) {
        self.0.store(
            on.map_or(-1, i8::from),
            std::sync::atomic::Ordering::Relaxed,
        );
    }
}

/// The process's switches, read from the environment on the first call.
pub fn get() -> &'static Switches {
    static SWITCHES: OnceLock<Switches> = OnceLock::new();
    SWITCHES.get_or_init(|| Switches::from_lookup(|k| std::env::var_os(k)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(pairs: &[(&str, &str)]) -> Switches {
        let m: HashMap<String, OsString> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Switches::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_and_the_values_that_change_them() {
        let d = with(&[]);
        assert!(d.pdl && d.decode_attention && !d.verify_weights && !d.pin_weights_blob);
        assert!(!d.fused_add_norm_linear);
        assert_eq!(d.attn_splits, None);
        for (v, want) in [
            ("1", Some(1)),
            ("8", Some(8)),
            ("0", None),
            ("9", None),
            ("x", None),
        ] {
            assert_eq!(with(&[(ATTN_SPLITS, v)]).attn_splits, want, "{v}");
        }
        assert_eq!(d.attn_rows, None);
        for (v, want) in [("1", Some(1)), ("8", Some(8)), ("3", None), ("0", None)] {
            assert_eq!(with(&[(ATTN_ROWS, v)]).attn_rows, want, "{v}");
        }
        assert_eq!((d.kernels_ptx, d.decode_kernels_ptx), (None, None));
        let s = with(&[
            (PDL, "0"),
            (ATTN_DECODE, "0"),
            (FUSED_ADD_NORM, "1"),
            (VERIFY_WEIGHTS, "1"),
            (PIN_WEIGHTS_BLOB, "1"),
            (DECODE_KERNELS_PTX, "/tmp/k.fatbin"),
            (KERNELS_PTX, ""),
        ]);
        assert!(!s.pdl && !s.decode_attention && s.verify_weights && s.pin_weights_blob);
        assert!(s.fused_add_norm_linear);
        assert_eq!(s.decode_kernels_ptx, Some(OsString::from("/tmp/k.fatbin")));
        assert_eq!(s.kernels_ptx, None, "an empty path is no path");
        // Other spellings keep the defaults.
        let o = with(&[(PDL, "off"), (VERIFY_WEIGHTS, "yes")]);
        assert!(o.pdl && !o.verify_weights);
    }

    #[test]
    fn an_override_wins_until_it_is_unset() {
        let o = Override::unset();
        assert!(o.get(true) && !o.get(false));
        o.set(Some(false));
        assert!(!o.get(true));
        o.set(Some(true));
        assert!(o.get(false));
        o.set(None);
        assert!(o.get(true) && !o.get(false));
    }
}
