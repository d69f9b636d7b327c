//! Window memory per process flat in the number of ranks (issue #27): what a window keeps
//! in this process, counted by the allocator, over the echo transport (rank 0 of jobs of
//! 2 to 65,536 ranks, sizes this machine cannot run as processes).
//!
//! Counted: the heap a window holds once made and used (an epoch with ops toward a few
//! targets), against a job of two ranks. The allgather of creation is O(ranks) while it
//! runs (every member's descriptor), as MPI's is; what the window keeps afterwards must
//! not be: one descriptor per rank is 40 bytes and more a window, 2.6 MB at 65,536 ranks.
//! Backends keep their own per-peer tables (a network's memory keys); the echo transport
//! keeps none, so what is counted here is the engine's.
//!
//! One test function in this binary: the counter is the process's, and tests of one
//! binary run in parallel threads.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rma_core::sim::echo::Echo;
use rma_core::{AsyncProgress, Config, Engine, LockType, Rank, Window};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call goes to the system allocator unchanged; the counter only watches.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The kinds of window counted.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Allocate,
    Create,
    Dynamic,
}

/// Bytes the window of `kind` keeps in rank 0 of a job of `size` ranks, made and used: a
/// lock of each of three targets, a put to each, the unlocks, then a fence epoch with a
/// put to the same targets.
fn kept_by_window(size: usize, kind: Kind) -> isize {
    let config = Config {
        async_progress: AsyncProgress::Off,
        timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    };
    let engine = Engine::new(Arc::new(Echo::new(size)), config);
    let make = |engine: &Engine| -> Window<u64> {
        match kind {
            Kind::Allocate => engine.allocate::<u64>(8).expect("allocate"),
            Kind::Create => engine.create(vec![0u64; 8]).expect("create"),
            Kind::Dynamic => engine.create_dynamic::<u64>().expect("create_dynamic"),
        }
    };
    let targets: [Rank; 3] = [1, 2, (size - 1) as Rank];
    let use_window = |w: &Window<u64>| {
        for &t in &targets {
            w.lock(LockType::Shared, t, Default::default())
                .expect("lock");
            if !matches!(kind, Kind::Dynamic) {
                w.put(&[7], t, 0).expect("put");
            }
            w.unlock(t).expect("unlock");
        }
    };
    // The engine's own parts that the first window or epoch makes lazily, out of the
    // count.
    let warm = make(&engine);
    use_window(&warm);
    warm.free().expect("free");
    let before = LIVE.load(Ordering::Relaxed);
    let w = make(&engine);
    use_window(&w);
    let kept = LIVE.load(Ordering::Relaxed) - before;
    w.free().expect("free");
    drop(engine);
    kept
}

#[test]
fn a_window_keeps_the_same_memory_whatever_the_number_of_ranks() {
    for kind in [Kind::Allocate, Kind::Create, Kind::Dynamic] {
        let small = kept_by_window(4, kind);
        let mut report = format!("{kind:?}: 4 ranks {small} bytes");
        for size in [64, 1024, 16_384, 65_536] {
            let kept = kept_by_window(size, kind);
            report += &format!(", {size} ranks {kept}");
            // Flat: a few words of slack, nothing per rank. (A backend whose ops complete
            // in their call adds a bit per rank, the marks of targets ops may reach
            // directly: shared memory, whose ranks are one node's.)
            assert!(
                kept <= small + 64,
                "{report}: a window's memory grows with the ranks"
            );
        }
        eprintln!("{report}");
    }
}
