//! Unit tests of the tensor model.
use super::*;

/// A CPU tensor (the tests here never ask for device memory).
fn host_tensor(sizes: Vec<i64>, strides: Vec<i64>, dtype: Code, device: Device) -> Result<Tensor> {
    Tensor::empty_strided_with(sizes, strides, dtype, device, |_, _| {
        Err(Error::internal("no device memory in the tensor tests"))
    })
}
use crate::dtype::codes::FLOAT32;

#[test]
fn strides_and_contiguity() {
    assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
    assert_eq!(contiguous_strides(&[]), Vec::<i64>::new());
    assert!(is_contiguous(&[2, 3], &[3, 1]));
    assert!(!is_contiguous(&[2, 3], &[1, 2]));
    assert!(is_contiguous(&[1, 3], &[99, 1]));
    assert!(is_contiguous(&[0, 3], &[7, 9]));
}

#[test]
fn required_bytes_rules() {
    assert_eq!(required_bytes(&[2, 3], &[3, 1], 0, 4).unwrap(), 24);
    assert_eq!(required_bytes(&[2, 3], &[3, 1], 2, 4).unwrap(), 32);
    assert_eq!(required_bytes(&[0, 3], &[3, 1], 5, 4).unwrap(), 0);
    assert_eq!(required_bytes(&[], &[], 0, 8).unwrap(), 8);
    assert!(required_bytes(&[-1], &[1], 0, 4).is_err());
    assert!(required_bytes(&[2], &[-1], 0, 4).is_err());
    assert!(required_bytes(&[2], &[1], -1, 4).is_err());
    assert!(required_bytes(&[2], &[1, 1], 0, 4).is_err());
    assert!(required_bytes(&[i64::MAX, 2], &[2, 1], 0, 4).is_err());
}

#[test]
fn cpu_views_share_storage() {
    let t = host_tensor(vec![4, 4], vec![4, 1], FLOAT32, Device::Cpu).unwrap();
    assert_eq!(t.storage.nbytes, 64);
    let v = Tensor::view(t.storage.clone(), FLOAT32, vec![2, 2], vec![4, 1], 5).unwrap();
    assert_eq!(v.data_ptr() as usize - t.data_ptr() as usize, 20);
    assert_eq!(Arc::strong_count(&t.storage), 2);
    // A view past the end of the storage is refused.
    assert!(Tensor::view(t.storage.clone(), FLOAT32, vec![4, 4], vec![4, 1], 1).is_err());
    drop(v);
    assert_eq!(Arc::strong_count(&t.storage), 1);
    let i = host_tensor(vec![3], vec![1], crate::dtype::codes::INT64, Device::Cpu).unwrap();
    assert_eq!(i.nbytes(), 24);
    // Rank above the limit.
    let big = vec![1i64; MAX_RANK + 1];
    assert!(host_tensor(big.clone(), big, FLOAT32, Device::Cpu).is_err());
}

#[test]
fn borrowed_storage_is_not_freed() {
    let mut buf = vec![1.0f32; 6];
    {
        // SAFETY: `buf` holds the 6 floats the view covers and outlives the tensor.
        let t = unsafe {
            Tensor::borrowed(
                buf.as_mut_ptr().cast(),
                FLOAT32,
                vec![2, 3],
                vec![3, 1],
                0,
                Device::Cpu,
            )
        }
        .unwrap();
        assert_eq!(t.nbytes(), 24);
    }
    assert_eq!(buf[5], 1.0);
    // SAFETY: a null pointer is refused before it could be used.
    let r = unsafe {
        Tensor::borrowed(
            std::ptr::null_mut(),
            FLOAT32,
            vec![1],
            vec![1],
            0,
            Device::Cpu,
        )
    };
    assert!(r.is_err());
}

#[test]
fn device_codes() {
    assert_eq!(Device::from_codes(0, -1, || 0).unwrap(), Device::Cpu);
    assert_eq!(Device::from_codes(1, 2, || 0).unwrap(), Device::Cuda(2));
    assert!(Device::from_codes(14, 0, || 0).is_err());
}
