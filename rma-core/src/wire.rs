//! The active-message wire format: versioned, length-checked, decoded without trusting
//! the sender.
//!
//! Every packet starts with a 12-byte header: version (1 byte), kind (1), flags (2),
//! window id (4), done count (4). The body depends on the kind. All integers are little
//! endian; payloads are window bytes in the sender's native order (ranks of one job share
//! an architecture).

use crate::datatype::{AccOp, DataType};

/// Version of this format; a packet of another version is refused. Version 2: extents
/// are u64 throughout (no size of a window or an op is cut to 32 bits), and
/// [`Kind::Depart`]. Version 3: [`flags::LOCK_ALL`]. Version 4: [`Kind::Collective`].
/// Version 5: [`flags::NOTIFY`].
pub const VERSION: u8 = 5;
/// Bytes of the fixed header.
pub const HEADER_LEN: usize = 12;

/// Packet flags. Several may ride on one packet (the piggyback optimizations).
pub mod flags {
    /// Single-op: take a shared lock before applying.
    pub const LOCK_SHARED: u16 = 1 << 0;
    /// Single-op: take an exclusive lock before applying.
    pub const LOCK_EXCLUSIVE: u16 = 1 << 1;
    /// Release the lock once the counted ops are applied.
    pub const UNLOCK: u16 = 1 << 2;
    /// RMA_DONE: acknowledge once the counted ops are applied.
    pub const DONE: u16 = 1 << 3;
    /// PSCW complete: this origin's access epoch is over once the counted ops are applied.
    pub const COMPLETE: u16 = 1 << 4;
    /// On a response: it also acknowledges the RMA_DONE (or UNLOCK) of its origin.
    pub const ACK: u16 = 1 << 5;
    /// On an ack: some operation since the last RMA_DONE was refused by the target.
    pub const REFUSED: u16 = 1 << 6;
    /// On a LOCK (shared): asked for by a lock_all epoch, which holds or waits for the
    /// locks of every target at once. The target grants it whenever no exclusive lock is
    /// held, even past exclusive requests waiting in its queue: otherwise two lock_all
    /// epochs each holding one target's shared lock and waiting behind an exclusive
    /// request queued at the other's target close a cycle (a deadlock seen on ofi tcp
    /// with 4 ranks mixing lock_all and exclusive locks).
    pub const LOCK_ALL: u16 = 1 << 7;
    /// On an op: a notified access. A u32 counter index follows the header; the target
    /// adds one to that notification counter of its own once the op's data is in its
    /// memory (for a get: read from it), and refuses an index past its counters.
    pub const NOTIFY: u16 = 1 << 8;
    /// Every flag this version knows.
    pub const ALL: u16 = (1 << 9) - 1;
}

/// Packet kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
#[allow(missing_docs)] // the names are the design's message names
pub enum Kind {
    Put = 1,
    Get,
    Accumulate,
    GetAccumulate,
    CompareAndSwap,
    Response,
    Lock,
    LockGranted,
    Done,
    Ack,
    Post,
    Barrier,
    Depart,
    /// A piece of one step of a communicator's collective (see [`Body::Collective`]).
    Collective,
}

impl Kind {
    /// Number of kinds (for counter arrays).
    pub const COUNT: usize = 15;

    fn from_code(c: u8) -> Option<Kind> {
        use Kind::*;
        Some(match c {
            1 => Put,
            2 => Get,
            3 => Accumulate,
            4 => GetAccumulate,
            5 => CompareAndSwap,
            6 => Response,
            7 => Lock,
            8 => LockGranted,
            9 => Done,
            10 => Ack,
            11 => Post,
            12 => Barrier,
            13 => Depart,
            14 => Collective,
            _ => return None,
        })
    }

    /// A short name, for counters and traces.
    pub const fn name(self) -> &'static str {
        match self {
            Kind::Put => "put",
            Kind::Get => "get",
            Kind::Accumulate => "accumulate",
            Kind::GetAccumulate => "get_accumulate",
            Kind::CompareAndSwap => "compare_and_swap",
            Kind::Response => "response",
            Kind::Lock => "lock",
            Kind::LockGranted => "lock_granted",
            Kind::Done => "rma_done",
            Kind::Ack => "ack",
            Kind::Post => "post",
            Kind::Barrier => "barrier",
            Kind::Depart => "depart",
            Kind::Collective => "collective",
        }
    }

    /// Whether the target counts this packet as an operation for RMA_DONE.
    pub const fn is_op(self) -> bool {
        matches!(
            self,
            Kind::Put | Kind::Get | Kind::Accumulate | Kind::GetAccumulate | Kind::CompareAndSwap
        )
    }
}

