//! Bounds-checked byte access to memory other processes may touch at the same time
//! (a mapped window segment, or user memory exposed by a window).
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

/// Window memory of this process that a network device or a peer may read and write at
/// any time (the window memory of the network backends): our own zeroed, 8-byte aligned
/// allocation, or the user's buffer. Reached only through raw copies (no reference to
/// bytes a device may write is ever formed); the owner lives as long as this, and
/// whoever registers the memory with a device must deregister before dropping it.
pub struct LocalMemory {
    region: Region,
    /// Our allocation (allocate); freed on drop.
    _own: Option<Box<[u64]>>,
    /// The user's memory (create), given back by [`into_user`](Self::into_user).
    user: std::sync::Mutex<Option<Box<dyn rma_core::transport::UserMemory>>>,
}

impl std::fmt::Debug for LocalMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalMemory")
            .field("region", &self.region)
            .finish()
    }
}

impl LocalMemory {
    /// `len` zero bytes of our own, 8-byte aligned (for native 8-byte atomics), or an
    /// error when the system has not that much memory to give (a typed failure of window
    /// creation, not an abort). Zeroed by the allocator (fresh pages are not touched).
    pub fn allocate(len: usize) -> std::io::Result<LocalMemory> {
        let words = len.div_ceil(8);
        let mut own: Box<[u64]> = if words == 0 {
            Box::new([])
        } else {
            let layout = std::alloc::Layout::array::<u64>(words)
                .map_err(|_| std::io::Error::from(std::io::ErrorKind::OutOfMemory))?;
            // SAFETY: `layout` has a non-zero size (words > 0).
            let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
            if p.is_null() {
                return Err(std::io::Error::from(std::io::ErrorKind::OutOfMemory));
            }
            // SAFETY: `p` was allocated by the global allocator with the layout of
            // `[u64; words]` and zeroed (a valid u64 array); the box takes sole ownership
            // and frees it with that same layout.
            unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, words)) }
        };
        // SAFETY: the boxed slice does not move and lives in `_own` as long as the
        // region is used (this value), and holds at least `len` bytes.
        let region = unsafe { Region::new(own.as_mut_ptr().cast(), len) };
        Ok(LocalMemory {
            region,
            _own: Some(own),
            user: std::sync::Mutex::new(None),
        })
    }

    /// Window memory of a network backend, whose ranks reach each other through a
    /// device only: `shared` (MPI_Win_allocate_shared, memory every rank loads and
    /// stores) is refused with `unshareable`, the same on every rank (the engine agrees
    /// on it); no memory to be had is a typed failure.
    pub fn for_network_window(
        len: usize,
        shared: bool,
        unshareable: &'static str,
    ) -> Result<LocalMemory, rma_core::TransportError> {
        if shared {
            return Err(rma_core::TransportError::Unsupported(unshareable));
        }
        Self::allocate(len).map_err(|e| {
            rma_core::TransportError::Failed(format!(
                "cannot allocate a window of {len} bytes: {e}"
            ))
        })
    }

    /// The user's memory, in place.
    pub fn from_user(mut memory: Box<dyn rma_core::transport::UserMemory>) -> LocalMemory {
        let bytes = memory.bytes_mut();
        // SAFETY: the heap buffer behind the box does not move or go while the box is
        // held here (until `into_user` or drop, which end the region's use).
        let region = unsafe { Region::new(bytes.as_mut_ptr(), bytes.len()) };
        LocalMemory {
            region,
            _own: None,
            user: std::sync::Mutex::new(Some(memory)),
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// Whether there are no bytes.
    pub fn is_empty(&self) -> bool {
        self.region.len() == 0
    }

    /// Address of the first byte (to register with a device, valid while this lives).
    pub fn base(&self) -> *mut u8 {
        self.region.base()
    }

    /// Copies out from `offset` into `dst`. Panics if out of range.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.region.read(offset, dst)
    }

    /// Copies `src` in at `offset`. Panics if out of range.
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.region.write(offset, src)
    }

    /// Read-modify-write of `len` bytes at `offset` through a copy (the engine's window
    /// lock serializes these; native atomics never target the same (op, type) on a
    /// window).
    pub fn update(&self, offset: usize, len: usize, f: &mut dyn FnMut(&mut [u8])) {
        let mut buf = vec![0; len];
        self.region.read(offset, &mut buf);
        f(&mut buf);
        self.region.write(offset, &buf);
    }

    /// The user's memory back (`None` for our own allocation).
    pub fn into_user(self) -> Option<Box<dyn rma_core::transport::UserMemory>> {
        self.user.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}
