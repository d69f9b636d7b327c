//! The calls into the system this crate makes: a zeroed allocation that may fail, and
//! whether a process still lives. The crate's other unsafe code is [`Region`]'s raw
//! access to memory that other processes or devices share.
//!
//! [`Region`]: crate::Region

use std::io;

/// `words` zeroed u64 of our own, or an error when the system has not that much memory to
/// give (a typed failure, not an abort). Zeroed by the allocator: fresh pages are not
/// touched, so a large window costs nothing until it is used.
pub(crate) fn zeroed_words(words: usize) -> io::Result<Box<[u64]>> {
    if words == 0 {
        return Ok(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<u64>(words)
        .map_err(|_| io::Error::from(io::ErrorKind::OutOfMemory))?;
    // SAFETY: `layout` has a non-zero size (words > 0).
    let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u64>();
    if p.is_null() {
        return Err(io::Error::from(io::ErrorKind::OutOfMemory));
    }
    // SAFETY: `p` was allocated by the global allocator with the layout of `[u64; words]`
    // and zeroed (a valid u64 array); the box takes sole ownership and frees it with that
    // same layout.
    Ok(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, words)) })
}

/// Whether process `pid` still exists and is not a zombie (a killed child its parent has
/// not reaped yet is dead for us).
pub(crate) fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 delivers nothing: kill only checks that the process exists and
    // that we may signal it; it touches no memory of ours.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if r < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => r == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_lives_and_a_reaped_child_does_not() {
        assert!(alive(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(!alive(pid));
    }

    #[test]
    fn allocations_are_zeroed_and_refused_past_the_address_space() {
        assert!(zeroed_words(0).unwrap().is_empty());
        assert!(zeroed_words(1000).unwrap().iter().all(|w| *w == 0));
        assert!(zeroed_words(usize::MAX / 4).is_err());
    }
}
