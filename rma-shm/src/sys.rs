//! The thin FFI layer: POSIX shared memory, mmap, cross-memory attach, futexes. Every
//! unsafe call of the crate that talks to the kernel is here, each argued (the liveness
//! of peer processes is rma-backend's, shared with the network backends).

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;

/// A shared-memory mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    /// An anonymous segment's descriptor while peers may still open it (see
    /// [`Mapping::create_anonymous`]).
    published: std::sync::Mutex<Option<std::os::fd::OwnedFd>>,
}

// SAFETY: the mapping is plain shared memory; every access goes through raw pointers
// whose synchronization the users of the mapping argue (atomics, epochs).
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

fn c_name(name: &str) -> io::Result<CString> {
    CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in segment name"))
}

impl Mapping {
    /// Creates an anonymous segment (a memfd) of `len` bytes, zeroed, mapped. It has no
    /// name, so nothing of it outlives the processes that map it, however they end.
    /// Processes of the same user open it through [`path`](Self::path) until
    /// [`unpublish`](Self::unpublish) closes the descriptor that path names.
    pub fn create_anonymous(len: usize) -> io::Result<Mapping> {
        // SAFETY: a constant NUL-terminated name (shown in /proc/<pid>/maps) and flags.
        let fd = unsafe { libc::memfd_create(c"rma-segment".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by memfd_create and is owned by nobody else.
        let owned = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        // SAFETY: `fd` is open (owned above); ftruncate zero-fills the new size.
        if unsafe { libc::ftruncate(fd, len.max(1) as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        let m = Self::map(fd, len)?;
        *m.published.lock().unwrap_or_else(|e| e.into_inner()) = Some(owned);
        Ok(m)
    }

    /// Where other processes of this user open an anonymous segment while it is
    /// published: `/proc/<pid>/fd/<fd>`.
    pub fn path(&self) -> Option<String> {
        use std::os::fd::AsRawFd;
        let fd = self.published.lock().unwrap_or_else(|e| e.into_inner());
        fd.as_ref()
            .map(|fd| format!("/proc/{}/fd/{}", pid(), fd.as_raw_fd()))
    }

    /// The descriptor number of an anonymous segment while it is published (peers open
    /// `/proc/<pid>/fd/<fd>`).
    pub fn published_fd(&self) -> Option<u32> {
        use std::os::fd::AsRawFd;
        let fd = self.published.lock().unwrap_or_else(|e| e.into_inner());
        fd.as_ref()
            .and_then(|fd| u32::try_from(fd.as_raw_fd()).ok())
    }

    /// Closes an anonymous segment's descriptor once every peer has mapped it: the
    /// descriptors a process holds stay flat however many windows it makes.
    pub fn unpublish(&self) {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
    }

    /// Opens and maps an existing segment of `len` bytes: a peer's anonymous segment by
    /// its [`path`](Self::path), or a named POSIX segment.
    pub fn open(name: &str, len: usize) -> io::Result<Mapping> {
        let c = c_name(name)?;
        let fd = if name.starts_with("/proc/") {
            // SAFETY: `c` is a valid NUL-terminated path; constant flags.
            unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
        } else {
            // SAFETY: `c` is a valid NUL-terminated string.
            unsafe { libc::shm_open(c.as_ptr(), libc::O_RDWR, 0o600) }
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // A segment smaller than the peer claims would fault (SIGBUS) on the first access
        // past its end: refuse it before mapping.
        // SAFETY: `libc::stat` is plain old data; all-zero is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open (checked above); `st` is a valid out-pointer.
        let size_ok = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_size as u64 >= len as u64;
        let out = if size_ok {
            Self::map(fd, len)
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the segment has {} bytes, fewer than the {len} its descriptor claims",
                    st.st_size
                ),
            ))
        };
        // SAFETY: `fd` is ours.
        unsafe { libc::close(fd) };
        out
    }

    fn map(fd: libc::c_int, len: usize) -> io::Result<Mapping> {
        // SAFETY: a fresh shared mapping of an open descriptor; the kernel picks the address.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len.max(1),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap never returns null on success"),
            len,
            published: std::sync::Mutex::new(None),
        })
    }

