//! CPU reference of the generator in `kernels/sort_rand.cu`: Philox4x32-10
//! and the mapping of its words to the values `rand`/`randint` write. Plain
//! Rust with no dependency on the crate, so that the GPU tests include this
//! same file (`#[path]`) to check the device's output bit for bit.

/// Philox4x32-10 of counter `ctr` under key `key` (Salmon et al., SC'11; the
/// Random123 reference's round and key schedule).
pub fn philox4x32_10(ctr: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    const M0: u64 = 0xD251_1F53;
    const M1: u64 = 0xCD9E_8D57;
    const W0: u32 = 0x9E37_79B9;
    const W1: u32 = 0xBB67_AE85;
    let mut c = ctr;
    let mut k = key;
    for round in 0..10 {
        if round > 0 {
            k[0] = k[0].wrapping_add(W0);
            k[1] = k[1].wrapping_add(W1);
        }
        let p0 = M0 * u64::from(c[0]);
        let p1 = M1 * u64::from(c[2]);
        c = [
            (p1 >> 32) as u32 ^ c[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ c[3] ^ k[1],
            p0 as u32,
        ];
    }
    c
}

/// The 4 words of block `block` for a generator at (`seed`, `offset` words).
pub fn block_words(seed: u64, offset: u64, block: u64) -> [u32; 4] {
    let ctr = offset / 4 + block;
    philox4x32_10(
        [ctr as u32, (ctr >> 32) as u32, 0, 0],
        [seed as u32, (seed >> 32) as u32],
    )
}

/// Words of the generator's stream a draw of `n` elements consumes: whole
/// blocks of 4 words, `per_block` elements per block (4, or 2 for 64-bit draws).
pub fn words_consumed(n: u64, per_block: u64) -> u64 {
    n.div_ceil(per_block) * 4
}

/// `rand` in float32: the low 24 bits of each word times 2^-24.
pub fn uniform_f32(seed: u64, offset: u64, n: usize) -> Vec<f32> {
    (0..n as u64)
        .map(|e| {
            let w = block_words(seed, offset, e / 4)[(e % 4) as usize];
            (w & 0xFF_FFFF) as f32 * (1.0 / 16_777_216.0)
        })
        .collect()
}

/// `rand` in bfloat16 (as bits): the low 8 bits of each word times 2^-8.
pub fn uniform_bf16_bits(seed: u64, offset: u64, n: usize) -> Vec<u16> {
    (0..n as u64)
        .map(|e| {
            let w = block_words(seed, offset, e / 4)[(e % 4) as usize];
            (((w & 0xFF) as f32 * (1.0 / 256.0)).to_bits() >> 16) as u16
        })
        .collect()
}

/// float16 bits of `k * 2^-11` for `k < 2048` (all exact: normal numbers or zero).
pub fn f16_bits_of_k11(k: u32) -> u16 {
    if k == 0 {
        return 0;
    }
    let m = 31 - k.leading_zeros(); // 0..=10
    (((m + 15 - 11) << 10) | ((k << (10 - m)) & 0x3FF)) as u16
}

/// `rand` in float16 (as bits): the low 11 bits of each word times 2^-11.
pub fn uniform_f16_bits(seed: u64, offset: u64, n: usize) -> Vec<u16> {
    (0..n as u64)
        .map(|e| f16_bits_of_k11(block_words(seed, offset, e / 4)[(e % 4) as usize] & 0x7FF))
        .collect()
}

/// `rand` in float64: the low 53 bits of two words (first word low) times 2^-53.
pub fn uniform_f64(seed: u64, offset: u64, n: usize) -> Vec<f64> {
    (0..n as u64)
        .map(|e| {
            let w = block_words(seed, offset, e / 2);
            let j = (e % 2) as usize * 2;
            let x = (u64::from(w[j + 1]) << 32) | u64::from(w[j]);
            (x & ((1 << 53) - 1)) as f64 * (1.0 / 9_007_199_254_740_992.0)
        })
        .collect()
}

/// Whether `randint` over `range` values draws 64 bits per element.
pub fn randint_is_wide(range: u64) -> bool {
    range > 1 << 32
}

/// `randint` as 64-bit values: `low + x mod range` (wrapping), with `range = high - low` as
/// an unsigned 64-bit number; x one word, or two when the range needs more than 32 bits.
pub fn randint_i64(seed: u64, offset: u64, low: i64, range: u64, n: usize) -> Vec<i64> {
    let wide = randint_is_wide(range);
    (0..n as u64)
        .map(|e| {
            let x = if wide {
                let w = block_words(seed, offset, e / 2);
                let j = (e % 2) as usize * 2;
                (u64::from(w[j + 1]) << 32) | u64::from(w[j])
            } else {
                u64::from(block_words(seed, offset, e / 4)[(e % 4) as usize])
            };
            (low as u64).wrapping_add(x % range) as i64
        })
        .collect()
}

#[cfg(test)]
mod kat {
    use super::*;

    // Known-answer vectors of Random123's kat_vectors, "philox4x32 10" lines
    // (counter words, key words -> output words).
    #[test]
    fn philox4x32_10_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]
        );
        assert_eq!(
            philox4x32_10([u32::MAX; 4], [u32::MAX; 2]),
            [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]
        );
        assert_eq!(
            philox4x32_10(
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0]
            ),
            [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1]
        );
    }

    #[test]
    fn mappings_stay_in_range_and_use_the_right_words() {
        let (seed, off) = (42, 8);
        let f = uniform_f32(seed, off, 9);
        assert!(f.iter().all(|&v| (0.0..1.0).contains(&v)));
        // Element 5 is word 1 of block 1 (counter 8/4 + 1 = 3).
        let w = philox4x32_10([3, 0, 0, 0], [42, 0])[1];
        assert_eq!(f[5], (w & 0xFF_FFFF) as f32 / 16_777_216.0);
        let d = uniform_f64(seed, off, 3);
        assert!(d.iter().all(|&v| (0.0..1.0).contains(&v)));
        for (h, b) in uniform_f16_bits(seed, off, 64)
            .into_iter()
            .zip(uniform_bf16_bits(seed, off, 64))
        {
            assert!(h < 0x3C00, "fp16 {h:#x} >= 1.0");
            assert!(b < 0x3F80, "bf16 {b:#x} >= 1.0");
        }
        assert_eq!(words_consumed(9, 4), 12);
        assert_eq!(words_consumed(3, 2), 8);
        assert_eq!(words_consumed(0, 4), 0);
    }

    #[test]
    fn f16_mapping_is_exact() {
        // Every k < 2048 maps to exactly k * 2^-11 (compared through f32).
        for k in 0u32..2048 {
            let bits = u32::from(f16_bits_of_k11(k));
            let exp = ((bits >> 10) & 0x1F) as i32;
            let man = bits & 0x3FF;
            let v = if exp == 0 {
                man as f32 * 2f32.powi(-24)
            } else {
                (1.0 + man as f32 / 1024.0) * 2f32.powi(exp - 15)
            };
            assert_eq!(v, k as f32 / 2048.0, "k = {k}");
        }
    }

    #[test]
    fn randint_covers_the_full_int64_range_without_overflow() {
        // Inductor's seeds: randint(low = i64::MIN, high = i64::MAX).
        let range = (i64::MAX as u64).wrapping_sub(i64::MIN as u64);
        assert_eq!(range, u64::MAX);
        assert!(randint_is_wide(range));
        let v = randint_i64(7, 0, i64::MIN, range, 1000);
        assert!(v.iter().all(|&x| x < i64::MAX));
        assert!(v.iter().any(|&x| x < 0) && v.iter().any(|&x| x > 0));
        let small = randint_i64(7, 0, -5, 22, 1000);
        assert!(small.iter().all(|&x| (-5..17).contains(&x)));
        assert!((-5..17).all(|x| small.contains(&x)), "every value drawn");
    }
}
