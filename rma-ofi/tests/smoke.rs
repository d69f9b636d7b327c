//! Opens fabric, domain and two endpoints of each provider in one process and sends one
//! message from one to the other, with and without local buffer registration
//! (FI_MR_LOCAL's descriptors).

use std::time::{Duration, Instant};

use rma_ofi::fabric::{Endpoint, LocalBuf, OpContext};
use rma_ofi::sys;

fn exchange(provider: &str, local_mr: bool) {
    let open = || Endpoint::open_with(Some(provider), true, 2, 0, local_mr);
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
    let mut rctx = Box::new(OpContext::default());
    let mut sctx = Box::new(OpContext::default());
    let mut msg = LocalBuf::default();
    msg.bytes.extend_from_slice(b"hello over libfabric");
    let (rdesc, sdesc) = (rbuf.desc(&mut b).unwrap(), msg.desc(&mut a).unwrap());
    assert_eq!(
        rdesc.is_null(),
        !local_mr,
        "{provider}: a descriptor when registered"
    );
    assert_eq!(sdesc.is_null(), !local_mr);
    // SAFETY: rbuf and rctx outlive the loop below, which reads the completion.
    let rc = unsafe {
        b.post_recv(
            rbuf.bytes.as_mut_ptr(),
            rbuf.bytes.len(),
            rdesc,
            (&mut *rctx as *mut OpContext).cast(),
        )
    };
    assert_eq!(rc, 0, "fi_recv");
    let mut entries = [sys::fi_cq_data_entry::default(); 8];
    let start = Instant::now();
    loop {
        // SAFETY: msg and sctx outlive the loop below, which reads the send completion.
        let rc = unsafe {
            a.send(
                msg.bytes.as_ptr(),
                msg.bytes.len(),
                sdesc,
                a_addrs[1],
                (&mut *sctx as *mut OpContext).cast(),
            )
        };
        if rc == 0 {
            break;
        }
        // -FI_EAGAIN while the connection is set up: progress both sides.
        assert_eq!(rc, -(sys::FI_EAGAIN as isize), "{provider}: fi_send");
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
            Ok(n) => sent |= n > 0,
            Err(_) => panic!("{provider}: send failed: {:?}", a.cq_readerr()),
        }
        match b.cq_read(&mut entries) {
            Ok(n) if n > 0 => {
                assert!(entries[0].flags & sys::FI_RECV as u64 != 0);
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
    let mut ep = Endpoint::open_with(Some("tcp"), true, 2, 0, true).expect("open");
    let mut buf = LocalBuf::default();
    assert!(
        buf.desc(&mut ep).unwrap().is_null(),
        "tcp does not ask for it"
    );
    ep.force_local_mr();
    buf.bytes.extend_from_slice(&[1; 16]);
    assert!(!buf.desc(&mut ep).unwrap().is_null());
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
    assert!(!buf.desc(&mut ep).unwrap().is_null());
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
    let (mr, key) = unsafe { b.mr_reg(wptr.cast(), 8, 1) }.expect("mr_reg");
    let addr = if b.offer.mr_mode & sys::FI_MR_VIRT_ADDR as u64 != 0 {
        wptr as u64
    } else {
        0
    };
    let operand = 5u64;
    let mut result = 0u64;
    let mut ctx = Box::new(OpContext::default());
    let mut entries = [sys::fi_cq_data_entry::default(); 8];
    let start = Instant::now();
    loop {
        // SAFETY: operand, result and ctx live until the completion is read below.
        let rc = unsafe {
            sys::rma_fi_fetch_atomic(
                a.raw().0,
                (&operand as *const u64).cast(),
                1,
                std::ptr::null_mut(),
                (&mut result as *mut u64).cast(),
                std::ptr::null_mut(),
                a_addrs[1],
                addr,
                key,
                sys::fi_datatype_FI_UINT64,
                sys::fi_op_FI_SUM,
                (&mut *ctx as *mut OpContext).cast(),
            )
        };
        if rc == 0 {
            break;
        }
        assert_eq!(
            rc,
            -(sys::FI_EAGAIN as isize),
            "{provider}: fi_fetch_atomic"
        );
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
    // SAFETY: as above.
    unsafe { b.mr_close(mr) };
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
