//! Sizes no memory holds (issue #15): every call that takes a count, a layout, a
//! displacement or a window length answers a huge value with a typed error, never a
//! panic, a wrapped size or a truncated extent; and the wire decoder refuses extents
//! whose sizes overflow. Property tests over random huge values on a simulated engine.

use proptest::prelude::*;
use rma_core::sim::{self, Profile};
use rma_core::wire::{self, Encoder, Extent, Kind};
use rma_core::{AccOp, Assert, Error, ErrorKind, Layout, UsageError};

/// Values around the edges of 32 and 64 bits and of `isize`, plus random ones.
fn huge() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u32::MAX as u64),
        Just(u32::MAX as u64 + 1),
        Just((1u64 << 32) + 1),
        Just(1u64 << 61),
        Just((1u64 << 61) - 1),
        Just((1u64 << 61) + 16),
        Just((1u64 << 62) + 1),
        Just(i64::MAX as u64),
        Just(u64::MAX),
        any::<u64>(),
    ]
}

/// Whether `r` is Ok or one of the typed errors a huge size may give.
fn typed<T>(r: &rma_core::Result<T>) -> bool {
    matches!(
        r.as_ref().map_err(Error::kind),
        Ok(_)
            | Err(ErrorKind::Usage(
                UsageError::TooLarge { .. }
                    | UsageError::OutOfBounds { .. }
                    | UsageError::BadLayout
                    | UsageError::Unsupported { .. }
            ))
            // More than one active message carries (dynamic windows reach their
            // targets by active messages only).
            | Err(ErrorKind::Transport(rma_core::TransportError::Unsupported(_)))
    )
}

