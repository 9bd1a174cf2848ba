//! The program headers: each segment's fields, the loadable segments' placement
//! in the file and in the address space, and the image they map (`Image`),
//! through which the dynamic tables are read by address.

use super::{
    bad, range_inside, u32_at, u64_at, ElfInfo, PhTable, PF_W, PF_X, PT_DYNAMIC, PT_GNU_EH_FRAME,
    PT_GNU_PROPERTY, PT_GNU_RELRO, PT_GNU_STACK, PT_LOAD, PT_NOTE, PT_PHDR, PT_TLS,
};
use crate::error::Result;

/// What the program headers hold, before the segments are checked against each other.
pub(super) struct ProgramHeaders {
    pub(super) info: ElfInfo,
    pub(super) loads: Vec<Seg>,
    /// Segments the loader or the unwinder read through their addresses.
    pub(super) located: Vec<(u32, String, Seg)>,
    pub(super) dynamic: Option<Seg>,
}

/// Read every program header: each segment inside the file, the loadable ones well placed and ascending.
pub(super) fn read_program_headers(b: &[u8], table: &PhTable) -> Result<ProgramHeaders> {
    let PhTable {
        phoff,
        phentsize,
        phnum,
    } = *table;
    let mut info = ElfInfo {
        loadable_segments: 0,
        has_dynamic: false,
        wants_exec_stack: false,
        companion_imports: Vec::new(),
    };
    let mut loads: Vec<Seg> = Vec::new();
    // Segments the loader or the unwinder read through their addresses.
    let mut located: Vec<(u32, String, Seg)> = Vec::new();
    let (mut dynamic, mut relro): (Option<Seg>, bool) = (None, false);
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
                if p_type == PT_GNU_RELRO && std::mem::replace(&mut relro, true) {
                    return Err(bad(format!("{what} is a second GNU_RELRO segment")));
                }
                located.push((p_type, what, seg));
            }
            _ => {}
        }
    }
    Ok(ProgramHeaders {
        info,
        loads,
        located,
        dynamic,
    })
}

/// A program header's fields.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seg {
    pub(super) offset: u64,
    pub(super) vaddr: u64,
    pub(super) filesz: u64,
    pub(super) memsz: u64,
    pub(super) align: u64,
    pub(super) flags: u32,
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
pub(super) struct Image<'a> {
    pub(super) b: &'a [u8],
    pub(super) loads: Vec<Seg>,
}

impl Image<'_> {
    /// The first loadable segment whose first `size(l)` bytes hold `len` bytes at `addr`
    /// (`size` is `memsz` or `filesz`). A binary search, not a scan (relocations ask once
    /// each): the segments ascend without overlapping, so their ends (`vaddr + size`, with
    /// `filesz <= memsz`) do not decrease either. The first segment ending at or past
    /// `addr + len` is the only one that can hold the range: those before it end too soon,
    /// those after it start after its start.
    fn holder(&self, addr: u64, len: u64, size: fn(&Seg) -> u64) -> Option<&Seg> {
        let end = addr.checked_add(len)?;
        let i = self.loads.partition_point(|l| l.vaddr + size(l) < end);
        self.loads.get(i).filter(|l| l.contains(addr, len, size(l)))
    }

    /// The loadable segment whose memory holds `len` bytes at `addr`.
    fn mapped(&self, addr: u64, len: u64) -> Option<&Seg> {
        self.holder(addr, len, |l| l.memsz)
    }

    /// The file offset of `len` bytes at `addr`, when a loadable segment maps them from the file.
    pub(super) fn file_bytes(&self, addr: u64, len: u64, what: &str) -> Result<usize> {
        self.holder(addr, len, |l| l.filesz)
            .map(|l| (l.offset + (addr - l.vaddr)) as usize)
            .ok_or_else(|| {
                bad(format!(
                    "{what} (address {addr:#x}, {len} bytes) is not inside the file bytes of a loadable segment"
                ))
            })
    }

    pub(super) fn need_mapped(&self, addr: u64, len: u64, what: &str) -> Result<&Seg> {
        self.mapped(addr, len).ok_or_else(|| {
            bad(format!(
                "{what} (address {addr:#x}, {len} bytes) is not inside a loadable segment"
            ))
        })
    }

    /// A table the loader writes to (relocation targets, the GOT's reserved words).
    pub(super) fn need_writable(
        &self,
        addr: u64,
        len: u64,
        textrel: bool,
        what: &str,
    ) -> Result<()> {
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
    pub(super) fn check_located(&self, p_type: u32, what: &str, s: &Seg) -> Result<Seg> {
        if s.filesz > s.memsz {
            return Err(bad(format!(
                "{what} has {} bytes in the file but only {} in memory",
                s.filesz, s.memsz
            )));
        }
        let holder = if p_type == PT_GNU_RELRO {
            // The loader protects whole pages: RELRO may end on the page boundary past its
            // segment. One scan: a file has at most one RELRO segment (checked when read).
            self.loads.iter().find(|l| {
                let page = l.align.clamp(4096, 1 << 16);
                let end = (l.vaddr + l.memsz).div_ceil(page).saturating_mul(page);
                s.vaddr >= l.vaddr && s.vaddr.checked_add(s.memsz).is_some_and(|e| e <= end)
            })
        } else {
            self.mapped(s.vaddr, s.memsz)
        };
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

    pub(super) fn u32_at(&self, addr: u64, what: &str) -> Result<u32> {
        let o = self.file_bytes(addr, 4, what)?;
        u32_at(self.b, o)
    }

    pub(super) fn u64_at(&self, addr: u64, what: &str) -> Result<u64> {
        let o = self.file_bytes(addr, 8, what)?;
        u64_at(self.b, o)
    }
}