    /// First byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }
}

impl Mapping {
    /// Places the whole pages of `offset..offset+len` on the NUMA node this thread runs
    /// on now, whoever touches them first: `mbind(MPOL_PREFERRED)` sets the segment's
    /// shared policy (memfd memory is shmem: the policy belongs to the memory, so a
    /// peer's page fault through its own mapping follows it too). Without it the first
    /// toucher's node wins, which is a peer's when its put comes before the owner's
    /// first store. Lazy: nothing is allocated now. Pages shared with a neighbouring
    /// part (allocate_shared) are left to their first toucher.
    pub fn prefer_this_node(&self, offset: usize, len: usize) -> io::Result<()> {
        let page = page_size();
        let start = (self.ptr() as usize + offset).next_multiple_of(page);
        let end = (self.ptr() as usize + offset.saturating_add(len).min(self.len)) / page * page;
        if end <= start {
            return Ok(());
        }
        let (mut cpu, mut node) = (0u32, 0u32);
        // SAFETY: getcpu writes two u32 through valid pointers; the cache argument is unused.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_getcpu,
                &mut cpu,
                &mut node,
                std::ptr::null_mut::<u8>(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let bits = 8 * std::mem::size_of::<libc::c_ulong>();
        let mut mask = vec![0 as libc::c_ulong; node as usize / bits + 1];
        mask[node as usize / bits] |= 1 << (node as usize % bits);
        // SAFETY: a page-aligned range inside this mapping (computed above), a node mask
        // of `mask.len() * bits` bits; mbind changes placement policy, not contents.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_mbind,
                start,
                end - start,
                libc::MPOL_PREFERRED,
                mask.as_ptr(),
                mask.len() * bits,
                0u32,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(1)
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly what `map` mapped; no reference into it outlives `self`
        // (holders keep the mapping alive through an Arc).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len.max(1)) };
    }
}

/// This process's id.
pub fn pid() -> u32 {
    std::process::id()
}

/// Lets any process of ours read and write this process's memory with
/// process_vm_readv/writev (Yama's ptrace_scope 1 otherwise allows only descendants).
pub fn allow_cross_memory_attach() {
    // SAFETY: prctl with constant arguments; failure only means CMA stays restricted.
    unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// Copies `local` into process `pid` at address `remote` (cross-memory attach).
pub fn write_remote(pid: u32, remote: u64, local: &[u8]) -> io::Result<()> {
    let l = libc::iovec {
        iov_base: local.as_ptr() as *mut libc::c_void,
        iov_len: local.len(),
    };
    let r = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: local.len(),
    };
    // SAFETY: `l` describes a live slice we only read; `r` names memory in another
    // process, checked by the kernel (EFAULT if unmapped there).
    let n = unsafe { libc::process_vm_writev(pid as libc::pid_t, &l, 1, &r, 1, 0) };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize != local.len() => Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "partial cross-memory write",
        )),
        _ => Ok(()),
    }
}

/// Copies from process `pid` at address `remote` into `local`.
pub fn read_remote(pid: u32, remote: u64, local: &mut [u8]) -> io::Result<()> {
    let l = libc::iovec {
        iov_base: local.as_mut_ptr().cast(),
        iov_len: local.len(),
    };
    let r = libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: local.len(),
    };
    // SAFETY: `l` describes a live slice we own exclusively; `r` is checked by the kernel.
    let n = unsafe { libc::process_vm_readv(pid as libc::pid_t, &l, 1, &r, 1, 0) };
    match n {
        n if n < 0 => Err(io::Error::last_os_error()),
        n if n as usize != local.len() => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "partial cross-memory read",
        )),
        _ => Ok(()),
    }
}

