//! The per-FQN matcher's fuzz body and its input decoding.

use super::match_storages;
use crate::aoti::container::ConstantInfo;
use crate::aoti::payload::FqnEntry;
use crate::tensor::Tensor;
use std::sync::Arc;

/// Fuzz body (`fuzz/fuzz_targets/per_fqn_match.rs`, and a test over
/// `fuzz/seeds/per_fqn_match`): constants and storages described by `data`
/// through the matcher; every match must be a view the upload's
/// [`Tensor::view`] accepts on a storage of the matched bytes. Returns the
/// number of matches.
pub(crate) fn fuzz_match(data: &[u8]) -> usize {
    use crate::tensor::{HostAlloc, Memory, Storage};
    let mut it = data.iter().copied();
    let mut next = move || it.next().unwrap_or(0);
    let blob = [0u8; 256];
    let storages = fuzz_storages(&mut next, &blob);
    let infos = fuzz_infos(&mut next, &storages);
    let Ok(matched) = match_storages(&infos, &storages) else {
        return 0;
    };
    for (m, bytes) in &matched {
        let n = bytes.len();
        let memory = if n == 0 {
            Memory::Empty
        } else {
            match HostAlloc::new(n) {
                Ok(h) => Memory::Host(h),
                Err(_) => return 0,
            }
        };
        let storage = Storage {
            memory,
            nbytes: n,
            device: crate::tensor::Device::Cpu,
        };
        if let Err(e) = Tensor::view(
            Arc::new(storage),
            m.entry.dtype,
            m.entry.sizes.to_vec(),
            m.entry.strides.to_vec(),
            m.entry.storage_offset,
        ) {
            panic!(
                "the matcher accepted {:?} but the upload's view refuses it: {e}",
                m.entry
            );
        }
    }
    matched.len()
}

/// The fuzz body's storages: up to 4 entries drawn from `next`, each on a slice of `blob`.
fn fuzz_storages<'b>(next: &mut impl FnMut() -> u8, blob: &'b [u8]) -> Vec<(FqnEntry, &'b [u8])> {
    // Mostly small values, sometimes the extremes.
    let val = |b: u8| -> i64 {
        match b {
            255 => i64::MAX,
            254 => i64::MAX / 3,
            253 => 1 << 40,
            252 => 1 << 61,
            251 => -1,
            x => (x % 8) as i64,
        }
    };
    let n = (next() % 5) as usize;
    let mut storages = Vec::with_capacity(n);
    for _ in 0..n {
        let rank = (next() % 18) as usize;
        let sizes: Vec<i64> = (0..rank).map(|_| val(next())).collect();
        let strides: Vec<i64> = (0..rank).map(|_| val(next())).collect();
        let e = FqnEntry {
            fqn: format!("c{}", next() % 4),
            storage_key: format!("s{}", next() % 4).into(),
            storage_nbytes: match next() {
                255 => u64::MAX,
                254 => 1 << 62,
                b => b as u64,
            },
            dtype: [6, 15, 4, 11, 99, 12][(next() % 6) as usize],
            device_type: [1, 0, 13][(next() % 3) as usize],
            storage_offset: val(next()),
            sizes: sizes.into(),
            strides: strides.into(),
        };
        let len = if next() & 1 == 0 {
            (e.storage_nbytes.min(255)) as usize
        } else {
            next() as usize
        };
        storages.push((e, &blob[..len]));
    }
    storages
}

/// The fuzz body's constants: up to 4 drawn from `next`, some named like `storages`.
fn fuzz_infos(next: &mut impl FnMut() -> u8, storages: &[(FqnEntry, &[u8])]) -> Vec<ConstantInfo> {
    (0..(next() % 5) as usize)
        .map(|i| {
            let like = storages.get(i).map(|(e, _)| e);
            ConstantInfo {
                name: format!("c{}", next() % 5),
                original_fqn: match (next() % 3, like) {
                    (0, Some(e)) => e.fqn.clone(),
                    (1, _) => String::new(),
                    _ => format!("c{}", next() % 5),
                },
                from_folded: next() % 8 == 0,
                kind: 1,
                dtype: match (next() % 4, like) {
                    (0, _) => 15,
                    (_, Some(e)) => e.dtype,
                    _ => 6,
                },
                data_size: (next() % 8) as usize,
            }
        })
        .collect()
}
