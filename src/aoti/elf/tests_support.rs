//! Test helpers shared with other modules' tests.

use super::*;

/// A minimal valid ELF64 shared object: header, a loadable segment holding
/// the whole file, a dynamic section naming a library that does not exist
/// (so `dlopen` fails cleanly) and its string table.
pub(crate) fn tiny_so() -> Vec<u8> {
    tiny_so_with_strings(b"")
}

/// [`tiny_so`] with `extra` (NUL-terminated strings) appended to its string table.
pub(crate) fn tiny_so_with_strings(extra: &[u8]) -> Vec<u8> {
    const DYN: usize = 64 + 2 * 56;
    const STR: usize = DYN + 4 * 16;
    let names = [b"\0libet_cuda_no_such_library.so\0".as_slice(), extra].concat();
    let mut b = vec![0u8; STR + names.len()];
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
    let mut put = |at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    // PT_LOAD covering the file, readable and writable, at address 0.
    put(64, PT_LOAD as u64 | ((PF_R | PF_W) as u64) << 32);
    put(64 + 32, len);
    put(64 + 40, len);
    put(64 + 48, 0x1000);
    // PT_DYNAMIC: at the same offset and address.
    let h = 64 + 56;
    put(h, PT_DYNAMIC as u64 | ((PF_R | PF_W) as u64) << 32);
    put(h + 8, DYN as u64);
    put(h + 16, DYN as u64);
    put(h + 32, 64);
    put(h + 40, 64);
    put(h + 48, 8);
    // DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_NULL.
    for (k, (tag, val)) in [
        (DT_NEEDED, 1),
        (DT_STRTAB, STR as u64),
        (DT_STRSZ, names.len() as u64),
    ]
    .into_iter()
    .enumerate()
    {
        put(DYN + 16 * k, tag);
        put(DYN + 16 * k + 8, val);
    }
    b[STR..].copy_from_slice(&names);
    b
}
