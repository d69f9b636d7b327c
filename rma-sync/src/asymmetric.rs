//! Asymmetric memory barriers, for handshakes where one side runs on every call and the
//! other rarely.
//!
//! Dekker's pattern: each side stores its word, then loads the other's; it works only if
//! each store is visible before the same side's load, which on x86 takes a full fence
//! (about 10 ns on this project's machine, as much as the lock it would replace). Here
//! the frequent side pays only a compiler fence ([`light`]) because the rare side
//! ([`heavy`]) makes every running thread of the process execute a full barrier: Linux's
//! `membarrier` (MEMBARRIER_CMD_PRIVATE_EXPEDITED), the technique of liburcu's
//! membarrier flavor and folly's `asymmetricHeavyBarrier`. A thread whose load came
//! before that barrier has its store visible to the heavy side after it; one whose load
//! came after sees the heavy side's store. Where the system has no membarrier (an old
//! kernel, a seccomp filter, valgrind) both sides fence.
//!
//! Used by [`BiasedLock`](crate::BiasedLock) (rma-core's window state) and by
//! librma-mpi's handle table.

use std::sync::atomic::{compiler_fence, fence, AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const MEMBARRIER: u8 = 1;
const FENCES: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// Which pair of barriers this process uses, registered for membarrier the first time.
/// Both sides ask before their barrier: a light side that finds membarrier in use runs
/// after the registration, which the heavy side's barriers then cover.
#[inline]
fn mode() -> u8 {
    let mode = MODE.load(Ordering::Acquire);
    if mode != UNKNOWN {
        return mode;
    }
    register()
}

#[cold]
fn register() -> u8 {
    let mode = if membarrier::register() {
        MEMBARRIER
    } else {
        FENCES
    };
    // First callers may race here: they all find the same answer.
    MODE.store(mode, Ordering::Release);
    mode
}

/// The frequent side's barrier: its store before its load, for the heavy side.
#[inline]
pub fn light() {
    if mode() == MEMBARRIER {
        // The heavy side's membarrier orders this thread's store and load for it.
        compiler_fence(Ordering::SeqCst);
    } else {
        fence(Ordering::SeqCst);
    }
}

/// The rare side's barrier: every light side's store before the heavy side's loads
/// (a system call, microseconds).
pub fn heavy() {
    if mode() == MEMBARRIER {
        // The kernel refuses a private expedited barrier only to a process that is not
        // registered for it: this one registered before any light side relied on it, or
        // it is a child forked after that (registration does not pass to a new address
        // space; its light sides' compiler fences are covered as soon as a barrier
        // runs, so registering again here is enough).
        let ran = membarrier::run() || (membarrier::register() && membarrier::run());
        assert!(
            ran,
            "membarrier, registered, refused a barrier: light sides are not ordered"
        );
        return;
    }
    fence(Ordering::SeqCst);
}

/// Linux's membarrier system call (thin FFI).
mod membarrier {
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Registers the process for private expedited barriers; whether that worked.
    pub fn register() -> bool {
        // SAFETY: membarrier takes two integers and a CPU id and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
    }

    /// A full memory barrier on every running thread of the process; whether it ran.
    pub fn run() -> bool {
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0, 0) == 0 }
    }
}
