//! Every operation under every synchronization mode, on both capability profiles of the
//! simulated transport, checked against final window contents and return values.

use rma_core::sim::{self, Profile};
use rma_core::{AccOp, Assert, Engine, LockType, Rank, Request, Result, Window};

const PROFILES: [Profile; 4] = [
    Profile::ActiveMessages,
    Profile::Rdma,
    Profile::SharedMemory,
    Profile::OrderedPuts,
];
const N: usize = 16;

struct Fetched {
    get_acc: Request<Vec<u64>>,
    fop: Request<u64>,
    cas: Request<u64>,
    get: Request<Vec<u64>>,
}

/// Window layout (N u64): put [0..4), accumulate(sum) [4..8), get_accumulate(sum)
/// [8..10), fetch_and_op(sum) at 10, compare_and_swap at 11, get of [12..16).
fn init(win: &Window<u64>, me: Rank) -> Result<()> {
    let m = me as u64;
    let mut v = vec![0u64; N];
    v[4..8].copy_from_slice(&[100, 100, 100, 100]);
    v[8..10].copy_from_slice(&[7, 8]);
    v[10] = 1000;
    v[12..16].copy_from_slice(&[m * 10, m * 10 + 1, m * 10 + 2, m * 10 + 3]);
    win.write_local(0, &v)
}

fn issue(win: &Window<u64>, me: Rank, right: Rank) -> Result<Fetched> {
    let m = me as u64;
    win.put(&[m, m + 1, m + 2, m + 3], right, 0)?;
    win.accumulate(&[1, 2, 3, 4], AccOp::Sum, right, 4)?;
    Ok(Fetched {
        get_acc: win.get_accumulate(&[10, 10], AccOp::Sum, right, 8)?,
        fop: win.fetch_and_op(5, AccOp::Sum, right, 10)?,
        cas: win.compare_and_swap(0, m + 1, right, 11)?,
        get: win.get(right, 12, 4)?,
    })
}

/// Checks what the origin fetched from its right neighbour.
fn check_fetched(f: Fetched, right: Rank) -> Result<()> {
    let r = right as u64;
    assert_eq!(f.get_acc.wait()?, vec![7, 8]);
    assert_eq!(f.fop.wait()?, 1000);
    assert_eq!(f.cas.wait()?, 0);
    assert_eq!(
        f.get.wait()?,
        vec![r * 10, r * 10 + 1, r * 10 + 2, r * 10 + 3]
    );
    Ok(())
}

/// Checks the window of a rank whose left neighbour ran `issue` on it.
fn check_window(win: &Window<u64>, left: Rank) {
    let l = left as u64;
    let v = win.local_to_vec();
    assert_eq!(&v[0..4], &[l, l + 1, l + 2, l + 3], "put");
    assert_eq!(&v[4..8], &[101, 102, 103, 104], "accumulate");
    assert_eq!(&v[8..10], &[17, 18], "get_accumulate");
    assert_eq!(v[10], 1005, "fetch_and_op");
    assert_eq!(v[11], l + 1, "compare_and_swap");
}

fn neighbours(e: &Engine) -> (Rank, Rank, Rank) {
    let (me, n) = (e.rank(), e.size() as Rank);
    (me, (me + 1) % n, (me + n - 1) % n)
}

fn each_profile(ranks: usize, f: fn(Engine) -> Result<()>) {
    for (i, p) in PROFILES.into_iter().enumerate() {
        for seed in [1u64, 2, 3] {
            sim::run(ranks, p, seed * 10 + i as u64, f)
                .unwrap_or_else(|e| panic!("{p:?} seed {seed}: {e}"));
        }
    }
}

#[test]
fn fence() {
    each_profile(3, |e| {
        let (me, right, left) = neighbours(&e);
        let win = e.allocate::<u64>(N)?;
        init(&win, me)?;
        win.fence(Assert::NOPRECEDE)?;
        let f = issue(&win, me, right)?;
        win.fence(Assert::NOSUCCEED)?;
        check_fetched(f, right)?;
        check_window(&win, left);
        win.free()?;
        Ok(())
    });
}

#[test]
fn pscw() {
    each_profile(3, |e| {
        let (me, right, left) = neighbours(&e);
        let win = e.allocate::<u64>(N)?;
        init(&win, me)?;
        e.barrier()?;
        win.post(&[left], Assert::NONE)?;
        win.start(&[right], Assert::NONE)?;
        let f = issue(&win, me, right)?;
        win.complete()?;
        win.wait()?;
        check_fetched(f, right)?;
        check_window(&win, left);
        win.free()?;
        Ok(())
    });
}

#[test]
fn lock_exclusive_and_shared() {
    for lock in [LockType::Exclusive, LockType::Shared] {
        for (i, p) in PROFILES.into_iter().enumerate() {
            sim::run(3, p, 40 + i as u64, move |e| {
                let (me, right, left) = neighbours(&e);
                let win = e.allocate::<u64>(N)?;
                init(&win, me)?;
                e.barrier()?;
                win.lock(lock, right, Assert::NONE)?;
                let f = issue(&win, me, right)?;
                win.unlock(right)?;
                check_fetched(f, right)?;
                e.barrier()?;
                check_window(&win, left);
                win.free()?;
                Ok(())
            })
            .unwrap();
        }
    }
}

#[test]
fn lock_all_with_flush() {
    each_profile(4, |e| {
        let (me, right, left) = neighbours(&e);
        let win = e.allocate::<u64>(N)?;
        init(&win, me)?;
        e.barrier()?;
        win.lock_all(Assert::NONE)?;
        let f = issue(&win, me, right)?;
        win.flush(right)?;
        check_fetched(f, right)?;
        win.unlock_all()?;
        e.barrier()?;
        check_window(&win, left);
        win.free()?;
        Ok(())
    });
}

