//! Unit tests of the ELF validation: a tiny shared object, the fixtures' libraries and their mutations.

use super::tests_support::{tiny_so, tiny_so_with_strings};
use super::*;

#[test]
fn accepts_a_minimal_shared_object() {
    let info = validate(&tiny_so()).unwrap();
    assert_eq!(info.loadable_segments, 1);
    assert!(info.has_dynamic);
}

#[test]
fn reports_the_companion_ops_the_so_names() {
    assert!(validate(&tiny_so()).unwrap().companion_imports.is_empty());
    let so = tiny_so_with_strings(
        b"aoti_torch_cuda_et_linear\0aoti_torch_empty_strided\0aoti_torch_cuda_et_gemv_bias\0aoti_torch_cuda_et_linear\0",
    );
    assert_eq!(
        validate(&so).unwrap().companion_imports,
        ["aoti_torch_cuda_et_gemv_bias", "aoti_torch_cuda_et_linear"]
    );
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
        .join("tests/fixtures")
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
    dynamic_segment_misplaced(&so);
    string_and_symbol_tables_misplaced(&so);
    relocations_and_hash_tables_broken(&so);
    init_code_and_dynamic_section_broken(&so);
    loadable_segments_broken(&so);
}

/// The dynamic segment outside every loadable segment, or not where its file bytes are mapped.
fn dynamic_segment_misplaced(so: &[u8]) {
    let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
    let d = find_ph(so, PT_DYNAMIC);
    // The dynamic segment's address far outside every loadable segment.
    let m = msg(with(so.to_vec(), ph(so, d, 16), 0x7000_0000_0000));
    assert!(
        m.contains("the dynamic segment (address 0x700000000000")
            && m.contains("is not inside a loadable segment"),
        "{m}"
    );
    // ... or inside one, but not where its file bytes are mapped.
    let vaddr = u64_at(so, ph(so, d, 16)).unwrap();
    let m = msg(with(so.to_vec(), ph(so, d, 16), vaddr + 16));
    assert!(m.contains("does not map onto each other"), "{m}");
}

/// String and symbol tables outside the file or too short.
fn string_and_symbol_tables_misplaced(so: &[u8]) {
    let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
    // A string table outside the file.
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_STRTAB), 0x4000_0000));
    assert!(
        m.contains("DT_STRTAB with DT_STRSZ") && m.contains("address 0x40000000"),
        "{m}"
    );
    // A string table size past its segment.
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_STRSZ), 1 << 32));
    assert!(m.contains("DT_STRTAB with DT_STRSZ 4294967296"), "{m}");
    // A string table too short for the library names.
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_STRSZ), 1));
    assert!(
        m.contains("DT_NEEDED string at offset") && m.contains("(DT_STRSZ 1)"),
        "{m}"
    );
    // A symbol table outside the file.
    let m = msg(with(
        so.to_vec(),
        dyn_value_at(so, DT_SYMTAB),
        0x6000_0000_0000,
    ));
    assert!(m.contains("DT_SYMTAB with"), "{m}");
}

/// Relocation tables past their segment or writing read-only memory, a GNU hash table without buckets.
fn relocations_and_hash_tables_broken(so: &[u8]) {
    let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
    // Relocations past their segment, and a relocation entry size the loader asserts on.
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_RELASZ), 1 << 40));
    assert!(m.contains("DT_RELA with DT_RELASZ 1099511627776"), "{m}");
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_RELAENT), 16));
    assert!(m.contains("DT_RELAENT is 16, not 24"), "{m}");
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_PLTRELSZ), 1 << 40));
    assert!(m.contains("DT_JMPREL with DT_PLTRELSZ"), "{m}");
    // The first relocation writing into the read-only first segment.
    let rela = u64_at(so, dyn_value_at(so, DT_RELA)).unwrap() as usize; // address == offset in segment 0
    let m = msg(with(so.to_vec(), rela, 0x10));
    assert!(
        m.contains("relocation 0 of DT_RELA") && m.contains("read-only"),
        "{m}"
    );
    // A GNU hash table without buckets (the loader divides by their count).
    let gnu = u64_at(so, dyn_value_at(so, DT_GNU_HASH)).unwrap() as usize;
    let mut nob = so.to_vec();
    nob[gnu..gnu + 4].copy_from_slice(&0u32.to_le_bytes());
    assert!(msg(nob).contains("DT_GNU_HASH has no buckets"));
}