/// Sleeps while the shared word `word` holds `expected`, at most `timeout` (a futex on
/// shared memory: another process's [`futex_wake`] on the same word ends it). Returns
/// early on a wake, a changed word, a signal or the timeout; the caller rechecks.
pub fn futex_wait(
    word: &std::sync::atomic::AtomicU32,
    expected: u32,
    timeout: std::time::Duration,
) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT (not private: the word is in a mapping shared between
    // processes) on a valid, aligned u32 that lives as long as the mapping the caller
    // holds; the timespec outlives the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes the processes sleeping in [`futex_wait`] on `word`.
pub fn futex_wake(word: &std::sync::atomic::AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 of a shared mapping; wakes at most
    // i32::MAX waiters and touches no memory.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_claiming_more_than_the_segment_is_refused_not_a_sigbus() {
        let m = Mapping::create_anonymous(4096).unwrap();
        let path = m.path().unwrap();
        let err = Mapping::open(&path, 1 << 20).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
        // The truth is fine, and it is the same memory.
        let peer = Mapping::open(&path, 4096).unwrap();
        // SAFETY: both mappings are 4096 bytes long and alive; one byte through each.
        unsafe {
            *m.ptr().add(4095) = 7;
            assert_eq!(*peer.ptr().add(4095), 7);
        }
        // Once unpublished, nobody opens it any more.
        m.unpublish();
        assert!(m.path().is_none());
        assert!(Mapping::open(&path, 4096).is_err());
    }

    /// The policy `get_mempolicy` reports for the page at `addr`, and its first node.
    fn policy_at(addr: *mut u8) -> (libc::c_int, libc::c_ulong) {
        let (mut mode, mut mask): (libc::c_int, libc::c_ulong) = (-1, 0);
        const MPOL_F_ADDR: libc::c_ulong = 2;
        // SAFETY: writes the mode and a one-word mask through valid pointers; `addr` is
        // mapped (the caller's mapping).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_get_mempolicy,
                &mut mode,
                &mut mask,
                64usize,
                addr,
                MPOL_F_ADDR,
            )
        };
        assert_eq!(rc, 0, "get_mempolicy: {}", io::Error::last_os_error());
        (mode, mask)
    }

    #[test]
    fn an_owner_places_its_pages_on_its_node_for_every_mapping_of_them() {
        let page = page_size();
        let m = Mapping::create_anonymous(4 * page).unwrap();
        // Before: the default policy (first touch decides).
        assert_eq!(policy_at(m.ptr()).0, libc::MPOL_DEFAULT);
        // A part from the middle of the first page to the end of the third: the whole
        // second and third pages are placed, not the first one, shared with a neighbour.
        m.prefer_this_node(page / 2, 3 * page - page / 2).unwrap();
        let mut node = 0u32;
        // SAFETY: getcpu writes a u32 through a valid pointer.
        unsafe {
            libc::syscall(
                libc::SYS_getcpu,
                std::ptr::null_mut::<u32>(),
                &mut node,
                0usize,
            )
        };
        // SAFETY: offsets inside the 4-page mapping.
        let (first, second, third, fourth) = unsafe {
            (
                m.ptr(),
                m.ptr().add(page),
                m.ptr().add(2 * page),
                m.ptr().add(3 * page),
            )
        };
        assert_eq!(policy_at(first).0, libc::MPOL_DEFAULT);
        assert_eq!(policy_at(second), (libc::MPOL_PREFERRED, 1 << node));
        assert_eq!(policy_at(third), (libc::MPOL_PREFERRED, 1 << node));
        assert_eq!(policy_at(fourth).0, libc::MPOL_DEFAULT);
        // A peer's mapping of the same memory sees the same policy: its faults follow it.
        let peer = Mapping::open(&m.path().unwrap(), 4 * page).unwrap();
        // SAFETY: inside the peer's 4-page mapping.
        let peer_second = unsafe { peer.ptr().add(page) };
        assert_eq!(policy_at(peer_second), (libc::MPOL_PREFERRED, 1 << node));
    }
}
