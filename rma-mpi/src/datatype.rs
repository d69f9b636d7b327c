//! Datatypes: what an MPI datatype means to rma, decoded once per datatype through
//! MPI's own envelope and contents calls and cached.
//!
//! A datatype becomes a [`Flat`]: its blocks of contiguous bytes (offsets from the
//! buffer, merged where adjacent), its extent and size, and the one rma element type
//! its basic elements have (accumulates need one, MPI-4.1 12.3.4). The cache is keyed by
//! the handle and dropped for a handle at MPI_Type_free (which librma-mpi intercepts, as
//! it does MPI_Type_commit: an op on a derived datatype never committed is
//! MPI_ERR_TYPE).

use std::collections::{HashMap, HashSet};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::error::{MpiError, MpiResult};
use crate::sys::{self, datatype_key, int, MPI_Aint, MPI_Datatype};

/// A datatype's layout in bytes.
#[derive(Debug)]
pub struct Flat {
    /// Bytes of data in one item.
    pub size: usize,
    /// Distance from one item to the next in a count of them.
    pub extent: isize,
    /// The runs of bytes of one item: (offset from the buffer, length).
    pub blocks: Vec<(isize, usize)>,
    /// The rma element code of its basic elements (1 u8 .. 10 f64, as
    /// `rma::DataType::from_code`); 0 when bytes only (no rma element, or mixed).
    pub code: u8,
    /// The blocks of one item as one regular pattern, found once when the datatype is
    /// decoded (vectors, subarrays of one dimension's stride, regular indexed types):
    /// the first block's offset, the blocks' length and their stride.
    pub pattern: Option<Pattern>,
    /// It holds a basic element wider than 8 bytes that rma has no element type for
    /// (long double complex where long double is not x86-64's): MPI_REPLACE and
    /// MPI_NO_OP could move it only as several words, which a concurrent update tears.
    pub wide: bool,
    /// One item is one run of `size` bytes from its start (no blocks, or one block
    /// `(0, size)`): found once, for the contiguity check of every call.
    pub one_run: bool,
}

/// Blocks of one length at one stride: (first offset, length, stride).
pub type Pattern = (isize, usize, isize);

impl Flat {
    /// A flat of `blocks`, its regular pattern found.
    pub fn new(size: usize, extent: isize, blocks: Vec<(isize, usize)>, code: u8) -> Flat {
        let pattern = Self::pattern_of(&blocks);
        let one_run = blocks.is_empty() || (blocks.len() == 1 && blocks[0] == (0, size));
        Flat {
            size,
            extent,
            blocks,
            code,
            pattern,
            wide: false,
            one_run,
        }
    }

    fn pattern_of(blocks: &[(isize, usize)]) -> Option<Pattern> {
        let &(first, len) = blocks.first()?;
        let stride = match blocks.get(1) {
            Some(b) => b.0.checked_sub(first)?,
            None => len as isize,
        };
        let regular = blocks
            .windows(2)
            .all(|w| w[1].1 == len && w[1].0.checked_sub(w[0].0) == Some(stride));
        (regular && len > 0 && stride >= len as isize).then_some((first, len, stride))
    }

    /// The runs of `count` items as one strided pattern of two runs or more, found
    /// without listing them: (first offset, runs, length, stride). `None` when they are
    /// one run, or not regular (items that do not continue their blocks' stride).
    #[inline]
    pub fn regular(&self, count: usize) -> Option<(isize, usize, usize, isize)> {
        let (first, len, stride) = self.pattern?;
        let per_item = self.blocks.len();
        let runs = per_item.checked_mul(count)?;
        if runs < 2 || stride == len as isize {
            return None;
        }
        // The next item's first block must fall where the pattern puts it.
        let continues = count <= 1 || self.extent == stride.checked_mul(per_item as isize)?;
        continues.then_some((first, runs, len, stride))
    }
    /// Whether `count` items are one run of bytes from the buffer's start.
    #[inline]
    pub fn contiguous(&self, count: usize) -> bool {
        self.one_run && (count <= 1 || self.extent == self.size as isize)
    }

