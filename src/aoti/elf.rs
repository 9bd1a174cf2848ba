//! ELF validation of an untrusted `.so` buffer before `dlopen`: `dlopen` of a
//! truncated file maps pages past its end and dies with SIGBUS instead of
//! failing, so every header and every loadable and dynamic segment must lie
//! inside the bytes, and the class and machine must be this process's.

use crate::error::{Error, Result};

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

/// Validate a 64-bit little-endian shared object for this machine: its
/// headers, its segments (in the file and in the address space they are
/// mapped to), and the dynamic section and the tables it names, which the
/// dynamic loader reads (and partly writes) before any code of the file runs.
/// This guards against corrupted and truncated files, not against a hostile
/// one: the file's code runs in this process anyway.
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
    let mut loads: Vec<Seg> = Vec::new();
    // Segments the loader or the unwinder read through their addresses.
    let mut located: Vec<(u32, String, Seg)> = Vec::new();
    let mut dynamic: Option<Seg> = None;
    for i in 0..phnum {
        let h = (phoff + i * phentsize) as usize;
        let p_type = u32_at(b, h)?;
        let p_flags = u32_at(b, h + 4)?;
        let seg = Seg {
            offset: u64_at(b, h + 8)?,
            vaddr: u64_at(b, h + 16)?,
            filesz: u64_at(b, h + 32)?,
            memsz: u64_at(b, h + 40)?,
            align: u64_at(b, h + 48)?,
            flags: p_flags,
        };
        match p_type {
            PT_LOAD => {
                let what = format!("loadable segment {i}");
                range_inside(b.len(), seg.offset, seg.filesz, &what)?;
                check_load(&seg, &what)?;
                if let Some(prev) = loads.last() {
                    if seg.vaddr < prev.vaddr + prev.memsz {
                        return Err(bad(format!(
                            "{what} at address {:#x} overlaps or precedes the one before it (ending at {:#x}); loadable segments must ascend",
                            seg.vaddr,
                            prev.vaddr + prev.memsz
                        )));
                    }
                }
                loads.push(seg);
                info.loadable_segments += 1;
            }
            PT_DYNAMIC => {
                range_inside(b.len(), seg.offset, seg.filesz, "the dynamic segment")?;
                if dynamic.is_some() {
                    return Err(bad("more than one dynamic segment"));
                }
                dynamic = Some(seg);
                info.has_dynamic = true;
            }
            PT_GNU_STACK => info.wants_exec_stack = p_flags & PF_X != 0,
            PT_PHDR | PT_NOTE | PT_TLS | PT_GNU_EH_FRAME | PT_GNU_RELRO | PT_GNU_PROPERTY => {
                let name = match p_type {
                    PT_PHDR => "PHDR",
                    PT_NOTE => "note",
                    PT_TLS => "TLS",
                    PT_GNU_EH_FRAME => "GNU_EH_FRAME",
                    PT_GNU_RELRO => "GNU_RELRO",
                    _ => "GNU_PROPERTY",
                };
                let what = format!("the {name} segment (program header {i})");
                range_inside(b.len(), seg.offset, seg.filesz, &what)?;
                located.push((p_type, what, seg));
            }
            _ => {}
        }
    }
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
    check_dynamic(&img, &dynamic)?;
    Ok(info)
}

/// A program header's fields.
#[derive(Debug, Clone, Copy)]
struct Seg {
    offset: u64,
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    align: u64,
    flags: u32,
}

impl Seg {
    fn contains(&self, addr: u64, len: u64, size: u64) -> bool {
        addr >= self.vaddr
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= self.vaddr + size)
    }
}

/// Highest address a segment may reach (the user half of a 48-bit address space).
const ADDRESS_LIMIT: u64 = 1 << 47;

fn check_load(s: &Seg, what: &str) -> Result<()> {
    if s.filesz > s.memsz {
        return Err(bad(format!(
            "{what} has {} bytes in the file but only {} in memory",
            s.filesz, s.memsz
        )));
    }
    if s.vaddr
        .checked_add(s.memsz)
        .is_none_or(|e| e > ADDRESS_LIMIT)
    {
        return Err(bad(format!(
            "{what} at address {:#x} with {} bytes lies past the address space",
            s.vaddr, s.memsz
        )));
    }
    if s.align > 1 {
        if !s.align.is_power_of_two() {
            return Err(bad(format!(
                "{what} has alignment {:#x}, not a power of two",
                s.align
            )));
        }
        if s.vaddr % s.align != s.offset % s.align {
            return Err(bad(format!(
                "{what}: address {:#x} and file offset {:#x} disagree modulo its alignment {:#x}",
                s.vaddr, s.offset, s.align
            )));
        }
    }
    Ok(())
}

