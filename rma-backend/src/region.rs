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
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Address of the first byte.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Whether `offset..offset+len` lies inside.
    pub fn contains(&self, offset: usize, len: usize) -> bool {
        offset.checked_add(len).is_some_and(|end| end <= self.len)
    }

    /// Copies `src` in at `offset`. Panics if out of range (callers check first).
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(self.contains(offset, src.len()), "write outside the region");
        // SAFETY: in range (checked above) of memory that stays mapped (constructor
        // contract); `src` cannot overlap shared window memory handed out as a slice.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.base.add(offset), src.len()) };
    }

    /// Copies out from `offset` into `dst`.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(self.contains(offset, dst.len()), "read outside the region");
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.base.add(offset), dst.as_mut_ptr(), dst.len())
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
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        assert!(
            self.contains(offset, 8) && (self.base as usize + offset).is_multiple_of(8),
            "misaligned atomic"
        );
        // SAFETY: in range, aligned (checked), mapped for the Region's life; AtomicU64
        // has the layout of u64 and other processes only touch it atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) }
    }

    /// The 4-byte-aligned word at `offset` as an atomic (a futex word).
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
    pub fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(self.contains(offset, len), "access outside the region");
        // SAFETY: in range (checked).
        unsafe { self.base.add(offset) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