    /// The runs of bytes of `count` items, merged where adjacent.
    pub fn runs(&self, count: usize) -> Vec<(isize, usize)> {
        let mut out: Vec<(isize, usize)> = Vec::with_capacity(self.blocks.len() * count.min(64));
        for i in 0..count as isize {
            for &(off, len) in &self.blocks {
                push_run(&mut out, i * self.extent + off, len);
            }
        }
        out
    }
}

fn push_run(out: &mut Vec<(isize, usize)>, off: isize, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = out.last_mut() {
        if last.0 + last.1 as isize == off {
            last.1 += len;
            return;
        }
    }
    out.push((off, len));
}

/// Handles hashed by one multiplication (they are distinct numbers already; SipHash
/// would cost more than the rest of a small put).
#[derive(Default)]
struct HandleHasher(u64);

impl std::hash::Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type HandleMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<HandleHasher>>;

struct Cache {
    flat: RwLock<HandleMap<Arc<Flat>>>,
    committed: RwLock<HashSet<u64>>,
}

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Cache {
        flat: RwLock::new(HandleMap::default()),
        committed: RwLock::new(HashSet::new()),
    })
}

/// A datatype's [`Flat`]: a predefined datatype's lives as long as the process (and
/// costs no reference count per operation), a derived one's as long as it is cached or
/// in use.
#[derive(Clone)]
pub enum FlatRef {
    Predefined(&'static Flat),
    Derived(Arc<Flat>),
}

impl std::ops::Deref for FlatRef {
    type Target = Flat;
    fn deref(&self) -> &Flat {
        match self {
            FlatRef::Predefined(f) => f,
            FlatRef::Derived(f) => f,
        }
    }
}

/// The predefined datatypes seen so far, found without a lock: an open-addressing table
/// of handle keys (plus one, so that 0 is empty) and their flats, filled under a mutex.
/// Flats here are never freed (predefined datatypes live as long as MPI).
struct Predefined {
    slots: [PredefinedSlot; PREDEFINED_SLOTS],
    filling: Mutex<()>,
}

/// A slot of [`Predefined`]: a handle's key (plus one; 0 for a free slot) and its flat,
/// side by side (one cache line's worth of a lookup).
struct PredefinedSlot {
    key: AtomicU64,
    flat: AtomicPtr<Flat>,
}

const PREDEFINED_SLOTS: usize = 256;

/// The table is a static of fixed size: its lookup, on every call's datatype, has no
/// first-use check and no bounds to check (a tenth of MPI_Put's instructions went to
/// them with a table behind a `OnceLock` of two `Vec`s).
fn predefined() -> &'static Predefined {
    #[allow(clippy::declare_interior_mutable_const)] // each slot of the static gets its own
    const FREE: PredefinedSlot = PredefinedSlot {
        key: AtomicU64::new(0),
        flat: AtomicPtr::new(std::ptr::null_mut()),
    };
    static TABLE: Predefined = Predefined {
        slots: [FREE; PREDEFINED_SLOTS],
        filling: Mutex::new(()),
    };
    &TABLE
}

impl Predefined {
    #[inline]
    fn slot_of(key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % PREDEFINED_SLOTS
    }

    #[inline]
    fn find(&self, key: u64) -> Option<&'static Flat> {
        let tag = key.wrapping_add(1);
        let start = Self::slot_of(key);
        for i in 0..PREDEFINED_SLOTS {
            let slot = &self.slots[(start + i) % PREDEFINED_SLOTS];
            match slot.key.load(Ordering::Acquire) {
                0 => return None,
                k if k == tag => {
                    let p = slot.flat.load(Ordering::Acquire);
                    // SAFETY: a slot's flat is stored (a leaked Box, never freed) before
                    // its key is published with Release, and the Acquire above sees it.
                    return Some(unsafe { &*p });
                }
                _ => {}
            }
        }
        None
    }

    fn insert(&self, key: u64, flat: Flat) -> &'static Flat {
        let _filling = self.filling.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = self.find(key) {
            return f;
        }
        let leaked: &'static Flat = Box::leak(Box::new(flat));
        let start = Self::slot_of(key);
        for i in 0..PREDEFINED_SLOTS {
            let slot = &self.slots[(start + i) % PREDEFINED_SLOTS];
            if slot.key.load(Ordering::Relaxed) == 0 {
                slot.flat
                    .store(leaked as *const Flat as *mut Flat, Ordering::Release);
                slot.key.store(key.wrapping_add(1), Ordering::Release);
                break;
            }
        }
        // A full table (more predefined types than slots) still answers, uncached.
        leaked
    }
}

