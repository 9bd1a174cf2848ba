//! The relocation tables the dynamic section names (`DT_RELA`, `DT_JMPREL`,
//! `DT_REL`, `DT_RELR`): inside the file, each writing inside a writable
//! segment, each naming an existing symbol.

use super::segments::Image;
use super::symbols::Symbols;
use super::table::Dyn;
use super::*;
use crate::error::Result;

/// Check every relocation table the dynamic section names, and the GOT the lazy binder writes.
pub(super) fn check_relocations(
    img: &Image<'_>,
    dy: &Dyn,
    syms: Option<&Symbols>,
    textrel: bool,
) -> Result<()> {
    if let Some(r) = dy.get(DT_RELA) {
        let size = dy
            .get(DT_RELASZ)
            .ok_or_else(|| bad("DT_RELA without DT_RELASZ"))?;
        check_relocs(img, r, size, "DT_RELA with DT_RELASZ", syms, textrel)?;
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
        check_relocs(img, r, size, "DT_JMPREL with DT_PLTRELSZ", syms, textrel)?;
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
    Ok(())
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
