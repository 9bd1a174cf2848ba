//! ELF validation of an untrusted `.so` buffer before `dlopen`: `dlopen` of a
//! truncated file maps pages past its end and dies with SIGBUS instead of
//! failing, so every header and every loadable and dynamic segment must lie
//! inside the bytes, and the class and machine must be this process's.

use crate::error::{Error, Result};

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_GNU_STACK: u32 = 0x6474_e551;
const PF_X: u32 = 1;
const ET_DYN: u16 = 3;

#[cfg(target_arch = "x86_64")]
const HOST_MACHINE: (u16, &str) = (62, "x86-64");
#[cfg(target_arch = "aarch64")]
const HOST_MACHINE: (u16, &str) = (183, "AArch64");
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const HOST_MACHINE: (u16, &str) = (0, "this architecture");

/// What validation learned about the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ElfInfo {
    pub(crate) loadable_segments: usize,
    pub(crate) has_dynamic: bool,
    /// `PT_GNU_STACK` asks for an executable stack (newer C libraries refuse to open such files).
    pub(crate) wants_exec_stack: bool,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid_program(format!(
        "the .so blob is not a loadable ELF: {}",
        msg.into()
    ))
}

fn u16_at(b: &[u8], off: usize) -> Result<u16> {
    b.get(off..off + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| bad(format!("truncated at offset {off}")))
}

fn u32_at(b: &[u8], off: usize) -> Result<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| bad(format!("truncated at offset {off}")))
}

fn u64_at(b: &[u8], off: usize) -> Result<u64> {
    let s = b
        .get(off..off + 8)
        .ok_or_else(|| bad(format!("truncated at offset {off}")))?;
    let mut a = [0u8; 8];
    a.copy_from_slice(s);
    Ok(u64::from_le_bytes(a))
}

fn range_inside(len: usize, off: u64, size: u64, what: &str) -> Result<()> {
    let end = off
        .checked_add(size)
        .ok_or_else(|| bad(format!("{what} range overflows")))?;
    if end > len as u64 {
        return Err(bad(format!(
            "{what} ends at byte {end} but the blob has {len} bytes (truncated?)"
        )));
    }
    Ok(())
}

/// Validate a 64-bit little-endian shared object for this machine.
pub(crate) fn validate(b: &[u8]) -> Result<ElfInfo> {
    if b.is_empty() {
        return Err(bad("the blob is empty"));
    }
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return Err(bad(format!(
            "no ELF header ({} bytes, starts with {:02x?})",
            b.len(),
            &b[..b.len().min(4)]
        )));
    }
    if b[4] != 2 {
        return Err(bad(format!("ELF class {} is not 64-bit", b[4])));
    }
    if b[5] != 1 {
        return Err(bad("not little-endian"));
    }
    let e_type = u16_at(b, 16)?;
    if e_type != ET_DYN {
        return Err(bad(format!("ELF type {e_type} is not a shared object (3)")));
    }
    let machine = u16_at(b, 18)?;
    if machine != HOST_MACHINE.0 {
        return Err(bad(format!(
            "built for ELF machine {machine}, this process is {} ({})",
            HOST_MACHINE.1, HOST_MACHINE.0
        )));
    }
    let phoff = u64_at(b, 32)?;
    let shoff = u64_at(b, 40)?;
    let phentsize = u16_at(b, 54)? as u64;
    let phnum = u16_at(b, 56)? as u64;
    let shentsize = u16_at(b, 58)? as u64;
    let shnum = u16_at(b, 60)? as u64;
    if phnum == 0 || phentsize < 56 {
        return Err(bad(format!("{phnum} program headers of {phentsize} bytes")));
    }
    range_inside(
        b.len(),
        phoff,
        phnum * phentsize,
        "the program header table",
    )?;
    if shnum > 0 {
        range_inside(
            b.len(),
            shoff,
            shnum * shentsize,
            "the section header table",
        )?;
    }
    let mut info = ElfInfo {
        loadable_segments: 0,
        has_dynamic: false,
        wants_exec_stack: false,
    };
    for i in 0..phnum {
        let h = (phoff + i * phentsize) as usize;
        let p_type = u32_at(b, h)?;
        let p_flags = u32_at(b, h + 4)?;
        let p_offset = u64_at(b, h + 8)?;
        let p_filesz = u64_at(b, h + 32)?;
        match p_type {
            PT_LOAD => {
                range_inside(
                    b.len(),
                    p_offset,
                    p_filesz,
                    &format!("loadable segment {i}"),
                )?;
                info.loadable_segments += 1;
            }
            PT_DYNAMIC => {
                range_inside(b.len(), p_offset, p_filesz, "the dynamic segment")?;
                info.has_dynamic = true;
            }
            PT_GNU_STACK => info.wants_exec_stack = p_flags & PF_X != 0,
            _ => {}
        }
    }
    if info.loadable_segments == 0 {
        return Err(bad("no loadable segment"));
    }
    if !info.has_dynamic {
        return Err(bad("no dynamic segment (not a shared library)"));
    }
    Ok(info)
}

