//! A lock biased to the thread that uses it: rma-core's window state.
//!
//! Every synchronization call and every op that takes the locked path holds the window's
//! state; a lock and unlock of a target hold it once each. A mutex costs two locked
//! instructions per hold (16 ns a hold on this project's machine, half of a lock + unlock
//! on shared memory), although almost every program uses a window from one thread. So
//! the first thread to hold the state becomes its *owner*, and holds it after that
//! without a locked instruction: it announces its hold in a word of the lock (a plain
//! store), then checks it still owns the lock (a plain load). Any other thread takes the
//! mutex and *revokes* the bias: it marks the lock revoked, runs the heavy side of an
//! [asymmetric barrier](crate::asymmetric), and waits for the owner's announced hold to
//! end; from then on every thread, the former owner too, takes the mutex. Dekker's
//! pattern with the barrier split unevenly: either the owner's check sees the lock
//! revoked (and it takes the mutex), or the revoker sees the owner's hold (and waits for
//! it). The owner's end of a hold is a release store and the revoker's wait an acquire
//! load: what the owner did is visible to the revoker. A revocation happens at most once
//! per window (the progress agent's first pass over it, a second application thread).
//!
//! Holding the state twice in one thread deadlocks a mutex; here it would alias the
//! state, so it is checked and refused with a panic (no caller does it).
//!
//! A thread is known by its [token](owner_token): on Linux with glibc on x86-64 and
//! AArch64, its thread pointer, one register read (a thread-local costs a call into the
//! dynamic linker per read inside a shared library such as librma-mpi: two per lock +
//! unlock); elsewhere its [`thread_id`]. Two live threads never share a thread pointer
//! (each points to its own thread control block). A thread that starts after another
//! exited may get the exited one's, and if that one owned a lock, the new thread holds it
//! as its owner: sound, because the exited owner holds nothing (its holds were guards on
//! its own stack, and each ended with a release store of `owner_holds`), and the new
//! thread's first fast hold reads `owner_holds` with acquire, after the C library took
//! the exited thread's stack back and handed it to the new one under its stack cache's
//! lock, so the exited owner's holds happen before it.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::asymmetric;

/// No thread owns the lock yet.
const NO_OWNER: u64 = 0;
/// The bias is gone: every thread takes the mutex.
const REVOKED: u64 = u64::MAX;

/// A lock of `T`, biased to its first holder's thread.
pub struct BiasedLock<T> {
    data: UnsafeCell<T>,
    /// Held by every hold that is not the owner's fast one.
    mutex: Mutex<()>,
    /// The owner's [token](owner_token), [`NO_OWNER`] or [`REVOKED`].
    owner: AtomicU64,
    /// The owner holds the state without the mutex.
    owner_holds: AtomicBool,
}

// SAFETY: the data is reached only through a `BiasedGuard`, and at most one exists at a
// time (module docs): the owner's fast hold excludes every mutex hold until it ends
// (revocation waits for it), mutex holds exclude each other.
unsafe impl<T: Send> Sync for BiasedLock<T> {}

/// A hold of a [`BiasedLock`]: the owner's fast one, or one through the mutex.
pub struct BiasedGuard<'a, T> {
    lock: &'a BiasedLock<T>,
    mutex: Option<MutexGuard<'a, ()>>,
}

impl<T> BiasedLock<T> {
    /// A lock of `data`, owned by no thread yet (its first holder becomes the owner).
    pub fn new(data: T) -> BiasedLock<T> {
        BiasedLock {
            data: UnsafeCell::new(data),
            mutex: Mutex::new(()),
            owner: AtomicU64::new(NO_OWNER),
            owner_holds: AtomicBool::new(false),
        }
    }

