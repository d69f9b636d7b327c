//! Criterion benches of the rma engine.
//!
//! - `post_and_issue`: the origin-side cost of one put (and of flushes and fetching ops)
//!   as the number of targets with a live target element grows, over the "echo"
//!   transport (`rma_core::sim::echo`), rank 0 of a large job that answers for every
//!   other rank at once;
//! - `native`: put + flush and get + flush over a transport whose native ops complete at
//!   the next poll (`next_poll`: the engine's share of an RDMA backend's latency), after
//!   16 empty polls (`after_16_empty_polls`: the passes of a wait for a wire's latency)
//!   or in the call (`in_call`: as rma-verbs reports them on rxe);
//! - `pool`: the two-level element pools;
//! - `sim_put_flush`: put + flush between two ranks of the simulated transport (threads).
//!
//! Run with `cargo bench -p rma-benches --bench engine`.

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_main, BenchmarkId, Criterion, Throughput};
use rma_core::sim::echo::Echo;
use rma_core::sim::{self, Network, Profile};
use rma_core::{AccOp, Assert, Config, Engine, GlobalPool, LocalPool, Rank, Window};

/// Active-target counts of `post_and_issue`.
const TARGETS: [usize; 4] = [1, 16, 256, 4096];
/// Ranks in the echo job: this rank plus the largest number of targets.
const WORLD: usize = 4096 + 1;
/// Puts between two flushes.
const FLUSH_EVERY: u64 = 16;

// ----- post_and_issue ----------------------------------------------------------------------

/// An engine over the echo transport with a `lock_all(NOCHECK)` epoch open on a window
/// whose first `active` peers each hold a target element.
struct Fixture {
    engine: Engine,
    win: Window<u64>,
    active: usize,
    next: usize,
}

impl Fixture {
    // Field by field rather than `..Config::default()`: `Config` may be non-exhaustive.
    #[allow(clippy::field_reassign_with_default)]
    fn new(active: usize) -> Self {
        let mut config = Config::default();
        config.target_pool_global = 2 * WORLD;
        config.op_pool_global = 2 * WORLD;
        config.timeout = Some(Duration::from_secs(30));
        let engine = Engine::new(Arc::new(Echo::new(WORLD)), config);
        let win = engine.allocate::<u64>(8).expect("allocate");
        win.lock_all(Assert::NOCHECK).expect("lock_all");
        // First touch: one put to each target creates its element; lazy target free
        // keeps it for the rest of the epoch.
        for t in 1..=active {
            win.put(&[1], t as Rank, 0).expect("first put");
        }
        win.flush_all().expect("flush_all");
        let stats = win.stats();
        assert!(stats.target_elements_high_water >= active as u64);
        assert_eq!(stats.restores, 0, "pools too small for {active} targets");
        Fixture {
            engine,
            win,
            active,
            next: 0,
        }
    }

    /// The next active target, round robin.
    fn target(&mut self) -> Rank {
        let t = self.next;
        self.next = (self.next + 1) % self.active;
        t as Rank + 1
    }

    fn put(&mut self) {
        let t = self.target();
        self.win.put(black_box(&[1u64]), t, 0).expect("put");
    }

    fn finish(self) {
        self.win.unlock_all().expect("unlock_all");
        self.win.free().expect("free");
        drop(self.engine);
    }
}

fn post_and_issue(c: &mut Criterion) {
    let mut g = c.benchmark_group("post_and_issue");
    g.throughput(Throughput::Elements(1));
    for active in TARGETS {
        let mut fx = Fixture::new(active);
        // The put call alone: flushes happen between timed stretches of 16 puts.
        g.bench_function(BenchmarkId::new("post_put/targets", active), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                let mut done = 0;
                while done < iters {
                    let n = (iters - done).min(FLUSH_EVERY);
                    let start = Instant::now();
                    for _ in 0..n {
                        fx.put();
                    }
                    timed += start.elapsed();
                    fx.win.flush_all().expect("flush_all");
                    done += n;
                }
                timed
            })
        });
        // A put plus a share of the flush_all that follows every 16 puts.
        g.bench_function(BenchmarkId::new("put_flush16/targets", active), |b| {
            b.iter_custom(|iters| {
                let start = Instant::now();
                for i in 1..=iters {
                    fx.put();
                    if i % FLUSH_EVERY == 0 {
                        fx.win.flush_all().expect("flush_all");
                    }
                }
                fx.win.flush_all().expect("flush_all");
                start.elapsed()
            })
        });
        // flush_all with nothing to flush: the walk over the target elements.
        g.bench_function(BenchmarkId::new("flush_all_idle/targets", active), |b| {
            b.iter(|| fx.win.flush_all().expect("flush_all"))
        });
        // A fetching op waited on: one round trip through global progress.
        g.bench_function(BenchmarkId::new("fetch_and_op_wait/targets", active), |b| {
            b.iter(|| {
                let t = fx.target();
                let r = fx.win.fetch_and_op(1, AccOp::Sum, t, 0).expect("fop");
                black_box(r.wait().expect("wait"))
            })
        });
        fx.finish();
    }
    g.finish();

    // A fence epoch over the whole echo job (ceil(log2 4097) = 13 barrier rounds).
    let mut g = c.benchmark_group("fence");
    let engine = Engine::new(Arc::new(Echo::new(WORLD)), Config::default());
    let win = engine.allocate::<u64>(8).expect("allocate");
    win.fence(Assert::NOPRECEDE).expect("fence");
    g.bench_function(BenchmarkId::new("put_fence/world", WORLD), |b| {
        b.iter(|| {
            win.put(black_box(&[1u64]), 1, 0).expect("put");
            win.fence(Assert::NONE).expect("fence")
        })
    });
    g.finish();
    win.fence(Assert::NOSUCCEED).expect("fence");
    win.free().expect("free");
}

