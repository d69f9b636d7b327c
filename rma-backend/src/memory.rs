//! Window memory of this process that a network device or a peer may read and write at
//! any time: [`LocalMemory`].

use rma_core::transport::UserMemory;
use rma_core::{BackendError, TransportError};

use crate::Region;

/// Window memory of this process that a network device or a peer may read and write at
/// any time (the window memory of the network backends): our own zeroed, 8-byte aligned
/// allocation, or the user's buffer. Reached only through raw copies (no reference to
/// bytes a device may write is ever formed); the owner lives as long as this, and
/// whoever registers the memory with a device must deregister before dropping it (a
/// [`WindowSegment`](crate::WindowSegment) does).
pub struct LocalMemory {
    region: Region,
    /// Our allocation (allocate); freed on drop.
    _own: Option<Box<[u64]>>,
    /// The user's memory (create), given back by [`into_user`](Self::into_user).
    user: std::sync::Mutex<Option<Box<dyn UserMemory>>>,
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
        let mut own = crate::sys::zeroed_words(len.div_ceil(8))?;
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
    ) -> Result<LocalMemory, TransportError> {
        if shared {
            return Err(TransportError::Unsupported(unshareable));
        }
        Self::allocate(len)
            .map_err(|e| BackendError::new(format!("allocating a window of {len} bytes"), e).into())
    }

    /// The user's memory, in place.
    pub fn from_user(mut memory: Box<dyn UserMemory>) -> LocalMemory {
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
        self.region.update_through_copy(offset, len, f)
    }

    /// The user's memory back (`None` for our own allocation).
    pub fn into_user(self) -> Option<Box<dyn UserMemory>> {
        self.user.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The system's refusal travels whole: the rma error says what was being done and its
    // source chain reaches the io::Error the allocator gave.
    #[test]
    fn a_window_no_memory_holds_keeps_the_system_error_as_its_source() {
        let len = 1usize << 62;
        let Err(failure) = LocalMemory::for_network_window(len, false, "not shared") else {
            panic!("{len} bytes allocated");
        };
        let err = rma_core::Error::from(failure);
        let mut cause = std::error::Error::source(&err);
        let mut io = None;
        while let Some(c) = cause {
            io = io.or(c.downcast_ref::<std::io::Error>());
            cause = c.source();
        }
        let io = io.unwrap_or_else(|| panic!("no io::Error under {err:?}"));
        assert_eq!(io.kind(), std::io::ErrorKind::OutOfMemory, "{err:?}");
        let text = format!("{err:?}");
        assert!(
            text.contains(&format!(
                "allocating a window of {len} bytes failed: caused by: "
            )),
            "{text}"
        );
    }
}
