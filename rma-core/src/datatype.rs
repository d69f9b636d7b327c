//! Element types and accumulate operations, applied element by element on byte slices.
//!
//! Window memory is handled as bytes in native byte order; every element is read and
//! written with `from_ne_bytes`/`to_ne_bytes`, so no alignment is assumed.

/// The element types RMA operations carry: the Rust primitive numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // each variant is the Rust type of the same name
pub enum DataType {
    U8 = 1,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
    /// A value and its location, as MINLOC and MAXLOC reduce them: [`LocF32`] (MPI's
    /// MPI_FLOAT_INT).
    LocF32,
    /// [`LocF64`] (MPI_DOUBLE_INT).
    LocF64,
    /// [`LocI64`] (MPI_LONG_INT).
    LocI64,
    /// [`LocI32`] (MPI_2INT).
    LocI32,
    /// [`LocI16`] (MPI_SHORT_INT).
    LocI16,
    /// x86-64's `long double` ([`LongDouble`]: 80-bit extended precision in 16 bytes),
    /// whose arithmetic the process provides ([`set_long_double_arithmetic`]).
    LongDouble,
    /// [`LocLongDouble`] (MPI_LONG_DOUBLE_INT).
    LocLongDouble,
    /// [`ComplexF32`]: two `f32` (C's `float _Complex`, MPI_C_FLOAT_COMPLEX).
    ComplexF32,
    /// [`ComplexF64`]: two `f64` (C's `double _Complex`, MPI_C_DOUBLE_COMPLEX).
    ComplexF64,
    /// [`ComplexLongDouble`]: two [`LongDouble`] (C's `long double _Complex`,
    /// MPI_C_LONG_DOUBLE_COMPLEX), computed with the process's long double arithmetic.
    ComplexLongDouble,
}

impl DataType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::U8 | DataType::I8 => 1,
            DataType::U16 | DataType::I16 => 2,
            DataType::U32 | DataType::I32 | DataType::F32 => 4,
            DataType::U64 | DataType::I64 | DataType::F64 => 8,
            DataType::LocF32 | DataType::LocI32 | DataType::LocI16 | DataType::ComplexF32 => 8,
            DataType::LocF64 | DataType::LocI64 | DataType::LongDouble | DataType::ComplexF64 => 16,
            DataType::LocLongDouble | DataType::ComplexLongDouble => 32,
        }
    }

    /// Whether bitwise and logical operations are defined (integers only).
    pub const fn is_integer(self) -> bool {
        !matches!(self, DataType::F32 | DataType::F64 | DataType::LongDouble)
            && !self.is_loc()
            && !self.is_complex()
    }

    /// Whether no CPU or network atomic takes the element (a MINLOC/MAXLOC pair, a long
    /// double, a complex number): it is updated whole under a lock
    /// ([`Capabilities::locked_atomics`](crate::Capabilities::locked_atomics)).
    pub const fn updated_whole(self) -> bool {
        self.is_loc() || self.is_complex() || matches!(self, DataType::LongDouble)
    }

    /// Whether the type is a complex number ([`ComplexF32`], [`ComplexF64`],
    /// [`ComplexLongDouble`]): summed and multiplied as complex numbers, updated whole.
    pub const fn is_complex(self) -> bool {
        matches!(
            self,
            DataType::ComplexF32 | DataType::ComplexF64 | DataType::ComplexLongDouble
        )
    }

    /// Whether sums and products of the type need the process's long double arithmetic
    /// ([`set_long_double_arithmetic`]).
    pub const fn needs_long_double_arithmetic(self) -> bool {
        matches!(self, DataType::LongDouble | DataType::ComplexLongDouble)
    }

    /// Whether the type is a (value, location) pair of MINLOC and MAXLOC: an element
    /// of two fields, updated whole.
    pub const fn is_loc(self) -> bool {
        matches!(
            self,
            DataType::LocF32
                | DataType::LocF64
                | DataType::LocI64
                | DataType::LocI32
                | DataType::LocI16
                | DataType::LocLongDouble
        )
    }

    /// Decodes the wire code; `None` for an unknown code.
    pub fn from_code(code: u8) -> Option<Self> {
        use DataType::*;
        Some(match code {
            1 => U8,
            2 => U16,
            3 => U32,
            4 => U64,
            5 => I8,
            6 => I16,
            7 => I32,
            8 => I64,
            9 => F32,
            10 => F64,
            11 => LocF32,
            12 => LocF64,
            13 => LocI64,
            14 => LocI32,
            15 => LocI16,
            16 => LongDouble,
            17 => LocLongDouble,
            18 => ComplexF32,
            19 => ComplexF64,
            20 => ComplexLongDouble,
            _ => return None,
        })
    }
}

/// A type that can live in a window: a plain primitive number (`u8` to `u64`, `i8` to
/// `i64`, `f32`, `f64`), or a value with its location for MINLOC and MAXLOC
/// ([`LocF64`] and its siblings).
///
/// Sealed: accumulates apply the arithmetic of [`DataType`] at the target, in every
/// backend's native atomics and on the wire, so an element is one of the types that
/// arithmetic is defined for. (A user struct as an element would get float maths on its
/// integer fields.) Structured data goes in a window of its widest primitive, or of
/// bytes through [`Window::elements`](crate::Window::elements).
pub trait Element:
    sealed::Sealed + bytemuck::Pod + PartialEq + std::fmt::Debug + Send + Sync + 'static
{
    /// Its [`DataType`].
    const DATATYPE: DataType;
}