/// The file's bytes and where its loadable segments put them.
struct Image<'a> {
    b: &'a [u8],
    loads: Vec<Seg>,
}

impl Image<'_> {
    /// The loadable segment whose memory holds `len` bytes at `addr`.
    fn mapped(&self, addr: u64, len: u64) -> Option<&Seg> {
        self.loads.iter().find(|l| l.contains(addr, len, l.memsz))
    }

    /// The file offset of `len` bytes at `addr`, when a loadable segment maps them from the file.
    fn file_bytes(&self, addr: u64, len: u64, what: &str) -> Result<usize> {
        self.loads
            .iter()
            .find(|l| l.contains(addr, len, l.filesz))
            .map(|l| (l.offset + (addr - l.vaddr)) as usize)
            .ok_or_else(|| {
                bad(format!(
                    "{what} (address {addr:#x}, {len} bytes) is not inside the file bytes of a loadable segment"
                ))
            })
    }

    fn need_mapped(&self, addr: u64, len: u64, what: &str) -> Result<&Seg> {
        self.mapped(addr, len).ok_or_else(|| {
            bad(format!(
                "{what} (address {addr:#x}, {len} bytes) is not inside a loadable segment"
            ))
        })
    }

    /// A table the loader writes to (relocation targets, the GOT's reserved words).
    fn need_writable(&self, addr: u64, len: u64, textrel: bool, what: &str) -> Result<()> {
        let l = self.need_mapped(addr, len, what)?;
        if l.flags & PF_W == 0 && !textrel {
            return Err(bad(format!(
                "{what} (address {addr:#x}) is in a read-only segment and the file declares no text relocations"
            )));
        }
        Ok(())
    }

    /// A segment read through its address must lie inside one loadable segment,
    /// at the same place in the file and in memory. Returns that loadable segment.
    fn check_located(&self, p_type: u32, what: &str, s: &Seg) -> Result<Seg> {
        if s.filesz > s.memsz {
            return Err(bad(format!(
                "{what} has {} bytes in the file but only {} in memory",
                s.filesz, s.memsz
            )));
        }
        let holder = self.loads.iter().find(|l| {
            if p_type == PT_GNU_RELRO {
                // The loader protects whole pages: RELRO may end on the page boundary past its segment.
                let page = l.align.clamp(4096, 1 << 16);
                let end = (l.vaddr + l.memsz).div_ceil(page).saturating_mul(page);
                s.vaddr >= l.vaddr && s.vaddr.checked_add(s.memsz).is_some_and(|e| e <= end)
            } else {
                l.contains(s.vaddr, s.memsz, l.memsz)
            }
        });
        let Some(l) = holder else {
            return Err(bad(format!(
                "{what} (address {:#x}, {} bytes) is not inside a loadable segment",
                s.vaddr, s.memsz
            )));
        };
        if s.filesz > 0
            && p_type != PT_GNU_RELRO
            && (!l.contains(s.vaddr, s.filesz, l.filesz)
                || s.offset.checked_sub(l.offset) != Some(s.vaddr - l.vaddr))
        {
            return Err(bad(format!(
                "{what} is at file offset {:#x} and address {:#x}, which its loadable segment (offset {:#x}, address {:#x}, {} file bytes) does not map onto each other",
                s.offset, s.vaddr, l.offset, l.vaddr, l.filesz
            )));
        }
        Ok(*l)
    }

    fn u32_at(&self, addr: u64, what: &str) -> Result<u32> {
        let o = self.file_bytes(addr, 4, what)?;
        u32_at(self.b, o)
    }

    fn u64_at(&self, addr: u64, what: &str) -> Result<u64> {
        let o = self.file_bytes(addr, 8, what)?;
        u64_at(self.b, o)
    }
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

/// The values of the dynamic section (the last entry of a tag wins, as in the loader).
struct Dyn {
    one: std::collections::BTreeMap<u64, u64>,
    strings: Vec<(u64, u64)>,
}

impl Dyn {
    fn get(&self, tag: u64) -> Option<u64> {
        self.one.get(&tag).copied()
    }
}

fn tag_name(tag: u64) -> &'static str {
    match tag {
        DT_NEEDED => "DT_NEEDED",
        DT_SONAME => "DT_SONAME",
        DT_RPATH => "DT_RPATH",
        DT_RUNPATH => "DT_RUNPATH",
        DT_AUXILIARY => "DT_AUXILIARY",
        DT_FILTER => "DT_FILTER",
        _ => "a string entry",
    }
}

