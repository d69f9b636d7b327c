//! The table behind the window handles: every call looks its handle up without a lock
//! or a locked instruction; MPI_Win_free, rare, sees every thread still in a call.
//!
//! Every MPI call on a window looks its handle up, and on shared memory a whole
//! `MPI_Put` is about 30 ns: a reader-writer lock per slot cost two locked instructions
//! per call (about 20 ns on this project's machine, two thirds of rma's own put + flush
//! for the pair of calls). Here a call *announces* the slot it uses in a word of its own
//! thread (a plain store), then reads the slot's pointer; taking an entry out swaps the
//! pointer for null, then reads every thread's announcements and gives the entry back
//! (the window is in use) when one names its slot. That is Dekker's pattern: each side
//! stores, then loads what the other stored, and needs the store visible before its load.
//! The reader pays only a compiler fence because the taker runs the heavy side of an
//! [asymmetric barrier](rma_sync::asymmetric) (Linux's `membarrier`): a reader whose load
//! came before that barrier has its announcement visible to the taker after it; one
//! whose load came after sees the null.
//!
//! Where MPI's calls come one at a time (the application initialized MPI below
//! MPI_THREAD_MULTIPLE: [`HandleTable::calls_one_at_a_time`]), every call announces in
//! one reader of the table instead of its thread's: finding the thread's cost a call into the
//! dynamic linker (`__tls_get_addr`, a thread-local of a shared library) on every MPI
//! call, 33 of the 650 instructions of an `MPI_Put` + `MPI_Win_flush` pair.
//!
//! A reader's announcement is cleared with a release store after its call: a taker
//! that sees it cleared (acquire) sees every access of the call done, so it may drop
//! the entry. Calls nest (attribute callbacks may call MPI on other windows): each
//! thread announces up to [`NESTING`] slots at once, a deeper call is refused.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};

use rma_sync::asymmetric;
use std::sync::{Mutex, MutexGuard};

/// How deeply one thread's calls on entries may nest.
pub const NESTING: usize = 8;

/// Why a lookup or a take found no entry to hand out.
#[derive(Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// No entry at that index (never made, or taken).
    Empty,
    /// Another call (of any thread) is using the entry: it stays where it was.
    InUse,
    /// This thread's calls nest deeper than [`NESTING`].
    TooDeep,
}

/// A fixed number of slots, each empty or holding a `T`, looked up from any thread.
pub struct HandleTable<T> {
    slots: Box<[AtomicPtr<T>]>,
    /// A slot's index is in use from [`insert`](Self::insert) until [`remove`](Self::remove),
    /// also while its entry is taken out: what was taken can go back in.
    reserved: Mutex<Vec<bool>>,
    /// The one reader of every call, where calls come one at a time
    /// ([`calls_one_at_a_time`](Self::calls_one_at_a_time)); null: each thread's own.
    serial: AtomicPtr<Reader>,
}