    /// Holds the state until the guard drops.
    #[inline]
    pub fn lock(&self) -> BiasedGuard<'_, T> {
        let me = owner_token();
        // Acquire: the owner's last hold happens before this one, also where this thread
        // took over an exited owner's token (module docs); a plain load on x86-64.
        if self.owner.load(Ordering::Relaxed) == me && !self.owner_holds.load(Ordering::Acquire) {
            self.owner_holds.store(true, Ordering::Relaxed);
            asymmetric::light();
            if self.owner.load(Ordering::Relaxed) == me {
                return BiasedGuard {
                    lock: self,
                    mutex: None,
                };
            }
            // Revoked meanwhile: the revoker waits for this to clear.
            self.owner_holds.store(false, Ordering::Release);
        }
        self.lock_slow(me)
    }

    /// A hold through the mutex: the first one makes its thread the owner, one by
    /// another thread revokes the owner's bias.
    #[cold]
    #[inline(never)]
    fn lock_slow(&self, me: u64) -> BiasedGuard<'_, T> {
        let held = self.mutex.lock().unwrap_or_else(|e| e.into_inner());
        match self.owner.load(Ordering::Relaxed) {
            NO_OWNER => self.owner.store(me, Ordering::Relaxed),
            REVOKED => {}
            owner if owner == me => {
                // Only a second hold in the owner's thread gets here (its fast path
                // failed for `owner_holds` set, by itself).
                assert!(
                    !self.owner_holds.load(Ordering::Relaxed),
                    "a window's state held twice by one thread"
                );
            }
            _ => {
                self.owner.store(REVOKED, Ordering::Relaxed);
                asymmetric::heavy();
                // Acquire: the owner's last hold happens before this one.
                while self.owner_holds.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
            }
        }
        BiasedGuard {
            lock: self,
            mutex: Some(held),
        }
    }
}

impl<T> std::ops::Deref for BiasedGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only hold of the lock (module docs).
        unsafe { &*self.lock.data.get() }
    }
}

impl<T> std::ops::DerefMut for BiasedGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and `&mut self` keeps this reference unique.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T> Drop for BiasedGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        if self.mutex.is_none() {
            // Release: this hold's accesses before a revoker's (acquire) sight of its end.
            self.lock.owner_holds.store(false, Ordering::Release);
        }
        // A mutex hold ends when its guard (a field) drops.
    }
}

/// How [`BiasedLock`]s know this thread (module docs): its thread pointer, never
/// [`NO_OWNER`] or [`REVOKED`] (the address of its thread control block, neither null
/// nor all ones).
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "x86_64"))]
#[inline(always)]
fn owner_token() -> u64 {
    let tcb: u64;
    // SAFETY: the x86-64 psABI's TLS layout, which glibc follows: %fs holds the thread
    // pointer, whose first word is the thread control block's own address (glibc's
    // `THREAD_SELF` reads it the same way). A read of this thread's own memory, always
    // mapped while the thread runs; no stack, no flags touched.
    unsafe {
        std::arch::asm!(
            "mov {}, qword ptr fs:[0]",
            out(reg) tcb,
            options(nostack, readonly, preserves_flags),
        );
    }
    tcb
}

/// How [`BiasedLock`]s know this thread: its thread pointer (as above).
#[cfg(all(target_os = "linux", target_env = "gnu", target_arch = "aarch64"))]
#[inline(always)]
fn owner_token() -> u64 {
    let tp: u64;
    // SAFETY: reads TPIDR_EL0, the thread pointer register user code may read (AArch64's
    // TLS ABI); it touches no memory.
    unsafe {
        std::arch::asm!(
            "mrs {}, tpidr_el0",
            out(reg) tp,
            options(nomem, nostack, preserves_flags),
        );
    }
    tp
}

/// How [`BiasedLock`]s know this thread where no thread pointer is read: its number.
#[cfg(not(all(
    target_os = "linux",
    target_env = "gnu",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
#[inline(always)]
fn owner_token() -> u64 {
    thread_id()
}

/// This thread's number, the same for every user in the process (the engine's
/// per-thread counters, whose shards it indexes; [`BiasedLock`]s where no thread pointer
/// is read): threads are numbered from 1 as they first ask, never renumbered.
#[inline]
pub fn thread_id() -> u64 {
    let me = THREAD_ID.get();
    if me != NO_OWNER {
        return me;
    }
    first_thread_id()
}

thread_local! {
    // Const-initialized, nothing to drop: a plain thread-local load, no lazy
    // initialization to check on every lock.
    static THREAD_ID: Cell<u64> = const { Cell::new(NO_OWNER) };
}