/// Walk the dynamic section and check every table it names.
fn check_dynamic(img: &Image<'_>, d: &Seg) -> Result<()> {
    let b = img.b;
    let n = d.filesz / 16;
    let mut dy = Dyn {
        one: Default::default(),
        strings: Vec::new(),
    };
    let mut terminated = false;
    for i in 0..n {
        let at = (d.offset + i * 16) as usize;
        let tag = u64_at(b, at)?;
        let val = u64_at(b, at + 8)?;
        match tag {
            DT_NULL => {
                terminated = true;
                break;
            }
            DT_NEEDED | DT_SONAME | DT_RPATH | DT_RUNPATH | DT_AUXILIARY | DT_FILTER => {
                dy.strings.push((tag, val))
            }
            _ => {
                dy.one.insert(tag, val);
            }
        }
    }
    if !terminated {
        return Err(bad(format!(
            "the dynamic section's {n} entries have no DT_NULL terminator"
        )));
    }
    let textrel = dy.get(DT_TEXTREL).is_some() || dy.get(DT_FLAGS).unwrap_or(0) & DF_TEXTREL != 0;

    // The string table, and every string the loader reads by offset.
    let strtab = match (dy.get(DT_STRTAB), dy.get(DT_STRSZ)) {
        (Some(addr), Some(size)) => {
            let o = img.file_bytes(addr, size, &format!("DT_STRTAB with DT_STRSZ {size}"))?;
            Some(&b[o..o + size as usize])
        }
        (Some(_), None) => return Err(bad("DT_STRTAB without DT_STRSZ")),
        (None, _) => None,
    };
    let string_at = |off: u64, what: &str| -> Result<()> {
        let Some(t) = strtab else {
            return Err(bad(format!("{what} without a DT_STRTAB")));
        };
        let ok = usize::try_from(off)
            .ok()
            .and_then(|o| t.get(o..))
            .is_some_and(|s| s.contains(&0));
        if !ok {
            return Err(bad(format!(
                "{what} string at offset {off} does not end inside DT_STRTAB (DT_STRSZ {})",
                t.len()
            )));
        }
        Ok(())
    };
    for &(tag, off) in &dy.strings {
        string_at(off, tag_name(tag))?;
    }
    if let Some(t) = strtab {
        // Symbol names are read up to their NUL: the table must end with one.
        if t.last() != Some(&0) {
            return Err(bad("DT_STRTAB does not end with a NUL"));
        }
    }

    // Fixed entry sizes (the loader asserts them, which aborts the process).
    for (tag, want, name) in [
        (DT_SYMENT, SYM_SIZE, "DT_SYMENT"),
        (DT_RELAENT, RELA_SIZE, "DT_RELAENT"),
        (DT_RELENT, REL_SIZE, "DT_RELENT"),
        (DT_RELRENT, 8, "DT_RELRENT"),
    ] {
        if let Some(v) = dy.get(tag) {
            if v != want {
                return Err(bad(format!("{name} is {v}, not {want}")));
            }
        }
    }
    for (table, ent, name) in [
        (DT_RELA, DT_RELAENT, "DT_RELA without DT_RELAENT"),
        (DT_REL, DT_RELENT, "DT_REL without DT_RELENT"),
        (DT_RELR, DT_RELRENT, "DT_RELR without DT_RELRENT"),
    ] {
        if dy.get(table).is_some() && dy.get(ent).is_none() {
            return Err(bad(name));
        }
    }
    if let Some(v) = dy.get(DT_PLTREL) {
        if v != DT_RELA {
            return Err(bad(format!("DT_PLTREL is {v}, not DT_RELA (7)")));
        }
    }

    // Symbols: DT_HASH gives their count, DT_GNU_HASH a lower bound (symbols
    // outside its chains, undefined ones, may follow).
    let mut exact: Option<u64> = None;
    let mut least = 0u64;
    if let Some(h) = dy.get(DT_HASH) {
        let nbucket = img.u32_at(h, "DT_HASH")? as u64;
        let nchain = img.u32_at(h + 4, "DT_HASH")? as u64;
        if nbucket == 0 {
            return Err(bad("DT_HASH has no buckets"));
        }
        let o = img.file_bytes(
            h,
            (2 + nbucket + nchain) * 4,
            "DT_HASH's buckets and chains",
        )?;
        for k in 0..nbucket + nchain {
            let v = u32_at(b, o + 8 + 4 * k as usize)? as u64;
            if v != 0 && v >= nchain {
                return Err(bad(format!("DT_HASH names symbol {v} of {nchain}")));
            }
        }
        exact = Some(nchain);
        least = nchain;
    }
    if let Some(g) = dy.get(DT_GNU_HASH) {
        least = least.max(gnu_hash_symbols(img, g)?);
    }
    let mut max_version = None;
    if let Some(v) = dy.get(DT_VERNEED) {
        max_version = Some(walk_verneed(img, v, &string_at)?.max(1));
    }
    if let Some(v) = dy.get(DT_VERDEF) {
        max_version = Some(walk_verdef(img, v, &string_at)?.max(max_version.unwrap_or(1)));
    }
    let syms = match dy.get(DT_SYMTAB) {
        Some(at) => Some(Symbols {
            at,
            exact,
            strsz: strtab.map(<[u8]>::len),
            versym: dy.get(DT_VERSYM),
            max_version,
        }),
        None if least > 0 || dy.get(DT_RELA).is_some() || dy.get(DT_JMPREL).is_some() => {
            return Err(bad("hash tables or relocations without a DT_SYMTAB"))
        }
        None => None,
    };
    if let Some(syms) = &syms {
        syms.check_range(img, least.max(1))?;
    }

    // Relocations: their tables, the symbols they name, and the places they write.
    if let Some(r) = dy.get(DT_RELA) {
        let size = dy
            .get(DT_RELASZ)
            .ok_or_else(|| bad("DT_RELA without DT_RELASZ"))?;
        check_relocs(
            img,
            r,
            size,
            "DT_RELA with DT_RELASZ",
            syms.as_ref(),
            textrel,
        )?;
        if let Some(c) = dy.get(DT_RELACOUNT) {
            if c > size / RELA_SIZE {
                return Err(bad(format!(
                    "DT_RELACOUNT {c} is more than the {} relocations of DT_RELASZ",
                    size / RELA_SIZE
                )));
            }
        }
    }
    if let Some(r) = dy.get(DT_JMPREL) {
        let size = dy
            .get(DT_PLTRELSZ)
            .ok_or_else(|| bad("DT_JMPREL without DT_PLTRELSZ"))?;
        check_relocs(
            img,
            r,
            size,
            "DT_JMPREL with DT_PLTRELSZ",
            syms.as_ref(),
            textrel,
        )?;
        let got = dy
            .get(DT_PLTGOT)
            .ok_or_else(|| bad("DT_JMPREL without DT_PLTGOT"))?;
        // The loader stores itself in the GOT's reserved words 1 and 2 for lazy binding.
        img.need_writable(got, 24, textrel, "DT_PLTGOT")?;
    }
    if let Some(r) = dy.get(DT_REL) {
        let size = dy
            .get(DT_RELSZ)
            .ok_or_else(|| bad("DT_REL without DT_RELSZ"))?;
        img.file_bytes(r, size, &format!("DT_REL with DT_RELSZ {size}"))?;
    }
    if let Some(r) = dy.get(DT_RELR) {
        let size = dy
            .get(DT_RELRSZ)
            .ok_or_else(|| bad("DT_RELR without DT_RELRSZ"))?;
        check_relr(img, r, size, textrel)?;
    }

    // Code and pointer arrays the loader calls.
    for (tag, name) in [(DT_INIT, "DT_INIT"), (DT_FINI, "DT_FINI")] {
        if let Some(a) = dy.get(tag) {
            let l = img.need_mapped(a, 1, name)?;
            if l.flags & PF_X == 0 {
                return Err(bad(format!(
                    "{name} (address {a:#x}) is not in an executable segment"
                )));
            }
        }
    }
    for (tag, size_tag, name) in [
        (
            DT_INIT_ARRAY,
            DT_INIT_ARRAYSZ,
            "DT_INIT_ARRAY with DT_INIT_ARRAYSZ",
        ),
        (
            DT_FINI_ARRAY,
            DT_FINI_ARRAYSZ,
            "DT_FINI_ARRAY with DT_FINI_ARRAYSZ",
        ),
        (
            DT_PREINIT_ARRAY,
            DT_PREINIT_ARRAYSZ,
            "DT_PREINIT_ARRAY with DT_PREINIT_ARRAYSZ",
        ),
    ] {
        if let Some(a) = dy.get(tag) {
            let size = dy.get(size_tag).unwrap_or(0);
            if size % 8 != 0 {
                return Err(bad(format!(
                    "{name} {size} is not a whole number of pointers"
                )));
            }
            img.need_mapped(a, size, &format!("{name} {size}"))?;
        }
    }
    if let Some(a) = dy.get(DT_PLTGOT) {
        img.need_mapped(a, 8, "DT_PLTGOT")?;
    }
    Ok(())
}