/// Test helpers shared with other modules' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A minimal valid-looking ELF64 shared object: header, two program headers.
    pub(crate) fn tiny_so() -> Vec<u8> {
        let mut b = vec![0u8; 64 + 2 * 56 + 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[16..18].copy_from_slice(&ET_DYN.to_le_bytes());
        b[18..20].copy_from_slice(&HOST_MACHINE.0.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        let len = b.len() as u64;
        // PT_LOAD covering the file.
        b[64..68].copy_from_slice(&PT_LOAD.to_le_bytes());
        b[64 + 32..64 + 40].copy_from_slice(&len.to_le_bytes());
        // PT_DYNAMIC at the tail.
        let h = 64 + 56;
        b[h..h + 4].copy_from_slice(&PT_DYNAMIC.to_le_bytes());
        b[h + 8..h + 16].copy_from_slice(&(len - 64).to_le_bytes());
        b[h + 32..h + 40].copy_from_slice(&64u64.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::tiny_so;
    use super::*;

    #[test]
    fn accepts_a_minimal_shared_object() {
        let info = validate(&tiny_so()).unwrap();
        assert_eq!(info.loadable_segments, 1);
        assert!(info.has_dynamic);
    }

    #[test]
    fn rejects_bad_blobs_with_clear_messages() {
        let msg = |b: &[u8]| validate(b).unwrap_err().to_string();
        assert!(msg(&[]).contains("empty"));
        assert!(
            msg(b"hello world, this is not an ELF file at all; padding padding padding!!")
                .contains("no ELF header")
        );
        let so = tiny_so();
        for frac in [10, 50, 90] {
            let cut = &so[..so.len() * frac / 100];
            let m = msg(cut);
            assert!(
                m.contains("truncated") || m.contains("no ELF header"),
                "{frac}%: {m}"
            );
        }
        let mut m32 = so.clone();
        m32[4] = 1;
        assert!(msg(&m32).contains("not 64-bit"));
        let mut arm = so.clone();
        arm[18..20].copy_from_slice(&40u16.to_le_bytes());
        assert!(msg(&arm).contains("ELF machine 40"));
        let mut exe = so.clone();
        exe[16..18].copy_from_slice(&2u16.to_le_bytes());
        assert!(msg(&exe).contains("not a shared object"));
        let mut huge = so.clone();
        huge[64 + 32..64 + 40].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(msg(&huge).contains("overflows") || msg(&huge).contains("truncated"));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for len in [0usize, 1, 63, 64, 65, 200, 4096] {
            for _ in 0..50 {
                let mut b = Vec::with_capacity(len);
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    b.push(x as u8);
                }
                if len >= 4 {
                    b[..4].copy_from_slice(b"\x7fELF");
                }
                let _ = validate(&b);
            }
        }
    }
}
