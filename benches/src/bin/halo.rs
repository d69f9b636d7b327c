//! `halo`: a halo exchange (issue #28) on a ring of ranks (1-D) or a periodic grid
//! (2-D): each iteration every rank writes its halos into its neighbours' windows, one
//! per direction, and waits for theirs, timed with four ways of saying "it is there", in
//! the same invocation:
//!
//! - **notify**: notified puts (`put_notify`) into one of two halo buffers (by the
//!   iteration's parity), then `wait_notify` for every neighbour's count; a passive
//!   epoch open throughout.
//! - **pscw**: post to the neighbours, start, a put per direction, complete, wait.
//! - **fence**: a put per direction, fence.
//! - **flush+flag**: a put per direction, a flush, then a flag put per direction (a
//!   second window), and a spin on our own flags: what a code does without notification.
//!
//! In 2-D the ranks form a px x py torus (px >= py, as near square as the count allows);
//! a rank sends to its west, east, south and north neighbours, each halo landing in the
//! receiver's slot for the direction it came from (as a code packs a column and a row
//! into contiguous buffers). A dimension of one rank has no halos (2 ranks in 2-D are a
//! ring), and on 4 ranks (2 x 2) each neighbour is both the east and the west one (and
//! the north and the south): four halos, two neighbours.
//!
//! `rma-run -n P halo [ITERS] [--dims 1|2]`: rank 0 prints, per halo size from 8 bytes
//! to 64 KiB, the mean iteration in microseconds (medians of 3 alternating rounds) and
//! notify's ratio to the others. Every iteration's halos are checked at the end.

use std::time::{Duration, Instant};

use rma::{Assert, Rank, Window, World};

const USAGE: &str = "usage: rma-run -n P halo [ITERS] [--dims 1|2]   (default 2000, 1)\n\
    A halo exchange on a ring (1-D) or a periodic grid (2-D), 8 B to 64 KiB halos, with\n\
    notified puts, PSCW, fence and put + flush + flag; rank 0 prints microseconds per\n\
    iteration.";

/// Halo sizes in bytes.
const SIZES: [usize; 7] = [8, 64, 512, 4096, 16384, 32768, 65536];

/// Directions of a 2-D exchange, by where a halo comes from: west, east, south, north.
const DIRECTIONS: usize = 4;

fn main() -> std::process::ExitCode {
    let (iters, dims) = match options() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("halo: {e}\n{USAGE}");
            return std::process::ExitCode::from(2);
        }
    };
    match run(iters, dims) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("halo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The command line: iterations and dimensions.
fn options() -> Result<(u32, u32), String> {
    use lexopt::prelude::*;
    rma::logging::init_or_exit("halo");
    let (mut iters, mut dims) = (None, 1);
    let mut p = lexopt::Parser::from_env();
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => {
                println!("{USAGE}");
                std::process::exit(0)
            }
            Long("dims") => {
                let v = p
                    .value()
                    .map_err(|e| e.to_string())?
                    .string()
                    .map_err(|e| e.to_string())?;
                dims = match v.as_str() {
                    "1" => 1,
                    "2" => 2,
                    _ => return Err(format!("--dims {v:?}: 1 or 2")),
                };
            }
            Value(v) if iters.is_none() => {
                let v = v.string().map_err(|e| e.to_string())?;
                iters = Some(
                    v.parse::<u32>()
                        .map_err(|_| format!("{v:?} is not a number of iterations"))?,
                );
            }
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    Ok((iters.unwrap_or(2000), dims))
}

/// A rank's place in the exchange: where each of its halos goes.
struct Grid<'w> {
    win: &'w Window<u64>,
    flags: &'w Window<u64>,
    /// Per halo this rank sends: the neighbour, and the direction (slot) it lands in
    /// there, the one it comes from as the neighbour sees it.
    out: Vec<(Rank, usize)>,
    /// The neighbours, each once (PSCW's groups).
    neighbours: Vec<Rank>,
    /// Elements per halo.
    n: usize,
}