/// The dynamic symbol table and what its entries refer to.
struct Symbols {
    at: u64,
    /// The count, when a `DT_HASH` gives it.
    exact: Option<u64>,
    strsz: Option<usize>,
    versym: Option<u64>,
    /// The highest version index declared, when the file declares versions.
    max_version: Option<u64>,
}

impl Symbols {
    /// Symbols `0..n` are in the file, with names inside the string table and declared versions.
    fn check_range(&self, img: &Image<'_>, n: u64) -> Result<()> {
        let o = img.file_bytes(
            self.at,
            n.saturating_mul(SYM_SIZE),
            &format!("DT_SYMTAB with {n} symbols"),
        )?;
        let vo = match self.versym {
            Some(v) => Some(img.file_bytes(v, n * 2, &format!("DT_VERSYM with {n} symbols"))?),
            None => None,
        };
        for k in 0..n as usize {
            self.check_fields(
                img.b,
                k as u64,
                o + k * SYM_SIZE as usize,
                vo.map(|v| v + 2 * k),
            )?;
        }
        Ok(())
    }

    /// Symbol `k`, which a relocation names.
    fn check_one(&self, img: &Image<'_>, k: u64, what: &str) -> Result<()> {
        if let Some(n) = self.exact {
            if k >= n.max(1) {
                return Err(bad(format!("{what} names symbol {k} of {n}")));
            }
        }
        let at = k
            .checked_mul(SYM_SIZE)
            .and_then(|x| x.checked_add(self.at))
            .ok_or_else(|| bad(format!("{what} names symbol {k}")))?;
        let o = img.file_bytes(at, SYM_SIZE, &format!("symbol {k}, which {what} names,"))?;
        let vo = match self.versym {
            Some(v) => Some(img.file_bytes(
                v + 2 * k,
                2,
                &format!("the version of symbol {k}, which {what} names,"),
            )?),
            None => None,
        };
        self.check_fields(img.b, k, o, vo)
    }