/// Where in the target window an op lands: `count` blocks of `block` bytes, `stride`
/// bytes apart, from byte `offset`. Built by the origin with checked arithmetic and
/// decoded only when [`is_well_formed`](Self::is_well_formed), so that `bytes` and `span`
/// never overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// First byte (or a dynamic window address).
    pub offset: u64,
    /// Number of blocks.
    pub count: u64,
    /// Bytes per block.
    pub block: u64,
    /// Bytes from the start of one block to the next.
    pub stride: u64,
}

impl Extent {
    /// A contiguous range.
    pub fn contiguous(offset: u64, len: usize) -> Self {
        Extent {
            offset,
            count: 1,
            block: len as u64,
            stride: len as u64,
        }
    }
    /// Bytes of payload (of a well-formed extent).
    pub fn bytes(&self) -> u64 {
        self.checked_bytes().unwrap_or(u64::MAX)
    }
    /// Bytes from the first to one past the last touched byte (of a well-formed extent).
    pub fn span(&self) -> u64 {
        self.checked_span().unwrap_or(u64::MAX)
    }
    /// Bytes of payload, if they fit in 64 bits.
    pub fn checked_bytes(&self) -> Option<u64> {
        self.count.checked_mul(self.block)
    }
    /// Bytes spanned, if they fit in 64 bits (also past `offset`).
    pub fn checked_span(&self) -> Option<u64> {
        let span = match self.count {
            0 => 0,
            n => (n - 1).checked_mul(self.stride)?.checked_add(self.block)?,
        };
        self.offset.checked_add(span)?;
        Some(span)
    }
    /// Whether blocks are disjoint and in order, and every size fits (bytes and span in
    /// 64 bits, the payload in this machine's address space).
    pub fn is_well_formed(&self) -> bool {
        (self.count <= 1 || self.stride >= self.block)
            && self.checked_span().is_some()
            && self
                .checked_bytes()
                .is_some_and(|b| isize::try_from(b).is_ok())
    }
    /// Byte offsets of each block, relative to `offset`.
    pub fn blocks(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        (0..self.count).map(|i| (i * self.stride, self.block as usize))
    }
}

/// A decoded packet, borrowing payloads from the received bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Packet<'a> {
    /// The kind.
    pub kind: Kind,
    /// Flags from [`flags`].
    pub flags: u16,
    /// Window id (the same on every rank: windows are created collectively in order).
    pub win: u32,
    /// With `DONE`, `UNLOCK` or `COMPLETE`: how many counted ops precede (or include) it.
    pub done_count: u32,
    /// With [`flags::NOTIFY`] (ops only): the target's notification counter to count it.
    pub notify: Option<u32>,
    /// The body.
    pub body: Body<'a>,
}

/// The kind-specific part of a packet.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // fields are named for what they are
pub enum Body<'a> {
    Put {
        extent: Extent,
        data: &'a [u8],
    },
    Get {
        token: u64,
        extent: Extent,
    },
    Accumulate {
        op: AccOp,
        datatype: DataType,
        extent: Extent,
        data: &'a [u8],
    },
    GetAccumulate {
        token: u64,
        op: AccOp,
        datatype: DataType,
        extent: Extent,
        data: &'a [u8],
    },
    CompareAndSwap {
        token: u64,
        datatype: DataType,
        offset: u64,
        compare: &'a [u8],
        swap: &'a [u8],
    },
    /// `ok == false`: the op was refused (out of the window); `data` is empty.
    Response {
        token: u64,
        ok: bool,
        data: &'a [u8],
    },
    /// No body: `Lock`, `LockGranted`, `Done`, `Ack`, `Post`.
    Empty,
    Barrier {
        seq: u32,
        round: u8,
    },
    /// The sender leaves a collective context: see [`Departure`].
    Depart {
        what: Departure,
        seq: u32,
    },
    /// Bytes `offset..offset + data.len()` of the `total` the sender sends in `step` of
    /// the collective call `tag` (a communicator's context and call number) whose kind is
    /// `call` (the receiver checks it: ranks in different collectives are a mismatch).
    /// Window id: the engine's.
    Collective {
        tag: u64,
        step: u32,
        call: u8,
        total: u64,
        offset: u64,
        data: &'a [u8],
    },
}

