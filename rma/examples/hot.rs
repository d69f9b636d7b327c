use rma::{Assert, LockType, World};
use std::time::Instant;
fn main() -> Result<(), rma::Error> {
    let w = World::init()?;
    let win = w.allocate::<u64>(1024)?;
    let me = w.rank();
    let t = (me + 1) % w.size() as u32;
    win.lock(LockType::Shared, t, Assert::NONE)?;
    let n = 1_000_000;
    for _ in 0..1000 {
        win.put(&[1], t, 0)?;
        win.flush(t)?;
    }
    let s = Instant::now();
    for _ in 0..n {
        win.put(&[1], t, 0)?;
    }
    let put = s.elapsed().as_nanos() as f64 / n as f64;
    let s = Instant::now();
    for _ in 0..n {
        win.flush(t)?;
    }
    let flush = s.elapsed().as_nanos() as f64 / n as f64;
    let s = Instant::now();
    for _ in 0..n {
        win.put(&[1], t, 0)?;
        win.flush(t)?;
    }
    let both = s.elapsed().as_nanos() as f64 / n as f64;
    let s = Instant::now();
    for _ in 0..n / 10 {
        win.fetch_and_op(1, rma::AccOp::Sum, t, 8)?.wait()?;
    }
    let fop = s.elapsed().as_nanos() as f64 / (n / 10) as f64;
    win.unlock(t)?;
    let s = Instant::now();
    for _ in 0..n / 10 {
        win.lock(LockType::Exclusive, t, Assert::NONE)?;
        win.put(&[1], t, 0)?;
        win.unlock(t)?;
    }
    let lpu = s.elapsed().as_nanos() as f64 / (n / 10) as f64;
    let s = Instant::now();
    for _ in 0..n / 10 {
        win.lock(LockType::Exclusive, t, Assert::NONE)?;
        win.unlock(t)?;
    }
    let lu = s.elapsed().as_nanos() as f64 / (n / 10) as f64;
    if me == 0 {
        println!("lock+unlock {lu:.0} ns");
    }
    if me == 0 {
        println!("put {put:.0} ns, flush {flush:.0} ns, put+flush {both:.0} ns, fop+wait {fop:.0} ns, lock+put+unlock {lpu:.0} ns");
    }
    w.barrier()?;
    win.free()?;
    Ok(())
}