    fn check_fields(&self, b: &[u8], k: u64, sym: usize, ver: Option<usize>) -> Result<()> {
        let name = u32_at(b, sym)? as usize;
        if let Some(n) = self.strsz {
            if name != 0 && name >= n {
                return Err(bad(format!(
                    "symbol {k}'s name at offset {name} is past DT_STRSZ ({n})"
                )));
            }
        }
        if let (Some(v), Some(max)) = (ver, self.max_version) {
            let ndx = (u16_at(b, v)? & 0x7fff) as u64;
            if ndx > max {
                return Err(bad(format!(
                    "symbol {k} has version index {ndx}, but only {max} are declared"
                )));
            }
        }
        Ok(())
    }
}

/// The number of symbols a `DT_GNU_HASH` table covers, after checking the table.
fn gnu_hash_symbols(img: &Image<'_>, g: u64) -> Result<u64> {
    let nbuckets = img.u32_at(g, "DT_GNU_HASH")? as u64;
    let symoffset = img.u32_at(g + 4, "DT_GNU_HASH")? as u64;
    let bloom = img.u32_at(g + 8, "DT_GNU_HASH")? as u64;
    if nbuckets == 0 {
        return Err(bad("DT_GNU_HASH has no buckets"));
    }
    if !bloom.is_power_of_two() {
        return Err(bad(format!(
            "DT_GNU_HASH's bloom filter has {bloom} words, not a power of two"
        )));
    }
    let buckets_at = g + 16 + bloom * 8;
    let o = img.file_bytes(
        g,
        16 + bloom * 8 + nbuckets * 4,
        "DT_GNU_HASH's bloom filter and buckets",
    )?;
    let buckets = o + 16 + (bloom * 8) as usize;
    let mut top = 0u64;
    for k in 0..nbuckets as usize {
        let v = u32_at(img.b, buckets + 4 * k)? as u64;
        if v != 0 && v < symoffset {
            return Err(bad(format!(
                "DT_GNU_HASH bucket {k} names symbol {v}, below its first hashed symbol {symoffset}"
            )));
        }
        top = top.max(v);
    }
    if top == 0 {
        return Ok(symoffset);
    }
    // Every chain ends at or before the end of the last one (the highest bucket's).
    let chains = buckets_at + nbuckets * 4;
    let mut i = top;
    loop {
        let c = img.u32_at(
            chains + (i - symoffset) * 4,
            &format!("DT_GNU_HASH's chain for symbol {i}"),
        )?;
        if c & 1 == 1 {
            return Ok(i + 1);
        }
        i += 1;
    }
}