#[test]
fn the_cases_the_issue_names_are_typed_errors() {
    sim::run(2, Profile::Rdma, 7, |engine| {
        // allocate::<u64>(2^61 + 16): its bytes overflow, not a 128-byte window.
        let r = engine.allocate::<u64>((1usize << 61) + 16);
        assert!(
            matches!(
                r.as_ref().map_err(Error::kind),
                Err(ErrorKind::Usage(UsageError::Unsupported { .. }))
            ),
            "{r:?}"
        );
        let win = engine.allocate::<u64>(16)?;
        win.lock_all(Assert::NONE)?;
        let peer = 1 - engine.rank();
        // get(t, 0, 1 << 61): bytes overflow (no "capacity overflow" panic).
        let r = win.get(peer, 0, 1 << 61);
        assert!(
            matches!(
                r.as_ref().map_err(Error::kind),
                Err(ErrorKind::Usage(UsageError::TooLarge { .. }))
            ),
            "{r:?}"
        );
        // A target layout of (1 << 62) + 1 blocks is not 4 contiguous elements.
        let r = win.get_strided(peer, 0, Layout::strided((1 << 62) + 1, 4, 4));
        assert!(r.is_err(), "{r:?}");
        // A stride of 2^32 + 1 elements does not land at offset 1.
        let r = win.get_strided(peer, 0, Layout::strided(2, 1, (1 << 32) + 1));
        assert!(
            matches!(
                r.as_ref().map_err(Error::kind),
                Err(ErrorKind::Usage(UsageError::OutOfBounds { .. }))
            ),
            "{r:?}"
        );
        // read_local/write_local far past the window: no wrap to element 0, no panic.
        let mut one = [0u64; 1];
        for disp in [1usize << 61, (1 << 61) - 1, usize::MAX] {
            let r = win.read_local(disp, &mut one);
            assert!(
                matches!(
                    r.as_ref().map_err(Error::kind),
                    Err(ErrorKind::Usage(UsageError::OutOfBounds { .. }))
                ),
                "{r:?}"
            );
            let r = win.write_local(disp, &one);
            assert!(
                matches!(
                    r.as_ref().map_err(Error::kind),
                    Err(ErrorKind::Usage(UsageError::OutOfBounds { .. }))
                ),
                "{r:?}"
            );
        }
        // compare_and_swap on floats is not MPI.
        let wf = engine.allocate::<f64>(4)?;
        wf.lock_all(Assert::NONE)?;
        let r = wf.compare_and_swap(0.0, 1.0, peer, 0);
        assert!(
            matches!(
                r.as_ref().map_err(Error::kind),
                Err(ErrorKind::Usage(UsageError::Unsupported { .. }))
            ),
            "{r:?}"
        );
        wf.unlock_all()?;
        win.unlock_all()?;
        engine.barrier()?;
        wf.free()?;
        win.free()?;
        Ok(())
    })
    .unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every data call with huge counts, layouts and displacements: typed outcomes only,
    /// on a static and a dynamic window, and the window still works afterwards.
    #[test]
    fn huge_values_never_panic(
        count in huge(), block in huge(), stride in huge(), disp in huge(), seed in 0u64..1000
    ) {
        let (count, block, stride) = (count as usize, block as usize, stride as usize);
        sim::run(2, Profile::Rdma, seed, move |engine| {
            let peer = 1 - engine.rank();
            let win = engine.allocate::<u32>(64)?;
            let dynamic = engine.create_dynamic::<u32>()?;
            let layout = Layout::strided(count, block, stride);
            let data = [7u32; 8];
            win.lock_all(Assert::NONE)?;
            dynamic.lock_all(Assert::NONE)?;
            for w in [&win, &dynamic] {
                assert!(typed(&w.get(peer, disp, count)));
                assert!(typed(&w.get_strided(peer, disp, layout)));
                assert!(typed(&w.put_strided(&data, Layout::contiguous(8), peer, disp, layout)));
                assert!(typed(&w.accumulate_strided(
                    &data, Layout::contiguous(8), AccOp::Sum, peer, disp, layout
                )));
                assert!(typed(&w.fetch_and_op(1, AccOp::Sum, peer, disp)));
            }
            assert!(typed(&win.read_local(disp as usize, &mut [0u32; 2])));
            assert!(typed(&win.write_local(disp as usize, &[0u32; 2])));
            // A window no memory holds: refused (the size, or the backend's allocation),
            // the same on both ranks.
            let r = engine.allocate::<u64>(count).map(drop);
            assert!(
                typed(&r)
                    || matches!(r.as_ref().map_err(Error::kind),
                        Err(ErrorKind::Transport(rma_core::TransportError::Failed(_))
                            | ErrorKind::Peer(rma_core::PeerError::CollectiveFailed { .. }))
                    ),
                "{r:?}"
            );
            // Still usable: an exact put and get.
            win.put(&[41, 42], peer, 3)?;
            win.flush(peer)?;
            assert_eq!(win.get(peer, 3, 2)?.wait()?, vec![41, 42]);
            // What reached the dynamic window's target outside its (empty) regions was
            // refused there, and the epoch's end says so.
            let r = dynamic.unlock_all();
            assert!(
                matches!(r.as_ref().map_err(Error::kind), Ok(()) | Err(ErrorKind::Peer(rma_core::PeerError::Refused { .. }))),
                "{r:?}"
            );
            win.unlock_all()?;
            engine.barrier()?;
            dynamic.free()?;
            win.free()?;
            Ok(())
        })
        .unwrap();
    }

    /// The decoder refuses any extent whose bytes or span overflow 64 bits or whose
    /// blocks overlap, and accepts (and round-trips) every other.
    #[test]
    fn decoded_extents_never_overflow(
        offset in huge(), count in huge(), block in huge(), stride in huge()
    ) {
        let e = Extent { offset, count, block, stride };
        let mut enc = Encoder::default();
        enc.start(Kind::Get, 0, 0, 0).u64(9).extent(e);
        match wire::decode(enc.finish()) {
            Ok(p) => {
                prop_assert!(e.is_well_formed());
                prop_assert!(e.checked_bytes().is_some() && e.checked_span().is_some());
                prop_assert_eq!(p.body, wire::Body::Get { token: 9, extent: e });
            }
            Err(_) => prop_assert!(!e.is_well_formed()),
        }
    }
}

/// An op larger than one active message goes in pieces, each one message: a 3 MiB put,
/// get and accumulate over the simulated active-message network (1 MiB messages),
/// exact results, and as many Put messages as pieces.
#[test]
fn ops_past_one_message_go_in_pieces_each_one_message() {
    sim::run(2, Profile::ActiveMessages, 5, |engine| {
        let n = 3 << 17; // 3 MiB of u64
        let win = engine.allocate::<u64>(n)?;
        let peer = 1 - engine.rank();
        let data: Vec<u64> = (0..n as u64).collect();
        win.lock_all(Assert::NONE)?;
        let before = win.stats();
        win.put(&data, peer, 0)?;
        win.flush(peer)?;
        let split = win.stats().since(&before);
        assert_eq!(split.ops_split, 1);
        // (1 MiB - 128) / 8 elements a piece: four pieces for 3 MiB.
        assert_eq!(split.pieces, 4);
        assert_eq!(split.messages(Kind::Put), 4);
        assert_eq!(win.get(peer, 0, n)?.wait()?, data);
        win.accumulate(&vec![1; n], AccOp::Sum, peer, 0)?;
        let fetched = win.get_accumulate(&vec![1; n], AccOp::Sum, peer, 0)?;
        win.flush(peer)?;
        let plus1: Vec<u64> = data.iter().map(|v| v + 1).collect();
        assert_eq!(fetched.wait()?, plus1);
        win.unlock_all()?;
        engine.barrier()?;
        win.free()?;
        Ok(())
    })
    .unwrap();
}