mod sealed {
    /// Only rma-core's primitive numbers are elements.
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $d:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DATATYPE: DataType = DataType::$d; }
    )*};
}
element!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32,
    i64 => I64, f32 => F32, f64 => F64, LocF32 => LocF32, LocF64 => LocF64, LocI64 => LocI64,
    LocI32 => LocI32, LocI16 => LocI16, LongDouble => LongDouble,
    LocLongDouble => LocLongDouble, ComplexF32 => ComplexF32, ComplexF64 => ComplexF64,
    ComplexLongDouble => ComplexLongDouble);

macro_rules! complex_type {
    ($(#[$doc:meta])* $name:ident, $part:ty) => {
        $(#[$doc])*
        ///
        /// Accumulated with [`AccOp::Sum`], [`AccOp::Prod`] (complex multiplication),
        /// [`AccOp::Replace`] and [`AccOp::NoOp`], atomically as a whole (no CPU atomic
        /// takes it: under the target's accumulate lock, or as one active message).
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            /// The real part.
            pub re: $part,
            /// The imaginary part.
            pub im: $part,
        }

        impl $name {
            /// `re + im i`.
            pub const fn new(re: $part, im: $part) -> Self {
                $name { re, im }
            }
        }

        impl Complex for $name {
            fn op(self, op: AccOp, o: Self) -> Self {
                match op {
                    AccOp::Sum => $name::new(self.re + o.re, self.im + o.im),
                    AccOp::Prod => $name::new(
                        self.re * o.re - self.im * o.im,
                        self.re * o.im + self.im * o.re,
                    ),
                    AccOp::Replace => o,
                    // Nothing else is valid for complex numbers (`valid_for`).
                    _ => self,
                }
            }
        }
    };
}

complex_type!(
    /// A complex number of two `f32`: C's `float _Complex` (MPI_C_FLOAT_COMPLEX, and
    /// Fortran's COMPLEX where REAL is 4 bytes).
    ComplexF32, f32
);
complex_type!(
    /// A complex number of two `f64`: C's `double _Complex` (MPI_C_DOUBLE_COMPLEX, and
    /// Fortran's DOUBLE COMPLEX).
    ComplexF64, f64
);

/// x86-64's `long double` (C's, MPI_LONG_DOUBLE): 80-bit extended precision, stored in
/// 16 bytes (the top 6 padding). Rust has no such type: the bytes are carried as they
/// are, and accumulates compute with the arithmetic the process set
/// ([`set_long_double_arithmetic`]; librma-mpi sets C's).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LongDouble(pub [u8; 16]);

impl LongDouble {
    /// Its place in the order of long doubles, read from the 80 bits themselves
    /// (sign, 15-bit exponent, 64-bit mantissa with its explicit integer bit): the
    /// magnitude is the exponent and mantissa as one number, so no arithmetic is
    /// needed; +0 and -0 are equal, and a NaN is unordered (`None`).
    pub fn order(&self) -> LongDoubleOrder {
        let b = &self.0;
        let mantissa = u64::from_le_bytes(b[0..8].try_into().expect("8 bytes"));
        let sign_exponent = u16::from_le_bytes([b[8], b[9]]);
        let exponent = sign_exponent & 0x7fff;
        if exponent == 0x7fff && mantissa << 1 != 0 {
            return LongDoubleOrder(None);
        }
        let magnitude = (i128::from(exponent) << 64) | i128::from(mantissa);
        LongDoubleOrder(Some(if sign_exponent & 0x8000 != 0 {
            -magnitude
        } else {
            magnitude
        }))
    }
}

/// A long double's place in their order ([`LongDouble::order`]); NaN compares with
/// nothing.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LongDoubleOrder(Option<i128>);

impl PartialOrd for LongDoubleOrder {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match (self.0, other.0) {
            (Some(a), Some(b)) => Some(a.cmp(&b)),
            _ => None,
        }
    }
}

/// A long double and its location: C's `struct { long double value; int index; }` (32
/// bytes, 12 of them padding), MPI_LONG_DOUBLE_INT. MINLOC and MAXLOC compare the
/// values by their bits ([`LongDouble::order`]), with no arithmetic.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct LocLongDouble {
    /// The value compared.
    pub value: LongDouble,
    /// Its location.
    pub index: i32,
    padding: [u32; 3],
}

impl LocLongDouble {
    /// A value at a location.
    pub const fn new(value: LongDouble, index: i32) -> Self {
        LocLongDouble {
            value,
            index,
            padding: [0; 3],
        }
    }
}

/// A complex number of two long doubles: C's `long double _Complex` (32 bytes,
/// MPI_C_LONG_DOUBLE_COMPLEX).
///
/// Accumulated with [`AccOp::Sum`], [`AccOp::Prod`], [`AccOp::Replace`] and
/// [`AccOp::NoOp`], atomically as a whole. Sums and products are computed with the
/// process's long double arithmetic ([`set_long_double_arithmetic`]), a product by the
/// textbook formula `(ac - bd) + (ad + bc) i` as MPICH's own reduction computes it (C's
/// `*` on `long double _Complex` differs only where it recovers infinities from NaN
/// results, Annex G).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ComplexLongDouble {
    /// The real part.
    pub re: LongDouble,
    /// The imaginary part.
    pub im: LongDouble,
}

impl ComplexLongDouble {
    /// `re + im i`.
    pub const fn new(re: LongDouble, im: LongDouble) -> Self {
        ComplexLongDouble { re, im }
    }

