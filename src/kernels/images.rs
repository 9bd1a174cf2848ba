//! The one table of the library's kernel images: each `kernels/<name>.cu` that
//! `kernels/build.sh` compiles, with what the crate embeds of it (the sm_90 +
//! compute_80 fatbin) and, for the tests, its source, its compute_80 PTX and
//! the hashes build.sh recorded. The loaders take their bytes from here: the
//! per-device [`super::Module`] loads [`INT4`] and [`DECODE`] (each can be
//! replaced by a PTX file for the JIT path, `crate::switches`); [`SAMPLE`] and
//! [`SORT_RAND`] are kept loaded per device by a [`super::Resident`].

/// One compiled source of `kernels/`.
#[derive(Debug)]
pub struct KernelImage {
    /// `kernels/<name>.cu`.
    pub name: &'static str,
    /// sm_90 SASS + compute_80 PTX (compressed), from `kernels/build.sh`.
    pub fatbin: &'static [u8],
    /// The CUDA source (tests: its hash against the record).
    #[cfg(test)]
    pub source: &'static [u8],
    /// The compute_80 PTX, readable (tests; the fatbin carries it too).
    #[cfg(test)]
    pub ptx: &'static [u8],
    /// `kernels/<name>.sha256`: the hashes of the three and the nvcc version.
    #[cfg(test)]
    pub record: &'static str,
}

/// `KernelImage` of `kernels/<name>.*`.
macro_rules! image {
    ($name:literal) => {
        KernelImage {
            name: $name,
            fatbin: include_bytes!(concat!("../../kernels/", $name, ".fatbin")),
            #[cfg(test)]
            source: include_bytes!(concat!("../../kernels/", $name, ".cu")),
            #[cfg(test)]
            ptx: include_bytes!(concat!("../../kernels/", $name, ".ptx")),
            #[cfg(test)]
            record: include_str!(concat!("../../kernels/", $name, ".sha256")),
        }
    };
}

/// int4 weight-only matmul (`aten._weight_int4pack_mm`).
pub static INT4: KernelImage = image!("int4mm");
/// The decode kernels (GEMV, the fused linear, decode attention), entry points `et_*`.
pub static DECODE: KernelImage = image!("decode");
/// The next token on the device (`et_cuda_sample`).
pub static SAMPLE: KernelImage = image!("sample");
/// Stable sort and the Philox generator (`aten.sort.stable`, `aten.rand*`).
pub static SORT_RAND: KernelImage = image!("sort_rand");

/// Every image, in `kernels/build.sh`'s order.
#[cfg(test)]
pub static IMAGES: [&KernelImage; 4] = [&INT4, &SORT_RAND, &DECODE, &SAMPLE];

#[cfg(test)]
impl KernelImage {
    /// The SHA-256 (hex) recorded for `what` ("source", "ptx", "fatbin").
    pub fn recorded(&self, what: &str) -> Option<&'static str> {
        self.record.lines().find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(what)).then(|| it.next()).flatten()
        })
    }

    /// The PTX as text.
    pub fn ptx_text(&self) -> &'static str {
        std::str::from_utf8(self.ptx).expect("PTX is text")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::sha256_hex;

    #[test]
    fn every_committed_image_matches_its_source_and_record() {
        for im in IMAGES {
            let n = im.name;
            assert_eq!(
                Some(sha256_hex(im.source).as_str()),
                im.recorded("source"),
                "kernels/{n}.cu changed since kernels/build.sh last ran: rebuild (kernels/build.sh {n}, nvcc 13.0) and commit"
            );
            for (what, bytes) in [("ptx", im.ptx), ("fatbin", im.fatbin)] {
                assert_eq!(
                    Some(sha256_hex(bytes).as_str()),
                    im.recorded(what),
                    "kernels/{n}.{what} is not the one kernels/build.sh recorded"
                );
            }
            assert!(
                im.record.contains("nvcc 13.0 "),
                "kernels/{n}: the artifacts must come from nvcc 13.0: {}",
                im.record
            );
            let ptx = im.ptx_text();
            assert!(
                ptx.lines().any(|l| l.trim() == ".target sm_80"),
                "{n}: PTX target"
            );
            let version = ptx
                .lines()
                .find_map(|l| l.trim().strip_prefix(".version "))
                .expect(".version line");
            let (major, minor) = version.split_once('.').expect("major.minor");
            let v = (major.parse::<u32>().unwrap(), minor.parse::<u32>().unwrap());
            // CUDA 13.0 writes and JITs PTX ISA 9.0; a newer nvcc would write a newer one.
            assert!(
                v <= (9, 0),
                "{n}: PTX ISA {version} is newer than CUDA 13.0's 9.0"
            );
            // The fatbin magic (0xBA55ED50, little-endian).
            assert_eq!(
                &im.fatbin[..4],
                &[0x50, 0xED, 0x55, 0xBA],
                "{n}: fatbin magic"
            );
        }
    }

    #[test]
    fn the_table_holds_every_source_build_sh_builds() {
        let script = include_str!("../../kernels/build.sh");
        let line = script
            .lines()
            .find_map(|l| l.trim().strip_prefix("SOURCES=("))
            .expect("kernels/build.sh has a SOURCES=(...) line");
        let built: Vec<&str> = line.trim_end_matches(')').split_whitespace().collect();
        let ours: Vec<&str> = IMAGES.iter().map(|im| im.name).collect();
        assert_eq!(
            built, ours,
            "kernels/build.sh's SOURCES and the image table"
        );
    }
}
