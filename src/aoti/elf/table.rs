//! The dynamic section's entries as the loader reads them ([`Dyn`]), and the
//! check of a string it reads from the string table: shared by the checks of
//! `dynamic`, `symbols` and `relocs`.

use super::segments::Seg;
use super::*;
use crate::error::Result;

/// The values of the dynamic section (the last entry of a tag wins, as in the loader).
pub(super) struct Dyn {
    pub(super) one: std::collections::BTreeMap<u64, u64>,
    pub(super) strings: Vec<(u64, u64)>,
}

impl Dyn {
    pub(super) fn get(&self, tag: u64) -> Option<u64> {
        self.one.get(&tag).copied()
    }
}

pub(super) fn tag_name(tag: u64) -> &'static str {
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

/// Read the dynamic section's entries up to its `DT_NULL` terminator, which must be there.
pub(super) fn read_entries(b: &[u8], d: &Seg) -> Result<Dyn> {
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
    Ok(dy)
}

/// A string the loader reads at offset `off` of the string table must end inside it.
pub(super) fn check_string(strtab: Option<&[u8]>, off: u64, what: &str) -> Result<()> {
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
}
