//! The dynamic section: its entries, the string table and the strings it
//! names, the fixed entry sizes the loader asserts, and the init and fini code
//! it calls (the symbol and relocation tables it names: `symbols`, `relocs`).

use super::relocs::check_relocations;
use super::segments::{Image, Seg};
use super::symbols::symbol_table;
use super::table::{check_string, read_entries, tag_name, Dyn};
use super::*;
use crate::error::Result;

/// Walk the dynamic section and check every table it names; returns the companion's op
/// names found in the string table (`ElfInfo::companion_imports`).
pub(super) fn check_dynamic(img: &Image<'_>, d: &Seg) -> Result<Vec<String>> {
    let dy = read_entries(img.b, d)?;
    let textrel = dy.get(DT_TEXTREL).is_some() || dy.get(DT_FLAGS).unwrap_or(0) & DF_TEXTREL != 0;

    // The string table, and every string the loader reads by offset.
    let strtab = string_table(img, &dy)?;

    // Fixed entry sizes (the loader asserts them, which aborts the process).
    check_entry_sizes(&dy)?;

    // Symbols, their hash tables and their versions.
    let syms = symbol_table(img, &dy, strtab)?;

    // Relocations: their tables, the symbols they name, and the places they write.
    check_relocations(img, &dy, syms.as_ref(), textrel)?;

    // Code and pointer arrays the loader calls.
    check_init_fini(img, &dy)?;
    if let Some(a) = dy.get(DT_PLTGOT) {
        img.need_mapped(a, 8, "DT_PLTGOT")?;
    }
    Ok(companion_names(strtab.unwrap_or_default()))
}

/// The distinct NUL-terminated strings of `strtab` that start with [`COMPANION_PREFIX`], sorted.
fn companion_names(strtab: &[u8]) -> Vec<String> {
    let names: std::collections::BTreeSet<String> = strtab
        .split(|&c| c == 0)
        .filter(|s| s.starts_with(COMPANION_PREFIX.as_bytes()))
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    names.into_iter().collect()
}

/// The string table (`DT_STRTAB`, `DT_STRSZ`), after checking every string the loader reads from it.
fn string_table<'a>(img: &Image<'a>, dy: &Dyn) -> Result<Option<&'a [u8]>> {
    let b = img.b;
    let strtab = match (dy.get(DT_STRTAB), dy.get(DT_STRSZ)) {
        (Some(addr), Some(size)) => {
            let o = img.file_bytes(addr, size, &format!("DT_STRTAB with DT_STRSZ {size}"))?;
            Some(&b[o..o + size as usize])
        }
        (Some(_), None) => return Err(bad("DT_STRTAB without DT_STRSZ")),
        (None, _) => None,
    };
    for &(tag, off) in &dy.strings {
        check_string(strtab, off, tag_name(tag))?;
    }
    if let Some(t) = strtab {
        // Symbol names are read up to their NUL: the table must end with one.
        if t.last() != Some(&0) {
            return Err(bad("DT_STRTAB does not end with a NUL"));
        }
    }
    Ok(strtab)
}

/// The fixed entry sizes, the tables that need them, and `DT_PLTREL`, which the loader asserts on.
fn check_entry_sizes(dy: &Dyn) -> Result<()> {
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
    Ok(())
}

/// `DT_INIT` and `DT_FINI` in executable segments, the init and fini arrays inside loadable ones.
fn check_init_fini(img: &Image<'_>, dy: &Dyn) -> Result<()> {
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
    Ok(())
}
