//! Element-wise atomic accumulate and compare-and-swap on shared memory with CPU atomics:
//! every (op, type) pair, atomic per element across processes. Integer sums and bitwise
//! ops and replace map to single instructions; the rest (min, max, prod, logical ops,
//! floating point) are compare-exchange loops over the element's bits.

use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};

use rma_core::{AccOp, DataType, Fetched};

use rma_backend::Region;

macro_rules! width {
    ($atomic:ty, $uint:ty, $ptr:expr, $op:expr, $dt:expr, $operand:expr, $old:expr) => {{
        debug_assert!(($ptr as usize) % std::mem::size_of::<$uint>() == 0);
        // SAFETY: the caller checked range and alignment of `$ptr` inside a live region;
        // peers only access window elements atomically or as plain copies during epochs
        // that MPI declares conflicting.
        let a = unsafe { <$atomic>::from_ptr($ptr.cast()) };
        let operand = <$uint>::from_ne_bytes($operand.try_into().expect("element size"));
        let signed_or_float = !matches!(
            $dt,
            DataType::U8 | DataType::U16 | DataType::U32 | DataType::U64
        );
        let old = match $op {
            AccOp::Sum if $dt.is_integer() => a.fetch_add(operand, SeqCst),
            AccOp::Band => a.fetch_and(operand, SeqCst),
            AccOp::Bor => a.fetch_or(operand, SeqCst),
            AccOp::Bxor => a.fetch_xor(operand, SeqCst),
            AccOp::Replace => a.swap(operand, SeqCst),
            AccOp::NoOp => a.load(SeqCst),
            AccOp::Max | AccOp::Min if !signed_or_float => {
                if $op == AccOp::Max {
                    a.fetch_max(operand, SeqCst)
                } else {
                    a.fetch_min(operand, SeqCst)
                }
            }
            // Floating-point sums, the common accumulate of numerical codes: the add
            // inline in the compare-exchange loop (the casts are the identity for the
            // width that carries the type; the other widths never take these arms).
            AccOp::Sum if $dt == DataType::F64 => {
                let mut cur = a.load(SeqCst);
                loop {
                    let sum = f64::from_bits(cur as u64) + f64::from_bits(operand as u64);
                    match a.compare_exchange_weak(cur, sum.to_bits() as $uint, SeqCst, SeqCst) {
                        Ok(prev) => break prev,
                        Err(now) => cur = now,
                    }
                }
            }
            AccOp::Sum if $dt == DataType::F32 => {
                let mut cur = a.load(SeqCst);
                loop {
                    let sum = f32::from_bits(cur as u32) + f32::from_bits(operand as u32);
                    match a.compare_exchange_weak(cur, sum.to_bits() as $uint, SeqCst, SeqCst) {
                        Ok(prev) => break prev,
                        Err(now) => cur = now,
                    }
                }
            }
            _ => {
                let mut cur = a.load(SeqCst);
                loop {
                    let mut next = cur.to_ne_bytes();
                    rma_core::apply_accumulate($op, $dt, &mut next, &operand.to_ne_bytes());
                    match a.compare_exchange_weak(cur, <$uint>::from_ne_bytes(next), SeqCst, SeqCst)
                    {
                        Ok(prev) => break prev,
                        Err(now) => cur = now,
                    }
                }
            }
        };
        $old.copy_from_slice(&old.to_ne_bytes());
    }};
}

/// `op` on the one 8-byte element `a` (a fetch_and_op of a u64, a notification
/// counter's add): its previous value into `old` (8 bytes).
#[inline(always)]
pub fn word_accumulate(a: &AtomicU64, op: AccOp, dt: DataType, operand: &[u8], old: &mut [u8]) {
    width!(AtomicU64, u64, a.as_ptr(), op, dt, operand, old);
}

/// Applies `op` element-wise at `offset` of `region`; returns the previous values (inline,
/// with no allocation, when they fit). `None` if an element is misaligned (the caller
/// falls back to another path).
pub fn accumulate(
    region: &Region,
    offset: usize,
    op: AccOp,
    dt: DataType,
    operand: &[u8],
) -> Option<Fetched> {
    let mut old = Fetched::zeroed(operand.len());
    accumulate_into(region, offset, op, dt, operand, old.as_mut_slice())?;
    Some(old)
}