// ----- native --------------------------------------------------------------------------------

/// What the engine adds to an RDMA backend's put + flush and get + flush (what
/// osu_put_latency and osu_get_latency time) when the wire costs nothing: the echo
/// transport completes each native op at the next poll, or in the call.
fn native(c: &mut Criterion) {
    let mut g = c.benchmark_group("native");
    g.throughput(Throughput::Elements(1));
    for (mode, echo) in [
        ("next_poll", Echo::native(2)),
        // A wire's latency in the waiter's passes: 16 polls find nothing before the
        // completion (what each look of a flush's wait costs, times 16).
        ("after_16_empty_polls", Echo::native_after_polls(2, 17)),
        ("in_call", Echo::native_in_call(2)),
    ] {
        let engine = Engine::new(Arc::new(echo), Config::default());
        let win = engine.allocate::<u64>(8).expect("allocate");
        win.lock_all(Assert::NONE).expect("lock_all");
        // One of each first (a bench filter may skip the loops): they must go native.
        win.put(&[1u64], 1, 0).expect("put");
        let mut dst = [0u64; 1];
        let r = win.get_into(1, 0, &mut dst).expect("get_into");
        win.flush(1).expect("flush");
        r.wait().expect("wait");
        assert_eq!(win.stats().ops_native, 2, "the ops went native ({mode})");
        g.bench_function(format!("put_flush/{mode}"), |b| {
            b.iter(|| {
                win.put(black_box(&[1u64]), 1, 0).expect("put");
                win.flush(1).expect("flush")
            })
        });
        g.bench_function(format!("get_flush/{mode}"), |b| {
            b.iter(|| {
                let r = win.get(1, 0, 1).expect("get");
                win.flush(1).expect("flush");
                black_box(r.wait().expect("wait"))
            })
        });
        // osu_get_latency's pattern: into the caller's buffer, reused.
        g.bench_function(format!("get_into_flush/{mode}"), |b| {
            b.iter(|| {
                let r = win.get_into(1, 0, &mut dst).expect("get_into");
                win.flush(1).expect("flush");
                black_box(r.wait().expect("wait")[0])
            })
        });
        win.unlock_all().expect("unlock_all");
        win.free().expect("free");
    }
    g.finish();
}

// ----- pool ----------------------------------------------------------------------------------

fn pool(c: &mut Criterion) {
    let mut g = c.benchmark_group("pool");
    g.throughput(Throughput::Elements(1));
    // Served by the window's local pool.
    let global = GlobalPool::<u64>::new(1024);
    let mut local = LocalPool::<u64>::new(64);
    g.bench_function("local_get_put", |b| {
        b.iter(|| {
            let e = local.get(&global).expect("element");
            local.put(black_box(e), &global);
        })
    });
    // A local pool of capacity zero: every element comes from and goes to the global
    // (lock-free) pool.
    let mut empty = LocalPool::<u64>::new(0);
    g.bench_function("global_get_put", |b| {
        b.iter(|| {
            let e = empty.get(&global).expect("element");
            empty.put(black_box(e), &global);
        })
    });
    // 128 elements out and back through a local pool of 64: half spill to the global one.
    let mut held = Vec::with_capacity(128);
    g.throughput(Throughput::Elements(128));
    g.bench_function("burst_128_over_local_64", |b| {
        b.iter(|| {
            for _ in 0..128 {
                held.push(local.get(&global).expect("element"));
            }
            for e in held.drain(..) {
                local.put(e, &global);
            }
        })
    });
    g.finish();
}

// ----- sim_put_flush -------------------------------------------------------------------------

/// `iters` put + flush from rank 0 to rank 1 on a fresh 2-rank simulated network; the
/// time of rank 0's loop (thread start, window creation and teardown excluded).
fn sim_put_flush_run(profile: Profile, iters: u64) -> Duration {
    let net = Network::new(2, profile, 42);
    let elapsed = Arc::new(Mutex::new(Duration::ZERO));
    let out = elapsed.clone();
    sim::run_on(
        &net,
        Config::default(),
        Duration::from_secs(300),
        move |engine| {
            let win = engine.allocate::<u64>(8)?;
            if engine.rank() == 0 {
                win.lock_all(Assert::NONE)?;
                let start = Instant::now();
                for i in 0..iters {
                    win.put(&[i], 1, 0)?;
                    win.flush(1)?;
                }
                *out.lock().unwrap_or_else(|e| e.into_inner()) = start.elapsed();
                win.unlock_all()?;
            }
            // Rank 1 makes progress (applies active messages) while it waits here.
            engine.barrier()?;
            win.free()?;
            Ok(())
        },
    )
    .expect("simulated run");
    let d = *elapsed.lock().unwrap_or_else(|e| e.into_inner());
    d
}

fn sim_put_flush(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim_put_flush");
    g.throughput(Throughput::Elements(1));
    for (name, profile) in [("am", Profile::ActiveMessages), ("rdma", Profile::Rdma)] {
        g.bench_function(name, |b| {
            b.iter_custom(|iters| sim_put_flush_run(profile, iters))
        });
    }
    g.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
}

/// Every group, with a configuration that keeps the whole run short.
fn benches() {
    let mut c = config().configure_from_args();
    post_and_issue(&mut c);
    native(&mut c);
    pool(&mut c);
    sim_put_flush(&mut c);
}

criterion_main!(benches);
