//! `halo`: a 1-D halo exchange on a ring of ranks (issue #28): each iteration every rank
//! writes its two halos into its neighbours' windows and waits for theirs, timed with
//! four ways of saying "it is there", in the same invocation:
//!
//! - **notify**: notified puts (`put_notify`) into one of two halo buffers (by the
//!   iteration's parity), then `wait_notify` for both neighbours' counts; a passive
//!   epoch open throughout.
//! - **pscw**: post to both neighbours, start, two puts, complete, wait.
//! - **fence**: two puts, fence.
//! - **flush+flag**: two puts, flush, then a flag put to each neighbour (a second
//!   window), and a spin on our own flags: what a code does without notification.
//!
//! `rma-run -n P halo [ITERS]`: rank 0 prints, per halo size from 8 bytes to 64 KiB,
//! the mean iteration in microseconds (medians of 3 alternating rounds) and
//! notify's ratio to the others. Every iteration's halos are checked at the end.

use std::time::{Duration, Instant};

use rma::{Assert, Rank, Window, World};

const USAGE: &str = "usage: rma-run -n P halo [ITERS]   (default 2000)\n\
    A 1-D halo exchange on a ring, 8 B to 64 KiB halos, with notified puts, PSCW,\n\
    fence and put + flush + flag; rank 0 prints microseconds per iteration.";

/// Halo sizes in bytes.
const SIZES: [usize; 7] = [8, 64, 512, 4096, 16384, 32768, 65536];

fn main() -> std::process::ExitCode {
    let iters = rma_benches::start("halo", USAGE, true).unwrap_or(2000);
    match run(iters) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

struct Ring<'w> {
    win: &'w Window<u64>,
    flags: &'w Window<u64>,
    left: Rank,
    right: Rank,
    /// Elements per halo.
    n: usize,
}

fn e(e: rma::Error) -> String {
    e.to_string()
}

impl Ring<'_> {
    /// Where the halo from `from` lands in parity `p`: [left0, right0, left1, right1].
    fn slot(&self, from_left: bool, parity: u64) -> u64 {
        ((parity as usize * 2 + usize::from(!from_left)) * self.n) as u64
    }

    /// This iteration's halo, written into the one buffer a method reuses (as the C
    /// program `benches/mpi/halo.c` fills its own): a fresh `Vec` per iteration cost a
    /// 64 KiB halo an allocation and its release each time, a third of rma's iteration
    /// beside the C program's through librma-mpi.
    fn halo<'b>(&self, buf: &'b mut Vec<u64>, i: u64) -> &'b [u64] {
        buf.clear();
        buf.resize(self.n, i);
        buf
    }

    /// Notified puts, `iters` iterations from `first`; counters 0 and 1 by parity.
    fn notify(&self, first: u64, iters: u64) -> Result<Duration, String> {
        let start = Instant::now();
        let mut buf = Vec::with_capacity(self.n);
        for i in first..first + iters {
            let p = i % 2;
            let h = self.halo(&mut buf, i);
            // To the right neighbour we are its left one, and the other way round.
            (self.win)
                .put_notify(h, self.right, self.slot(true, p), p as u32)
                .map_err(e)?;
            (self.win)
                .put_notify(h, self.left, self.slot(false, p), p as u32)
                .map_err(e)?;
            // Both neighbours' halos of this iteration (two per parity use).
            self.win.wait_notify(p as u32, 2 * (i / 2 + 1)).map_err(e)?;
        }
        Ok(start.elapsed())
    }

    fn pscw(&self, first: u64, iters: u64) -> Result<Duration, String> {
        // (On 2 ranks both neighbours are one.)
        let both: &[Rank] = if self.left == self.right {
            &[self.left]
        } else {
            &[self.left, self.right]
        };
        let start = Instant::now();
        let mut buf = Vec::with_capacity(self.n);
        for i in first..first + iters {
            let h = self.halo(&mut buf, i);
            self.win.post(both, Assert::NONE).map_err(e)?;
            self.win.start(both, Assert::NONE).map_err(e)?;
            self.win.put(h, self.right, self.slot(true, 0)).map_err(e)?;
            self.win.put(h, self.left, self.slot(false, 0)).map_err(e)?;
            self.win.complete().map_err(e)?;
            self.win.wait().map_err(e)?;
        }
        Ok(start.elapsed())
    }

    fn fence(&self, first: u64, iters: u64) -> Result<Duration, String> {
        self.win.fence(Assert::NOPRECEDE).map_err(e)?;
        let start = Instant::now();
        let mut buf = Vec::with_capacity(self.n);
        for i in first..first + iters {
            let h = self.halo(&mut buf, i);
            self.win.put(h, self.right, self.slot(true, 0)).map_err(e)?;
            self.win.put(h, self.left, self.slot(false, 0)).map_err(e)?;
            self.win.fence(Assert::NONE).map_err(e)?;
        }
        let took = start.elapsed();
        self.win.fence(Assert::NOSUCCEED).map_err(e)?;
        Ok(took)
    }

    /// Puts, a flush, a flag put to each neighbour; then our flags spun on. Parity
    /// buffers as notify's: a flag says its halo is complete.
    fn flush_flag(&self, first: u64, iters: u64) -> Result<Duration, String> {
        let start = Instant::now();
        let mut buf = Vec::with_capacity(self.n);
        for i in first..first + iters {
            let p = i % 2;
            let h = self.halo(&mut buf, i);
            (self.win)
                .put(h, self.right, self.slot(true, p))
                .map_err(e)?;
            (self.win)
                .put(h, self.left, self.slot(false, p))
                .map_err(e)?;
            self.win.flush(self.right).map_err(e)?;
            self.win.flush(self.left).map_err(e)?;
            self.flags.put(&[i + 1], self.right, 0).map_err(e)?;
            self.flags.put(&[i + 1], self.left, 1).map_err(e)?;
            self.flags.flush_all().map_err(e)?;
            loop {
                let f = self.flags.local_to_vec();
                if f[0] > i && f[1] > i {
                    break;
                }
                // Progress for flags that come as messages, and the core for a rank
                // it waits for (more ranks than cores).
                self.flags.flush_all().map_err(e)?;
                std::thread::yield_now();
            }
        }
        Ok(start.elapsed())
    }

    /// The last iteration's halos from both neighbours, where `parity` put them.
    fn check(&self, last: u64, parity: u64, what: &str) -> Result<(), String> {
        let v = self.win.local_to_vec();
        for from_left in [true, false] {
            let at = self.slot(from_left, parity) as usize;
            if v[at..at + self.n].iter().any(|x| *x != last) {
                return Err(format!(
                    "{what}, {} bytes: the last halo from the {} is {:?}, not {last}",
                    self.n * 8,
                    if from_left { "left" } else { "right" },
                    &v[at..(at + 4).min(at + self.n)]
                ));
            }
        }
        Ok(())
    }
}