/// What a [`Kind::Depart`] packet says the sender did; `seq` is how many barriers it
/// started in that context (the engine's, or the window's) before. For
/// [`Departure::Job`], the header's done count is the peer the sender blamed for leaving
/// plus one (0: it left without an error naming a peer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Departure {
    /// The sender's World is gone (window id: the engine's).
    Job = 0,
    /// The sender dropped the window without freeing it.
    Abandoned = 1,
    /// The sender is in `free` of the window.
    Free = 2,
    /// The sender found the others' collective calls on the window do not match its own,
    /// which `seq` names ([`Departure::call_code`]); its call failed.
    Mismatch = 3,
}

impl Departure {
    fn from_code(c: u8) -> Option<Departure> {
        Some(match c {
            0 => Departure::Job,
            1 => Departure::Abandoned,
            2 => Departure::Free,
            3 => Departure::Mismatch,
            _ => return None,
        })
    }

    /// The code a [`Departure::Mismatch`] carries in `seq` for a window's collective call.
    pub fn call_code(call: &str) -> u32 {
        match call {
            "fence" => 1,
            "free" => 2,
            _ => 0,
        }
    }

    /// The call of a [`call_code`](Self::call_code).
    pub fn call_of(code: u32) -> &'static str {
        match code {
            1 => "fence",
            2 => "free",
            _ => "another collective",
        }
    }
}

/// Why a packet was refused.
pub type DecodeError = &'static str;

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err("truncated packet");
        }
        let (h, t) = self.buf.split_at(n);
        self.buf = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| "truncated")?,
        ))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| "truncated")?,
        ))
    }
    fn extent(&mut self) -> Result<Extent, DecodeError> {
        let e = Extent {
            offset: self.u64()?,
            count: self.u64()?,
            block: self.u64()?,
            stride: self.u64()?,
        };
        if !e.is_well_formed() {
            return Err("overlapping strided blocks or sizes past 64 bits");
        }
        Ok(e)
    }
    fn op(&mut self) -> Result<(AccOp, DataType), DecodeError> {
        let op = AccOp::from_code(self.u8()?).ok_or("unknown accumulate op")?;
        let dt = DataType::from_code(self.u8()?).ok_or("unknown datatype")?;
        if !crate::datatype::computable(op, dt) {
            return Err("accumulate op not defined for datatype");
        }
        Ok((op, dt))
    }
    fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }
    fn end(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err("trailing bytes")
        }
    }
}

