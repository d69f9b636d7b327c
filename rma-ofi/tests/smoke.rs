//! Opens fabric, domain and two endpoints of each provider in one process and sends one
//! message from one to the other, with and without local buffer registration
//! (FI_MR_LOCAL's descriptors).

use std::time::{Duration, Instant};

use rma_core::{AccOp, DataType};
use rma_ofi::fabric::{is_again, Completion, Endpoint, Local, LocalBuf, OpContext, Remote};
use rma_ofi::sys::Atomic;

fn exchange(provider: &str, local_mr: bool) {
    let open = || Endpoint::open_with(Some(provider), true, 2, 0, local_mr, false);
    let (mut a, mut b) = (open().expect("open a"), open().expect("open b"));
    if local_mr {
        a.force_local_mr();
        b.force_local_mr();
    }
    eprintln!("{provider}: {:?}", a.offer);
    let names = vec![a.name().unwrap(), b.name().unwrap()];
    let a_addrs = a.insert(&names).unwrap();
    let _b_addrs = b.insert(&names).unwrap();
    let mut rbuf = LocalBuf::zeroed(64);
    let mut rctx = Box::new(OpContext::new(1));
    let mut sctx = Box::new(OpContext::new(2));
    let mut msg = LocalBuf::default();
    msg.bytes.extend_from_slice(b"hello over libfabric");
    let (rlocal, slocal) = (rbuf.local(&mut b).unwrap(), msg.local(&mut a).unwrap());
    assert_eq!(
        rlocal.desc.is_none(),
        !local_mr,
        "{provider}: a descriptor when registered"
    );
    assert_eq!(slocal.desc.is_none(), !local_mr);
    // SAFETY: rbuf and rctx outlive the loop below, which reads the completion.
    let rc = unsafe { b.post_recv(rlocal, &mut *rctx) };
    assert_eq!(rc, 0, "fi_recv");
    let mut entries = [Completion::default(); 8];
    let start = Instant::now();
    loop {
        // SAFETY: msg and sctx outlive the loop below, which reads the send completion.
        let rc = unsafe { a.send(slocal, a_addrs[1], &mut *sctx) };
        if rc == 0 {
            break;
        }
        // -FI_EAGAIN while the connection is set up: progress both sides.
        assert!(is_again(rc), "{provider}: fi_send: {rc}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{provider}: send stuck"
        );
        let _ = a.cq_read(&mut entries);
        assert_eq!(b.cq_read(&mut entries), Ok(0));
    }
    let (mut sent, mut got) = (false, None);
    while !(sent && got.is_some()) {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{provider}: no completion"
        );
        match a.cq_read(&mut entries) {
            Ok(n) => sent |= entries[..n].iter().any(|c| c.id == Some(2)),
            Err(_) => panic!("{provider}: send failed: {:?}", a.cq_readerr()),
        }
        match b.cq_read(&mut entries) {
            Ok(n) if n > 0 => {
                assert!(entries[0].is_recv());
                assert_eq!(entries[0].id, Some(1), "the receive's context");
                got = Some(entries[0].len);
            }
            Ok(_) => {}
            Err(_) => panic!("{provider}: recv failed: {:?}", b.cq_readerr()),
        }
    }
    assert_eq!(&rbuf.bytes[..got.unwrap()], &msg.bytes[..]);
}

#[test]
fn tcp_rxm() {
    exchange("tcp", false);
    exchange("tcp", true);
}

#[test]
fn sockets() {
    exchange("sockets", false);
    exchange("sockets", true);
}

#[test]
fn shm() {
    exchange("shm", false);
    exchange("shm", true);
}

/// A registered buffer keeps its region while it stays where it is, and is registered
/// again once it grows out of its allocation.
#[test]
fn a_local_buffer_is_registered_again_when_it_moves() {
    let mut ep = Endpoint::open_with(Some("tcp"), true, 2, 0, true, false).expect("open");
    let mut buf = LocalBuf::default();
    assert!(
        buf.desc(&mut ep).unwrap().is_none(),
        "tcp does not ask for it"
    );
    ep.force_local_mr();
    buf.bytes.extend_from_slice(&[1; 16]);
    assert!(!buf.desc(&mut ep).unwrap().is_none());
    assert_eq!(ep.local_registrations(), (1, 1));
    buf.bytes.clear();
    buf.bytes.extend_from_slice(&[2; 8]);
    buf.desc(&mut ep).unwrap();
    assert_eq!(
        ep.local_registrations(),
        (1, 1),
        "same allocation, same region"
    );
    let at = buf.bytes.as_ptr();
    buf.bytes.resize(1 << 20, 0);
    assert_ne!(
        buf.bytes.as_ptr(),
        at,
        "a megabyte does not fit the first allocation"
    );
    assert!(!buf.desc(&mut ep).unwrap().is_none());
    assert_eq!(
        ep.local_registrations(),
        (2, 1),
        "registered again, the old region closed"
    );
}

/// One fetching atomic (u64 sum) from endpoint a to a registered word of endpoint b;
/// returns (fetched, word after).
fn fetch_add(provider: &str) -> (u64, u64) {
    let mut a = Endpoint::open(Some(provider), true, 2).expect("open a");
    let mut b = Endpoint::open(Some(provider), true, 2).expect("open b");
    let names = vec![a.name().unwrap(), b.name().unwrap()];
    let a_addrs = a.insert(&names).unwrap();
    let _ = b.insert(&names).unwrap();
    let mut word = Box::new(7u64);
    let wptr: *mut u64 = &mut *word;
    // SAFETY: `word` outlives the registration (closed below before it drops).
    let mr = unsafe { b.mr_reg(wptr.cast(), 8, 1) }.expect("mr_reg");
    let to = Remote {
        peer: a_addrs[1],
        addr: if b.offer.virt_addr() { wptr as u64 } else { 0 },
        key: mr.key(),
    };
    let mut operand = 5u64;
    let mut result = 0u64;
    let sum = Atomic {
        op: AccOp::Sum,
        datatype: DataType::U64,
        count: 1,
    };
    let mut ctx = Box::new(OpContext::new(3));
    let mut entries = [Completion::default(); 8];
    let start = Instant::now();
    loop {
        let operand = Local::plain((&mut operand as *mut u64).cast(), 8);
        let result = Local::plain((&mut result as *mut u64).cast(), 8);
        // SAFETY: operand, result and ctx live until the completion is read below.
        let rc = unsafe { a.fetch_atomic(operand, result, to, sum, &mut *ctx) };
        if rc == 0 {
            break;
        }
        assert!(is_again(rc), "{provider}: fi_fetch_atomic: {rc}");
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{provider}: stuck"
        );
        let _ = a.cq_read(&mut entries);
        let _ = b.cq_read(&mut entries);
    }
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{provider}: no completion"
        );
        match a.cq_read(&mut entries) {
            Ok(0) => {}
            Ok(_) => break,
            Err(_) => panic!("{provider}: atomic failed: {:?}", a.cq_readerr()),
        }
        let _ = b.cq_read(&mut entries);
    }
    // SAFETY: the word is only read after the op completed; mr closed once.
    let after = unsafe { std::ptr::read_volatile(wptr) };
    b.mr_close(mr);
    (result, after)
}

#[test]
fn fetch_add_tcp_rxm() {
    assert_eq!(fetch_add("tcp"), (7, 12));
}

#[test]
fn fetch_add_sockets() {
    assert_eq!(fetch_add("sockets"), (7, 12));
}

#[test]
fn fetch_add_shm() {
    assert_eq!(fetch_add("shm"), (7, 12));
}