    /// `op(self, o)` with the long double arithmetic `f` (Sum, Prod; Replace gives `o`).
    fn op(self, op: AccOp, o: Self, f: LongDoubleArithmetic) -> Self {
        let apply = |op: AccOp, a: LongDouble, b: LongDouble| {
            let mut r = a.0;
            f(op, &mut r, &b.0);
            LongDouble(r)
        };
        match op {
            AccOp::Sum => {
                ComplexLongDouble::new(apply(op, self.re, o.re), apply(op, self.im, o.im))
            }
            AccOp::Prod => {
                let product = |a, b| apply(AccOp::Prod, a, b);
                let (ac, bd) = (product(self.re, o.re), product(self.im, o.im));
                let (ad, bc) = (product(self.re, o.im), product(self.im, o.re));
                ComplexLongDouble::new(
                    apply(AccOp::Sum, ac, bd.negated()),
                    apply(AccOp::Sum, ad, bc),
                )
            }
            AccOp::Replace => o,
            // Nothing else is valid for complex numbers (`valid_for`).
            _ => self,
        }
    }
}

impl LongDouble {
    /// The same value with its sign flipped (exact: the sign bit, byte 9's top bit).
    pub const fn negated(self) -> LongDouble {
        let mut b = self.0;
        b[9] ^= 0x80;
        LongDouble(b)
    }
}

/// `target = op(target, origin)` on long doubles (Sum, Prod, Min, Max), as C computes.
pub type LongDoubleArithmetic = fn(AccOp, &mut [u8; 16], &[u8; 16]);

static LONG_DOUBLE_ARITHMETIC: std::sync::OnceLock<LongDoubleArithmetic> =
    std::sync::OnceLock::new();

/// Sets this process's long double arithmetic, once (later calls keep the first). Every
/// process of a job that accumulates long doubles sets the same, before its first
/// window: an origin refuses a long double sum without it, and a target refuses one
/// that arrives without it.
pub fn set_long_double_arithmetic(f: LongDoubleArithmetic) {
    let _ = LONG_DOUBLE_ARITHMETIC.set(f);
}

/// The long double arithmetic, if this process has one.
pub fn long_double_arithmetic() -> Option<LongDoubleArithmetic> {
    LONG_DOUBLE_ARITHMETIC.get().copied()
}

/// Whether `op` on `datatype` can be computed in this process: everything valid, but
/// long double arithmetic only where it was set. Inline: checked by every accumulate,
/// whose datatype is a constant of its element type (the long double branch folds away
/// for every other).
#[inline]
pub fn computable(op: AccOp, datatype: DataType) -> bool {
    op.valid_for(datatype)
        && (!datatype.needs_long_double_arithmetic()
            || matches!(op, AccOp::Replace | AccOp::NoOp)
            || long_double_arithmetic().is_some())
}