/// Decodes a packet. Every length is checked against what the header and body declare;
/// nothing is trusted.
pub fn decode(buf: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let mut r = Reader { buf };
    if r.u8()? != VERSION {
        return Err("unknown wire version");
    }
    let kind = Kind::from_code(r.u8()?).ok_or("unknown packet kind")?;
    let flags = u16::from_le_bytes(r.take(2)?.try_into().map_err(|_| "truncated")?);
    if flags & !flags::ALL != 0 {
        return Err("unknown flags");
    }
    let win = r.u32()?;
    let done_count = r.u32()?;
    let notify = if flags & flags::NOTIFY != 0 {
        if !kind.is_op() {
            return Err("a notification on a packet that is no operation");
        }
        Some(r.u32()?)
    } else {
        None
    };
    let body = match kind {
        Kind::Put => {
            let extent = r.extent()?;
            let data = r.rest();
            if data.len() as u64 != extent.bytes() {
                return Err("put payload length differs from its extent");
            }
            Body::Put { extent, data }
        }
        Kind::Get => {
            let token = r.u64()?;
            let extent = r.extent()?;
            r.end()?;
            Body::Get { token, extent }
        }
        Kind::Accumulate | Kind::GetAccumulate => {
            let token = if kind == Kind::GetAccumulate {
                r.u64()?
            } else {
                0
            };
            let (op, datatype) = r.op()?;
            let extent = r.extent()?;
            let data = r.rest();
            if !(extent.block as usize).is_multiple_of(datatype.size()) {
                return Err("block is not a whole number of elements");
            }
            // get_accumulate with NO_OP carries no origin data.
            let expect = if op == AccOp::NoOp && kind == Kind::GetAccumulate {
                0
            } else {
                extent.bytes()
            };
            if data.len() as u64 != expect {
                return Err("accumulate payload length differs from its extent");
            }
            if kind == Kind::Accumulate {
                Body::Accumulate {
                    op,
                    datatype,
                    extent,
                    data,
                }
            } else {
                Body::GetAccumulate {
                    token,
                    op,
                    datatype,
                    extent,
                    data,
                }
            }
        }
        Kind::CompareAndSwap => {
            let token = r.u64()?;
            let datatype = DataType::from_code(r.u8()?).ok_or("unknown datatype")?;
            if !datatype.is_integer() {
                return Err("compare_and_swap on a floating-point type");
            }
            let offset = r.u64()?;
            let n = datatype.size();
            let compare = r.take(n)?;
            let swap = r.take(n)?;
            r.end()?;
            Body::CompareAndSwap {
                token,
                datatype,
                offset,
                compare,
                swap,
            }
        }
        Kind::Response => {
            let token = r.u64()?;
            let ok = match r.u8()? {
                0 => false,
                1 => true,
                _ => return Err("bad response status"),
            };
            Body::Response {
                token,
                ok,
                data: r.rest(),
            }
        }
        Kind::Barrier => {
            let seq = r.u32()?;
            let round = r.u8()?;
            r.end()?;
            Body::Barrier { seq, round }
        }
        Kind::Depart => {
            let what = Departure::from_code(r.u8()?).ok_or("unknown departure")?;
            let seq = r.u32()?;
            r.end()?;
            Body::Depart { what, seq }
        }
        Kind::Collective => {
            let tag = r.u64()?;
            let step = r.u32()?;
            let call = r.u8()?;
            let total = r.u64()?;
            let offset = r.u64()?;
            let data = r.rest();
            if offset
                .checked_add(data.len() as u64)
                .is_none_or(|end| end > total)
            {
                return Err("collective piece past its total");
            }
            Body::Collective {
                tag,
                step,
                call,
                total,
                offset,
                data,
            }
        }
        Kind::Lock | Kind::LockGranted | Kind::Done | Kind::Ack | Kind::Post => {
            r.end()?;
            Body::Empty
        }
    };
    Ok(Packet {
        kind,
        flags,
        win,
        done_count,
        notify,
        body,
    })
}

/// Bytes of a response packet before its data: the header (version, kind, flags, window,
/// done count), the token and the status. A get's reply reserves them at the start of
/// the buffer it reads the window into, and [`response_head`] fills them in: the packet
/// goes from that buffer, where encoding it would copy every byte of the data once more.
pub const RESPONSE_HEAD: usize = HEADER_LEN + 8 + 1;

/// A packet's header: version, kind, flags, window, done count (little-endian).
fn header(kind: Kind, flags: u16, win: u32, done_count: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[0] = VERSION;
    h[1] = kind as u8;
    h[2..4].copy_from_slice(&flags.to_le_bytes());
    h[4..8].copy_from_slice(&win.to_le_bytes());
    h[8..12].copy_from_slice(&done_count.to_le_bytes());
    h
}

/// Writes a response's head into the first [`RESPONSE_HEAD`] bytes of `packet`, whose
/// data follows them: the same bytes as [`Encoder::start`] with `Kind::Response` and a
/// done count of 0, then `token` and `ok`.
pub fn response_head(packet: &mut [u8], flags: u16, win: u32, token: u64, ok: bool) {
    packet[..HEADER_LEN].copy_from_slice(&header(Kind::Response, flags, win, 0));
    packet[HEADER_LEN..HEADER_LEN + 8].copy_from_slice(&token.to_le_bytes());
    packet[HEADER_LEN + 8] = ok as u8;
}

/// Builds packets into a reusable buffer.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
}