/// Init code and arrays out of place, a dynamic section without its terminator.
fn init_code_and_dynamic_section_broken(so: &[u8]) {
    let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
    let d = find_ph(so, PT_DYNAMIC);
    // Init code outside the executable segment, and init arrays past their segment.
    let m = msg(with(so.to_vec(), dyn_value_at(so, DT_INIT), 0x10));
    assert!(
        m.contains("DT_INIT (address 0x10) is not in an executable segment"),
        "{m}"
    );
    let m = msg(with(
        so.to_vec(),
        dyn_value_at(so, DT_INIT_ARRAYSZ),
        1 << 30,
    ));
    assert!(m.contains("DT_INIT_ARRAY with DT_INIT_ARRAYSZ"), "{m}");
    // A dynamic section without its terminator.
    let mut open = so.to_vec();
    let (off, size) = (
        u64_at(so, ph(so, d, 8)).unwrap(),
        u64_at(so, ph(so, d, 32)).unwrap(),
    );
    let mut at = dyn_value_at(so, DT_NULL) - 8;
    while at < (off + size) as usize {
        open = with(open, at, DT_FLAGS);
        at += 16;
    }
    let m = msg(open);
    assert!(m.contains("no DT_NULL terminator"), "{m}");
}

/// Loadable segments out of shape, out of the address space or out of order.
fn loadable_segments_broken(so: &[u8]) {
    let msg = |b: Vec<u8>| validate(&b).unwrap_err().to_string();
    // Loadable segments: more file bytes than memory, misaligned, past the address space.
    let m = msg(with(so.to_vec(), ph(so, 0, 40), 16));
    assert!(
        m.contains("loadable segment 0 has") && m.contains("only 16 in memory"),
        "{m}"
    );
    let m = msg(with(so.to_vec(), ph(so, 1, 16), 0x8e008));
    assert!(m.contains("disagree modulo its alignment"), "{m}");
    let m = msg(with(so.to_vec(), ph(so, 1, 40), u64::MAX - 10));
    assert!(m.contains("past the address space"), "{m}");
    // Two loadable segments swapped in address order.
    let v0 = u64_at(so, ph(so, 0, 16)).unwrap();
    let m = msg(with(so.to_vec(), ph(so, 1, 16), v0));
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

/// The segment look-ups (one per relocation, table, symbol) are binary searches now: they
/// give what the first-match scan gave, over segments with gaps, shared boundaries and
/// empty ones, for ranges inside, across and outside them.
#[test]
fn segment_lookups_agree_with_a_scan() {
    use super::segments::{Image, Seg};
    assert_eq!(std::mem::size_of::<Seg>(), 48);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    for _ in 0..50 {
        let mut loads = Vec::new();
        let mut at = next(64);
        for _ in 0..next(12) {
            let memsz = next(40);
            let filesz = memsz.min(next(48));
            loads.push(Seg {
                offset: at,
                vaddr: at,
                filesz,
                memsz,
                align: 1,
                flags: if next(2) == 0 { PF_R } else { PF_R | PF_W },
            });
            // The next one starts where this one ends, or after a gap.
            at += memsz + next(3) * next(16);
        }
        let img = Image { b: &[], loads };
        let scan = |addr: u64, len: u64, file: bool| {
            img.loads.iter().position(|l| {
                let size = if file { l.filesz } else { l.memsz };
                addr >= l.vaddr && addr.checked_add(len).is_some_and(|e| e <= l.vaddr + size)
            })
        };
        for _ in 0..400 {
            let (addr, len) = (next(at + 8), next(24));
            let want = scan(addr, len, false);
            let index = |l: &Seg| (l as *const Seg as usize - img.loads.as_ptr() as usize) / 48;
            let got = img.need_mapped(addr, len, "x").ok().map(index);
            assert_eq!(got, want, "mapped {addr} +{len} in {:?}", img.loads);
            let want = scan(addr, len, true)
                .map(|i| (img.loads[i].offset + addr - img.loads[i].vaddr) as usize);
            let got = img.file_bytes(addr, len, "x").ok();
            assert_eq!(got, want, "file bytes {addr} +{len} in {:?}", img.loads);
        }
        assert!(img.need_mapped(u64::MAX, 2, "x").is_err());
    }
}

/// A file with two GNU_RELRO segments is refused (the check of the one a file may have
/// is a scan of the loadable segments).
#[test]
fn a_second_relro_segment_is_refused() {
    let tiny = super::tests_support::tiny_so();
    let phoff = tiny.len();
    let mut b = tiny.clone();
    b.extend_from_slice(&tiny[64..64 + 2 * 56]);
    let relro = |b: &mut Vec<u8>| {
        let mut h = vec![0u8; 56];
        h[..4].copy_from_slice(&PT_GNU_RELRO.to_le_bytes());
        h[4..8].copy_from_slice(&PF_R.to_le_bytes());
        h[32..40].copy_from_slice(&16u64.to_le_bytes());
        h[40..48].copy_from_slice(&16u64.to_le_bytes());
        h[48..56].copy_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&h);
    };
    relro(&mut b);
    let mut one = with(b.clone(), 32, phoff as u64);
    one[56..58].copy_from_slice(&3u16.to_le_bytes());
    assert!(validate(&one).is_ok(), "{:?}", validate(&one).err());
    relro(&mut b);
    let mut two = with(b, 32, phoff as u64);
    two[56..58].copy_from_slice(&4u16.to_le_bytes());
    let e = validate(&two).unwrap_err().to_string();
    assert!(e.contains("second GNU_RELRO"), "{e}");
}