impl<T> HandleTable<T> {
    /// A table of `n` empty slots.
    pub fn new(n: usize) -> HandleTable<T> {
        HandleTable {
            slots: (0..n)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            reserved: Mutex::new(vec![false; n]),
            serial: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// From now on calls come one at a time (MPI_THREAD_SINGLE, FUNNELED or SERIALIZED:
    /// the application never makes two at once, and orders those it makes from several
    /// threads itself): they announce in one reader of this table's, with no
    /// thread-local lookup. Set before any entry is filled; the entries' safety then
    /// rests on MPI's rule, as the communicators' already does (`bootstrap::Duplicate`).
    pub fn calls_one_at_a_time(&self) {
        let reader = new_reader();
        self.serial
            .store((reader as *const Reader).cast_mut(), Release);
    }

    fn reserved(&self) -> MutexGuard<'_, Vec<bool>> {
        self.reserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the entry at `index`.
    #[inline]
    pub fn with<R>(&self, index: usize, f: impl FnOnce(&T) -> R) -> Result<R, Unavailable> {
        let slot = self.slots.get(index).ok_or(Unavailable::Empty)?;
        let announced = Announcement::new(&self.serial, slot)?;
        asymmetric::light();
        let entry = slot.load(Acquire);
        if entry.is_null() {
            return Err(Unavailable::Empty);
        }
        // SAFETY: `entry` came from `Box::into_raw` (`put`) and stays allocated while
        // this thread announces `index`: `take` frees nothing a reader announces (module
        // docs: the announcement is visible to it, or this load saw null). Only shared
        // references are made to entries.
        let out = f(unsafe { &*entry });
        drop(announced);
        Ok(out)
    }

    /// Reserves the first free index, for an entry [`fill`](Self::fill) puts there
    /// (entries may need their index, as a window its handle); `None` when all are
    /// reserved.
    pub fn reserve(&self) -> Option<usize> {
        let mut reserved = self.reserved();
        let index = reserved.iter().position(|r| !r)?;
        reserved[index] = true;
        Some(index)
    }

    /// Takes the entry at `index` out, unless a call is using it; its index stays
    /// reserved for [`fill`](Self::fill) until [`remove`](Self::remove).
    pub fn take(&self, index: usize) -> Result<Box<T>, Unavailable> {
        let slot = self.slots.get(index).ok_or(Unavailable::Empty)?;
        let _serial = self.reserved(); // one taker at a time
        let entry = slot.swap(std::ptr::null_mut(), AcqRel);
        if entry.is_null() {
            return Err(Unavailable::Empty);
        }
        asymmetric::heavy();
        if announced_anywhere(slot) {
            slot.store(entry, Release);
            return Err(Unavailable::InUse);
        }
        // SAFETY: `entry` came from `Box::into_raw` and is no longer in the slot; no
        // reader holds it (none announces `index` after the barrier, and a later reader
        // loads null), so this is its only owner.
        Ok(unsafe { Box::from_raw(entry) })
    }

    /// Puts `entry` at `index`, reserved and empty (new, or taken out).
    pub fn fill(&self, index: usize, entry: Box<T>) {
        let reserved = self.reserved();
        assert!(reserved[index], "fill of an index not reserved");
        let old = self.slots[index].swap(Box::into_raw(entry), Release);
        assert!(old.is_null(), "fill of a full slot");
    }

    /// Frees an empty index (taken out, or reserved and never filled) for new entries.
    pub fn remove(&self, index: usize) {
        if let Some(r) = self.reserved().get_mut(index) {
            *r = false;
        }
    }

    /// The indexes that hold an entry now.
    pub fn filled(&self) -> Vec<usize> {
        (0..self.slots.len())
            .filter(|&i| !self.slots[i].load(Acquire).is_null())
            .collect()
    }
}

impl<T> Drop for HandleTable<T> {
    fn drop(&mut self) {
        for slot in self.slots.iter() {
            let entry = slot.swap(std::ptr::null_mut(), Relaxed);
            if !entry.is_null() {
                // SAFETY: `&mut self`: no reader can hold an entry of this table.
                drop(unsafe { Box::from_raw(entry) });
            }
        }
    }
}

// ---- announcements: one word per nesting level per thread ------------------------------

/// A thread's announcements: the address of the slot it uses per nesting level, 0 for
/// none. An address, not an index: threads share one list of readers across every table
/// (a process may hold several), and an index would name a slot of each. Written by its
/// thread only, read by takers.
struct Reader {
    using: [AtomicUsize; NESTING],
    /// How many of `using` its thread announces now (written and read by that thread
    /// only, so relaxed; here rather than in the thread-local so that ending a call
    /// needs no thread-local lookup, a call into the dynamic linker in a shared library).
    depth: AtomicUsize,
    /// Held by a live thread (a new thread reuses a reader its thread left).
    owned: AtomicBool,
}

/// Every reader made, for takers to read (leaked: a few per thread ever alive).
static READERS: Mutex<Vec<&'static Reader>> = Mutex::new(Vec::new());

/// A reader for takers to read, owned by its caller.
fn new_reader() -> &'static Reader {
    let r: &'static Reader = Box::leak(Box::new(Reader {
        using: Default::default(),
        depth: AtomicUsize::new(0),
        owned: AtomicBool::new(true),
    }));
    READERS.lock().unwrap_or_else(|e| e.into_inner()).push(r);
    r
}

/// This thread's reader.
struct ThisThread {
    reader: &'static Reader,
}

impl ThisThread {
    fn register() -> ThisThread {
        let all = READERS.lock().unwrap_or_else(|e| e.into_inner());
        let free = all.iter().find(|r| {
            r.owned
                .compare_exchange(false, true, Acquire, Relaxed)
                .is_ok()
        });
        let reader = match free {
            Some(r) => *r,
            None => {
                drop(all);
                new_reader()
            }
        };
        // A reader left by an ended thread announces nothing (its drop cleared it).
        reader.depth.store(0, Relaxed);
        ThisThread { reader }
    }
}

