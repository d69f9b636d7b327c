//! The transport on a real device, one rank (native ops reach its own window over the
//! loopback QP pair): range checks at the origin, put, get, atomics, native locks, a
//! message to oneself. Without an RDMA device (this project's host kernel has none) each
//! test says so and passes; ci/verbs.sh runs this binary inside the rxe VM, where
//! `RMA_VERBS_REQUIRE_DEVICE=1` turns a missing device into a failure.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rma_core::transport::{
    Event, Fetched, Issued, NativeAtomic, RemoteSegment, Segment, Transport,
};
use rma_core::{AccOp, Bootstrap, DataType, Rank, TransportError};
use rma_verbs::VerbsTransport;

/// A job of one process.
#[derive(Default)]
struct Alone {
    kv: Mutex<HashMap<String, Vec<u8>>>,
}

impl Bootstrap for Alone {
    fn rank(&self) -> Rank {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn job_id(&self) -> &str {
        "verbs-device-test"
    }
    fn node_id(&self) -> &str {
        "here"
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<(), TransportError> {
        self.kv
            .lock()
            .unwrap()
            .insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, TransportError> {
        self.kv
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .ok_or_else(|| TransportError::Failed(format!("no key {key}")))
    }
    fn barrier(&self) -> Result<(), TransportError> {
        Ok(())
    }
}

fn transport() -> Option<VerbsTransport> {
    match VerbsTransport::new(Arc::new(Alone::default())) {
        Ok(t) => Some(t),
        Err(e) => {
            assert!(
                std::env::var("RMA_VERBS_REQUIRE_DEVICE").as_deref() != Ok("1"),
                "no usable RDMA device: {e}"
            );
            eprintln!("skipped: no usable RDMA device ({e})");
            None
        }
    }
}

/// A 64-byte window 0 over allocated memory.
fn window(t: &VerbsTransport) -> Arc<dyn Segment> {
    let seg = t.allocate(64, None).expect("allocate");
    let remote = [RemoteSegment {
        len: 64,
        disp_unit: 1,
        key: seg.descriptor(),
    }];
    t.window_ready(0, Some(&seg), &remote)
        .expect("window_ready");
    seg
}

/// Waits for the completion of `token` (or takes an immediate one).
fn done(t: &VerbsTransport, issued: Issued, token: u64) -> Option<Vec<u8>> {
    let Issued::Pending = issued else {
        let Issued::Complete(data) = issued else {
            unreachable!()
        };
        return data.map(Fetched::into_vec);
    };
    let start = Instant::now();
    let mut events = Vec::new();
    loop {
        t.poll(&mut events).expect("poll");
        if let Some(e) = events.pop() {
            assert!(events.is_empty(), "more events than one: {events:?}");
            match e {
                Event::Completed { token: k, data } if k == token => {
                    return data.map(Fetched::into_vec)
                }
                Event::Failed { token: k, error } if k == token => panic!("op failed: {error}"),
                other => panic!("unexpected event {other:?}"),
            }
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no completion");
    }
}

fn u64s(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn out_of_window_never_reaches_the_wire() {
    let Some(t) = transport() else { return };
    let seg = window(&t);
    for (offset, len) in [(60u64, 8usize), (64, 1), (u64::MAX - 2, 8)] {
        let r = t.put(0, 0, offset, &vec![9; len], 1);
        assert!(
            matches!(r, Err(TransportError::Failed(_))),
            "{offset}+{len}: {r:?}"
        );
        let r = t.get(0, 0, offset, len, 2);
        assert!(matches!(r, Err(TransportError::Failed(_))), "{r:?}");
    }
    // Misaligned atomics are refused too (they would put the QP in error).
    let r = t.atomic(
        0,
        0,
        4,
        NativeAtomic::Accumulate {
            op: AccOp::Sum,
            datatype: DataType::U64,
            operand: &1u64.to_ne_bytes(),
            fetch: true,
        },
        3,
    );
    assert!(matches!(r, Err(TransportError::Failed(_))), "{r:?}");
    // A window that is not there, a rank that is not there: no key to use.
    assert!(matches!(
        t.put(7, 0, 0, &[1], 4),
        Err(TransportError::Unsupported(_))
    ));
    assert!(t.put(0, 5, 0, &[1], 5).is_err());
    // Nothing of that reached the device: the QP still works and the memory is intact.
    let issued = t.put(0, 0, 56, &[7; 8], 6).expect("put");
    done(&t, issued, 6);
    let mut back = [0u8; 64];
    seg.read(0, &mut back);
    assert_eq!(&back[..56], &[0; 56][..]);
    assert_eq!(&back[56..], &[7; 8][..]);
}

#[test]
fn put_get_atomics_and_locks() {
    let Some(t) = transport() else { return };
    let seg = window(&t);
    // A put larger than the inline size and one within it.
    let big: Vec<u8> = (0..48).collect();
    let issued = t.put(0, 0, 0, &big, 1).expect("put");
    done(&t, issued, 1);
    let issued = t.put(0, 0, 48, &[5; 8], 2).expect("put");
    done(&t, issued, 2);
    let issued = t.get(0, 0, 0, 56, 3).expect("get");
    let got = done(&t, issued, 3).expect("data");
    assert_eq!(&got[..48], &big[..]);
    assert_eq!(&got[48..], &[5; 8]);

    // Fetch-and-add of two elements, then compare-and-swap.
    seg.write(0, &[0; 16]);
    let operand: Vec<u8> = [3u64, 4].iter().flat_map(|v| v.to_ne_bytes()).collect();
    for round in 0..2u64 {
        let issued = t
            .atomic(
                0,
                0,
                0,
                NativeAtomic::Accumulate {
                    op: AccOp::Sum,
                    datatype: DataType::U64,
                    operand: &operand,
                    fetch: true,
                },
                10 + round,
            )
            .expect("fetch-add");
        let old = done(&t, issued, 10 + round).expect("old values");
        assert_eq!(u64s(&old), vec![3 * round, 4 * round]);
    }
    let issued = t
        .atomic(
            0,
            0,
            8,
            NativeAtomic::CompareAndSwap {
                datatype: DataType::U64,
                compare: &8u64.to_ne_bytes(),
                swap: &42u64.to_ne_bytes(),
            },
            20,
        )
        .expect("cas");
    assert_eq!(u64s(&done(&t, issued, 20).expect("old")), vec![8]);
    let mut b = [0u8; 16];
    seg.read(0, &mut b);
    assert_eq!(u64s(&b), vec![6, 42]);

    // Native locks: exclusive excludes everything, shared ones share.
    assert!(t.window_capabilities(0, 0).native_locks);
    assert!(t.try_lock(0, 0, true).expect("lock"));
    assert!(!t.try_lock(0, 0, true).expect("lock"));
    assert!(!t.try_lock(0, 0, false).expect("lock"));
    t.unlock(0, 0, true).expect("unlock");
    assert!(t.try_lock(0, 0, false).expect("lock"));
    assert!(t.try_lock(0, 0, false).expect("lock"));
    assert!(!t.try_lock(0, 0, true).expect("lock"));
    t.unlock(0, 0, false).expect("unlock");
    t.unlock(0, 0, false).expect("unlock");
    assert!(t.try_lock(0, 0, true).expect("lock"));
    t.unlock(0, 0, true).expect("unlock");

    // A message to oneself.
    t.send(0, b"hello").expect("send");
    let mut events = Vec::new();
    t.poll(&mut events).expect("poll");
    assert!(
        matches!(&events[..], [Event::Received { from: 0, data }] if data == b"hello"),
        "{events:?}"
    );
    t.window_freed(0);
}