macro_rules! loc_type {
    ($(#[$doc:meta])* $name:ident, $value:ty, { $($pad:ident: $pad_ty:ty),* }, [$($pad_before:ident: $pb_ty:ty),*]) => {
        $(#[$doc])*
        ///
        /// Accumulated with [`AccOp::MinLoc`], [`AccOp::MaxLoc`], [`AccOp::Replace`] and
        /// [`AccOp::NoOp`], atomically as a pair (MPI's atomicity per element).
        // Pod (through the derive, which checks it): `repr(C)` of plain numbers with the C
        // layout's padding spelled out as fields, so every byte is initialized.
        #[repr(C)]
        #[derive(Clone, Copy, Debug, PartialEq, Default, bytemuck::Pod, bytemuck::Zeroable)]
        pub struct $name {
            /// The value compared.
            pub value: $value,
            $($pad_before: $pb_ty,)*
            /// Its location (MPI: an index, the rank that holds the value).
            pub index: i32,
            $($pad: $pad_ty,)*
        }

        impl $name {
            /// A value at a location.
            pub const fn new(value: $value, index: i32) -> Self {
                $name { value, $($pad_before: 0,)* index, $($pad: 0,)* }
            }
        }
    };
}

loc_type!(
    /// An `f32` and its location: C's `struct { float value; int index; }`, MPI_FLOAT_INT.
    LocF32, f32, {}, []
);
loc_type!(
    /// An `f64` and its location: C's `struct { double value; int index; }` (16 bytes,
    /// 4 of them padding), MPI_DOUBLE_INT.
    LocF64, f64, { padding: u32 }, []
);
loc_type!(
    /// An `i64` and its location: C's `struct { long value; int index; }` (16 bytes),
    /// MPI_LONG_INT.
    LocI64, i64, { padding: u32 }, []
);
loc_type!(
    /// An `i32` and its location: C's `struct { int value; int index; }`, MPI_2INT.
    LocI32, i32, {}, []
);
loc_type!(
    /// An `i16` and its location: C's `struct { short value; int index; }` (8 bytes, 2
    /// of them padding after the value), MPI_SHORT_INT.
    LocI16, i16, {}, [padding: u16]
);

/// Accumulate operations (MPI's predefined reduction operations for RMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AccOp {
    /// `t + o` (wrapping for integers).
    Sum = 1,
    /// `t * o` (wrapping for integers).
    Prod,
    /// The smaller.
    Min,
    /// The larger.
    Max,
    /// Bitwise and.
    Band,
    /// Bitwise or.
    Bor,
    /// Bitwise exclusive or.
    Bxor,
    /// Logical and (non-zero is true; the result is 0 or 1).
    Land,
    /// Logical or.
    Lor,
    /// Logical exclusive or.
    Lxor,
    /// Replace the target with the origin value (MPI_REPLACE).
    Replace,
    /// Leave the target unchanged (MPI_NO_OP, for atomic reads by get_accumulate).
    NoOp,
    /// The smaller value with its location (MPI_MINLOC; of equal values, the smaller
    /// location). For the [`is_loc`](DataType::is_loc) types only: every rank offers a
    /// value at its own location, the window keeps the smallest and where it was.
    ///
    /// ```
    /// use rma_core::{sim, AccOp, Assert, LocF64};
    /// sim::run(4, sim::Profile::SharedMemory, 3, |engine| {
    ///     let me = engine.rank();
    ///     let win = engine.allocate::<LocF64>(1)?;
    ///     win.write_local(0, &[LocF64::new(f64::INFINITY, -1)])?;
    ///     engine.barrier()?;
    ///     win.fence(Assert::NONE)?;
    ///     let value = [9.5, 2.5, 7.0, 2.5][me as usize];
    ///     win.accumulate(&[LocF64::new(value, me as i32)], AccOp::MinLoc, 0, 0)?;
    ///     win.fence(Assert::NONE)?;
    ///     if me == 0 {
    ///         // 2.5 at ranks 1 and 3: the smaller location.
    ///         assert_eq!(win.local_to_vec(), vec![LocF64::new(2.5, 1)]);
    ///     }
    ///     win.free()?;
    ///     Ok(())
    /// }).unwrap();
    /// ```
    MinLoc,
    /// The larger value with its location (MPI_MAXLOC; of equal values, the smaller
    /// location).
    MaxLoc,
}

impl AccOp {
    /// Whether the operation is defined for the element type: MINLOC and MAXLOC for the
    /// (value, location) pairs and only them, which otherwise take replace and no-op
    /// only; bitwise and logical operations for integers.
    pub const fn valid_for(self, datatype: DataType) -> bool {
        if datatype.is_loc() {
            return matches!(
                self,
                AccOp::MinLoc | AccOp::MaxLoc | AccOp::Replace | AccOp::NoOp
            );
        }
        if matches!(datatype, DataType::LongDouble) {
            return matches!(
                self,
                AccOp::Sum | AccOp::Prod | AccOp::Min | AccOp::Max | AccOp::Replace | AccOp::NoOp
            );
        }
        if datatype.is_complex() {
            // MPI-4.1 6.9.2: complex numbers take the arithmetic ops, not the ordering ones.
            return matches!(
                self,
                AccOp::Sum | AccOp::Prod | AccOp::Replace | AccOp::NoOp
            );
        }
        match self {
            AccOp::Band | AccOp::Bor | AccOp::Bxor | AccOp::Land | AccOp::Lor | AccOp::Lxor => {
                datatype.is_integer()
            }
            AccOp::MinLoc | AccOp::MaxLoc => false,
            _ => true,
        }
    }

    /// Decodes the wire code.
    pub fn from_code(code: u8) -> Option<Self> {
        use AccOp::*;
        Some(match code {
            1 => Sum,
            2 => Prod,
            3 => Min,
            4 => Max,
            5 => Band,
            6 => Bor,
            7 => Bxor,
            8 => Land,
            9 => Lor,
            10 => Lxor,
            11 => Replace,
            12 => NoOp,
            13 => MinLoc,
            14 => MaxLoc,
            _ => return None,
        })
    }
}

macro_rules! int_apply {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let (a, b): ($t, $t) = ($a, $b);
        match $op {
            AccOp::Sum => a.wrapping_add(b),
            AccOp::Prod => a.wrapping_mul(b),
            AccOp::Min => a.min(b),
            AccOp::Max => a.max(b),
            AccOp::Band => a & b,
            AccOp::Bor => a | b,
            AccOp::Bxor => a ^ b,
            AccOp::Land => ((a != 0) && (b != 0)) as $t,
            AccOp::Lor => ((a != 0) || (b != 0)) as $t,
            AccOp::Lxor => ((a != 0) != (b != 0)) as $t,
            AccOp::Replace => b,
            // MINLOC and MAXLOC are refused for plain numbers (`valid_for`).
            AccOp::NoOp | AccOp::MinLoc | AccOp::MaxLoc => a,
        }
    }};
}

macro_rules! float_apply {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        let (a, b): ($t, $t) = ($a, $b);
        match $op {
            AccOp::Sum => a + b,
            AccOp::Prod => a * b,
            AccOp::Min => a.min(b),
            AccOp::Max => a.max(b),
            AccOp::Replace => b,
            // Bitwise/logical ops are refused before reaching here (`valid_for`).
            _ => a,
        }
    }};
}

macro_rules! each_element {
    ($dt:expr, $target:expr, $origin:expr, |$t:ident, $a:ident, $b:ident| $int:expr, $float:expr) => {{
        match $dt {
            DataType::U8 => each_element!(@run u8, $target, $origin, $t, $a, $b, $int),
            DataType::U16 => each_element!(@run u16, $target, $origin, $t, $a, $b, $int),
            DataType::U32 => each_element!(@run u32, $target, $origin, $t, $a, $b, $int),
            DataType::U64 => each_element!(@run u64, $target, $origin, $t, $a, $b, $int),
            DataType::I8 => each_element!(@run i8, $target, $origin, $t, $a, $b, $int),
            DataType::I16 => each_element!(@run i16, $target, $origin, $t, $a, $b, $int),
            DataType::I32 => each_element!(@run i32, $target, $origin, $t, $a, $b, $int),
            DataType::I64 => each_element!(@run i64, $target, $origin, $t, $a, $b, $int),
            DataType::F32 => each_element!(@run f32, $target, $origin, $t, $a, $b, $float),
            DataType::F64 => each_element!(@run f64, $target, $origin, $t, $a, $b, $float),
            // Pairs take MINLOC and MAXLOC (`accumulate`), replace and no-op only.
            DataType::LocF32
            | DataType::LocF64
            | DataType::LocI64
            | DataType::LocI32
            | DataType::LocI16
            | DataType::LongDouble
            | DataType::LocLongDouble
            | DataType::ComplexF32
            | DataType::ComplexF64
            | DataType::ComplexLongDouble => {}
        }
    }};
    (@run $ty:ty, $target:expr, $origin:expr, $t:ident, $a:ident, $b:ident, $body:expr) => {{
        const N: usize = std::mem::size_of::<$ty>();
        for (tc, oc) in $target.chunks_exact_mut(N).zip($origin.chunks_exact(N)) {
            let $a = <$ty>::from_ne_bytes(tc.try_into().expect("chunk of element size"));
            let $b = <$ty>::from_ne_bytes(oc.try_into().expect("chunk of element size"));
            #[allow(unused)]
            type $t = $ty;
            let r: $ty = $body;
            tc.copy_from_slice(&r.to_ne_bytes());
        }
    }};
}