fn run(iters: u32) -> Result<(), String> {
    let world = World::init().map_err(e)?;
    let (me, size) = (world.rank(), world.size() as Rank);
    let (left, right) = ((me + size - 1) % size, (me + 1) % size);
    let iters = u64::from(iters.max(2));
    let max = SIZES.iter().max().copied().unwrap_or(8) / 8;
    let win = world.allocate::<u64>(4 * max).map_err(e)?;
    let flags = world.allocate::<u64>(2).map_err(e)?;
    win.set_notify_count(2).map_err(e)?;
    if me == 0 {
        println!("# rma halo exchange, 1-D ring of {size} ranks, us per iteration (medians of 3)");
        println!(
            "{:<10}{:>12}{:>12}{:>12}{:>14}{:>14}{:>14}",
            "# Size", "notify", "pscw", "fence", "flush+flag", "notify/pscw", "notify/fence"
        );
    }
    // Iterations so far: the notify counters count every one of theirs (the flags say
    // the iteration's number), across sizes.
    let (mut notified, mut flagged) = (0u64, 0u64);
    for bytes in SIZES {
        let ring = Ring {
            win: &win,
            flags: &flags,
            left,
            right,
            n: bytes / 8,
        };
        // Small halos more iterations: about the same time per size.
        let n = if bytes > 4096 { iters / 4 } else { iters }.max(2) & !1;
        let (mut t_notify, mut t_pscw, mut t_fence, mut t_flag) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Each size starts from zeroed flags and counters, everyone past the last size.
        win.lock_all(Assert::NONE).map_err(e)?;
        flags.lock_all(Assert::NONE).map_err(e)?;
        world.barrier().map_err(e)?;
        for round in 0..4 {
            let t = ring.notify(notified, n)?;
            notified += n;
            ring.check(notified - 1, (notified - 1) % 2, "notify")?;
            world.barrier().map_err(e)?;
            let t2 = ring.flush_flag(flagged, n)?;
            flagged += n;
            ring.check(flagged - 1, (flagged - 1) % 2, "flush+flag")?;
            world.barrier().map_err(e)?;
            if round > 0 {
                // Round 0 warms up.
                t_notify.push(t);
                t_flag.push(t2);
            }
        }
        win.unlock_all().map_err(e)?;
        flags.unlock_all().map_err(e)?;
        for round in 0..4 {
            world.barrier().map_err(e)?;
            let t = ring.pscw(0, n)?;
            ring.check(n - 1, 0, "pscw")?;
            world.barrier().map_err(e)?;
            let t2 = ring.fence(0, n)?;
            ring.check(n - 1, 0, "fence")?;
            if round > 0 {
                t_pscw.push(t);
                t_fence.push(t2);
            }
        }
        let us = |mut v: Vec<Duration>| {
            v.sort();
            v[v.len() / 2].as_secs_f64() * 1e6 / n as f64
        };
        let (a, b, c, d) = (us(t_notify), us(t_pscw), us(t_fence), us(t_flag));
        if me == 0 {
            println!(
                "{bytes:<10}{a:>12.2}{b:>12.2}{c:>12.2}{d:>14.2}{:>14.2}{:>14.2}",
                a / b,
                a / c
            );
        }
    }
    world.barrier().map_err(e)?;
    win.set_notify_count(0).map_err(e)?;
    flags.free().map_err(|e| e.to_string())?;
    win.free().map_err(|e| e.to_string())?;
    Ok(())
}
