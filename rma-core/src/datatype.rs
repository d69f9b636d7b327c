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
}

impl DataType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::U8 | DataType::I8 => 1,
            DataType::U16 | DataType::I16 => 2,
            DataType::U32 | DataType::I32 | DataType::F32 => 4,
            DataType::U64 | DataType::I64 | DataType::F64 => 8,
        }
    }

    /// Whether bitwise and logical operations are defined (integers only).
    pub const fn is_integer(self) -> bool {
        !matches!(self, DataType::F32 | DataType::F64)
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
            _ => return None,
        })
    }
}

/// A type that can live in a window: a plain primitive number (`u8` to `u64`, `i8` to
/// `i64`, `f32`, `f64`).
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
    i64 => I64, f32 => F32, f64 => F64);

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
}

impl AccOp {
    /// Whether the operation is defined for the element type.
    pub const fn valid_for(self, datatype: DataType) -> bool {
        match self {
            AccOp::Band | AccOp::Bor | AccOp::Bxor | AccOp::Land | AccOp::Lor | AccOp::Lxor => {
                datatype.is_integer()
            }
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
            AccOp::NoOp => a,
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
        _ => each_element!(
            datatype,
            target,
            origin,
            |T, a, b| int_apply!(T, op, a, b),
            float_apply!(T, op, a, b)
        ),
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
