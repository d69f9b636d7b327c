//! Bounds-checked byte access to memory other processes or devices may touch at the same
//! time (a mapped window segment, user memory exposed by a window, memory registered with
//! a network device).
//!
//! Concurrent plain accesses to the same bytes are what MPI calls conflicting accesses:
//! erroneous programs get unspecified values, never undefined behaviour of this process,
//! because every access is a raw copy (no Rust reference to shared bytes is ever formed).

use std::sync::atomic::{AtomicU32, AtomicU64};

/// A window of bytes at a fixed address, valid while its owner (mapping or buffer) lives.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    base: *mut u8,
    len: usize,
}

// SAFETY: a Region is an address range in shared memory; all accesses are raw copies or
// atomics, synchronized by the RMA epochs that use it.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// # Safety
    /// `base..base+len` must stay mapped (readable and writable) for as long as the
    /// Region or any copy of it is used.
    pub unsafe fn new(base: *mut u8, len: usize) -> Region {
        Region { base, len }
    }

    /// Size in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte.
    #[inline]
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Whether `offset..offset+len` lies inside.
    #[inline]
    pub fn contains(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies `src` in at `offset`. Panics if out of range (callers check first).
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(self.contains(offset, src.len()), "write outside the region");
        if src.len() == 8 {
            // The latency benchmarks' and the atomics' size: one move, no call.
            // SAFETY: in range (checked above) of memory that stays mapped, 8 bytes
            // read from `src` and written unaligned.
            unsafe {
                let v = std::ptr::read_unaligned(src.as_ptr().cast::<[u8; 8]>());
                std::ptr::write_unaligned(self.base.add(offset).cast::<[u8; 8]>(), v);
            }
            return;
        }
        // SAFETY: in range (checked above) of memory that stays mapped (constructor
        // contract); `src` cannot overlap shared window memory handed out as a slice.
        unsafe { crate::copy::copy_bytes(src.as_ptr(), self.base.add(offset), src.len()) };
    }

    /// Copies out from `offset` into `dst`.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(self.contains(offset, dst.len()), "read outside the region");
        if dst.len() == 8 {
            // As in `write`: the latency benchmarks' size, one move without a call.
            // SAFETY: in range (checked above) of memory that stays mapped, 8 bytes read
            // unaligned and written to `dst`.
            unsafe {
                let v = std::ptr::read_unaligned(self.base.add(offset).cast::<[u8; 8]>());
                std::ptr::write_unaligned(dst.as_mut_ptr().cast::<[u8; 8]>(), v);
            }
            return;
        }
        // SAFETY: in range (checked above) of memory that stays mapped (constructor
        // contract); `dst` is the caller's own buffer, writable for its length, and cannot
        // overlap shared window memory handed out as a slice.
        unsafe { crate::copy::copy_bytes(self.base.add(offset), dst.as_mut_ptr(), dst.len()) };
    }

    /// Reads `len` bytes at `offset` into `dst`, in place of what it held: a reused
    /// buffer keeps its capacity, and a new one is written once, not zeroed first (a
    /// received message's buffer: a fresh one of a large message's size was as much
    /// zeroing as copying).
    pub fn read_to_vec(&self, offset: usize, len: usize, dst: &mut Vec<u8>) {
        assert!(self.contains(offset, len), "read outside the region");
        dst.clear();
        dst.reserve(len);
        // SAFETY: the source is in range (checked above) of memory that stays mapped; the
        // destination is `dst`'s spare capacity, at least `len` bytes (reserved above),
        // which the copy writes in full before `set_len` makes it part of the vector.
        unsafe {
            crate::copy::copy_bytes(self.base.add(offset), dst.as_mut_ptr(), len);
            dst.set_len(len);
        }
    }

    /// Whether `count` blocks of `block` bytes, `stride` bytes apart from `offset`, lie
    /// inside (all of them: the last block's end is checked, nothing wraps).
    pub fn contains_blocks(
        &self,
        offset: usize,
        count: usize,
        block: usize,
        stride: usize,
    ) -> bool {
        match count {
            0 => true,
            n => (n - 1)
                .checked_mul(stride)
                .and_then(|last| offset.checked_add(last))
                .is_some_and(|last| self.contains(last, block)),
        }
    }

    /// Copies `src` in as blocks of `block` bytes, `stride` bytes apart from `offset`
    /// (a strided put: one range check for all of them). Panics if out of range (callers
    /// check first).
    pub fn write_blocks(&self, offset: usize, stride: usize, block: usize, src: &[u8]) {
        let count = src.len().checked_div(block).unwrap_or(0);
        assert!(
            block > 0 && src.len() == count * block && stride >= block || src.is_empty(),
            "blocks that overlap or do not fill the data"
        );
        assert!(
            self.contains_blocks(offset, count, block, stride),
            "write outside the region"
        );
        // SAFETY: every block in range (checked above: the last one's end is, and they
        // ascend) of memory that stays mapped (constructor contract); `src` is not window
        // memory handed out as a slice.
        unsafe {
            copy_blocks(
                src.as_ptr(),
                block,
                self.base.add(offset),
                stride,
                block,
                count,
            )
        };
    }

    /// Copies out blocks of `block` bytes, `stride` bytes apart from `offset`, into `dst`
    /// packed (a strided get).
    pub fn read_blocks(&self, offset: usize, stride: usize, block: usize, dst: &mut [u8]) {
        let count = dst.len().checked_div(block).unwrap_or(0);
        assert!(
            block > 0 && dst.len() == count * block && stride >= block || dst.is_empty(),
            "blocks that overlap or do not fill the data"
        );
        assert!(
            self.contains_blocks(offset, count, block, stride),
            "read outside the region"
        );
        // SAFETY: as in `write_blocks`.
        unsafe {
            copy_blocks(
                self.base.add(offset),
                stride,
                dst.as_mut_ptr(),
                block,
                block,
                count,
            )
        };
    }

    /// Read-modify-write of `len` bytes at `offset` through a copy, on the stack for an
    /// element (this runs once per element of every accumulate that arrives as an active
    /// message). Not atomic: the caller serializes it against other writers (the engine's
    /// window lock). Panics if out of range.
    pub fn update_through_copy(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        let mut small = [0u8; 16];
        let mut large = Vec::new();
        let buf: &mut [u8] = if len <= small.len() {
            &mut small[..len]
        } else {
            large.resize(len, 0);
            &mut large
        };
        self.read(offset, buf);
        f(buf);
        self.write(offset, buf);
    }

    /// The 8-byte-aligned word at `offset` as an atomic.
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            self.contains(offset, 8) && (self.base as usize + offset).is_multiple_of(8),
            "misaligned atomic"
        );
        // SAFETY: in range, aligned (checked), mapped for the Region's life; AtomicU64
        // has the layout of u64 and other processes only touch it atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) }
    }

    /// The 8-byte word at `offset` as an atomic, if it lies inside and is aligned.
    #[inline]
    pub fn checked_u64(&self, offset: usize) -> Option<&AtomicU64> {
        if !(self.contains(offset, 8) && (self.base as usize + offset).is_multiple_of(8)) {
            return None;
        }
        // SAFETY: in range, aligned (checked), mapped for the Region's life; AtomicU64
        // has the layout of u64 and other processes only touch it atomically.
        Some(unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) })
    }

    /// The 8-byte-aligned word at `offset`, checked here once, for a caller that
    /// reaches the same word on every call (a lock word): [`Word::get`] checks nothing.
    pub fn word_u64(&self, offset: usize) -> Word {
        Word {
            ptr: std::ptr::from_ref(self.atomic_u64(offset)),
        }
    }

    /// The 4-byte-aligned word at `offset` as an atomic (a futex word).
    #[inline]
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            self.contains(offset, 4) && (self.base as usize + offset).is_multiple_of(4),
            "misaligned atomic"
        );
        // SAFETY: in range, aligned (checked), mapped for the Region's life; AtomicU32
        // has the layout of u32 and other processes only touch it atomically.
        unsafe { AtomicU32::from_ptr(self.base.add(offset).cast()) }
    }

    /// Pointer to `offset`, checked for `len` bytes.
    #[inline]
    pub fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(self.contains(offset, len), "access outside the region");
        // SAFETY: in range (checked).
        unsafe { self.base.add(offset) }
    }
}