impl Encoder {
    /// Takes the encoded packet out (to queue it without a copy), leaving `replacement`
    /// (cleared at the next start) to encode into.
    pub fn take(&mut self, replacement: Vec<u8>) -> Vec<u8> {
        std::mem::replace(&mut self.buf, replacement)
    }
    /// Starts a packet, clearing the buffer.
    pub fn start(&mut self, kind: Kind, flags: u16, win: u32, done_count: u32) -> &mut Self {
        self.buf.clear();
        self.buf
            .extend_from_slice(&header(kind, flags, win, done_count));
        self
    }
    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }
    /// Appends a u32.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends a u64.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    /// Appends an extent.
    pub fn extent(&mut self, e: Extent) -> &mut Self {
        self.u64(e.offset).u64(e.count).u64(e.block).u64(e.stride)
    }
    /// Appends raw bytes.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        // A large op's data (a piece of up to the largest message) lands at any alignment
        // after the header: memcpy's slow case on some CPUs (rma_sync::copy).
        rma_sync::copy::extend(&mut self.buf, b);
        self
    }
    /// The encoded packet.
    pub fn finish(&self) -> &[u8] {
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response written in place decodes as the encoder's: same bytes.
    #[test]
    fn a_response_head_in_place_equals_the_encoded_one() {
        let data = [9u8, 8, 7, 6, 5];
        let mut enc = Encoder::default();
        enc.start(Kind::Response, 0x0102, 77, 0)
            .u64(0xDEAD_BEEF_0000_0001)
            .u8(1)
            .bytes(&data);
        let mut packet = vec![0u8; RESPONSE_HEAD];
        packet.extend_from_slice(&data);
        response_head(&mut packet, 0x0102, 77, 0xDEAD_BEEF_0000_0001, true);
        assert_eq!(packet, enc.finish());
    }

    #[test]
    fn put_round_trips() {
        let mut e = Encoder::default();
        e.start(Kind::Put, flags::DONE, 7, 3)
            .extent(Extent::contiguous(16, 4))
            .bytes(&[1, 2, 3, 4]);
        let p = decode(e.finish()).unwrap();
        assert_eq!(p.kind, Kind::Put);
        assert_eq!((p.flags, p.win, p.done_count), (flags::DONE, 7, 3));
        assert_eq!(
            p.body,
            Body::Put {
                extent: Extent::contiguous(16, 4),
                data: &[1, 2, 3, 4]
            }
        );
    }

    #[test]
    fn a_notified_op_carries_its_counter_and_nothing_else_may() {
        let mut e = Encoder::default();
        e.start(Kind::Get, flags::NOTIFY, 3, 0)
            .u32(5)
            .u64(77)
            .extent(Extent::contiguous(8, 8));
        let p = decode(e.finish()).unwrap();
        assert_eq!(p.notify, Some(5));
        assert_eq!(
            p.body,
            Body::Get {
                token: 77,
                extent: Extent::contiguous(8, 8)
            }
        );
        // Without the flag, no counter.
        e.start(Kind::Get, 0, 3, 0)
            .u64(77)
            .extent(Extent::contiguous(8, 8));
        assert_eq!(decode(e.finish()).unwrap().notify, None);
        // A notification on a control packet, or a counter cut short.
        e.start(Kind::Done, flags::NOTIFY, 3, 0).u32(1);
        assert!(decode(e.finish()).is_err());
        e.start(Kind::Put, flags::NOTIFY, 3, 0).u8(1);
        assert!(decode(e.finish()).is_err());
    }

    #[test]
    fn refuses_lies() {
        let mut e = Encoder::default();
        // Payload shorter than the extent claims.
        e.start(Kind::Put, 0, 0, 0)
            .extent(Extent::contiguous(0, 8))
            .bytes(&[0; 4]);
        assert!(decode(e.finish()).is_err());
        // Bitwise op on floats.
        e.start(Kind::Accumulate, 0, 0, 0)
            .u8(AccOp::Band as u8)
            .u8(DataType::F64 as u8)
            .extent(Extent::contiguous(0, 8))
            .bytes(&[0; 8]);
        assert_eq!(
            decode(e.finish()),
            Err("accumulate op not defined for datatype")
        );
        // Overlapping strides.
        e.start(Kind::Get, 0, 0, 0).u64(1).extent(Extent {
            offset: 0,
            count: 2,
            block: 8,
            stride: 4,
        });
        assert!(decode(e.finish()).is_err());
        // Unknown version, unknown flags, truncation.
        assert!(decode(&[2, 1, 0, 0]).is_err());
        e.start(Kind::Lock, 0x8000, 0, 0);
        assert!(decode(e.finish()).is_err());
        for n in 0..HEADER_LEN {
            assert!(decode(&e.finish()[..n]).is_err());
        }
    }

    #[test]
    fn never_panics_on_garbage() {
        // A cheap deterministic fuzz: every prefix and bit flip of a valid packet.
        let mut e = Encoder::default();
        e.start(Kind::CompareAndSwap, 0, 1, 0)
            .u64(9)
            .u8(DataType::U64 as u8)
            .u64(8)
            .bytes(&[0; 8])
            .bytes(&[1; 8]);
        let good = e.finish().to_vec();
        assert!(decode(&good).is_ok());
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                let _ = decode(&b);
            }
            let _ = decode(&good[..i]);
        }
    }
}