/// Check the version-needed entries; returns the highest version index they declare.
fn walk_verneed(
    img: &Image<'_>,
    start: u64,
    string_at: &dyn Fn(u64, &str) -> Result<()>,
) -> Result<u64> {
    let l = img.need_mapped(start, 16, "DT_VERNEED")?;
    // Each entry is 16 distinct bytes of the segment: more steps than that is a loop.
    let mut budget = l.filesz / 16 + 1;
    let mut step = || {
        budget = budget
            .checked_sub(1)
            .ok_or_else(|| bad("DT_VERNEED's entries loop"))?;
        Ok::<(), Error>(())
    };
    let mut max = 0u64;
    let mut at = start;
    loop {
        step()?;
        let cnt_file = img.u64_at(at, "a DT_VERNEED entry")?;
        let cnt = (cnt_file >> 16) & 0xffff;
        let file = cnt_file >> 32;
        string_at(file, "a DT_VERNEED file name")?;
        let aux = img.u32_at(at + 8, "a DT_VERNEED entry")? as u64;
        let next = img.u32_at(at + 12, "a DT_VERNEED entry")? as u64;
        let mut a = at + aux;
        for _ in 0..cnt {
            step()?;
            let other = img.u32_at(a + 4, "a DT_VERNEED auxiliary entry")? >> 16;
            let name = img.u32_at(a + 8, "a DT_VERNEED auxiliary entry")? as u64;
            string_at(name, "a DT_VERNEED version name")?;
            max = max.max((other & 0x7fff) as u64);
            let an = img.u32_at(a + 12, "a DT_VERNEED auxiliary entry")? as u64;
            if an == 0 {
                break;
            }
            a += an;
        }
        if next == 0 {
            return Ok(max);
        }
        at += next;
    }
}

/// Check the version-definition entries; returns the highest version index they define.
fn walk_verdef(
    img: &Image<'_>,
    start: u64,
    string_at: &dyn Fn(u64, &str) -> Result<()>,
) -> Result<u64> {
    let l = img.need_mapped(start, 20, "DT_VERDEF")?;
    let mut budget = l.filesz / 8 + 1;
    let mut step = || {
        budget = budget
            .checked_sub(1)
            .ok_or_else(|| bad("DT_VERDEF's entries loop"))?;
        Ok::<(), Error>(())
    };
    let mut max = 0u64;
    let mut at = start;
    loop {
        step()?;
        let w = img.u64_at(at, "a DT_VERDEF entry")?;
        let ndx = (w >> 32) & 0xffff;
        let cnt = w >> 48;
        max = max.max(ndx & 0x7fff);
        let aux = img.u32_at(at + 12, "a DT_VERDEF entry")? as u64;
        let next = img.u32_at(at + 16, "a DT_VERDEF entry")? as u64;
        let mut a = at + aux;
        for _ in 0..cnt {
            step()?;
            let name = img.u32_at(a, "a DT_VERDEF auxiliary entry")? as u64;
            string_at(name, "a DT_VERDEF version name")?;
            let an = img.u32_at(a + 4, "a DT_VERDEF auxiliary entry")? as u64;
            if an == 0 {
                break;
            }
            a += an;
        }
        if next == 0 {
            return Ok(max);
        }
        at += next;
    }
}

/// Check a table of `Elf64_Rela`: inside the file, each writing inside a writable
/// segment, each naming an existing symbol.
fn check_relocs(
    img: &Image<'_>,
    addr: u64,
    size: u64,
    what: &str,
    syms: Option<&Symbols>,
    textrel: bool,
) -> Result<()> {
    if size % RELA_SIZE != 0 {
        return Err(bad(format!(
            "{what} {size} is not a whole number of relocations"
        )));
    }
    let o = img.file_bytes(addr, size, &format!("{what} {size}"))?;
    for k in 0..(size / RELA_SIZE) as usize {
        let at = o + k * RELA_SIZE as usize;
        let r_offset = u64_at(img.b, at)?;
        let r_info = u64_at(img.b, at + 8)?;
        let r_addend = u64_at(img.b, at + 16)?;
        let (sym, ty) = (r_info >> 32, r_info as u32);
        if ty == 0 {
            continue; // R_*_NONE
        }
        let name = || format!("relocation {k} of {what}");
        img.need_writable(r_offset, 8, textrel, &name())?;
        if sym != 0 {
            let syms = syms.ok_or_else(|| {
                bad(format!(
                    "{} names a symbol but there is no DT_SYMTAB",
                    name()
                ))
            })?;
            syms.check_one(img, sym, &name())?;
        }
        if ty == R_IRELATIVE {
            // The loader calls the resolver at the addend.
            let l = img.need_mapped(r_addend, 1, &format!("{}'s resolver", name()))?;
            if l.flags & PF_X == 0 {
                return Err(bad(format!(
                    "{}'s resolver at {r_addend:#x} is not in an executable segment",
                    name()
                )));
            }
        }
    }
    Ok(())
}