/// Applies `target[i] = op(target[i], origin[i])` element by element.
///
/// `target` and `origin` hold whole elements of `datatype`; a trailing partial element
/// is ignored (callers check lengths first). The operation must be
/// [`valid_for`](AccOp::valid_for) the type.
pub fn accumulate(op: AccOp, datatype: DataType, target: &mut [u8], origin: &[u8]) {
    match op {
        AccOp::NoOp => {}
        AccOp::Replace => {
            let n = target.len().min(origin.len());
            target[..n].copy_from_slice(&origin[..n]);
        }
        AccOp::MinLoc | AccOp::MaxLoc => match datatype {
            DataType::LocF32 => locs::<LocF32, _>(op, target, origin, |l| l.value, |l| l.index),
            DataType::LocF64 => locs::<LocF64, _>(op, target, origin, |l| l.value, |l| l.index),
            DataType::LocI64 => locs::<LocI64, _>(op, target, origin, |l| l.value, |l| l.index),
            DataType::LocI32 => locs::<LocI32, _>(op, target, origin, |l| l.value, |l| l.index),
            DataType::LocI16 => locs::<LocI16, _>(op, target, origin, |l| l.value, |l| l.index),
            DataType::LocLongDouble => {
                locs::<LocLongDouble, _>(op, target, origin, |l| l.value.order(), |l| l.index)
            }
            // Refused for plain numbers (`valid_for`).
            _ => {}
        },
        _ if datatype == DataType::ComplexF32 => complexes::<ComplexF32>(op, target, origin),
        _ if datatype == DataType::ComplexF64 => complexes::<ComplexF64>(op, target, origin),
        _ if datatype == DataType::ComplexLongDouble => {
            // Checked before (`computable`); without arithmetic nothing can be done.
            if let Some(f) = long_double_arithmetic() {
                for (tc, oc) in target.chunks_exact_mut(32).zip(origin.chunks_exact(32)) {
                    let (t, o): (ComplexLongDouble, ComplexLongDouble) = (
                        bytemuck::pod_read_unaligned(tc),
                        bytemuck::pod_read_unaligned(oc),
                    );
                    tc.copy_from_slice(bytemuck::bytes_of(&t.op(op, o, f)));
                }
            }
        }
        _ if datatype == DataType::LongDouble => {
            // Checked before (`computable`); without arithmetic nothing can be done.
            if let Some(f) = long_double_arithmetic() {
                for (tc, oc) in target.chunks_exact_mut(16).zip(origin.chunks_exact(16)) {
                    let (t, o): (&mut [u8; 16], &[u8; 16]) = (
                        tc.try_into().expect("16 bytes"),
                        oc.try_into().expect("16 bytes"),
                    );
                    f(op, t, o);
                }
            }
        }
        _ => each_element!(
            datatype,
            target,
            origin,
            |T, a, b| int_apply!(T, op, a, b),
            float_apply!(T, op, a, b)
        ),
    }
}

/// `op` on complex numbers of type `C`, number by number.
fn complexes<C: Complex>(op: AccOp, target: &mut [u8], origin: &[u8]) {
    let n = std::mem::size_of::<C>();
    for (tc, oc) in target.chunks_exact_mut(n).zip(origin.chunks_exact(n)) {
        let (t, o): (C, C) = (
            bytemuck::pod_read_unaligned(tc),
            bytemuck::pod_read_unaligned(oc),
        );
        tc.copy_from_slice(bytemuck::bytes_of(&t.op(op, o)));
    }
}

/// The complex element types' arithmetic, for [`complexes`].
trait Complex: bytemuck::Pod {
    fn op(self, op: AccOp, o: Self) -> Self;
}

/// MINLOC or MAXLOC of (value, location) pairs of type `L`, pair by pair: the smaller
/// (larger) value with its location; of equal values, the smaller location (MPI-4.1
/// 6.9.4). A pair taken from the origin is written whole, its padding too.
fn locs<L: bytemuck::Pod, V: PartialOrd>(
    op: AccOp,
    target: &mut [u8],
    origin: &[u8],
    value: impl Fn(&L) -> V,
    index: impl Fn(&L) -> i32,
) {
    let n = std::mem::size_of::<L>();
    for (tc, oc) in target.chunks_exact_mut(n).zip(origin.chunks_exact(n)) {
        let (t, o): (L, L) = (
            bytemuck::pod_read_unaligned(tc),
            bytemuck::pod_read_unaligned(oc),
        );
        let (tv, ov) = (value(&t), value(&o));
        let origin_wins = match op {
            AccOp::MinLoc => ov < tv,
            _ => ov > tv,
        };
        if origin_wins || (tv == ov && index(&o) < index(&t)) {
            tc.copy_from_slice(oc);
        }
    }
}