impl Drop for ThisThread {
    fn drop(&mut self) {
        for word in &self.reader.using {
            word.store(0, Release);
        }
        self.reader.owned.store(false, Release);
    }
}

thread_local! {
    static THIS_THREAD: ThisThread = ThisThread::register();
}

/// One announced slot of this thread, cleared on drop (also when the call panics).
struct Announcement {
    reader: &'static Reader,
    level: usize,
}

impl Announcement {
    #[inline]
    fn new<T>(
        serial: &AtomicPtr<Reader>,
        slot: &AtomicPtr<T>,
    ) -> Result<Announcement, Unavailable> {
        let one = serial.load(Acquire);
        if !one.is_null() {
            // SAFETY: set from a `&'static Reader` (`calls_one_at_a_time`), never freed.
            return Self::by(unsafe { &*one }, slot);
        }
        THIS_THREAD
            .try_with(|t| Self::by(t.reader, slot))
            // A thread past its thread-locals' destruction makes no MPI calls that
            // matter; it is told no.
            .unwrap_or(Err(Unavailable::TooDeep))
    }

    #[inline(always)]
    fn by<T>(reader: &'static Reader, slot: &AtomicPtr<T>) -> Result<Announcement, Unavailable> {
        let level = reader.depth.load(Relaxed);
        if level == NESTING {
            return Err(Unavailable::TooDeep);
        }
        reader.depth.store(level + 1, Relaxed);
        reader.using[level].store(slot_word(slot), Relaxed);
        Ok(Announcement { reader, level })
    }
}

impl Drop for Announcement {
    #[inline]
    fn drop(&mut self) {
        // Release: the call's accesses to the entry before a taker sees the word clear.
        self.reader.using[self.level].store(0, Release);
        self.reader.depth.store(self.level, Relaxed);
    }
}

/// The word that announces `slot`: its address (never 0).
#[inline(always)]
fn slot_word<T>(slot: &AtomicPtr<T>) -> usize {
    slot as *const AtomicPtr<T> as usize
}