/// A thread's first [`thread_id`]: numbers it.
#[cold]
#[inline(never)]
fn first_thread_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let me = NEXT.fetch_add(1, Ordering::Relaxed);
    THREAD_ID.set(me);
    me
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Threads take turns with an owner that holds the lock all the time: a plain
    /// (non-atomic) counter inside loses no increment, and no hold ever sees another
    /// inside (a flag set for the hold's length).
    #[test]
    fn holds_exclude_each_other_across_the_revocation() {
        struct Shared {
            count: u64,
            inside: bool,
        }
        let lock = Arc::new(BiasedLock::new(Shared {
            count: 0,
            inside: false,
        }));
        let hold = |lock: &BiasedLock<Shared>| {
            let mut g = lock.lock();
            assert!(!g.inside, "two holds at once");
            g.inside = true;
            g.count += 1;
            std::hint::black_box(&mut *g);
            g.inside = false;
        };
        // The owner: this thread, first to hold.
        for _ in 0..1000 {
            hold(&lock);
        }
        let others: Vec<_> = (0..3)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..20_000 {
                        hold(&lock);
                    }
                })
            })
            .collect();
        for _ in 0..20_000 {
            hold(&lock);
        }
        for t in others {
            t.join().unwrap();
        }
        assert_eq!(lock.lock().count, 1000 + 4 * 20_000);
        assert_eq!(lock.owner.load(Ordering::Relaxed), REVOKED);
    }

    #[test]
    fn the_owner_holds_without_the_mutex() {
        let lock = BiasedLock::new(5u32);
        drop(lock.lock()); // the first hold makes this thread the owner
        let g = lock.lock();
        assert!(g.mutex.is_none(), "the owner's hold is the fast one");
        assert!(lock.mutex.try_lock().is_ok(), "and leaves the mutex free");
        drop(g);
        assert!(!lock.owner_holds.load(Ordering::Relaxed));
    }

    #[test]
    fn live_threads_have_tokens_of_their_own() {
        let all_alive = Arc::new(std::sync::Barrier::new(4));
        let tokens: Vec<u64> = (0..4)
            .map(|_| {
                let all_alive = all_alive.clone();
                std::thread::spawn(move || {
                    let first = owner_token();
                    // Every thread reads its token while the others still run.
                    all_alive.wait();
                    assert_eq!(owner_token(), first, "a thread's token changed");
                    first
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let mut distinct = tokens.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            4,
            "two live threads shared a token: {tokens:?}"
        );
        assert!(tokens.iter().all(|&t| t != NO_OWNER && t != REVOKED));
        assert!(!tokens.contains(&owner_token()));
    }

    /// A thread that starts after the owner exited holds the lock with the owner's
    /// writes seen: as the owner when it got the exited owner's token (the C library
    /// reuses a joined thread's stack and control block), through the mutex otherwise.
    #[test]
    fn a_thread_after_an_exited_owner_sees_its_writes() {
        let lock = Arc::new(BiasedLock::new(0u64));
        let owner = {
            let lock = lock.clone();
            std::thread::spawn(move || {
                *lock.lock() = 41; // the first hold: this thread owns the lock
                *lock.lock() += 1;
                owner_token()
            })
            .join()
            .unwrap()
        };
        assert_eq!(lock.owner.load(Ordering::Relaxed), owner);
        let lock2 = lock.clone();
        let (token, value, fast) = std::thread::spawn(move || {
            let g = lock2.lock();
            (owner_token(), *g, g.mutex.is_none())
        })
        .join()
        .unwrap();
        assert_eq!(value, 42, "the exited owner's writes were not seen");
        assert_eq!(
            fast,
            token == owner,
            "a hold's kind does not follow its token (owner {owner:#x}, this {token:#x})"
        );
    }

    #[test]
    #[should_panic(expected = "held twice")]
    fn a_second_hold_in_one_thread_is_refused() {
        let lock = BiasedLock::new(0u32);
        drop(lock.lock());
        let _first = lock.lock();
        let _second = lock.lock();
    }
}