/// Copies `count` blocks of `block` bytes from `src` (blocks `src_stride` apart) to `dst`
/// (`dst_stride` apart). The usual element sizes get a fixed-size copy each (no call to
/// memcpy per block: a strided op of 1,024 doubles is 1,024 moves).
///
/// # Safety
/// Every block of both sides must be valid for the copy, and no block of one side may
/// overlap a block of the other.
unsafe fn copy_blocks(
    src: *const u8,
    src_stride: usize,
    dst: *mut u8,
    dst_stride: usize,
    block: usize,
    count: usize,
) {
    /// # Safety
    /// As `copy_blocks`, with `N == block`.
    unsafe fn fixed<const N: usize>(src: *const u8, ss: usize, dst: *mut u8, ds: usize, n: usize) {
        for i in 0..n {
            // SAFETY: the caller's contract, block by block; unaligned reads and writes
            // of N bytes.
            unsafe {
                let v = std::ptr::read_unaligned(src.add(i * ss).cast::<[u8; N]>());
                std::ptr::write_unaligned(dst.add(i * ds).cast::<[u8; N]>(), v);
            }
        }
    }
    // SAFETY: the caller's contract, passed on.
    unsafe {
        match block {
            4 => fixed::<4>(src, src_stride, dst, dst_stride, count),
            8 => fixed::<8>(src, src_stride, dst, dst_stride, count),
            16 => fixed::<16>(src, src_stride, dst, dst_stride, count),
            _ => {
                for i in 0..count {
                    crate::copy::copy_bytes(
                        src.add(i * src_stride),
                        dst.add(i * dst_stride),
                        block,
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_checked_whole_and_copied_in_place() {
        let mut buf = [0u8; 32];
        // SAFETY: `buf` outlives the region, which is used only in this test.
        let r = unsafe { Region::new(buf.as_mut_ptr(), buf.len()) };
        r.write_blocks(1, 10, 3, &[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let mut all = [0u8; 32];
        r.read(0, &mut all);
        assert_eq!(
            &all[..24],
            &[0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 4, 5, 6, 0, 0, 0, 0, 0, 0, 0, 7, 8, 9]
        );
        let mut back = [0u8; 9];
        r.read_blocks(1, 10, 3, &mut back);
        assert_eq!(back, [1, 2, 3, 4, 5, 6, 7, 8, 9]);
        assert!(r.contains_blocks(1, 3, 3, 10) && !r.contains_blocks(10, 3, 3, 10));
        assert!(!r.contains_blocks(0, usize::MAX, 1, 2), "no wrap");
        let past = std::panic::catch_unwind(|| r.write_blocks(12, 10, 3, &[0; 9]));
        assert!(past.is_err(), "the last block past the end is refused");
    }

    #[test]
    fn updates_go_through_a_copy_of_any_size() {
        let mut buf = [1u8; 64];
        // SAFETY: `buf` outlives the region, which is used only in this test.
        let r = unsafe { Region::new(buf.as_mut_ptr(), buf.len()) };
        r.update_through_copy(8, 8, &mut |b| b.iter_mut().for_each(|x| *x += 1));
        r.update_through_copy(16, 40, &mut |b| b.fill(9));
        let mut out = [0u8; 64];
        r.read(0, &mut out);
        assert_eq!(&out[..8], &[1; 8]);
        assert_eq!(&out[8..16], &[2; 8]);
        assert_eq!(&out[16..56], &[9; 40]);
        assert!(!r.contains(60, 8) && r.contains(56, 8) && !r.is_empty());
    }
}

/// An 8-byte word of a [`Region`], in range and aligned (checked by
/// [`Region::word_u64`]), valid while the Region's memory is (its constructor's
/// contract).
#[derive(Debug, Clone, Copy)]
pub struct Word {
    ptr: *const AtomicU64,
}

// SAFETY: as for Region: an address in shared memory, only ever accessed atomically.
unsafe impl Send for Word {}
// SAFETY: as above.
unsafe impl Sync for Word {}

impl Word {
    /// The word as an atomic.
    #[inline(always)]
    pub fn get(&self) -> &AtomicU64 {
        // SAFETY: in range and aligned (checked when made from the Region), mapped as
        // long as the Region's memory (Region::new's contract, which covers everything
        // derived from it); AtomicU64 has u64's layout and every process touches the
        // word atomically only.
        unsafe { &*self.ptr }
    }
}
