//! The copy under every put and get of window memory and every large message's bytes: `memcpy`, except where `memcpy`
//! is known to fall off a cliff.
//!
//! glibc's `memcpy` moves copies from about 2 KiB up to its "stop" threshold (the
//! per-core cache, 512 KiB on AMD EPYC) with `rep movsb`. On AMD EPYC cores (this
//! project's machine; the CPUs with FSRM) `rep movsb` runs about ten times slower when
//! the source and the destination are not equally aligned within a cache line:
//! `benches/scripts/copy_alignment.c` copies 64 blocks of 4 KiB to 256 KiB from one
//! buffer to another at 1.3-2.7 GB/s when the destination sits 8 or 16 bytes past the
//! source's alignment, 22-35 GB/s when both are aligned alike, and 22-25 GB/s with the
//! misaligned pair and the vector loop below (6-8 GB/s for all from 256 KiB: memory). Such pairs are the rule for RMA: a window
//! is page-aligned, and a `Vec` or `malloc` buffer of that size starts 16 bytes into a
//! page (glibc's chunk header), so every get into and put from a user's buffer in that
//! range hit it (`osu_get_bw` 1.7 GB/s from 4 KiB to 256 KiB, against 15 GB/s at 2 KiB).
//!
//! So a copy of a misaligned pair in that range runs a loop of unaligned vector loads
//! and aligned stores (AVX2 where the CPU has it, else SSE2, on x86-64); everything else
//! is `memcpy`, which is as fast as anything there (small copies, equally aligned pairs,
//! large copies with non-temporal stores).

