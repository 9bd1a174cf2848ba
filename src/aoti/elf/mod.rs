//! ELF validation of an untrusted `.so` buffer before `dlopen`: `dlopen` of a
//! truncated file maps pages past its end and dies with SIGBUS instead of
//! failing, so every header and every loadable and dynamic segment must lie
//! inside the bytes, and the class and machine must be this process's.
//! The checks are split by what they read: `segments` (the program headers
//! and where the loadable segments put the file), `dynamic` (the dynamic
//! section and the strings and init code it names), `symbols` (the symbol,
//! hash and version tables) and `relocs` (the relocation tables).

use crate::error::{Error, Result};

mod dynamic;
mod relocs;
mod segments;
mod symbols;
mod table;
#[cfg(test)]
mod tests;
#[cfg(test)]
pub(crate) mod tests_support;

use dynamic::check_dynamic;
use segments::{Image, ProgramHeaders};

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_NOTE: u32 = 4;
const PT_PHDR: u32 = 6;
const PT_TLS: u32 = 7;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PT_GNU_STACK: u32 = 0x6474_e551;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const PT_GNU_PROPERTY: u32 = 0x6474_e553;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
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
    /// The names in the dynamic string table that start with [`COMPANION_PREFIX`]: the export
    /// companion's ops the `.so` imports (the loader checks what they need before `dlopen`).
    pub(crate) companion_imports: Vec<String>,
}

/// The prefix of the export companion's shim names (`aoti_torch_cuda_et_*`).
pub(crate) const COMPANION_PREFIX: &str = "aoti_torch_cuda_et_";

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

// Dynamic section tags.
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_PLTRELSZ: u64 = 2;
const DT_PLTGOT: u64 = 3;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_RELA: u64 = 7;
const DT_RELASZ: u64 = 8;
const DT_RELAENT: u64 = 9;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const DT_INIT: u64 = 12;
const DT_FINI: u64 = 13;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_REL: u64 = 17;
const DT_RELSZ: u64 = 18;
const DT_RELENT: u64 = 19;
const DT_PLTREL: u64 = 20;
const DT_TEXTREL: u64 = 22;
const DT_JMPREL: u64 = 23;
const DT_INIT_ARRAY: u64 = 25;
const DT_FINI_ARRAY: u64 = 26;
const DT_INIT_ARRAYSZ: u64 = 27;
const DT_FINI_ARRAYSZ: u64 = 28;
const DT_RUNPATH: u64 = 29;
const DT_FLAGS: u64 = 30;
const DT_PREINIT_ARRAY: u64 = 32;
const DT_PREINIT_ARRAYSZ: u64 = 33;
const DT_RELRSZ: u64 = 35;
const DT_RELR: u64 = 36;
const DT_RELRENT: u64 = 37;
const DT_GNU_HASH: u64 = 0x6fff_fef5;
const DT_VERSYM: u64 = 0x6fff_fff0;
const DT_RELACOUNT: u64 = 0x6fff_fff9;
const DT_VERDEF: u64 = 0x6fff_fffc;
const DT_VERNEED: u64 = 0x6fff_fffe;
const DT_AUXILIARY: u64 = 0x7fff_fffd;
const DT_FILTER: u64 = 0x7fff_ffff;
const DF_TEXTREL: u64 = 4;

const SYM_SIZE: u64 = 24;
const RELA_SIZE: u64 = 24;
const REL_SIZE: u64 = 16;

#[cfg(target_arch = "aarch64")]
const R_IRELATIVE: u32 = 1032;
#[cfg(not(target_arch = "aarch64"))]
const R_IRELATIVE: u32 = 37;

/// Validate a 64-bit little-endian shared object for this machine: its
/// headers, its segments (in the file and in the address space they are
/// mapped to), and the dynamic section and the tables it names, which the
/// dynamic loader reads (and partly writes) before any code of the file runs.
/// This guards against corrupted and truncated files, not against a hostile
/// one: the file's code runs in this process anyway.
pub(crate) fn validate(b: &[u8]) -> Result<ElfInfo> {
    let table = check_header(b)?;
    let ProgramHeaders {
        info,
        loads,
        located,
        dynamic,
    } = segments::read_program_headers(b, &table)?;
    if info.loadable_segments == 0 {
        return Err(bad("no loadable segment"));
    }
    let Some(dynamic) = dynamic else {
        return Err(bad("no dynamic segment (not a shared library)"));
    };
    let img = Image { b, loads };
    for (p_type, what, seg) in &located {
        img.check_located(*p_type, what, seg)?;
    }
    let dyn_load = img.check_located(PT_DYNAMIC, "the dynamic segment", &dynamic)?;
    if dyn_load.flags & (PF_R | PF_W) != PF_R | PF_W {
        return Err(bad(format!(
            "the dynamic segment (address {:#x}) is in a loadable segment that is not readable and writable (flags {:#x}); the loader writes to it",
            dynamic.vaddr, dyn_load.flags
        )));
    }
    let companion_imports = check_dynamic(&img, &dynamic)?;
    Ok(ElfInfo {
        companion_imports,
        ..info
    })
}

/// Where the program header table is: its file offset, entry size and entry count.
struct PhTable {
    phoff: u64,
    phentsize: u64,
    phnum: u64,
}

/// Check the ELF header (magic, class, byte order, type, machine) and that both header tables lie in the file.
fn check_header(b: &[u8]) -> Result<PhTable> {
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
    Ok(PhTable {
        phoff,
        phentsize,
        phnum,
    })
}
