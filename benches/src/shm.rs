//! A tiny POSIX shared-memory segment (shm_open + mmap) for the reference patterns of
//! `--reference`: memory both ranks map with no library in the way. Private to the
//! benches on purpose: the reference must not share code with the transport it measures.

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

/// A mapping of a named POSIX shared-memory object, unmapped on drop.
#[derive(Debug)]
pub struct SharedSegment {
    ptr: NonNull<u8>,
    len: usize,
}

fn c_name(name: &str) -> io::Result<CString> {
    if !name.starts_with('/') || name[1..].contains('/') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad shared-memory name {name:?}: one '/' first, none after"),
        ));
    }
    CString::new(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
}

impl SharedSegment {
    /// Creates the object `name` (it must not exist; mode 0600), sizes it to `len` bytes
    /// (zero-filled) and maps it.
    pub fn create(name: &str, len: usize) -> io::Result<SharedSegment> {
        let cname = c_name(name)?;
        // SAFETY: `cname` is a valid NUL-terminated string; shm_open has no other
        // preconditions.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
                0o600,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let sized = i64::try_from(len)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "segment too large"))
            .and_then(|l| {
                // SAFETY: `fd` is the descriptor just opened; ftruncate only resizes it.
                if unsafe { libc::ftruncate(fd, l) } == 0 {
                    Ok(())
                } else {
                    Err(io::Error::last_os_error())
                }
            });
        let mapped = sized.and_then(|()| Self::map(fd, len));
        // SAFETY: `fd` is ours and not used after this (the mapping keeps the object).
        unsafe { libc::close(fd) };
        if mapped.is_err() {
            let _ = Self::unlink(name);
        }
        mapped
    }

    /// Opens and maps the existing object `name`, which must hold at least `len` bytes.
    pub fn open(name: &str, len: usize) -> io::Result<SharedSegment> {
        let cname = c_name(name)?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        let fd = unsafe { libc::shm_open(cname.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: an all-zero `stat` is a valid value of the plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is a valid, writable `stat`.
        let stat_ok = unsafe { libc::fstat(fd, &mut st) } == 0;
        let mapped = if !stat_ok {
            Err(io::Error::last_os_error())
        } else if (st.st_size as u64) < len as u64 {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{name} holds {} bytes, not {len}", st.st_size),
            ))
        } else {
            Self::map(fd, len)
        };
        // SAFETY: `fd` is ours and not used after this.
        unsafe { libc::close(fd) };
        mapped
    }

    fn map(fd: libc::c_int, len: usize) -> io::Result<SharedSegment> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty segment"));
        }
        // SAFETY: a fresh shared mapping of `len` bytes of an object that holds at least
        // that many; the kernel picks the address, so nothing existing is replaced.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))?;
        Ok(SharedSegment { ptr, len })
    }

    /// Removes the name (mappings stay valid until unmapped).
    pub fn unlink(name: &str) -> io::Result<()> {
        let cname = c_name(name)?;
        // SAFETY: `cname` is a valid NUL-terminated string.
        if unsafe { libc::shm_unlink(cname.as_ptr()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// The first byte of the mapping (page-aligned).
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: empty segments are refused).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedSegment {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping made in `map`, unmapped only here.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_mappings_share_bytes() {
        let name = format!("/rma-benches-test-{}", std::process::id());
        let a = SharedSegment::create(&name, 8192).unwrap();
        let b = SharedSegment::open(&name, 8192).unwrap();
        SharedSegment::unlink(&name).unwrap();
        assert!(SharedSegment::open(&name, 8192).is_err());
        // SAFETY: both mappings hold 8192 bytes; nothing else touches them.
        unsafe {
            a.as_ptr().add(100).write(42);
            assert_eq!(b.as_ptr().add(100).read(), 42);
        }
        assert_eq!(a.len(), 8192);
        assert!(SharedSegment::create("no-slash", 10).is_err());
    }
}
