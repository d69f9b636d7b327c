//! `rma-run -n 2 verbs_raw_latency [ITERATIONS]`: the raw-verbs baseline of
//! `osu_put_latency -b verbs` and `osu_get_latency -b verbs`, with no rma engine: rank 0
//! posts an 8-byte RDMA WRITE (inline when the QP allows, as rma-verbs does) or READ to
//! rank 1's registered buffer over one RC QP and polls the completion queue until it
//! completes, ITERATIONS times (default 10,000, after 10% warm-up); rank 1 waits in the
//! bootstrap's barrier (with `RAW_TARGET_SPINS=1`: polls and yields, as the engine's
//! target does). Prints `raw_write 8 <us>` and `raw_read 8 <us>` (mean per op).
//! The same device, port and GID choice as rma-verbs (`RMA_VERBS_DEVICE`, ...).

use std::process::ExitCode;
use std::time::Instant;

use rma_verbs::ib::{
    empty_wc, Access, Buffer, Context, Cq, Endpoint, Local, Pd, QpParams, ResetQp, SendOp,
};

fn env_u8(name: &str) -> Option<u8> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("verbs_raw_latency: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let iters: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let world = rma::World::init()?;
    let boot = world.bootstrap();
    if boot.size() != 2 {
        return Err("run it under rma-run -n 2".into());
    }
    let me = boot.rank() as usize;
    let device = std::env::var("RMA_VERBS_DEVICE").ok();
    let ctx = Context::open(
        device.as_deref(),
        env_u8("RMA_VERBS_PORT").unwrap_or(1),
        env_u8("RMA_VERBS_GID_INDEX"),
    )?;
    let pd = Pd::new(&ctx)?;
    let cq = Cq::new(&ctx, 64, false)?;
    let qp = ResetQp::new(&pd, &cq, 16, 1, 256)?;
    let target = Buffer::new(&pd, 64, Access::window(true))?;
    let local = Buffer::new(&pd, 64, Access::LOCAL)?;
    let psn = 0x1234 + me as u32;
    let mut blob = Vec::new();
    Endpoint {
        qpn: qp.qpn(),
        psn,
        lid: ctx.lid,
        gid: ctx.gid,
    }
    .encode(&mut blob);
    blob.extend_from_slice(&(target.addr() as u64).to_le_bytes());
    blob.extend_from_slice(&target.rkey().to_le_bytes());
    let all = boot.allgather("raw-verbs", &blob)?;
    let peer = &all[1 - me];
    let remote = Endpoint::decode(peer).ok_or("bad endpoint")?;
    let at = Endpoint::LEN;
    let raddr = u64::from_le_bytes(peer[at..at + 8].try_into()?);
    let rkey = u32::from_le_bytes(peer[at + 8..at + 12].try_into()?);
    let params = QpParams {
        timeout: 17,
        retry_cnt: 6,
        rnr_retry: 7,
        rd_atomic: ctx.max_qp_rd_atom.clamp(1, 16) as u8,
    };
    let qp = qp
        .init()?
        .ready_to_receive(&remote, params)?
        .ready_to_send(psn)?;
    boot.barrier()?;
    if me == 0 {
        let mut wcs = [empty_wc()];
        let inline = 8 <= qp.max_inline();
        for (name, op) in [
            ("raw_write", SendOp::Write(raddr, rkey)),
            ("raw_read", SendOp::Read(raddr, rkey)),
        ] {
            let inline = inline && matches!(op, SendOp::Write(..));
            let warm = iters / 10;
            let mut start = Instant::now();
            for i in 0..warm + iters {
                if i == warm {
                    start = Instant::now();
                }
                let l = Local {
                    addr: local.addr(),
                    len: 8,
                    lkey: local.lkey(),
                };
                // SAFETY: `local` is registered and outlives the op, which completes
                // (polled below) before the next one is posted; the remote range is 8
                // bytes of the peer's 64-byte registered buffer.
                unsafe { qp.post_send(i as u64, op, l, inline, true)? };
                loop {
                    if cq.poll(&mut wcs)? == 1 {
                        if wcs[0].status != 0 {
                            return Err(format!("completion status {}", wcs[0].status).into());
                        }
                        break;
                    }
                }
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / iters as f64;
            println!("{name} 8 {us:.2}");
        }
        // Tell a spinning target we are done: 1 into its word at offset 8.
        let one = 1u64.to_ne_bytes();
        let l = Local {
            addr: one.as_ptr(),
            len: 8,
            lkey: 0,
        };
        // SAFETY: inline (the bytes are copied by the call); 8 bytes at offset 8 of the
        // peer's 64-byte registered buffer.
        unsafe { qp.post_send(u64::MAX, SendOp::Write(raddr + 8, rkey), l, true, true)? };
        while cq.poll(&mut wcs)? == 0 {}
    } else if std::env::var_os("RAW_TARGET_SPINS").is_some() {
        // Wait the way the engine's target does: polling (its CQ) and yielding every 8.
        let mut wcs = [empty_wc()];
        let mut n = 0u64;
        // SAFETY: offset 8 of our 64-byte buffer; read volatile (the HCA writes it).
        while unsafe { std::ptr::read_volatile(target.addr().add(8).cast::<u64>()) } == 0 {
            cq.poll(&mut wcs)?;
            n += 1;
            if n.is_multiple_of(8) {
                std::thread::yield_now();
            }
        }
    }
    boot.barrier()?;
    Ok(())
}