#[test]
fn lock_all_nocheck_flush_local_all() {
    each_profile(2, |e| {
        let (me, right, left) = neighbours(&e);
        let win = e.allocate::<u64>(N)?;
        init(&win, me)?;
        e.barrier()?;
        win.lock_all(Assert::NOCHECK)?;
        let f = issue(&win, me, right)?;
        win.flush_local_all()?;
        check_fetched(f, right)?;
        win.flush_all()?;
        win.unlock_all()?;
        e.barrier()?;
        check_window(&win, left);
        win.free()?;
        Ok(())
    });
}

#[test]
fn lock_nocheck_and_self() {
    each_profile(2, |e| {
        let (me, right, left) = neighbours(&e);
        let win = e.allocate::<u64>(N)?;
        init(&win, me)?;
        e.barrier()?;
        win.lock(LockType::Shared, right, Assert::NOCHECK)?;
        let f = issue(&win, me, right)?;
        win.unlock(right)?;
        check_fetched(f, right)?;
        e.barrier()?;
        check_window(&win, left);
        // A lock on oneself: local load/store under it.
        win.lock(LockType::Exclusive, me, Assert::NONE)?;
        win.put(&[99], me, 15)?;
        win.flush(me)?;
        win.unlock(me)?;
        assert_eq!(win.local_to_vec()[15], 99);
        win.free()?;
        Ok(())
    });
}

#[test]
fn request_based_and_strided() {
    each_profile(2, |e| {
        let (me, right, left) = neighbours(&e);
        let win = e.allocate::<i32>(32)?;
        e.barrier()?;
        win.lock_all(Assert::NONE)?;
        let data: Vec<i32> = (0..8).map(|i| i + 10 * me as i32).collect();
        win.rput(&data[..4], right, 0)?.wait()?;
        // Every other origin element into every third target slot from 8.
        win.put_strided(
            &data,
            rma_core::Layout::strided(4, 1, 2),
            right,
            8,
            rma_core::Layout::strided(4, 1, 3),
        )?;
        win.raccumulate(&[1, 1], AccOp::Sum, right, 20)?.wait()?;
        win.accumulate_strided(
            &[5, 6, 7, 8],
            rma_core::Layout::contiguous(4),
            AccOp::Max,
            right,
            24,
            rma_core::Layout::strided(2, 2, 4),
        )?;
        win.flush(right)?;
        let mut mine = [0i32; 4];
        let into = win.get_into(right, 0, &mut mine)?;
        win.flush(right)?;
        let m0 = 10 * me as i32;
        assert_eq!(into.wait()?, &[m0, m0 + 1, m0 + 2, m0 + 3]);
        let strided = win.get_strided(right, 8, rma_core::Layout::strided(4, 1, 3))?;
        let rg = win.get_accumulate(&[0, 0], AccOp::NoOp, right, 20)?;
        win.flush(right)?;
        let m = 10 * me as i32;
        assert_eq!(strided.wait()?, vec![m, m + 2, m + 4, m + 6]);
        assert_eq!(rg.wait()?, vec![1, 1]);
        win.unlock_all()?;
        e.barrier()?;
        let v = win.local_to_vec();
        let l = 10 * left as i32;
        assert_eq!(&v[0..4], &[l, l + 1, l + 2, l + 3]);
        assert_eq!((v[8], v[11], v[14], v[17]), (l, l + 2, l + 4, l + 6));
        assert_eq!(&v[24..30], &[5, 6, 0, 0, 7, 8]);
        win.free()?;
        Ok(())
    });
}

#[test]
fn window_kinds_create_dynamic_shared() {
    each_profile(2, |e| {
        let (me, right, left) = neighbours(&e);
        // create: over user memory, given back by free.
        let win = e.create(vec![0u16; 8])?;
        win.fence(Assert::NONE)?;
        win.put(&[me as u16 + 1; 2], right, 6)?;
        win.fence(Assert::NONE)?;
        let mem = win.free()?.expect("create gives the memory back");
        assert_eq!(
            mem,
            vec![0, 0, 0, 0, 0, 0, left as u16 + 1, left as u16 + 1]
        );

        // dynamic: attach, exchange the address, access, detach.
        let dynw = e.create_dynamic::<f64>()?;
        let addr = dynw.attach(vec![0.5f64; 4])?;
        // A region's address is where its memory is in its process (MPI_Get_address):
        // exchanged, as programs do.
        let addrs = e.world().allgather(&[addr])?;
        let theirs = addrs[right as usize];
        dynw.lock_all(Assert::NONE)?;
        dynw.accumulate(&[1.25], AccOp::Sum, right, theirs + 8)?;
        let bad = dynw.put(&[1.0], right, theirs + 4 * 8 + 64);
        assert!(bad.is_ok(), "the origin cannot check dynamic addresses");
        let flushed = dynw.flush(right);
        assert!(
            matches!(
                flushed.as_ref().map_err(rma_core::Error::kind),
                Err(rma_core::ErrorKind::Peer(
                    rma_core::PeerError::Refused { .. }
                ))
            ),
            "{flushed:?}"
        );
        dynw.unlock_all()?;
        e.barrier()?;
        let region = dynw.detach(addr)?;
        assert_eq!(region, vec![0.5, 0.5 + 1.25, 0.5, 0.5]);
        dynw.free()?;
        Ok(())
    });
}