/// Whether any thread announces `slot` (a taker's read, after its barrier).
fn announced_anywhere<T>(slot: &AtomicPtr<T>) -> bool {
    let word = slot_word(slot);
    let all = READERS.lock().unwrap_or_else(|e| e.into_inner());
    all.iter()
        .any(|r| r.using.iter().any(|w| w.load(Acquire) == word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn insert<T>(t: &HandleTable<T>, entry: T) -> Option<usize> {
        let index = t.reserve()?;
        t.fill(index, Box::new(entry));
        Some(index)
    }

    #[test]
    fn reserve_fill_with_take_remove() {
        let t = HandleTable::new(2);
        let a = insert(&t, 7u32).unwrap();
        let b = insert(&t, 8u32).unwrap();
        assert_eq!(t.reserve(), None, "full");
        assert_eq!(t.with(a, |v| *v), Ok(7));
        assert_eq!(t.with(b, |v| *v), Ok(8));
        assert_eq!(t.with(5, |v| *v), Err(Unavailable::Empty));
        let taken = t.take(a).unwrap();
        assert_eq!(t.with(a, |v| *v), Err(Unavailable::Empty));
        assert_eq!(t.reserve(), None, "a taken entry keeps its index");
        t.fill(a, taken);
        assert_eq!(t.with(a, |v| *v), Ok(7));
        assert_eq!(t.filled(), vec![a, b]);
        drop(t.take(a).unwrap());
        t.remove(a);
        assert_eq!(t.filled(), vec![b]);
        assert_eq!(insert(&t, 10u32), Some(a));
    }

    #[test]
    fn an_entry_in_use_is_not_taken() {
        let t = HandleTable::new(2);
        let a = insert(&t, 1u32).unwrap();
        let b = insert(&t, 2u32).unwrap();
        // Nested: a call on `b` inside one on `a` (an attribute callback); taking either
        // from inside is refused, both stay.
        t.with(a, |_| {
            t.with(b, |_| {
                assert_eq!(t.take(a).err(), Some(Unavailable::InUse));
                assert_eq!(t.take(b).err(), Some(Unavailable::InUse));
            })
        })
        .unwrap()
        .unwrap();
        assert_eq!(t.with(a, |v| *v), Ok(1));
        assert!(t.take(b).is_ok(), "free once no call uses it");
    }

    /// A call inside one table's slot does not hold the same index of another table:
    /// announcements name slots, not indexes (the tests of this module run at once on
    /// threads of one process, as a program's tables would).
    #[test]
    fn a_call_in_one_table_leaves_another_free() {
        let (one, other) = (HandleTable::new(1), HandleTable::new(1));
        let a = insert(&one, 1u32).unwrap();
        let b = insert(&other, 2u32).unwrap();
        assert_eq!(a, b);
        one.with(a, |_| {
            assert_eq!(one.take(a).err(), Some(Unavailable::InUse));
            assert_eq!(other.take(b).map(|e| *e), Ok(2));
        })
        .unwrap();
    }

    /// Calls one at a time (below MPI_THREAD_MULTIPLE) share the table's one reader,
    /// from whichever thread: nested calls still keep their entries from a take, and
    /// an entry no call uses goes.
    #[test]
    fn calls_one_at_a_time_announce_in_the_tables_reader() {
        let t = Arc::new(HandleTable::new(2));
        t.calls_one_at_a_time();
        let a = insert(&*t, 1u32).unwrap();
        let b = insert(&*t, 2u32).unwrap();
        let other = t.clone();
        std::thread::spawn(move || {
            other
                .with(a, |_| {
                    other.with(b, |_| {
                        assert_eq!(other.take(a).err(), Some(Unavailable::InUse));
                        assert_eq!(other.take(b).err(), Some(Unavailable::InUse));
                    })
                })
                .unwrap()
                .unwrap();
        })
        .join()
        .unwrap();
        assert_eq!(t.with(a, |v| *v), Ok(1));
        t.with(a, |_| assert_eq!(t.take(a).err(), Some(Unavailable::InUse)))
            .unwrap();
        assert_eq!(t.take(b).map(|e| *e), Ok(2));
        assert_eq!(t.take(a).map(|e| *e), Ok(1));
        assert!(
            (0..NESTING).all(|_| t.with(a, |_| ()).is_err()),
            "taken: empty"
        );
    }

    #[test]
    fn nesting_past_the_limit_is_refused() {
        fn nest(t: &HandleTable<u32>, left: usize) -> Result<usize, Unavailable> {
            t.with(0, |_| {
                if left == 0 {
                    Ok(0)
                } else {
                    nest(t, left - 1).map(|d| d + 1)
                }
            })?
        }
        let t = HandleTable::new(1);
        insert(&t, 0u32).unwrap();
        assert_eq!(nest(&t, NESTING - 1), Ok(NESTING - 1));
        assert_eq!(nest(&t, NESTING), Err(Unavailable::TooDeep));
        assert_eq!(t.with(0, |v| *v), Ok(0), "levels are given back");
    }

    /// Readers on other threads hammer an entry while it is taken and put back: a taker
    /// gets it only when no reader is inside, and a reader never sees a freed entry (the
    /// entry's value is checked inside every call; a taken one is poisoned before it
    /// goes back).
    #[test]
    fn takes_race_readers_safely() {
        let t = Arc::new(HandleTable::new(1));
        let index = insert(&t, AtomicUsize::new(42)).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (t, stop, seen) = (t.clone(), stop.clone(), seen.clone());
                std::thread::spawn(move || {
                    while !stop.load(Relaxed) {
                        if let Ok(v) = t.with(index, |v| v.load(Relaxed)) {
                            assert_eq!(v, 42, "a reader saw an entry being taken");
                            seen.fetch_add(1, Relaxed);
                        }
                    }
                })
            })
            .collect();
        // Until both sides had their turns many times (a loaded machine may run the
        // readers late), within a deadline.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (mut taken, mut refused) = (0usize, 0usize);
        while (taken < 5_000 || seen.load(Relaxed) < 5_000) && std::time::Instant::now() < deadline
        {
            match t.take(index) {
                Ok(entry) => {
                    taken += 1;
                    // A reader inside would see the poison.
                    entry.store(0, Relaxed);
                    for _ in 0..50 {
                        std::hint::spin_loop();
                    }
                    entry.store(42, Relaxed);
                    t.fill(index, entry);
                }
                Err(Unavailable::InUse) => refused += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        stop.store(true, Relaxed);
        for r in readers {
            r.join().unwrap();
        }
        let seen = seen.load(Relaxed);
        assert!(
            taken >= 5_000 && seen >= 5_000,
            "taken {taken}, refused {refused}, seen {seen} in 60 s"
        );
    }
}