/// As [`accumulate`], the previous values landing in `old` (as long as `operand`): a
/// caller with a place for them (fetch_and_op's element, get_accumulate's result
/// buffer) gets them without a [`Fetched`] carried back through the calls.
pub fn accumulate_into(
    region: &Region,
    offset: usize,
    op: AccOp,
    dt: DataType,
    operand: &[u8],
    old: &mut [u8],
) -> Option<()> {
    let size = dt.size();
    let ptr = region.at(offset, operand.len());
    if !(ptr as usize).is_multiple_of(size) || old.len() != operand.len() {
        return None;
    }
    if operand.len() == 8 && size == 8 {
        // One 8-byte element (fetch_and_op, a u64 or f64 accumulate): no slicing into
        // chunks.
        width!(AtomicU64, u64, ptr, op, dt, operand, old);
    } else if size < 8 && operand.len() == 8 && (ptr as usize).is_multiple_of(8) {
        // One aligned word of narrower elements (OSU's 8-byte accumulate of chars): its
        // lanes at once, without by_words' walk.
        // SAFETY: 8 bytes in range (`at` checked them) of a live region, 8-aligned
        // (checked here); as in `by_words`.
        let a = unsafe { AtomicU64::from_ptr(ptr.cast()) };
        let prev = word_of_lanes(a, op, dt, operand);
        old.copy_from_slice(&prev.to_ne_bytes());
    } else if size < 8 && operand.len() >= 8 {
        by_words(region, offset, op, dt, operand, old);
    } else {
        each_element(region, offset, op, dt, operand, old);
    }
    Some(())
}

/// Applies `op` to the `dt` elements of `operand` at `offset` (aligned, checked by the
/// caller), one atomic each; their previous values into `old` (as long as `operand`).
fn each_element(
    region: &Region,
    offset: usize,
    op: AccOp,
    dt: DataType,
    operand: &[u8],
    old: &mut [u8],
) {
    let size = dt.size();
    let slots = old.chunks_exact_mut(size);
    for (i, (o, slot)) in operand.chunks_exact(size).zip(slots).enumerate() {
        let p = region.at(offset + i * size, size);
        match size {
            1 => width!(AtomicU8, u8, p, op, dt, o, slot),
            2 => width!(AtomicU16, u16, p, op, dt, o, slot),
            4 => width!(AtomicU32, u32, p, op, dt, o, slot),
            _ => width!(AtomicU64, u64, p, op, dt, o, slot),
        }
    }
}

/// Applies `op` element-wise to blocks of `block` bytes, `stride` bytes apart from
/// `offset`, with `operand` packed (a strided accumulate that fetches nothing): the
/// same atomics per element as [`accumulate`], without building a result. `None` if an
/// element is misaligned; an error if a block is out of range (nothing is applied then:
/// the whole span is checked first).
pub fn accumulate_blocks(
    region: &Region,
    offset: usize,
    stride: usize,
    block: usize,
    op: AccOp,
    dt: DataType,
    operand: &[u8],
) -> Option<()> {
    let size = dt.size();
    let count = operand.len().checked_div(block).unwrap_or(0);
    debug_assert!(region.contains_blocks(offset, count, block, stride));
    if !(region.base() as usize + offset).is_multiple_of(size)
        || !stride.is_multiple_of(size)
        || !block.is_multiple_of(size)
    {
        return None;
    }
    if op == AccOp::Sum && size == 8 && matches!(dt, DataType::F64 | DataType::I64 | DataType::U64)
    {
        // The sum of doubles (or 64-bit integers) the numerical codes accumulate: one
        // loop for this pair, the span checked once above.
        sum_blocks_of_8(region, offset, stride, block, dt == DataType::F64, operand);
        return Some(());
    }
    // The previous values go nowhere: one scratch buffer for the block's.
    let mut scratch = vec![0u8; block];
    for (i, chunk) in operand.chunks_exact(block).enumerate() {
        let at = offset + i * stride;
        if size < 8 && block >= 8 {
            by_words(region, at, op, dt, chunk, &mut scratch);
        } else {
            each_element(region, at, op, dt, chunk, &mut scratch);
        }
    }
    Some(())
}

