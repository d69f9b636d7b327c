//! `progress_agent`: what the progress agent (issue #16) buys and costs, between two
//! ranks (rank 0 origin, rank 1 target): `rma-run -n 2 progress_agent [ITERS]`, with the
//! backend from the environment (`RMA_BACKEND=ofi` for libfabric).
//!
//! 1. 8-byte lock + put + unlock latency toward a target that polls (it waits in a
//!    barrier, inside the library) and toward a target that computes (a busy loop with
//!    no library call, for longer than the origin's loop), and their ratio.
//! 2. The same two cases with no library in the way (the reference): an 8-byte TCP
//!    round trip on loopback toward a responder that spins, and toward one whose
//!    answering thread sleeps in read(2) while its main thread computes.
//! 3. The CPU an idle process uses with its window open and its agent asleep: both
//!    ranks sleep `RMA_IDLE_SECS` (default 10) and read their user + system time from
//!    `/proc/self/stat` around it, in percent of one core.
//!
//! Lines start with `#` except the results, which are `name value` pairs.

use std::time::{Duration, Instant};

use rma::{Assert, LockType, World};

const USAGE: &str = "usage: rma-run -n 2 progress_agent [ITERS]   (default 2000)\n\
    What the progress agent buys and costs: lock + put + unlock toward a polling and a\n\
    computing target, the same by hand over TCP, and the CPU an idle rank uses\n\
    (RMA_IDLE_SECS, default 10).";

fn main() -> std::process::ExitCode {
    let iters = rma_benches::start("progress_agent", USAGE, true).unwrap_or(2000);
    match run(iters) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("progress_agent: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(iters: u32) -> Result<(), String> {
    let idle_secs: u64 = match std::env::var("RMA_IDLE_SECS") {
        Ok(v) => v.parse().map_err(|_| format!("RMA_IDLE_SECS={v:?}"))?,
        Err(_) => 10,
    };
    let world = World::init().map_err(|e| e.to_string())?;
    if world.size() != 2 {
        return Err("run it on 2 ranks".into());
    }
    let me = world.rank();
    let win = world.allocate::<u64>(1).map_err(|e| e.to_string())?;
    let e = |e: rma::Error| e.to_string();
    let lock_put_unlock = |n: u32| -> Result<Duration, String> {
        let start = Instant::now();
        for i in 0..n {
            win.lock(LockType::Exclusive, 1, Assert::NONE).map_err(e)?;
            win.put(&[u64::from(i)], 1, 0).map_err(e)?;
            win.unlock(1).map_err(e)?;
        }
        Ok(start.elapsed() / n.max(1))
    };
    if me == 0 {
        println!(
            "# progress_agent: RMA_ASYNC_PROGRESS={}, backend {}",
            std::env::var("RMA_ASYNC_PROGRESS").unwrap_or_else(|_| "auto".into()),
            std::env::var("RMA_BACKEND").unwrap_or_else(|_| "default".into())
        );
    }

    // Warm-up (connections, pools), then toward a polling target.
    if me == 0 {
        lock_put_unlock(iters / 10 + 1)?;
    }
    world.barrier().map_err(e)?;
    let polling = if me == 0 {
        Some(lock_put_unlock(iters)?)
    } else {
        None
    };
    world.barrier().map_err(e)?;

    // Toward a computing target: it computes for 4x the polling loop's time (at least
    // a second), told through the launcher, with no library call.
    let budget = {
        let mine = polling
            .map_or(0, |d| (d * iters * 4).as_millis() as u64)
            .max(1000);
        let all = world
            .bootstrap()
            .allgather("agent-budget", &mine.to_le_bytes())
            .map_err(|e| e.to_string())?;
        let first: [u8; 8] = all[0][..8].try_into().map_err(|_| "budget")?;
        Duration::from_millis(u64::from_le_bytes(first))
    };
    let computing = if me == 0 {
        let start = Instant::now();
        let d = lock_put_unlock(iters)?;
        if start.elapsed() > budget {
            println!("# the origin's loop outlasted the target's computation: not comparable");
        }
        Some(d)
    } else {
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < budget {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        None
    };
    world.barrier().map_err(e)?;
    if let (Some(p), Some(c)) = (polling, computing) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!("# 8-byte lock + put + unlock, {iters} iterations, microseconds");
        println!("lock_put_unlock_polling_target_us {:.2}", us(p));
        println!("lock_put_unlock_computing_target_us {:.2}", us(c));
        println!("computing_over_polling {:.3}", us(c) / us(p));
    }

    // The same two cases with no library: an 8-byte TCP ping-pong over loopback whose
    // responder spins on a non-blocking socket, or sleeps in read(2) on a thread of a
    // process whose main thread computes (what any sleeping agent pays for a wake-up).
    let raw = raw_reference(&world, iters)?;
    if let Some((spinning, sleeping)) = raw {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!("# reference: 8-byte TCP round trip on loopback, no library, microseconds");
        println!("tcp_round_trip_spinning_responder_us {:.2}", us(spinning));
        println!(
            "tcp_round_trip_sleeping_responder_computing_us {:.2}",
            us(sleeping)
        );
        println!(
            "reference_sleeping_over_spinning {:.3}",
            us(sleeping) / us(spinning)
        );
    }

    // Idle: both asleep with the window open.
    let before = cpu_ticks()?;
    std::thread::sleep(Duration::from_secs(idle_secs));
    let ticks = cpu_ticks()? - before;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let percent = ticks as f64 / hz / idle_secs.max(1) as f64 * 100.0;
    let all = world
        .bootstrap()
        .allgather("agent-idle", &percent.to_le_bytes())
        .map_err(|e| e.to_string())?;
    if me == 0 {
        println!("# CPU of an idle process over {idle_secs} s, percent of one core");
        for (rank, v) in all.iter().enumerate() {
            let v: [u8; 8] = v[..8].try_into().map_err(|_| "idle")?;
            println!("idle_cpu_percent_rank{rank} {:.2}", f64::from_le_bytes(v));
        }
        println!("agent_passes_rank0 {}", world.stats().agent_passes);
    }
    world.barrier().map_err(e)?;
    win.free().map_err(|e| e.to_string())?;
    Ok(())
}

/// User + system time of this process so far, in clock ticks (`/proc/self/stat` fields
/// 14 and 15, counted after the command name's closing parenthesis).
fn cpu_ticks() -> Result<u64, String> {
    let stat = std::fs::read_to_string("/proc/self/stat").map_err(|e| e.to_string())?;
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or("no ')' in /proc/self/stat")?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    let num = |i: usize| -> Result<u64, String> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("/proc/self/stat field {}", i + 3))
    };
    Ok(num(11)? + num(12)?)
}