/// The layout of no data: the origin of a get_accumulate with MPI_NO_OP, whose
/// origin arguments MPI ignores (MPI-4.1 12.3.4).
pub fn nothing() -> FlatRef {
    static NOTHING: Flat = Flat {
        size: 0,
        extent: 0,
        blocks: Vec::new(),
        code: 0,
        pattern: None,
        wide: false,
        one_run: true,
    };
    FlatRef::Predefined(&NOTHING)
}

/// MPI_Type_commit of `datatype` succeeded.
pub fn committed(datatype: MPI_Datatype) {
    let key = datatype_key(datatype);
    let c = cache();
    c.committed
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key);
    c.flat
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key);
}

/// `datatype` is about to be freed: its handle may name another datatype later.
pub fn freed(datatype: MPI_Datatype) {
    let key = datatype_key(datatype);
    let c = cache();
    c.committed
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key);
    c.flat
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key);
}

fn type_error(message: impl Into<String>) -> MpiError {
    MpiError::new(int!(MPI_ERR_TYPE), message)
}

/// The flat of a predefined datatype seen before, without a [`FlatRef`] to drop: the
/// lookup of the common call's datatype.
#[inline(always)]
pub fn predefined_flat(datatype: MPI_Datatype) -> Option<&'static Flat> {
    predefined().find(datatype_key(datatype))
}

/// What `datatype` means, for an operation (predefined, or derived and committed).
///
/// A predefined datatype seen before is the hot path, inline; everything else is in
/// [`flat_of_others`], out of line: its locals (a typemap, a set) made every call save
/// and restore a large frame, a third of the lookup.
#[inline(always)]
pub fn flat(datatype: MPI_Datatype) -> MpiResult<FlatRef> {
    let key = datatype_key(datatype);
    match predefined().find(key) {
        Some(f) => Ok(FlatRef::Predefined(f)),
        None => flat_of_others(datatype, key),
    }
}

/// [`flat`] of a derived datatype, or of a predefined one the first time.
#[inline(never)]
fn flat_of_others(datatype: MPI_Datatype, key: u64) -> MpiResult<FlatRef> {
    let c = cache();
    if let Some(f) = c.flat.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(FlatRef::Derived(f.clone()));
    }
    // SAFETY: the ABI layer compares the handle with predefined ones.
    if unsafe { sys::rmampi_is_datatype_null(datatype) } != 0 {
        return Err(type_error("MPI_DATATYPE_NULL is not a datatype"));
    }
    // SAFETY: as above.
    let code = unsafe { sys::rmampi_predefined_code(datatype) };
    if code < 0
        && !c
            .committed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&key)
    {
        return Err(type_error(
            "the datatype is not committed (MPI_Type_commit) or not a datatype",
        ));
    }
    let mut blocks = Vec::new();
    let mut codes = HashSet::new();
    typemap(datatype, 0, &mut blocks, &mut codes, 0)?;
    let (_, extent) = extent_of(datatype)?;
    let size = blocks.iter().map(|b: &(isize, usize)| b.1).sum();
    let wide = codes.remove(&WIDE_BITS);
    let code = match codes.len() {
        1 => codes.into_iter().next().unwrap_or(0),
        _ => 0,
    };
    let mut f = Flat::new(size, extent, blocks, code);
    f.wide = wide;
    if code_is_predefined(datatype) {
        return Ok(FlatRef::Predefined(predefined().insert(key, f)));
    }
    let f = Arc::new(f);
    c.flat
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, f.clone());
    Ok(FlatRef::Derived(f))
}

