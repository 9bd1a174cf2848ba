//! The dynamic symbol table and the tables that describe its symbols: the
//! `DT_HASH` and `DT_GNU_HASH` hash tables (which give the symbol count) and
//! the version tables (`DT_VERNEED`, `DT_VERDEF`, `DT_VERSYM`).

use super::segments::Image;
use super::table::{check_string, Dyn};
use super::*;
use crate::error::Result;

/// The symbol table (`DT_SYMTAB`), after checking the hash and version tables and the symbols they cover.
pub(super) fn symbol_table(
    img: &Image<'_>,
    dy: &Dyn,
    strtab: Option<&[u8]>,
) -> Result<Option<Symbols>> {
    let string_at = |off: u64, what: &str| check_string(strtab, off, what);
    // Symbols: DT_HASH gives their count, DT_GNU_HASH a lower bound (symbols
    // outside its chains, undefined ones, may follow).
    let mut exact: Option<u64> = None;
    let mut least = 0u64;
    if let Some(h) = dy.get(DT_HASH) {
        let nchain = hash_symbols(img, h)?;
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
    Ok(syms)
}

/// The number of symbols a `DT_HASH` table covers, after checking the table.
fn hash_symbols(img: &Image<'_>, h: u64) -> Result<u64> {
    let b = img.b;
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
    Ok(nchain)
}

/// The dynamic symbol table and what its entries refer to.
pub(super) struct Symbols {
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
    pub(super) fn check_one(&self, img: &Image<'_>, k: u64, what: &str) -> Result<()> {
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

/// One step of a walk over linked entries, `entries + 1` steps at most: a walk
/// longer than the entries that fit in their segment follows links in a loop.
fn step_budget(entries: u64, looped: &'static str) -> impl FnMut() -> Result<()> {
    let mut budget = entries + 1;
    move || {
        budget = budget.checked_sub(1).ok_or_else(|| bad(looped))?;
        Ok(())
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
    let mut step = step_budget(l.filesz / 16, "DT_VERNEED's entries loop");
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
    let mut step = step_budget(l.filesz / 8, "DT_VERDEF's entries loop");
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