/// [`accumulate_blocks`] of `AccOp::Sum` on 8-byte elements (doubles when `float`,
/// integers otherwise), 8-aligned, in range (checked by the caller).
fn sum_blocks_of_8(
    region: &Region,
    offset: usize,
    stride: usize,
    block: usize,
    float: bool,
    operand: &[u8],
) {
    let count = operand.len() / block;
    let span = if count == 0 {
        0
    } else {
        (count - 1) * stride + block
    };
    let base = region.at(offset, span);
    for (i, chunk) in operand.chunks_exact(block).enumerate() {
        for (j, o) in chunk.chunks_exact(8).enumerate() {
            let o = u64::from_ne_bytes(o.try_into().expect("8 bytes"));
            // SAFETY: inside the span `at` checked, 8-aligned (the caller checked the
            // start, the stride and the block), mapped for the region's life; peers
            // access window elements atomically (as in `width!`).
            let a = unsafe { AtomicU64::from_ptr(base.add(i * stride + j * 8).cast()) };
            if !float {
                a.fetch_add(o, SeqCst);
                continue;
            }
            let add = f64::from_bits(o);
            let mut cur = a.load(SeqCst);
            while let Err(now) =
                a.compare_exchange_weak(cur, (f64::from_bits(cur) + add).to_bits(), SeqCst, SeqCst)
            {
                cur = now;
            }
        }
    }
}

/// Elements smaller than 8 bytes, `operand.len()` bytes of them at `offset` (aligned to
/// their size): every aligned 8-byte word wholly inside the range in one compare-exchange
/// (all its elements updated together: atomic per element, as MPI asks, and one locked
/// instruction where a byte sum of 8 elements took eight), the elements before the first
/// such word and after the last one each by itself. The previous values go to `old`.
///
/// Only bytes of the operation are ever written (a word is taken only when all 8 of its
/// bytes are the operation's). Other processes may update the same elements with narrower
/// atomics (a one-byte fetch_and_op) at the same time: on x86-64 and AArch64 aligned
/// atomics of different sizes on one location are coherent and each indivisible, so the
/// compare-exchange fails and retries when any element of the word changed under it.
fn by_words(
    region: &Region,
    offset: usize,
    op: AccOp,
    dt: DataType,
    operand: &[u8],
    old: &mut [u8],
) {
    let size = dt.size();
    let base = region.at(offset, operand.len()) as usize;
    let mut i = 0;
    while i < operand.len() {
        if (base + i).is_multiple_of(8) && operand.len() - i >= 8 {
            let p = region.at(offset + i, 8);
            // SAFETY: 8 bytes in range (`at` checked them) of a live region, 8-aligned
            // (checked above); peers access window elements atomically or as plain copies
            // during epochs MPI declares conflicting (as in `width!`).
            let a = unsafe { AtomicU64::from_ptr(p.cast()) };
            let prev = word_of_lanes(a, op, dt, &operand[i..i + 8]);
            old[i..i + 8].copy_from_slice(&prev.to_ne_bytes());
            i += 8;
        } else {
            let (o, slot) = (&operand[i..i + size], &mut old[i..i + size]);
            let p = region.at(offset + i, size);
            match size {
                1 => width!(AtomicU8, u8, p, op, dt, o, slot),
                2 => width!(AtomicU16, u16, p, op, dt, o, slot),
                _ => width!(AtomicU32, u32, p, op, dt, o, slot),
            }
            i += size;
        }
    }
}

