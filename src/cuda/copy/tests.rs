//! Unit tests of the copies that run without a GPU: strided host copies and clones, pitched layouts, refused mismatches.

use super::strided::Pitched;
use super::*;
use crate::dtype::codes::FLOAT32;
use std::sync::Arc;

fn host_tensor(vals: &[f32], sizes: Vec<i64>, strides: Vec<i64>) -> Tensor {
    let t = crate::cuda::memory::empty_strided(sizes, strides, FLOAT32, Device::Cpu).unwrap();
    let bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    write_span(&t, 0, &bytes).unwrap();
    t
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn strided_copy_and_clone_on_host() {
    // A 2x3 matrix stored column-major (strides [1, 2]).
    let src = host_tensor(&[1., 4., 2., 5., 3., 6.], vec![2, 3], vec![1, 2]);
    let c = clone_contiguous(&src).unwrap();
    assert!(c.is_contiguous());
    assert_eq!(
        floats(&gather_to_host(&c).unwrap()),
        [1., 2., 3., 4., 5., 6.]
    );
    let dst = host_tensor(&[0.; 6], vec![2, 3], vec![1, 2]);
    copy_tensor(&dst, &c).unwrap();
    assert_eq!(
        floats(&gather_to_host(&dst).unwrap()),
        [1., 2., 3., 4., 5., 6.]
    );
    zero(&dst).unwrap();
    assert_eq!(floats(&gather_to_host(&dst).unwrap()), [0.; 6]);
    let p = clone_preserve_strides(&src).unwrap();
    assert_eq!(p.strides, vec![1, 2]);
    assert_eq!(
        floats(&gather_to_host(&p).unwrap()),
        [1., 2., 3., 4., 5., 6.]
    );
}

#[test]
fn pitched_layouts() {
    let t = |sizes: Vec<i64>, strides: Vec<i64>| {
        let n = required_bytes_for(&sizes, &strides);
        let storage = Arc::new(crate::tensor::Storage {
            memory: crate::tensor::Memory::Empty,
            nbytes: n,
            device: Device::Cpu,
        });
        Tensor::view(storage, FLOAT32, sizes, strides, 0).unwrap()
    };
    // Rows of 10 floats, 16 apart: the padded output of a dynamic batch.
    assert_eq!(
        pitched(&t(vec![7, 10], vec![16, 1])),
        Some(Pitched {
            rows: 7,
            width: 40,
            pitch: 64
        })
    );
    assert_eq!(
        pitched(&t(vec![2, 3, 10], vec![48, 16, 1])),
        Some(Pitched {
            rows: 6,
            width: 40,
            pitch: 64
        })
    );
    assert_eq!(
        pitched(&t(vec![4, 10], vec![10, 1])),
        Some(Pitched {
            rows: 4,
            width: 40,
            pitch: 40
        })
    );
    assert_eq!(
        pitched(&t(vec![1, 10], vec![99, 1])),
        Some(Pitched {
            rows: 1,
            width: 40,
            pitch: 40
        })
    );
    // Not pitched: a transposed view, or outer dims not spaced as one row index.
    assert_eq!(pitched(&t(vec![10, 7], vec![1, 10])), None);
    assert_eq!(pitched(&t(vec![2, 3, 10], vec![64, 16, 1])), None);
}

fn required_bytes_for(sizes: &[i64], strides: &[i64]) -> usize {
    crate::tensor::required_bytes(sizes, strides, 0, 4).unwrap()
}

#[test]
fn copy_refuses_mismatches() {
    let a = host_tensor(&[0.; 6], vec![2, 3], vec![3, 1]);
    let b = host_tensor(&[0.; 6], vec![3, 2], vec![2, 1]);
    assert!(copy_tensor(&a, &b).is_err());
    let i = crate::cuda::memory::empty_strided(
        vec![2, 3],
        vec![3, 1],
        crate::dtype::codes::INT32,
        Device::Cpu,
    )
    .unwrap();
    let e = copy_tensor(&i, &a).unwrap_err().to_string();
    assert!(e.contains("dtype conversion"), "{e}");
}

/// Issue 31: a copy of no bytes checks its device like any other (it returned OK for
/// device -5 without a driver).
#[test]
fn zero_length_ordered_copies_check_the_device() {
    use crate::error::ErrorKind;
    let mut host = [0u8; 4];
    for ordinal in [-5, -1] {
        // SAFETY: no bytes are copied; refused before any pointer is used.
        let e = unsafe {
            super::copy_htod_ordered(std::ptr::null_mut(), host.as_ptr().cast(), 0, ordinal)
        }
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains(&ordinal.to_string()), "{e}");
        // SAFETY: as above.
        let e = unsafe {
            super::copy_dtoh_ordered(host.as_mut_ptr().cast(), std::ptr::null(), 0, ordinal)
        }
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
    // A device index this machine lacks: no device (without a driver, no device at all).
    let n = crate::cuda::device_count().unwrap_or(0);
    // SAFETY: as above.
    let e = unsafe { super::copy_htod_ordered(std::ptr::null_mut(), host.as_ptr().cast(), 0, n) }
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoDevice, "{e}");
}