/// Check a `DT_RELR` table: every place it relocates is in a writable segment.
fn check_relr(img: &Image<'_>, addr: u64, size: u64, textrel: bool) -> Result<()> {
    if size % 8 != 0 {
        return Err(bad(format!(
            "DT_RELRSZ {size} is not a whole number of entries"
        )));
    }
    let o = img.file_bytes(addr, size, &format!("DT_RELR with DT_RELRSZ {size}"))?;
    let mut base: Option<u64> = None;
    for k in 0..(size / 8) as usize {
        let e = u64_at(img.b, o + 8 * k)?;
        if e & 1 == 0 {
            img.need_writable(e, 8, textrel, &format!("DT_RELR entry {k}"))?;
            base = Some(e.saturating_add(8));
        } else {
            let b0 = base.ok_or_else(|| bad("DT_RELR starts with a bitmap"))?;
            for bit in 1..64 {
                if e >> bit & 1 == 1 {
                    let at = b0.saturating_add((bit - 1) * 8);
                    img.need_writable(at, 8, textrel, &format!("DT_RELR entry {k}"))?;
                }
            }
            base = Some(b0.saturating_add(63 * 8));
        }
    }
    Ok(())
}

/// Test helpers shared with other modules' tests.
#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// A minimal valid ELF64 shared object: header, a loadable segment holding
    /// the whole file, a dynamic section naming a library that does not exist
    /// (so `dlopen` fails cleanly) and its string table.
    pub(crate) fn tiny_so() -> Vec<u8> {
        const DYN: usize = 64 + 2 * 56;
        const STR: usize = DYN + 4 * 16;
        let names = b"\0libet_cuda_no_such_library.so\0";
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
        b[STR..].copy_from_slice(names);
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

    /// A fixture's `.so`, or `None` (with a line saying so) when the fixtures are not here.
    fn fixture_so(name: &str) -> Option<Vec<u8>> {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../shared/fixtures")
            .join(name)
            .join("forward_so_blob.bin");
        match std::fs::read(&p) {
            Ok(b) => Some(b),
            Err(e) => {
                println!("SKIPPED: no fixture {} ({e})", p.display());
                None
            }
        }
    }

    /// Byte offset of program header `i`'s field at `field`.
    fn ph(b: &[u8], i: usize, field: usize) -> usize {
        u64_at(b, 32).unwrap() as usize + i * 56 + field
    }

    /// Index of the first program header of type `t`.
    fn find_ph(b: &[u8], t: u32) -> usize {
        let n = u16_at(b, 56).unwrap() as usize;
        (0..n)
            .find(|&i| u32_at(b, ph(b, i, 0)).unwrap() == t)
            .unwrap()
    }

    /// File offset of the value of dynamic entry `tag`.
    fn dyn_value_at(b: &[u8], tag: u64) -> usize {
        let d = find_ph(b, PT_DYNAMIC);
        let off = u64_at(b, ph(b, d, 8)).unwrap() as usize;
        (0..)
            .map(|k| off + 16 * k)
            .find(|&at| u64_at(b, at).unwrap() == tag)
            .unwrap()
            + 8
    }

    fn with(mut b: Vec<u8>, at: usize, v: u64) -> Vec<u8> {
        b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        b
    }

    #[test]
    fn the_fixtures_validate() {
        for f in ["mlp_f32", "conv_f32", "attn_bf16"] {
            let Some(so) = fixture_so(f) else { continue };
            let info = validate(&so).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert!(info.loadable_segments >= 2 && info.has_dynamic, "{f}");
        }
    }

    #[test]
    fn headers_that_would_crash_dlopen_are_refused() {
        let Some(so) = fixture_so("mlp_f32") else {
            return;
        };
        let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
        let d = find_ph(&so, PT_DYNAMIC);
        // The dynamic segment's address far outside every loadable segment.
        let m = msg(with(so.clone(), ph(&so, d, 16), 0x7000_0000_0000));
        assert!(
            m.contains("the dynamic segment (address 0x700000000000")
                && m.contains("is not inside a loadable segment"),
            "{m}"
        );
        // ... or inside one, but not where its file bytes are mapped.
        let vaddr = u64_at(&so, ph(&so, d, 16)).unwrap();
        let m = msg(with(so.clone(), ph(&so, d, 16), vaddr + 16));
        assert!(m.contains("does not map onto each other"), "{m}");
        // A string table outside the file.
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_STRTAB), 0x4000_0000));
        assert!(
            m.contains("DT_STRTAB with DT_STRSZ") && m.contains("address 0x40000000"),
            "{m}"
        );
        // A string table size past its segment.
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_STRSZ), 1 << 32));
        assert!(m.contains("DT_STRTAB with DT_STRSZ 4294967296"), "{m}");
        // A string table too short for the library names.
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_STRSZ), 1));
        assert!(
            m.contains("DT_NEEDED string at offset") && m.contains("(DT_STRSZ 1)"),
            "{m}"
        );
        // A symbol table outside the file.
        let m = msg(with(
            so.clone(),
            dyn_value_at(&so, DT_SYMTAB),
            0x6000_0000_0000,
        ));
        assert!(m.contains("DT_SYMTAB with"), "{m}");
        // Relocations past their segment, and a relocation entry size the loader asserts on.
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_RELASZ), 1 << 40));
        assert!(m.contains("DT_RELA with DT_RELASZ 1099511627776"), "{m}");
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_RELAENT), 16));
        assert!(m.contains("DT_RELAENT is 16, not 24"), "{m}");
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_PLTRELSZ), 1 << 40));
        assert!(m.contains("DT_JMPREL with DT_PLTRELSZ"), "{m}");
        // The first relocation writing into the read-only first segment.
        let rela = u64_at(&so, dyn_value_at(&so, DT_RELA)).unwrap() as usize; // address == offset in segment 0
        let m = msg(with(so.clone(), rela, 0x10));
        assert!(
            m.contains("relocation 0 of DT_RELA") && m.contains("read-only"),
            "{m}"
        );
        // A GNU hash table without buckets (the loader divides by their count).
        let gnu = u64_at(&so, dyn_value_at(&so, DT_GNU_HASH)).unwrap() as usize;
        let mut nob = so.clone();
        nob[gnu..gnu + 4].copy_from_slice(&0u32.to_le_bytes());
        assert!(msg(nob).contains("DT_GNU_HASH has no buckets"));
        // Init code outside the executable segment, and init arrays past their segment.
        let m = msg(with(so.clone(), dyn_value_at(&so, DT_INIT), 0x10));
        assert!(
            m.contains("DT_INIT (address 0x10) is not in an executable segment"),
            "{m}"
        );
        let m = msg(with(
            so.clone(),
            dyn_value_at(&so, DT_INIT_ARRAYSZ),
            1 << 30,
        ));
        assert!(m.contains("DT_INIT_ARRAY with DT_INIT_ARRAYSZ"), "{m}");
        // A dynamic section without its terminator.
        let mut open = so.clone();
        let (off, size) = (
            u64_at(&so, ph(&so, d, 8)).unwrap(),
            u64_at(&so, ph(&so, d, 32)).unwrap(),
        );
        let mut at = dyn_value_at(&so, DT_NULL) - 8;
        while at < (off + size) as usize {
            open = with(open, at, DT_FLAGS);
            at += 16;
        }
        let m = msg(open);
        assert!(m.contains("no DT_NULL terminator"), "{m}");
        // Loadable segments: more file bytes than memory, misaligned, past the address space.
        let m = msg(with(so.clone(), ph(&so, 0, 40), 16));
        assert!(
            m.contains("loadable segment 0 has") && m.contains("only 16 in memory"),
            "{m}"
        );
        let m = msg(with(so.clone(), ph(&so, 1, 16), 0x8e008));
        assert!(m.contains("disagree modulo its alignment"), "{m}");
        let m = msg(with(so.clone(), ph(&so, 1, 40), u64::MAX - 10));
        assert!(m.contains("past the address space"), "{m}");
        // Two loadable segments swapped in address order.
        let v0 = u64_at(&so, ph(&so, 0, 16)).unwrap();
        let m = msg(with(so.clone(), ph(&so, 1, 16), v0));
        assert!(m.contains("loadable segments must ascend"), "{m}");
    }

    #[test]
    fn the_tiny_shared_object_validates_and_its_mutations_do_not() {
        let so = tiny_so();
        validate(&so).unwrap();
        let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
        // Dynamic segment in a segment that is not writable.
        let mut ro = so.clone();
        ro[68..72].copy_from_slice(&PF_R.to_le_bytes());
        assert!(msg(ro).contains("not readable and writable"));
        // DT_NEEDED past DT_STRSZ.
        let m = msg(with(so.clone(), 64 + 2 * 56 + 8, 1000));
        assert!(m.contains("DT_NEEDED string at offset 1000"), "{m}");
        // DT_STRTAB without DT_STRSZ.
        let m = msg(with(so.clone(), 64 + 2 * 56 + 32, 0x7777));
        assert!(m.contains("DT_STRTAB without DT_STRSZ"), "{m}");
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