fn e(e: rma::Error) -> String {
    e.to_string()
}

impl Grid<'_> {
    /// The grid of `size` ranks in `dims` dimensions, as `me` sees it: a ring in 1-D; in
    /// 2-D a px x py torus (rank = y * px + x), its dimensions of one rank left out.
    fn new<'w>(
        win: &'w Window<u64>,
        flags: &'w Window<u64>,
        me: Rank,
        size: Rank,
        dims: u32,
    ) -> Grid<'w> {
        let (px, py) = if dims == 2 { torus(size) } else { (size, 1) };
        let (x, y) = (me % px, me / px);
        let at = |x: Rank, y: Rank| y * px + x;
        let mut out = Vec::new();
        if px > 1 {
            // To the east we are its west (slot 0), to the west its east (slot 1).
            out.push((at((x + 1) % px, y), 0));
            out.push((at((x + px - 1) % px, y), 1));
        }
        if py > 1 {
            // To the north we are its south (slot 2), to the south its north (slot 3).
            out.push((at(x, (y + 1) % py), 2));
            out.push((at(x, (y + py - 1) % py), 3));
        }
        let mut neighbours: Vec<Rank> = out.iter().map(|(r, _)| *r).collect();
        neighbours.sort_unstable();
        neighbours.dedup();
        Grid {
            win,
            flags,
            out,
            neighbours,
            n: 0,
        }
    }

    /// Halos per iteration, in and out.
    fn halos(&self) -> u64 {
        self.out.len() as u64
    }

    /// Where the halo from direction `dir` lands in parity `p`: `[p][dir][n]`.
    fn slot(&self, dir: usize, parity: u64) -> u64 {
        ((parity as usize * DIRECTIONS + dir) * self.n) as u64
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
            for &(to, dir) in &self.out {
                (self.win)
                    .put_notify(h, to, self.slot(dir, p), p as u32)
                    .map_err(e)?;
            }
            // Every neighbour's halo of this iteration (a count per parity use).
            let want = self.halos() * (i / 2 + 1);
            self.win.wait_notify(p as u32, want).map_err(e)?;
        }
        Ok(start.elapsed())
    }

    fn pscw(&self, first: u64, iters: u64) -> Result<Duration, String> {
        let start = Instant::now();
        let mut buf = Vec::with_capacity(self.n);
        for i in first..first + iters {
            let h = self.halo(&mut buf, i);
            self.win.post(&self.neighbours, Assert::NONE).map_err(e)?;
            self.win.start(&self.neighbours, Assert::NONE).map_err(e)?;
            for &(to, dir) in &self.out {
                self.win.put(h, to, self.slot(dir, 0)).map_err(e)?;
            }
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
            for &(to, dir) in &self.out {
                self.win.put(h, to, self.slot(dir, 0)).map_err(e)?;
            }
            self.win.fence(Assert::NONE).map_err(e)?;
        }
        let took = start.elapsed();
        self.win.fence(Assert::NOSUCCEED).map_err(e)?;
        Ok(took)
    }

    /// Puts, a flush per neighbour, a flag put per direction; then our flags spun on.
    /// Parity buffers as notify's: a flag says its halo is complete.
    fn flush_flag(&self, first: u64, iters: u64) -> Result<Duration, String> {
        let start = Instant::now();
        let mut buf = Vec::with_capacity(self.n);
        for i in first..first + iters {
            let p = i % 2;
            let h = self.halo(&mut buf, i);
            for &(to, dir) in &self.out {
                self.win.put(h, to, self.slot(dir, p)).map_err(e)?;
            }
            for &to in &self.neighbours {
                self.win.flush(to).map_err(e)?;
            }
            for &(to, dir) in &self.out {
                self.flags.put(&[i + 1], to, dir as u64).map_err(e)?;
            }
            self.flags.flush_all().map_err(e)?;
            loop {
                let f = self.flags.local_to_vec();
                if self.out.iter().all(|&(_, dir)| f[dir] > i) {
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

    /// The last iteration's halos from every direction, where `parity` put them.
    fn check(&self, last: u64, parity: u64, what: &str) -> Result<(), String> {
        let v = self.win.local_to_vec();
        for &(_, dir) in &self.out {
            let at = self.slot(dir, parity) as usize;
            if v[at..at + self.n].iter().any(|x| *x != last) {
                return Err(format!(
                    "{what}, {} bytes: the last halo from the {} is {:?}, not {last}",
                    self.n * 8,
                    ["west", "east", "south", "north"][dir],
                    &v[at..(at + 4).min(at + self.n)]
                ));
            }
        }
        Ok(())
    }
}

/// The 2-D torus of `size` ranks, px x py with px >= py, as near square as `size`
/// divides (MPI_Dims_create's choice): 4 ranks 2 x 2, 8 ranks 4 x 2, 2 or a prime 1-D.
fn torus(size: Rank) -> (Rank, Rank) {
    let py = (1..=size)
        .take_while(|d| d * d <= size)
        .filter(|d| size.is_multiple_of(*d))
        .last()
        .unwrap_or(1);
    (size / py, py)
}

fn run(iters: u32, dims: u32) -> Result<(), String> {
    let world = World::init().map_err(e)?;
    let (me, size) = (world.rank(), world.size() as Rank);
    let iters = u64::from(iters.max(2));
    let max = SIZES.iter().max().copied().unwrap_or(8) / 8;
    let win = world.allocate::<u64>(2 * DIRECTIONS * max).map_err(e)?;
    let flags = world.allocate::<u64>(DIRECTIONS).map_err(e)?;
    win.set_notify_count(2).map_err(e)?;
    let mut grid = Grid::new(&win, &flags, me, size, dims);
    if me == 0 {
        let (px, py) = if dims == 2 { torus(size) } else { (size, 1) };
        let shape = if dims == 2 {
            format!("2-D torus of {px} x {py} ranks")
        } else {
            format!("1-D ring of {size} ranks")
        };
        println!(
            "# rma halo exchange, {shape}, {} halos per rank and iteration, us per \
             iteration (medians of 3)",
            grid.halos()
        );
        println!(
            "{:<10}{:>12}{:>12}{:>12}{:>14}{:>14}{:>14}",
            "# Size", "notify", "pscw", "fence", "flush+flag", "notify/pscw", "notify/fence"
        );
    }
    // Iterations so far: the notify counters count every one of theirs (the flags say
    // the iteration's number), across sizes.
    let (mut notified, mut flagged) = (0u64, 0u64);
    for bytes in SIZES {
        grid.n = bytes / 8;
        // Small halos more iterations: about the same time per size.
        let n = if bytes > 4096 { iters / 4 } else { iters }.max(2) & !1;
        let (mut t_notify, mut t_pscw, mut t_fence, mut t_flag) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // Each size starts from zeroed flags and counters, everyone past the last size.
        win.lock_all(Assert::NONE).map_err(e)?;
        flags.lock_all(Assert::NONE).map_err(e)?;
        world.barrier().map_err(e)?;
        for round in 0..4 {
            let t = grid.notify(notified, n)?;
            notified += n;
            grid.check(notified - 1, (notified - 1) % 2, "notify")?;
            world.barrier().map_err(e)?;
            let t2 = grid.flush_flag(flagged, n)?;
            flagged += n;
            grid.check(flagged - 1, (flagged - 1) % 2, "flush+flag")?;
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
            let t = grid.pscw(0, n)?;
            grid.check(n - 1, 0, "pscw")?;
            world.barrier().map_err(e)?;
            let t2 = grid.fence(0, n)?;
            grid.check(n - 1, 0, "fence")?;
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