/// `op` on the elements (narrower than 8 bytes) of one aligned word at once, its 8
/// operand bytes `word_operand`: one locked instruction; the word's previous value.
#[inline(always)]
fn word_of_lanes(a: &AtomicU64, op: AccOp, dt: DataType, word_operand: &[u8]) -> u64 {
    let o = u64::from_ne_bytes(word_operand.try_into().expect("8 bytes"));
    match op {
        AccOp::NoOp => a.load(SeqCst),
        // Lane-wise by nature: one locked instruction for the whole word.
        AccOp::Replace => a.swap(o, SeqCst),
        AccOp::Band => a.fetch_and(o, SeqCst),
        AccOp::Bor => a.fetch_or(o, SeqCst),
        AccOp::Bxor => a.fetch_xor(o, SeqCst),
        AccOp::Sum if dt.is_integer() => {
            let size = dt.size();
            let mut cur = a.load(SeqCst);
            loop {
                let next = lanes_wrapping_add(cur, o, size);
                match a.compare_exchange_weak(cur, next, SeqCst, SeqCst) {
                    Ok(prev) => break prev,
                    Err(now) => cur = now,
                }
            }
        }
        _ => {
            let mut cur = a.load(SeqCst);
            loop {
                let mut next = cur.to_ne_bytes();
                rma_core::apply_accumulate(op, dt, &mut next, word_operand);
                let next = u64::from_ne_bytes(next);
                match a.compare_exchange_weak(cur, next, SeqCst, SeqCst) {
                    Ok(prev) => break prev,
                    Err(now) => cur = now,
                }
            }
        }
    }
}

/// The wrapping sums of the `lane`-byte integers packed in `a` and `b` (1, 2 or 4 bytes
/// per lane), lane by lane, no carry crossing into the next lane: the sums of the lanes
/// without their top bits cannot carry out of them, and the top bits are then the
/// exclusive or of both top bits and the carry into them. A lane is a contiguous run of
/// bits in either byte order, so this holds on little- and big-endian machines alike.
fn lanes_wrapping_add(a: u64, b: u64, lane: usize) -> u64 {
    let top = match lane {
        1 => 0x8080_8080_8080_8080,
        2 => 0x8000_8000_8000_8000,
        _ => 0x8000_0000_8000_0000,
    };
    ((a & !top).wrapping_add(b & !top)) ^ ((a ^ b) & top)
}

macro_rules! cas_width {
    ($atomic:ty, $uint:ty, $ptr:expr, $c:expr, $s:expr, $old:expr) => {{
        // SAFETY: as in `width!`: in range and aligned (checked by the caller).
        let a = unsafe { <$atomic>::from_ptr($ptr.cast()) };
        let c = <$uint>::from_ne_bytes($c.try_into().expect("element size"));
        let s = <$uint>::from_ne_bytes($s.try_into().expect("element size"));
        match a.compare_exchange(c, s, SeqCst, SeqCst) {
            Ok(v) | Err(v) => $old.copy_from_slice(&v.to_ne_bytes()),
        }
    }};
}

/// Compare-and-swap of one element (bitwise comparison); returns the previous value.
pub fn compare_and_swap(
    region: &Region,
    offset: usize,
    compare: &[u8],
    swap: &[u8],
) -> Option<Fetched> {
    let mut old = Fetched::zeroed(compare.len());
    compare_and_swap_into(region, offset, compare, swap, old.as_mut_slice())?;
    Some(old)
}

/// As [`compare_and_swap`], the previous value landing in `old` (one element).
pub fn compare_and_swap_into(
    region: &Region,
    offset: usize,
    compare: &[u8],
    swap: &[u8],
    old: &mut [u8],
) -> Option<()> {
    let size = compare.len();
    let p = region.at(offset, size);
    if !(p as usize).is_multiple_of(size) || old.len() != size || swap.len() != size {
        return None;
    }
    match size {
        1 => cas_width!(AtomicU8, u8, p, compare, swap, old),
        2 => cas_width!(AtomicU16, u16, p, compare, swap, old),
        4 => cas_width!(AtomicU32, u32, p, compare, swap, old),
        _ => cas_width!(AtomicU64, u64, p, compare, swap, old),
    }
    Some(())
}

/// Compare-and-swap of the one 8-byte element `a` (bitwise comparison): its previous
/// value into `old`.
#[inline(always)]
pub fn word_compare_and_swap(a: &AtomicU64, compare: &[u8], swap: &[u8], old: &mut [u8]) {
    cas_width!(AtomicU64, u64, a.as_ptr(), compare, swap, old);
}