/// Compare-and-swap of one element: if `target == compare`, `target = swap`.
/// Returns nothing; the caller reads the old value first.
pub fn compare_and_swap(target: &mut [u8], compare: &[u8], swap: &[u8]) {
    // Bitwise comparison, as network atomics do (so -0.0 and 0.0 differ, NaN equals itself).
    if target == compare {
        target.copy_from_slice(swap);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc<T: Element>(op: AccOp, t: T, o: T) -> T {
        let mut tb = bytemuck::bytes_of(&t).to_vec();
        accumulate(op, T::DATATYPE, &mut tb, bytemuck::bytes_of(&o));
        bytemuck::pod_read_unaligned(&tb)
    }

    #[test]
    fn integer_ops() {
        assert_eq!(acc(AccOp::Sum, 250u8, 10), 4);
        assert_eq!(acc(AccOp::Prod, -3i32, 7), -21);
        assert_eq!(acc(AccOp::Min, -3i64, 7), -3);
        assert_eq!(acc(AccOp::Max, 3u16, 7), 7);
        assert_eq!(acc(AccOp::Band, 0b1100u32, 0b1010), 0b1000);
        assert_eq!(acc(AccOp::Bor, 0b1100u32, 0b1010), 0b1110);
        assert_eq!(acc(AccOp::Bxor, 0b1100u32, 0b1010), 0b0110);
        assert_eq!(acc(AccOp::Land, 5u64, 0), 0);
        assert_eq!(acc(AccOp::Lor, 5u64, 0), 1);
        assert_eq!(acc(AccOp::Lxor, 5i8, 3), 0);
        assert_eq!(acc(AccOp::Replace, 5i16, 3), 3);
        assert_eq!(acc(AccOp::NoOp, 5i16, 3), 5);
    }

    #[test]
    fn float_ops() {
        assert_eq!(acc(AccOp::Sum, 1.5f64, 2.25), 3.75);
        assert_eq!(acc(AccOp::Prod, 1.5f32, 2.0), 3.0);
        assert_eq!(acc(AccOp::Max, -1.5f32, 2.0), 2.0);
        assert!(!AccOp::Band.valid_for(DataType::F64));
        assert!(AccOp::Band.valid_for(DataType::I8));
    }

    // MINLOC/MAXLOC (MPI-4.1 6.9.4): the smaller (larger) value with its location; of
    // equal values the smaller location; the whole pair, padding too, from the winner.
    #[test]
    fn minloc_and_maxloc_take_the_value_with_its_location() {
        let run = |op, t: LocF64, o: LocF64| acc(op, t, o);
        let at = |v: f64, i: i32| LocF64::new(v, i);
        assert_eq!(run(AccOp::MinLoc, at(3.0, 7), at(2.0, 9)), at(2.0, 9));
        assert_eq!(run(AccOp::MinLoc, at(1.0, 7), at(2.0, 9)), at(1.0, 7));
        assert_eq!(run(AccOp::MinLoc, at(2.0, 7), at(2.0, 3)), at(2.0, 3));
        assert_eq!(run(AccOp::MinLoc, at(2.0, 3), at(2.0, 7)), at(2.0, 3));
        assert_eq!(run(AccOp::MaxLoc, at(3.0, 7), at(2.0, 9)), at(3.0, 7));
        assert_eq!(run(AccOp::MaxLoc, at(3.0, 7), at(3.0, 1)), at(3.0, 1));
        assert_eq!(
            acc(AccOp::MaxLoc, LocI16::new(-4, 2), LocI16::new(5, 8)),
            LocI16::new(5, 8)
        );
        assert_eq!(
            acc(AccOp::MinLoc, LocI64::new(-4, 2), LocI64::new(5, 8)),
            LocI64::new(-4, 2)
        );
        assert_eq!(
            acc(AccOp::MinLoc, LocI32::new(6, 2), LocI32::new(6, 1)),
            LocI32::new(6, 1)
        );
        assert_eq!(
            acc(AccOp::MaxLoc, LocF32::new(0.5, 2), LocF32::new(1.5, 4)),
            LocF32::new(1.5, 4)
        );
        assert_eq!(acc(AccOp::Replace, at(1.0, 1), at(9.0, 9)), at(9.0, 9));
        assert_eq!(acc(AccOp::NoOp, at(1.0, 1), at(9.0, 9)), at(1.0, 1));
        // Several pairs at once, each by itself.
        let mut t = bytemuck::cast_slice(&[LocI32::new(1, 0), LocI32::new(9, 0)]).to_vec();
        let o = [LocI32::new(5, 1), LocI32::new(5, 1)];
        accumulate(
            AccOp::MinLoc,
            DataType::LocI32,
            &mut t,
            bytemuck::cast_slice(&o),
        );
        assert_eq!(
            bytemuck::cast_slice::<u8, LocI32>(&t),
            &[LocI32::new(1, 0), LocI32::new(5, 1)]
        );
    }

    // The pair types have C's layout (MPI's pair types), and take MINLOC, MAXLOC,
    // replace and no-op only; plain numbers never take MINLOC or MAXLOC.
    #[test]
    fn pairs_have_c_layout_and_their_own_ops() {
        assert_eq!(std::mem::size_of::<LocF32>(), DataType::LocF32.size());
        assert_eq!(std::mem::size_of::<LocF64>(), 16);
        assert_eq!(std::mem::size_of::<LocI64>(), 16);
        assert_eq!(std::mem::size_of::<LocI32>(), 8);
        assert_eq!(std::mem::size_of::<LocI16>(), 8);
        assert_eq!(std::mem::offset_of!(LocF64, index), 8);
        assert_eq!(std::mem::offset_of!(LocI16, index), 4);
        assert_eq!(std::mem::align_of::<LocI32>(), 4);
        for op in (1..=14).filter_map(AccOp::from_code) {
            let loc_op = matches!(op, AccOp::MinLoc | AccOp::MaxLoc);
            let pair_op = loc_op || matches!(op, AccOp::Replace | AccOp::NoOp);
            assert_eq!(op.valid_for(DataType::LocF64), pair_op, "{op:?}");
            assert_eq!(op.valid_for(DataType::LocI16), pair_op, "{op:?}");
            if loc_op {
                assert!(!op.valid_for(DataType::I32) && !op.valid_for(DataType::F64));
            }
        }
        assert!(!DataType::LocI32.is_integer());
    }

    // Long double: carried as bytes, replace and no-op always, arithmetic exactly where
    // the process set one (here a stand-in that adds the first bytes), then through it.
    #[test]
    fn long_double_arithmetic_is_the_process_s_own() {
        assert!(computable(AccOp::Replace, DataType::LongDouble));
        assert!(!computable(AccOp::Band, DataType::LongDouble));
        assert!(!computable(AccOp::MinLoc, DataType::LongDouble));
        assert!(computable(AccOp::NoOp, DataType::ComplexLongDouble));
        assert!(!computable(AccOp::Max, DataType::ComplexLongDouble));
        assert_eq!(
            computable(AccOp::Sum, DataType::LongDouble),
            long_double_arithmetic().is_some()
        );
        set_long_double_arithmetic(f64_arithmetic);
        assert!(computable(AccOp::Sum, DataType::LongDouble));
        assert!(computable(AccOp::Prod, DataType::ComplexLongDouble));
        let (mut t, o) = (
            [ld(2.0), ld(-0.5)].map(|v| v.0).concat(),
            [ld(3.0), ld(4.0)].map(|v| v.0).concat(),
        );
        accumulate(AccOp::Sum, DataType::LongDouble, &mut t, &o);
        assert_eq!(t, [ld(5.0), ld(3.5)].map(|v| v.0).concat());
        assert_eq!(
            std::mem::size_of::<LongDouble>(),
            DataType::LongDouble.size()
        );
    }

    /// Complex long doubles: sums part by part, products by the textbook formula, replace
    /// whole; in C's layout (real part, then imaginary, 16 bytes each).
    #[test]
    fn complex_long_doubles_sum_and_multiply_as_complex_numbers() {
        set_long_double_arithmetic(f64_arithmetic);
        let z = |re, im| ComplexLongDouble::new(ld(re), ld(im));
        let bytes = |v: &[ComplexLongDouble]| bytemuck::cast_slice::<_, u8>(v).to_vec();
        let mut t = bytes(&[z(1.0, 2.0), z(3.0, -1.0), z(7.0, 7.0)]);
        let o = bytes(&[z(0.5, -4.0), z(2.0, 5.0), z(-1.0, 0.25)]);
        let mut products = t.clone();
        accumulate(AccOp::Sum, DataType::ComplexLongDouble, &mut t, &o);
        assert_eq!(t, bytes(&[z(1.5, -2.0), z(5.0, 4.0), z(6.0, 7.25)]));
        accumulate(AccOp::Prod, DataType::ComplexLongDouble, &mut products, &o);
        // (1 + 2i)(0.5 - 4i) = 8.5 - 3i; (3 - i)(2 + 5i) = 11 + 13i; (7 + 7i)(-1 + i/4).
        assert_eq!(
            products,
            bytes(&[z(8.5, -3.0), z(11.0, 13.0), z(-8.75, -5.25)])
        );
        accumulate(AccOp::Replace, DataType::ComplexLongDouble, &mut t, &o);
        assert_eq!(t, o);
        assert_eq!(
            std::mem::size_of::<ComplexLongDouble>(),
            DataType::ComplexLongDouble.size()
        );
        assert_eq!(DataType::from_code(20), Some(DataType::ComplexLongDouble));
        assert_eq!(ld(2.0).negated(), ld(-2.0));
    }

    /// A long double of an `f64` (normal numbers and zero): the same sign, the exponent
    /// rebiased, the mantissa with its integer bit.
    fn ld(v: f64) -> LongDouble {
        let bits = v.to_bits();
        let negative = bits >> 63 == 1;
        let exponent = ((bits >> 52) & 0x7ff) as u16;
        if exponent == 0 {
            return f80(negative, 0, 0);
        }
        f80(
            negative,
            exponent + 16383 - 1023,
            (1 << 63) | ((bits & ((1 << 52) - 1)) << 11),
        )
    }

    /// The `f64` of a long double [`ld`] made (or one as exact).
    fn f64_of(v: &LongDouble) -> f64 {
        let mantissa = u64::from_le_bytes(v.0[..8].try_into().expect("8 bytes"));
        let sign_exponent = u16::from_le_bytes([v.0[8], v.0[9]]);
        let sign = u64::from(sign_exponent >> 15) << 63;
        let exponent = sign_exponent & 0x7fff;
        if exponent == 0 && mantissa == 0 {
            return f64::from_bits(sign);
        }
        let e64 = u64::from(exponent + 1023 - 16383);
        f64::from_bits(sign | (e64 << 52) | ((mantissa >> 11) & ((1 << 52) - 1)))
    }

    /// Long double arithmetic through `f64`, exact for the small values of these tests
    /// (every test of this process sets the same: the first one set stays).
    fn f64_arithmetic(op: AccOp, t: &mut [u8; 16], o: &[u8; 16]) {
        let (a, b) = (f64_of(&LongDouble(*t)), f64_of(&LongDouble(*o)));
        let r = match op {
            AccOp::Sum => a + b,
            AccOp::Prod => a * b,
            AccOp::Min => a.min(b),
            AccOp::Max => a.max(b),
            _ => a,
        };
        *t = ld(r).0;
    }

    /// An 80-bit long double of (sign, exponent, mantissa), in its 16 bytes.
    fn f80(negative: bool, exponent: u16, mantissa: u64) -> LongDouble {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&mantissa.to_le_bytes());
        b[8..10].copy_from_slice(&(exponent | if negative { 0x8000 } else { 0 }).to_le_bytes());
        LongDouble(b)
    }

    // Long doubles are ordered by their bits (no arithmetic): 1 < 1.5 < 2, -2 < -1,
    // +0 == -0, NaN unordered; MINLOC/MAXLOC of MPI_LONG_DOUBLE_INT pairs use it.
    #[test]
    fn long_double_pairs_order_by_their_bits() {
        let one = f80(false, 0x3fff, 1 << 63);
        let one_and_half = f80(false, 0x3fff, 3 << 62);
        let two = f80(false, 0x4000, 1 << 63);
        let minus_one = f80(true, 0x3fff, 1 << 63);
        let minus_two = f80(true, 0x4000, 1 << 63);
        let nan = f80(false, 0x7fff, 3 << 62);
        assert!(one.order() < one_and_half.order() && one_and_half.order() < two.order());
        assert!(minus_two.order() < minus_one.order() && minus_one.order() < one.order());
        assert_eq!(f80(false, 0, 0).order(), f80(true, 0, 0).order());
        assert!(nan.order().partial_cmp(&one.order()).is_none());
        let at = LocLongDouble::new;
        assert_eq!(acc(AccOp::MaxLoc, at(one, 4), at(two, 9)), at(two, 9));
        assert_eq!(acc(AccOp::MinLoc, at(one, 4), at(two, 9)), at(one, 4));
        assert_eq!(acc(AccOp::MinLoc, at(one, 4), at(one, 2)), at(one, 2));
        assert_eq!(acc(AccOp::MinLoc, at(one, 4), at(nan, 0)), at(one, 4));
        assert_eq!(
            std::mem::size_of::<LocLongDouble>(),
            DataType::LocLongDouble.size()
        );
        assert_eq!(std::mem::offset_of!(LocLongDouble, index), 16);
    }

    #[test]
    fn complex_numbers_sum_and_multiply_as_complex_numbers() {
        let z = |re, im| ComplexF64::new(re, im);
        let mut t = bytemuck::bytes_of(&[z(1.0, 2.0), z(-3.0, 0.5)]).to_vec();
        let o = bytemuck::bytes_of(&[z(0.5, -1.0), z(2.0, 4.0)]).to_vec();
        accumulate(AccOp::Sum, DataType::ComplexF64, &mut t, &o);
        let got: Vec<ComplexF64> = bytemuck::pod_collect_to_vec(&t);
        assert_eq!(got, [z(1.5, 1.0), z(-1.0, 4.5)]);
        // (1.5 + 1i)(0.5 - 1i) = 0.75 + 1 + (-1.5 + 0.5)i; (-1 + 4.5i)(2 + 4i) = -2 - 18 + (-4 + 9)i
        accumulate(AccOp::Prod, DataType::ComplexF64, &mut t, &o);
        let got: Vec<ComplexF64> = bytemuck::pod_collect_to_vec(&t);
        assert_eq!(got, [z(1.75, -1.0), z(-20.0, 5.0)]);
        let w = |re, im| ComplexF32::new(re, im);
        let mut t = bytemuck::bytes_of(&w(0.0, 1.0)).to_vec();
        accumulate(
            AccOp::Prod,
            DataType::ComplexF32,
            &mut t,
            bytemuck::bytes_of(&w(0.0, 1.0)),
        );
        assert_eq!(
            bytemuck::pod_read_unaligned::<ComplexF32>(&t),
            w(-1.0, 0.0),
            "i * i"
        );
        accumulate(
            AccOp::Replace,
            DataType::ComplexF32,
            &mut t,
            bytemuck::bytes_of(&w(7.0, 8.0)),
        );
        accumulate(
            AccOp::NoOp,
            DataType::ComplexF32,
            &mut t,
            bytemuck::bytes_of(&w(9.0, 9.0)),
        );
        assert_eq!(bytemuck::pod_read_unaligned::<ComplexF32>(&t), w(7.0, 8.0));
        for dt in [DataType::ComplexF32, DataType::ComplexF64] {
            assert!(dt.updated_whole() && !dt.is_integer() && !dt.is_loc());
            for op in [
                AccOp::Min,
                AccOp::Max,
                AccOp::Band,
                AccOp::Lor,
                AccOp::MinLoc,
            ] {
                assert!(!op.valid_for(dt), "{op:?} {dt:?}");
            }
            for op in [AccOp::Sum, AccOp::Prod, AccOp::Replace, AccOp::NoOp] {
                assert!(op.valid_for(dt) && computable(op, dt), "{op:?} {dt:?}");
            }
        }
        assert_eq!(
            std::mem::size_of::<ComplexF32>(),
            DataType::ComplexF32.size()
        );
        assert_eq!(
            std::mem::size_of::<ComplexF64>(),
            DataType::ComplexF64.size()
        );
    }

    #[test]
    fn codes_round_trip() {
        for c in 0..=255u8 {
            if let Some(d) = DataType::from_code(c) {
                assert_eq!(d as u8, c);
            }
            if let Some(o) = AccOp::from_code(c) {
                assert_eq!(o as u8, c);
            }
        }
    }
}