/// Rank 1 answers rank 0's 8-byte messages over TCP loopback, first spinning on a
/// non-blocking socket, then from a thread asleep in read(2) while its main thread
/// computes. Rank 0 returns the mean round trip of each.
fn raw_reference(world: &World, iters: u32) -> Result<Option<(Duration, Duration)>, String> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let io = |e: std::io::Error| e.to_string();
    let me = world.rank();
    let listener = if me == 1 {
        Some(TcpListener::bind("127.0.0.1:0").map_err(io)?)
    } else {
        None
    };
    let port = listener
        .as_ref()
        .map_or(Ok(0u16), |l| l.local_addr().map(|a| a.port()))
        .map_err(io)?;
    let all = world
        .bootstrap()
        .allgather("agent-raw-port", &port.to_le_bytes())
        .map_err(|e| e.to_string())?;
    let port = u16::from_le_bytes([all[1][0], all[1][1]]);
    let rounds = iters.max(1);
    if let Some(listener) = listener {
        let (mut s, _) = listener.accept().map_err(io)?;
        s.set_nodelay(true).map_err(io)?;
        let mut buf = [0u8; 8];
        // Spinning: non-blocking reads in a loop.
        s.set_nonblocking(true).map_err(io)?;
        for _ in 0..rounds {
            read_spinning(&mut s, &mut buf)?;
            s.write_all(&buf).map_err(io)?;
        }
        // Sleeping: a thread blocked in read, the main thread computing meanwhile.
        s.set_nonblocking(false).map_err(io)?;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = done.clone();
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            let mut buf = [0u8; 8];
            for _ in 0..rounds {
                s.read_exact(&mut buf)?;
                s.write_all(&buf)?;
            }
            flag.store(true, std::sync::atomic::Ordering::Release);
            Ok(())
        });
        let mut x = 0u64;
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        echo.join()
            .map_err(|_| "the echo thread panicked".to_string())?
            .map_err(io)?;
        Ok(None)
    } else if me == 0 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(io)?;
        s.set_nodelay(true).map_err(io)?;
        // The origin spins for the answer, as the library's waits do.
        s.set_nonblocking(true).map_err(io)?;
        let mut buf = [0u8; 8];
        let mut time = || -> Result<Duration, String> {
            let start = Instant::now();
            for i in 0..rounds {
                s.write_all(&u64::from(i).to_le_bytes()).map_err(io)?;
                read_spinning(&mut s, &mut buf)?;
            }
            Ok(start.elapsed() / rounds)
        };
        let spinning = time()?;
        let sleeping = time()?;
        Ok(Some((spinning, sleeping)))
    } else {
        Ok(None)
    }
}

/// Fills `buf` from the non-blocking `s`, spinning while nothing is there.
fn read_spinning(s: &mut std::net::TcpStream, buf: &mut [u8]) -> Result<(), String> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err("the peer closed".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::hint::spin_loop(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}