macro_rules! update_width {
    ($atomic:ty, $uint:ty, $ptr:expr, $f:expr) => {{
        // SAFETY: as in `width!`: in range and aligned (checked by the caller).
        let a = unsafe { <$atomic>::from_ptr($ptr.cast()) };
        let mut cur = a.load(SeqCst);
        loop {
            let mut next = cur.to_ne_bytes();
            $f(&mut next);
            match a.compare_exchange_weak(cur, <$uint>::from_ne_bytes(next), SeqCst, SeqCst) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
    }};
}

/// Read-modify-write of one element of 1, 2, 4 or 8 bytes with `f`, as a compare-exchange
/// loop, so that it is atomic with respect to peers' CPU atomics on the same element
/// (`f` may run more than once). `false` if the element is misaligned or of another size
/// (the caller falls back to a plain copy).
pub fn update_element(
    region: &Region,
    offset: usize,
    len: usize,
    f: &mut dyn FnMut(&mut [u8]),
) -> bool {
    let p = region.at(offset, len);
    if !matches!(len, 1 | 2 | 4 | 8) || !(p as usize).is_multiple_of(len) {
        return false;
    }
    match len {
        1 => update_width!(AtomicU8, u8, p, f),
        2 => update_width!(AtomicU16, u16, p, f),
        4 => update_width!(AtomicU32, u32, p, f),
        _ => update_width!(AtomicU64, u64, p, f),
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Strided accumulates (every other element of 16: doubles, u64, and bytes by words
    /// and alone) from four threads at once: every sum exact, the elements between the
    /// blocks untouched.
    #[test]
    fn strided_accumulates_lose_no_update_under_contention() {
        const ROUNDS: u64 = 5_000;
        let mut buf = [0u64; 96];
        // SAFETY: `buf` outlives the region and every thread (scoped).
        let r = unsafe { Region::new(buf.as_mut_ptr().cast(), 768) };
        let halves: Vec<u8> = (0..16).flat_map(|_| 0.5f64.to_ne_bytes()).collect();
        let ones: Vec<u8> = (0..16).flat_map(|_| 1u64.to_ne_bytes()).collect();
        let pairs: Vec<u8> = vec![1u8; 16 * 8];
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        // Doubles at bytes 0, 16, ..: blocks of one, stride two.
                        accumulate_blocks(&r, 0, 16, 8, AccOp::Sum, DataType::F64, &halves)
                            .unwrap();
                        // u64 at bytes 256, 272, ...
                        accumulate_blocks(&r, 256, 16, 8, AccOp::Sum, DataType::U64, &ones)
                            .unwrap();
                        // Bytes: blocks of 8 (one word each) at 512, 528, ...
                        accumulate_blocks(&r, 512, 16, 8, AccOp::Sum, DataType::U8, &pairs)
                            .unwrap();
                    }
                });
            }
        });
        for i in 0..16 {
            let mut v = [0u8; 8];
            r.read(16 * i, &mut v);
            assert_eq!(
                f64::from_ne_bytes(v),
                0.5 * 4.0 * ROUNDS as f64,
                "double {i}"
            );
            r.read(16 * i + 8, &mut v);
            assert_eq!(v, [0; 8], "between the doubles");
            r.read(256 + 16 * i, &mut v);
            assert_eq!(u64::from_ne_bytes(v), 4 * ROUNDS, "u64 {i}");
            r.read(512 + 16 * i, &mut v);
            assert_eq!(v, [(4 * ROUNDS % 256) as u8; 8], "bytes of block {i}");
            r.read(512 + 16 * i + 8, &mut v);
            assert_eq!(v, [0; 8], "between the byte blocks");
        }
    }

    #[test]
    fn lane_sums_wrap_inside_each_lane() {
        let pick = |seed: u64| seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17);
        for k in 0..10_000u64 {
            let (a, b) = (pick(k), pick(k ^ 0xdead_beef));
            let (ab, bb) = (a.to_ne_bytes(), b.to_ne_bytes());
            let bytes: Vec<u8> = (0..8).map(|i| ab[i].wrapping_add(bb[i])).collect();
            assert_eq!(lanes_wrapping_add(a, b, 1).to_ne_bytes().to_vec(), bytes);
            let halves: Vec<u8> = (0..4)
                .flat_map(|i| {
                    let x = u16::from_ne_bytes([ab[2 * i], ab[2 * i + 1]]);
                    let y = u16::from_ne_bytes([bb[2 * i], bb[2 * i + 1]]);
                    x.wrapping_add(y).to_ne_bytes()
                })
                .collect();
            assert_eq!(lanes_wrapping_add(a, b, 2).to_ne_bytes().to_vec(), halves);
            let words: Vec<u8> = (0..2)
                .flat_map(|i| {
                    let x = u32::from_ne_bytes(ab[4 * i..4 * i + 4].try_into().unwrap());
                    let y = u32::from_ne_bytes(bb[4 * i..4 * i + 4].try_into().unwrap());
                    x.wrapping_add(y).to_ne_bytes()
                })
                .collect();
            assert_eq!(lanes_wrapping_add(a, b, 4).to_ne_bytes().to_vec(), words);
        }
        // Every lane at its maximum plus one wraps to zero without touching the next.
        assert_eq!(lanes_wrapping_add(u64::MAX, 0x0101_0101_0101_0101, 1), 0);
    }

    #[test]
    fn signed_max_and_float_sum() {
        let mut buf = [0u64; 4];
        // SAFETY: `buf` outlives the region.
        let r = unsafe { Region::new(buf.as_mut_ptr().cast(), 32) };
        r.write(0, &(-5i64).to_ne_bytes());
        let old = accumulate(&r, 0, AccOp::Max, DataType::I64, &(-7i64).to_ne_bytes()).unwrap();
        assert_eq!(i64::from_ne_bytes(old.as_slice().try_into().unwrap()), -5);
        let mut v = [0u8; 8];
        r.read(0, &mut v);
        assert_eq!(i64::from_ne_bytes(v), -5, "signed max keeps -5 over -7");
        r.write(8, &1.5f64.to_ne_bytes());
        accumulate(&r, 8, AccOp::Sum, DataType::F64, &2.25f64.to_ne_bytes()).unwrap();
        r.read(8, &mut v);
        assert_eq!(f64::from_ne_bytes(v), 3.75);
        let old = compare_and_swap(&r, 8, &3.75f64.to_ne_bytes(), &1.0f64.to_ne_bytes()).unwrap();
        assert_eq!(f64::from_ne_bytes(old.as_slice().try_into().unwrap()), 3.75);
        r.read(8, &mut v);
        assert_eq!(f64::from_ne_bytes(v), 1.0);
    }

    /// The `_into` forms fetch what the returning ones fetch, into the caller's buffer, and
    /// refuse a buffer of another length (changing nothing).
    #[test]
    fn into_forms_fetch_in_place() {
        let mut buf = [0u64; 4];
        // SAFETY: `buf` outlives the region.
        let r = unsafe { Region::new(buf.as_mut_ptr().cast(), 32) };
        r.write(0, &40u64.to_ne_bytes());
        let mut old = [0u8; 8];
        accumulate_into(
            &r,
            0,
            AccOp::Sum,
            DataType::U64,
            &2u64.to_ne_bytes(),
            &mut old,
        )
        .unwrap();
        assert_eq!(u64::from_ne_bytes(old), 40);
        // Eight bytes summed lane by lane, their previous values in place.
        r.write(8, &[1, 2, 3, 4, 5, 6, 7, 255]);
        accumulate_into(&r, 8, AccOp::Sum, DataType::U8, &[1; 8], &mut old).unwrap();
        assert_eq!(old, [1, 2, 3, 4, 5, 6, 7, 255]);
        let mut now = [0u8; 8];
        r.read(8, &mut now);
        assert_eq!(now, [2, 3, 4, 5, 6, 7, 8, 0]);
        let mut old4 = [0u8; 4];
        r.write(16, &9u32.to_ne_bytes());
        compare_and_swap_into(&r, 16, &9u32.to_ne_bytes(), &11u32.to_ne_bytes(), &mut old4)
            .unwrap();
        assert_eq!(u32::from_ne_bytes(old4), 9);
        // Wrong lengths: refused, nothing changed.
        assert!(accumulate_into(&r, 0, AccOp::Sum, DataType::U64, &[0; 8], &mut old4).is_none());
        assert!(compare_and_swap_into(&r, 16, &[0; 4], &[0; 4], &mut old).is_none());
        r.read(0, &mut now);
        assert_eq!(u64::from_ne_bytes(now), 42);
    }

    /// One aligned word of elements narrower than 8 bytes (the single-word path of an
    /// 8-byte accumulate) comes to what the element-wise definition gives, for every op
    /// valid for the type, and fetches the word as it was.
    #[test]
    fn one_word_of_small_elements_matches_the_elementwise_definition() {
        let init: [u8; 8] = [0x81, 7, 0xff, 3, 0x10, 0x80, 1, 0x7f];
        let operand: [u8; 8] = [0x7f, 0xf0, 1, 0x80, 0x22, 0x80, 0xfe, 1];
        let types = [
            DataType::U8,
            DataType::I8,
            DataType::U16,
            DataType::I16,
            DataType::U32,
            DataType::I32,
            DataType::F32,
        ];
        let ops = [
            AccOp::Sum,
            AccOp::Prod,
            AccOp::Min,
            AccOp::Max,
            AccOp::Band,
            AccOp::Bor,
            AccOp::Bxor,
            AccOp::Land,
            AccOp::Lor,
            AccOp::Lxor,
            AccOp::Replace,
            AccOp::NoOp,
        ];
        let mut tried = 0;
        for dt in types {
            for op in ops.into_iter().filter(|op| op.valid_for(dt)) {
                let mut buf = [u64::from_ne_bytes(init)];
                // SAFETY: `buf` outlives the region.
                let r = unsafe { Region::new(buf.as_mut_ptr().cast(), 8) };
                let mut old = [0u8; 8];
                accumulate_into(&r, 0, op, dt, &operand, &mut old).expect("aligned");
                let mut expected = init;
                rma_core::apply_accumulate(op, dt, &mut expected, &operand);
                let mut now = [0u8; 8];
                r.read(0, &mut now);
                assert_eq!(now, expected, "{op:?} on {dt:?}");
                assert_eq!(old, init, "{op:?} on {dt:?} fetches the word as it was");
                tried += 1;
            }
        }
        assert!(tried >= 40, "{tried} (op, type) pairs");
    }

    /// Byte and u16 sums by words (with unaligned heads and tails by element), from four
    /// threads at once, while two more add to single bytes of the same words with
    /// one-byte atomics and two to one aligned word of them alone: every increment
    /// counted, the fetched values consistent.
    #[test]
    fn small_elements_by_words_lose_no_update_under_contention() {
        const ROUNDS: u64 = 20_000;
        let mut buf = [0u64; 8];
        // SAFETY: `buf` outlives the region and every thread (scoped).
        let r = unsafe { Region::new(buf.as_mut_ptr().cast(), 64) };
        let ones = [1u8; 40];
        let twos = [2u8, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0, 2, 0];
        std::thread::scope(|s| {
            for _ in 0..2 {
                // Bytes 3..43: a head of 5 bytes, four whole words, a tail of 3.
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        let old = accumulate(&r, 3, AccOp::Sum, DataType::U8, &ones).unwrap();
                        assert_eq!(old.len(), 40);
                    }
                });
                // u16 elements at bytes 48..64: two whole words.
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        accumulate(&r, 48, AccOp::Sum, DataType::U16, &twos).unwrap();
                    }
                });
                // One-byte atomics into bytes the word path also updates.
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        accumulate(&r, 16, AccOp::Sum, DataType::U8, &[1]).unwrap();
                    }
                });
                // One aligned word alone (its own path), inside the 40 bytes above.
                s.spawn(|| {
                    for _ in 0..ROUNDS {
                        accumulate(&r, 24, AccOp::Sum, DataType::U8, &[1; 8]).unwrap();
                    }
                });
            }
        });
        let mut bytes = [0u8; 64];
        r.read(0, &mut bytes);
        let sum = |k: u64| (k % 256) as u8;
        for (b, v) in bytes.iter().enumerate() {
            let expected = match b {
                16 => sum(2 * ROUNDS + 2 * ROUNDS),
                24..32 => sum(2 * ROUNDS + 2 * ROUNDS),
                3..43 => sum(2 * ROUNDS),
                _ => 0,
            };
            if (48..64).contains(&b) {
                continue;
            }
            assert_eq!(*v, expected, "byte {b}");
        }
        for e in 0..8 {
            let v = u16::from_ne_bytes([bytes[48 + 2 * e], bytes[49 + 2 * e]]);
            assert_eq!(v, (2 * 2 * ROUNDS) as u16, "u16 element {e}");
        }
    }
}