/// Copies `src` into `dst`, as [`slice::copy_from_slice`] (which panics when the lengths
/// differ; so does this).
#[inline]
pub fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of different lengths"
    );
    // SAFETY: both slices are valid for their (equal) lengths, and a `&mut` slice
    // cannot overlap a shared one.
    unsafe { copy_bytes(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// Appends `src` to `v`, as [`Vec::extend_from_slice`].
#[inline]
pub fn extend(v: &mut Vec<u8>, src: &[u8]) {
    v.reserve(src.len());
    let len = v.len();
    // SAFETY: `reserve` made room for `src.len()` more bytes after `len`, which the copy
    // initializes (a Vec's spare capacity cannot overlap `src`, a live shared borrow)
    // before `set_len` covers them.
    unsafe {
        copy_bytes(src.as_ptr(), v.as_mut_ptr().add(len), src.len());
        v.set_len(len + src.len());
    }
}

/// A new vector holding `src`, as `src.to_vec()`.
#[inline]
pub fn to_vec(src: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    extend(&mut v, src);
    v
}

/// Copies `len` bytes from `src` to `dst`.
///
/// # Safety
/// As [`std::ptr::copy_nonoverlapping`]: `src` readable and `dst` writable for `len`
/// bytes, the two ranges not overlapping.
#[inline]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if (LOOP_FROM..LOOP_BELOW).contains(&len) && (src as usize ^ dst as usize) & 63 != 0 {
        // SAFETY: the caller's contract, passed on.
        return unsafe { x86::copy_misaligned(src, dst, len) };
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { std::ptr::copy_nonoverlapping(src, dst, len) }
}

/// The smallest copy that takes the loop: below it glibc copies with vector moves of its
/// own, whatever the alignment.
#[cfg(target_arch = "x86_64")]
const LOOP_FROM: usize = 2048;

/// The first size that stays with `memcpy`: from there on glibc's copy streams past the
/// caches (non-temporal stores), level with the loop for misaligned pairs and ahead of
/// it beyond the last-level cache.
#[cfg(target_arch = "x86_64")]
const LOOP_BELOW: usize = 1 << 20;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// # Safety
    /// As [`super::copy_bytes`], and `len >= 64`.
    #[inline(never)]
    pub(super) unsafe fn copy_misaligned(src: *const u8, dst: *mut u8, len: usize) {
        debug_assert!(len >= 64);
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the caller's contract; the CPU has AVX2 (checked just above).
            unsafe { copy_avx2(src, dst, len) }
        } else {
            // SAFETY: the caller's contract; SSE2 is part of x86-64.
            unsafe { copy_sse2(src, dst, len) }
        }
    }

    /// The loop of one vector width `$w` (bytes) and its intrinsics: unaligned loads,
    /// stores aligned to `$w`, four vectors per step; the first and the last `$w` bytes
    /// as unaligned moves, which may overlap the aligned middle (the same bytes written
    /// twice, with the same values).
    macro_rules! vector_copy {
        ($src:ident, $dst:ident, $len:ident, $w:literal, $load:ident, $store:ident, $storeu:ident) => {
            // SAFETY: every access lies in `src..src+len` or `dst..dst+len` (the head and
            // tail are `$w` bytes of `len >= 64 >= 2 * $w`; the loops stop `$w` or
            // `4 * $w` bytes before the end), which the caller vouches for; the stores
            // in the loops are at `$w`-aligned addresses (`at` starts where `dst + at`
            // is aligned and moves in multiples of `$w`).
            unsafe {
                let head = $load($src.cast());
                let tail = $load($src.add($len - $w).cast());
                let mut at = $w - ($dst as usize & ($w - 1));
                while at + 4 * $w <= $len {
                    let a = $load($src.add(at).cast());
                    let b = $load($src.add(at + $w).cast());
                    let c = $load($src.add(at + 2 * $w).cast());
                    let d = $load($src.add(at + 3 * $w).cast());
                    $store($dst.add(at).cast(), a);
                    $store($dst.add(at + $w).cast(), b);
                    $store($dst.add(at + 2 * $w).cast(), c);
                    $store($dst.add(at + 3 * $w).cast(), d);
                    at += 4 * $w;
                }
                while at + $w <= $len {
                    $store($dst.add(at).cast(), $load($src.add(at).cast()));
                    at += $w;
                }
                $storeu($dst.cast(), head);
                $storeu($dst.add($len - $w).cast(), tail);
            }
        };
    }

    /// 32-byte moves.
    ///
    /// # Safety
    /// As [`super::copy_bytes`], `len >= 64`, and the CPU has AVX2.
    #[target_feature(enable = "avx2")]
    unsafe fn copy_avx2(src: *const u8, dst: *mut u8, len: usize) {
        vector_copy!(
            src,
            dst,
            len,
            32,
            _mm256_loadu_si256,
            _mm256_store_si256,
            _mm256_storeu_si256
        );
    }

    /// 16-byte moves.
    ///
    /// # Safety
    /// As [`super::copy_bytes`], and `len >= 64`.
    unsafe fn copy_sse2(src: *const u8, dst: *mut u8, len: usize) {
        vector_copy!(
            src,
            dst,
            len,
            16,
            _mm_loadu_si128,
            _mm_store_si128,
            _mm_storeu_si128
        );
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Lengths around the loops' steps and the sizes that take them.
        const LENGTHS: [usize; 11] = [64, 65, 127, 128, 129, 200, 2048, 2049, 4095, 4127, 8191];

        /// Copies with one loop (`avx`: AVX2's) into a fresh buffer at `d`; checks that
        /// it equals the source and that nothing outside it was touched.
        fn check(src: &[u8], s: usize, d: usize, len: usize, avx: bool) {
            let mut dst = vec![0xAAu8; len + 128];
            // SAFETY: `src[s..s+len]` and `dst[d..d+len]` are in bounds (the callers' s,
            // len and d: s + len <= src.len(), d <= 64) and in distinct buffers; AVX2
            // only where the CPU has it (the caller checks).
            unsafe {
                let (from, to) = (src.as_ptr().add(s), dst.as_mut_ptr().add(d));
                if avx {
                    copy_avx2(from, to, len)
                } else {
                    copy_sse2(from, to, len)
                }
            }
            assert_eq!(&dst[d..d + len], &src[s..s + len], "len {len} s {s} d {d}");
            assert!(dst[..d].iter().all(|&b| b == 0xAA), "before the copy");
            assert!(dst[d + len..].iter().all(|&b| b == 0xAA), "after the copy");
        }

        /// Every alignment of source and destination within a line, both loops.
        #[test]
        fn both_loops_copy_exactly_their_bytes() {
            let src: Vec<u8> = (0..9000u32).map(|i| (i * 7 + 3) as u8).collect();
            let avx2 = std::is_x86_feature_detected!("avx2");
            for len in LENGTHS {
                for s in [0, 1, 8, 16, 31] {
                    for d in [0, 3, 16, 17, 32, 63] {
                        check(&src, s, d, len, false);
                        if avx2 {
                            check(&src, s, d, len, true);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, copy_slice, extend, to_vec};

    /// The safe forms: what `copy_from_slice`, `extend_from_slice` and `to_vec` give.
    #[test]
    fn safe_forms_equal_the_standard_ones() {
        let src: Vec<u8> = (0..70_000u32).map(|i| (i % 251) as u8).collect();
        for (from, len) in [(0, 0), (3, 5), (16, 4096), (1, 65536)] {
            let part = &src[from..from + len];
            let mut dst = vec![0u8; len];
            copy_slice(&mut dst, part);
            assert_eq!(dst, part);
            assert_eq!(to_vec(part), part);
            let mut v = vec![7u8; 9];
            extend(&mut v, part);
            assert_eq!(&v[..9], &[7u8; 9]);
            assert_eq!(&v[9..], part);
        }
    }

    #[test]
    #[should_panic(expected = "different lengths")]
    fn copy_slice_refuses_different_lengths() {
        copy_slice(&mut [0u8; 3], &[1, 2]);
    }

    /// The public copy at every size class (memcpy's, the loop's, memcpy's again above),
    /// aligned and misaligned pairs.
    #[test]
    fn copies_every_size_class_and_alignment() {
        let src: Vec<u8> = (0..(1u32 << 20) + 256)
            .map(|i| (i ^ (i >> 8)) as u8)
            .collect();
        for len in [
            0,
            1,
            8,
            63,
            2047,
            2048,
            4096,
            65536 + 5,
            (1 << 20) - 1,
            1 << 20,
        ] {
            for (s, d) in [(0, 0), (0, 16), (16, 0), (5, 64), (64, 64)] {
                let mut dst = vec![0u8; len + 128];
                // SAFETY: both ranges in bounds (s, d <= 64, the buffers 128 longer than
                // `len`), in distinct allocations.
                unsafe { copy_bytes(src.as_ptr().add(s), dst.as_mut_ptr().add(d), len) };
                assert_eq!(&dst[d..d + len], &src[s..s + len], "len {len} s {s} d {d}");
            }
        }
    }
}