/// Whether `datatype` is one of MPI's predefined datatypes (a named one).
fn code_is_predefined(datatype: MPI_Datatype) -> bool {
    let (mut ni, mut na, mut nd, mut combiner) = (0, 0, 0, 0);
    // SAFETY: valid out pointers; MPI checks the handle.
    let rc =
        unsafe { sys::PMPI_Type_get_envelope(datatype, &mut ni, &mut na, &mut nd, &mut combiner) };
    rc == 0 && combiner == int!(MPI_COMBINER_NAMED)
}

fn extent_of(datatype: MPI_Datatype) -> MpiResult<(isize, isize)> {
    let (mut lb, mut extent): (MPI_Aint, MPI_Aint) = (0, 0);
    // SAFETY: valid out pointers; MPI checks the handle.
    let rc = unsafe { sys::PMPI_Type_get_extent(datatype, &mut lb, &mut extent) };
    if rc != 0 {
        return Err(type_error("MPI_Type_get_extent refused the datatype"));
    }
    Ok((lb as isize, extent as isize))
}

/// Met beside code 0 in [`typemap`]'s codes: a basic element of no rma type wider
/// than 8 bytes ([`Flat::wide`]).
const WIDE_BITS: u8 = u8::MAX;

/// Appends the runs of one item of `datatype` at `base` (merging adjacent ones) and the
/// element codes met (with [`WIDE_BITS`] for a wide element of no rma type).
fn typemap(
    datatype: MPI_Datatype,
    base: isize,
    out: &mut Vec<(isize, usize)>,
    codes: &mut HashSet<u8>,
    depth: u32,
) -> MpiResult<()> {
    if depth > 64 {
        return Err(type_error("datatype nested more than 64 deep"));
    }
    // SAFETY: the ABI layer compares the handle with predefined ones.
    let code = unsafe { sys::rmampi_predefined_code(datatype) };
    let (mut ni, mut na, mut nd, mut combiner) = (0, 0, 0, 0);
    // SAFETY: valid out pointers; MPI checks the handle.
    let rc =
        unsafe { sys::PMPI_Type_get_envelope(datatype, &mut ni, &mut na, &mut nd, &mut combiner) };
    if rc != 0 {
        return Err(type_error("MPI_Type_get_envelope refused the datatype"));
    }
    if combiner == int!(MPI_COMBINER_NAMED) {
        if code < 0 {
            return Err(type_error("a predefined datatype librma-mpi does not know"));
        }
        // SAFETY: the ABI layer compares the handle with predefined ones.
        if unsafe { sys::rmampi_is_pair(datatype) } != 0 {
            // A pair of MINLOC/MAXLOC moves whole, its padding too (MPI_SHORT_INT has a
            // hole): one run of its extent, an rma pair element (rma::LocF64 and its
            // siblings, updated whole); a pair type rma had no element for would be
            // refused where a torn update could be seen.
            let (_, extent) = extent_of(datatype)?;
            if code > 0 {
                codes.insert(code as u8);
            } else {
                codes.insert(0);
                codes.insert(WIDE_BITS);
            }
            push_run(out, base, extent.max(0) as usize);
            return Ok(());
        }
        let mut size: c_int = 0;
        // SAFETY: valid out pointer.
        unsafe { sys::PMPI_Type_size(datatype, &mut size) };
        if code == 0 {
            // Bytes only, or a pair type (MINLOC/MAXLOC): decode pairs to their parts
            // below would need MPI's layout of them; keep them as bytes.
            codes.insert(0);
            if size > 8 {
                codes.insert(WIDE_BITS);
            }
        } else {
            codes.insert(code as u8);
        }
        push_run(out, base, size.max(0) as usize);
        return Ok(());
    }
    let mut ints = vec![0 as c_int; ni.max(0) as usize];
    let mut addrs = vec![0 as MPI_Aint; na.max(0) as usize];
    // SAFETY: zeroed handles of the ABI's type, overwritten by MPI.
    let mut types: Vec<MPI_Datatype> = vec![unsafe { std::mem::zeroed() }; nd.max(0) as usize];
    // SAFETY: arrays of the sizes the envelope gave.
    let rc = unsafe {
        sys::PMPI_Type_get_contents(
            datatype,
            ni,
            na,
            nd,
            ints.as_mut_ptr(),
            addrs.as_mut_ptr(),
            types.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(type_error("MPI_Type_get_contents refused the datatype"));
    }
    let result = decode(combiner, &ints, &addrs, &types, base, out, codes, depth);
    for mut t in types {
        // Derived datatypes returned by MPI_Type_get_contents are new references.
        let (mut a, mut b, mut c, mut comb) = (0, 0, 0, 0);
        // SAFETY: handles MPI just returned; valid out pointers.
        unsafe {
            sys::PMPI_Type_get_envelope(t, &mut a, &mut b, &mut c, &mut comb);
            if comb != int!(MPI_COMBINER_NAMED) {
                sys::PMPI_Type_free(&mut t);
            }
        }
    }
    result
}

#[allow(clippy::too_many_arguments)]
fn decode(
    combiner: c_int,
    ints: &[c_int],
    addrs: &[MPI_Aint],
    types: &[MPI_Datatype],
    base: isize,
    out: &mut Vec<(isize, usize)>,
    codes: &mut HashSet<u8>,
    depth: u32,
) -> MpiResult<()> {
    let bad = || type_error("malformed datatype contents");
    let n = |i: usize| -> MpiResult<usize> {
        ints.get(i)
            .and_then(|&v| usize::try_from(v).ok())
            .ok_or_else(bad)
    };
    let ext = |t: MPI_Datatype| extent_of(t).map(|(_, e)| e);
    let t0 = *types.first().ok_or_else(bad)?;
    let mut repeat = |t: MPI_Datatype, at: isize, count: usize, out: &mut Vec<(isize, usize)>| {
        let e = ext(t)?;
        for j in 0..count as isize {
            typemap(t, at + j * e, out, codes, depth + 1)?;
        }
        Ok::<(), MpiError>(())
    };
    match combiner {
        c if c == int!(MPI_COMBINER_DUP) => repeat(t0, base, 1, out),
        c if c == int!(MPI_COMBINER_RESIZED) => repeat(t0, base, 1, out),
        c if c == int!(MPI_COMBINER_CONTIGUOUS) => repeat(t0, base, n(0)?, out),
        c if c == int!(MPI_COMBINER_VECTOR) => {
            let (count, block) = (n(0)?, n(1)?);
            let stride = *ints.get(2).ok_or_else(bad)? as isize * ext(t0)?;
            for i in 0..count as isize {
                repeat(t0, base + i * stride, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_HVECTOR) => {
            let (count, block) = (n(0)?, n(1)?);
            let stride = *addrs.first().ok_or_else(bad)? as isize;
            for i in 0..count as isize {
                repeat(t0, base + i * stride, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_INDEXED) => {
            let count = n(0)?;
            let e = ext(t0)?;
            for i in 0..count {
                let block = n(1 + i)?;
                let disp = *ints.get(1 + count + i).ok_or_else(bad)? as isize;
                repeat(t0, base + disp * e, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_HINDEXED) => {
            let count = n(0)?;
            for i in 0..count {
                let block = n(1 + i)?;
                let disp = *addrs.get(i).ok_or_else(bad)? as isize;
                repeat(t0, base + disp, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_INDEXED_BLOCK) => {
            let (count, block) = (n(0)?, n(1)?);
            let e = ext(t0)?;
            for i in 0..count {
                let disp = *ints.get(2 + i).ok_or_else(bad)? as isize;
                repeat(t0, base + disp * e, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_HINDEXED_BLOCK) => {
            let (count, block) = (n(0)?, n(1)?);
            for i in 0..count {
                let disp = *addrs.get(i).ok_or_else(bad)? as isize;
                repeat(t0, base + disp, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_STRUCT) => {
            let count = n(0)?;
            for i in 0..count {
                let block = n(1 + i)?;
                let disp = *addrs.get(i).ok_or_else(bad)? as isize;
                let t = *types.get(i).ok_or_else(bad)?;
                repeat(t, base + disp, block, out)?;
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_SUBARRAY) => {
            let dims = n(0)?;
            let sizes: Vec<usize> = (0..dims).map(|d| n(1 + d)).collect::<MpiResult<_>>()?;
            let subs: Vec<usize> = (0..dims)
                .map(|d| n(1 + dims + d))
                .collect::<MpiResult<_>>()?;
            let starts: Vec<usize> = (0..dims)
                .map(|d| n(1 + 2 * dims + d))
                .collect::<MpiResult<_>>()?;
            let order = *ints.get(1 + 3 * dims).ok_or_else(bad)?;
            // Dimension indices from the slowest to the fastest varying.
            let dims_order: Vec<usize> = if order == int!(MPI_ORDER_C) {
                (0..dims).collect()
            } else {
                (0..dims).rev().collect()
            };
            let e = ext(t0)?;
            let total: usize = subs.iter().product();
            let mut index = vec![0usize; dims];
            for _ in 0..total {
                let mut linear = 0usize;
                for &d in &dims_order {
                    linear = linear * sizes[d] + starts[d] + index[d];
                }
                repeat(t0, base + linear as isize * e, 1, out)?;
                // Next index, the fastest dimension first.
                for &d in dims_order.iter().rev() {
                    index[d] += 1;
                    if index[d] < subs[d] {
                        break;
                    }
                    index[d] = 0;
                }
            }
            Ok(())
        }
        c if c == int!(MPI_COMBINER_DARRAY) => {
            let (size, rank, dims) = (n(0)?, n(1)?, n(2)?);
            let field = |k: usize, d: usize| ints.get(3 + k * dims + d).copied().ok_or_else(bad);
            let mut psizes = Vec::with_capacity(dims);
            for d in 0..dims {
                psizes.push(usize::try_from(field(3, d)?).map_err(|_| bad())?);
            }
            if psizes.iter().product::<usize>() != size || rank >= size {
                return Err(bad());
            }
            // The process grid is row-major whatever the array's order (MPI-4.1 5.1.13).
            let coords = grid_coords(rank, &psizes);
            let mut owned = Vec::with_capacity(dims);
            let mut gsizes = Vec::with_capacity(dims);
            for d in 0..dims {
                let g = usize::try_from(field(0, d)?).map_err(|_| bad())?;
                gsizes.push(g);
                let distribution = match field(1, d)? {
                    x if x == int!(MPI_DISTRIBUTE_NONE) => Distribution::NotDistributed,
                    x if x == int!(MPI_DISTRIBUTE_BLOCK) => Distribution::Block,
                    x if x == int!(MPI_DISTRIBUTE_CYCLIC) => Distribution::Cyclic,
                    _ => return Err(bad()),
                };
                let darg = match field(2, d)? {
                    x if x == int!(MPI_DISTRIBUTE_DFLT_DARG) => None,
                    x => Some(usize::try_from(x).map_err(|_| bad())?),
                };
                owned.push(
                    darray_owned(g, psizes[d], coords[d], distribution, darg).ok_or_else(bad)?,
                );
            }
            let order = field(4, 0)?;
            let e = ext(t0)?;
            // The array's elements this process owns, in storage order: the slowest
            // dimension first (the first for C order, the last for Fortran's).
            let dims_order: Vec<usize> = if order == int!(MPI_ORDER_C) {
                (0..dims).collect()
            } else {
                (0..dims).rev().collect()
            };
            let mut pos = vec![0usize; dims];
            if owned.iter().any(Vec::is_empty) {
                return Ok(());
            }
            loop {
                let mut linear = 0usize;
                for &d in &dims_order {
                    linear = linear * gsizes[d] + owned[d][pos[d]];
                }
                repeat(t0, base + linear as isize * e, 1, out)?;
                let mut carry = true;
                for &d in dims_order.iter().rev() {
                    pos[d] += 1;
                    if pos[d] < owned[d].len() {
                        carry = false;
                        break;
                    }
                    pos[d] = 0;
                }
                if carry {
                    return Ok(());
                }
            }
        }
        _ => Err(MpiError::new(
            int!(MPI_ERR_TYPE),
            "a datatype combiner librma-mpi does not decode (Fortran's parameterized types)",
        )),
    }
}

/// How a darray spreads one dimension over the processes of the grid's dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Distribution {
    /// Every index (the grid's dimension must be 1).
    NotDistributed,
    /// One block of `darg` indices (default: the indices over the processes, rounded up).
    Block,
    /// Blocks of `darg` indices (default 1) dealt round robin.
    Cyclic,
}

/// The coordinates of `rank` in a row-major process grid of `psizes`.
fn grid_coords(rank: usize, psizes: &[usize]) -> Vec<usize> {
    let mut coords = vec![0; psizes.len()];
    let mut r = rank;
    for d in (0..psizes.len()).rev() {
        coords[d] = r % psizes[d];
        r /= psizes[d];
    }
    coords
}

/// The indices of a dimension of `g` that the process at `coord` of `p` owns, in
/// increasing order (MPI-4.1 5.1.13); `None` for arguments MPI would have refused.
fn darray_owned(
    g: usize,
    p: usize,
    coord: usize,
    distribution: Distribution,
    darg: Option<usize>,
) -> Option<Vec<usize>> {
    if p == 0 || coord >= p {
        return None;
    }
    match distribution {
        Distribution::NotDistributed => (p == 1).then(|| (0..g).collect()),
        Distribution::Block => {
            let b = darg.unwrap_or(g.div_ceil(p));
            if b == 0 || b.checked_mul(p)? < g {
                return None;
            }
            let lo = (coord * b).min(g);
            Some((lo..(lo + b).min(g)).collect())
        }
        Distribution::Cyclic => {
            let b = darg.unwrap_or(1);
            if b == 0 {
                return None;
            }
            let mut owned = Vec::new();
            let mut start = coord * b;
            while start < g {
                owned.extend(start..(start + b).min(g));
                start += p * b;
            }
            Some(owned)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn darray_dimensions_follow_the_standard_distributions() {
        use Distribution::*;
        // 10 indices over 3 processes: default blocks of 4 (4, 4, 2).
        assert_eq!(darray_owned(10, 3, 0, Block, None), Some(vec![0, 1, 2, 3]));
        assert_eq!(darray_owned(10, 3, 2, Block, None), Some(vec![8, 9]));
        // Blocks of 5 over 3: the last process owns nothing.
        assert_eq!(darray_owned(10, 3, 2, Block, Some(5)), Some(vec![]));
        // Blocks too small to cover the dimension: MPI refuses the type.
        assert_eq!(darray_owned(10, 3, 0, Block, Some(3)), None);
        // Cyclic(1) and cyclic(2) over 3: round robin, the last block cut at the end.
        assert_eq!(darray_owned(10, 3, 1, Cyclic, None), Some(vec![1, 4, 7]));
        assert_eq!(
            darray_owned(10, 3, 0, Cyclic, Some(2)),
            Some(vec![0, 1, 6, 7])
        );
        assert_eq!(darray_owned(10, 3, 2, Cyclic, Some(2)), Some(vec![4, 5]));
        assert_eq!(
            darray_owned(5, 1, 0, NotDistributed, None),
            Some(vec![0, 1, 2, 3, 4])
        );
        assert_eq!(darray_owned(5, 2, 0, NotDistributed, None), None);
        // Every index owned exactly once, whatever the distribution.
        for (dist, darg) in [
            (Block, None),
            (Cyclic, None),
            (Cyclic, Some(3)),
            (Block, Some(7)),
        ] {
            let mut all: Vec<usize> = (0..4)
                .flat_map(|c| darray_owned(25, 4, c, dist, darg).unwrap())
                .collect();
            all.sort_unstable();
            assert_eq!(all, (0..25).collect::<Vec<_>>(), "{dist:?} {darg:?}");
        }
    }

    #[test]
    fn the_process_grid_of_a_darray_is_row_major() {
        assert_eq!(grid_coords(0, &[2, 3]), vec![0, 0]);
        assert_eq!(grid_coords(1, &[2, 3]), vec![0, 1]);
        assert_eq!(grid_coords(3, &[2, 3]), vec![1, 0]);
        assert_eq!(grid_coords(5, &[2, 3]), vec![1, 2]);
    }
}
