//! Collectives in shared memory: barrier, broadcast, allgather, allreduce and reduce of
//! a communicator whose members all share memory (one node, on the shared-memory
//! backend), with loads and stores in a window of the communicator's own instead of
//! messages.
//!
//! By message, an allreduce of 8 bytes on 2 ranks was 1.4 us (a message each way
//! through the rings, each woken by a progress pass), against 0.3 us for Open MPI's
//! MPI_Allreduce. Here each member owns two *slots* in the window, used by alternate
//! calls; a call *publishes* into the member's slot (its data, then a flag word with the
//! call's number and kind, stored with release ordering) and reads the others' slots once
//! their flags show the same call (acquire). An 8-byte allreduce on 2 ranks is then one
//! cache line each way.
//!
//! Why two slots are enough: a member publishes call `k` only after it finished call
//! `k - 1`, reads included. When call `k - 1` was *full* (a barrier or an allreduce:
//! every member published it before anyone finished it), a member at call `k` knows
//! every other finished call `k - 2`, so the slot of `k - 2`, which call `k` reuses, is
//! read by nobody. After a broadcast (only the root publishes data; the others publish a
//! flag once they read it, an acknowledgement), a member that is about to write data
//! first waits until every flag shows call `k - 1`. A flag alone overwrites no data, so
//! acknowledgements and barriers never wait before publishing.
//!
//! The flag carries the call's kind: a member in another collective is a
//! [`PeerError::Mismatch`], as by message; a member that left is
//! [`PeerError::Departed`]; a dead one [`PeerError::Dead`]; the wait has the library's
//! deadline. Data larger than a slot goes in several calls, each a slot's worth; a member
//! whose length differs is told so by every member at the first (each slot carries its
//! publisher's whole length), and all of them stay in step.
//!
//! Used where every member shares memory with every other and the window's ops complete
//! in their call, which the members agree on once, at the communicator's first such
//! collective (the window is made then: a collective of its own, by message). With more
//! members than cores a wait yields the core at once (the member it waits for may be the
//! one kept off it): 4 ranks on 2 cores, an allreduce went from 24 us to 2-3.

use std::sync::Arc;

use crate::collective::{call_code, call_name};
use crate::comm::Comm;
use crate::datatype::{accumulate, AccOp, DataType, Element};
use crate::engine::Engine;
use crate::error::{PeerError, Result, UsageError};
use crate::transport::{NativeAtomic, WindowOps};
use crate::window::Window;
use crate::Rank;

/// A slot: a flag word, the publisher's whole length, then its data.
const SLOT: usize = 4096;
/// The flag word's place in a slot, and the length's.
const FLAG: usize = 0;
const LENGTH: usize = 8;
/// Where a slot's data begins.
const DATA: usize = 16;
/// Data one call carries.
pub(crate) const SLOT_DATA: usize = SLOT - DATA;
/// Most members: every member reads every other's flag, so the traffic of a call grows
/// as the square of the members; beyond this many, messages (trees) do better.
const MOST_MEMBERS: usize = 64;

/// How a communicator's barrier, allreduce and broadcast run.
pub(crate) enum NodeCollectives {
    /// Not known yet: decided at the first of them.
    Undecided,
    /// By message (members on several nodes, a backend without shared memory).
    Messages,
    /// In the members' shared memory.
    Shared(Arena),
}

/// A communicator's window of slots, and where its calls stand.
pub(crate) struct Arena {
    window: Option<Window<u64>>,
    ops: Arc<dyn WindowOps>,
    engine: Engine,
    /// The members' World ranks, in the communicator's order.
    members: Box<[Rank]>,
    me: usize,
    /// Calls published so far (the same count on every member).
    calls: u64,
    /// The last call was full (barrier, allreduce): see the module's docs.
    after_full: bool,
    /// One member's slot, read.
    scratch: Vec<u8>,
    /// More members than this process may run on cores at once: a wait yields at once.
    crowded: bool,
}

impl Drop for Arena {
    fn drop(&mut self) {
        // The members drop their arenas with their communicators, each on its own: no
        // one waits for a free, and a peer's slots stay mapped in its own process.
        if let Some(w) = self.window.take() {
            w.leave_quietly();
        }
    }
}

impl NodeCollectives {
    /// Decides, collectively, how `comm`'s collectives run: every member gets the same
    /// answer, and the arena when it is shared memory.
    pub(crate) fn decide(comm: &Comm, call: &'static str) -> Result<NodeCollectives> {
        let engine = comm.engine();
        let members = comm.group().members();
        let size = members.len();
        // Every member computes the same: the backend shares memory with a peer on its
        // node, whichever side asks.
        let t = &engine.shared.transport;
        if !(2..=MOST_MEMBERS).contains(&size)
            || !members.iter().all(|&r| t.capabilities(r).shared_memory)
        {
            return Ok(NodeCollectives::Messages);
        }
        let window = engine.allocate_in::<u64>(comm, 2 * SLOT / 8)?;
        let me = comm.rank() as usize;
        let ops = t.node_window_ops(window.id()).filter(|ops| {
            // A flag is read and stored by native atomics on a 64-bit word.
            let mut old = [0u8; 8];
            let load = NativeAtomic::Accumulate {
                op: AccOp::NoOp,
                datatype: DataType::U64,
                operand: &[0; 8],
                fetch: true,
            };
            matches!(
                ops.atomic_into(members[me], FLAG as u64, load, &mut old),
                Ok(true)
            )
        });
        let all = comm.allgather_as(call, &[u8::from(ops.is_some())])?;
        match ops {
            Some(ops) if all.iter().all(|b| b.as_slice() == [1]) => {
                Ok(NodeCollectives::Shared(Arena {
                    window: Some(window),
                    ops,
                    engine: engine.clone(),
                    members: members.into(),
                    me,
                    calls: 0,
                    after_full: true,
                    scratch: Vec::new(),
                    crowded: std::thread::available_parallelism()
                        .is_ok_and(|cores| size > cores.get()),
                }))
            }
            _ => {
                window.leave_quietly();
                Ok(NodeCollectives::Messages)
            }
        }
    }
}

impl Arena {
    /// Blocks until every member called it.
    pub(crate) fn barrier(&mut self) -> Result<()> {
        let k = self.next();
        let code = call_code("barrier");
        self.publish(k, code, None)?;
        self.wait_all("barrier", k, Some(code))?;
        self.after_full = true;
        Ok(())
    }

    /// `op` over every member's `mine`, element by element, reduced in rank order (the
    /// same bits on every member, as by message); `call` is allreduce or reduce (whose
    /// root keeps the result).
    pub(crate) fn allreduce<T: Element>(
        &mut self,
        call: &'static str,
        mine: &[T],
        op: AccOp,
    ) -> Result<Vec<T>> {
        let mine: &[u8] = bytemuck::cast_slice(mine);
        let mut out = vec![T::zeroed(); mine.len() / std::mem::size_of::<T>().max(1)];
        let out_bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut out);
        let mut mismatch = false;
        self.exchange(call, mine, |i, total, at, bytes| {
            if total != out_bytes.len() {
                mismatch = true;
            } else if i == 0 {
                rma_sync::copy::copy_slice(&mut out_bytes[at..at + bytes.len()], bytes);
            } else {
                accumulate(op, T::DATATYPE, &mut out_bytes[at..at + bytes.len()], bytes);
            }
        })?;
        if mismatch {
            // Every member finds it (each reads every length), after the same calls.
            return Err(UsageError::BadGroup {
                why: "members gave buffers of different lengths to one collective",
            }
            .into());
        }
        Ok(out)
    }

    /// Every member's bytes, in rank order (`call`: the public call it serves).
    pub(crate) fn allgather(&mut self, call: &'static str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut all = vec![Vec::new(); self.members.len()];
        self.exchange(call, mine, |i, total, at, bytes| {
            let theirs = &mut all[i];
            if at == 0 {
                theirs.resize(total, 0);
            }
            rma_sync::copy::copy_slice(&mut theirs[at..at + bytes.len()], bytes);
        })?;
        Ok(all)
    }

    /// Every member publishes `mine` and reads every other's, a slot's worth per call,
    /// as many calls as the longest needs (every member learns each one's length at the
    /// first, so all make the same calls): `each(member, its length, offset, bytes)`
    /// for every part of every member, this one's included, in member order per call
    /// (an empty part at the first call for a member with nothing).
    fn exchange(
        &mut self,
        call: &'static str,
        mine: &[u8],
        mut each: impl FnMut(usize, usize, usize, &[u8]),
    ) -> Result<()> {
        let code = call_code(call);
        let mut at = 0;
        let mut longest = 0;
        loop {
            let part = &mine[at.min(mine.len())..mine.len().min(at + SLOT_DATA)];
            let k = self.next();
            if !self.after_full {
                self.wait_all(call, k - 1, None)?;
            }
            self.publish(k, code, Some((mine.len(), part)))?;
            self.wait_all(call, k, Some(code))?;
            self.after_full = true;
            for i in 0..self.members.len() {
                if i == self.me {
                    longest = longest.max(mine.len());
                    if at < mine.len() || at == 0 {
                        each(i, mine.len(), at, part);
                    }
                    continue;
                }
                // Most often as long as this member's: one copy, the length with the data.
                let (total, _) = self.read(k, i, part.len())?;
                longest = longest.max(total);
                if at < total || at == 0 {
                    let n = (total - at).min(SLOT_DATA);
                    if n != part.len() {
                        self.read(k, i, n)?;
                    }
                    each(i, total, at, &self.scratch[8..8 + n]);
                }
            }
            at += SLOT_DATA;
            if at >= longest {
                return Ok(());
            }
        }
    }

    /// `data` of member `root` on every member (every member gives the same length).
    pub(crate) fn broadcast(&mut self, data: &mut [u8], root: usize) -> Result<()> {
        let code = call_code("broadcast");
        let total = data.len();
        let mut at = 0;
        if root == self.me {
            loop {
                let end = total.min(at + SLOT_DATA);
                let k = self.next();
                if !self.after_full {
                    self.wait_all("broadcast", k - 1, None)?;
                }
                self.publish(k, code, Some((total, &data[at..end])))?;
                self.after_full = false;
                at = end;
                if at >= total {
                    return Ok(());
                }
            }
        }
        // The root's length decides how many calls it takes; a member whose own differs
        // reads them all (and acknowledges them, so the root is not left waiting), then
        // says so.
        let mut root_total = None;
        loop {
            let k = self.next();
            self.wait_one("broadcast", k, root, code)?;
            let n = total.saturating_sub(at).min(SLOT_DATA);
            let (theirs, bytes) = self.read(k, root, n)?;
            let their_total = *root_total.get_or_insert(theirs);
            if their_total == total {
                rma_sync::copy::copy_slice(&mut data[at..at + n], bytes);
            }
            self.publish(k, code, None)?;
            self.after_full = false;
            at += their_total.saturating_sub(at).min(SLOT_DATA);
            if at >= their_total {
                break;
            }
        }
        if root_total == Some(total) {
            Ok(())
        } else {
            Err(UsageError::BadGroup {
                why: "broadcast buffers of different lengths",
            }
            .into())
        }
    }

    fn next(&mut self) -> u64 {
        self.calls += 1;
        self.calls
    }

    /// Where call `k`'s slot begins in a member's window.
    fn slot(k: u64) -> u64 {
        (k % 2) * SLOT as u64
    }

    /// Call `k`'s data (if any: the whole length and this call's part) then its flag,
    /// into this member's slot.
    fn publish(&mut self, k: u64, code: u8, data: Option<(usize, &[u8])>) -> Result<()> {
        let (me, slot) = (self.members[self.me], Self::slot(k));
        if let Some((total, part)) = data {
            // Length and data in one copy while they fit a line with the flag.
            let mut line = [0u8; 64 - LENGTH];
            line[..8].copy_from_slice(&(total as u64).to_le_bytes());
            if part.len() <= line.len() - 8 {
                rma_sync::copy::copy_slice(&mut line[8..8 + part.len()], part);
                self.ops
                    .put(me, slot + LENGTH as u64, &line[..8 + part.len()])?;
            } else {
                self.ops.put(me, slot + LENGTH as u64, &line[..8])?;
                self.ops.put(me, slot + DATA as u64, part)?;
            }
        }
        let flag = (k << 8) | u64::from(code);
        let store = NativeAtomic::Accumulate {
            op: AccOp::Replace,
            datatype: DataType::U64,
            operand: &flag.to_le_bytes(),
            fetch: true,
        };
        // A swap: its release (and the CPU's order of stores) puts the data first.
        let mut old = [0u8; 8];
        self.ops
            .atomic_into(me, slot + FLAG as u64, store, &mut old)?;
        Ok(())
    }

    /// Member `i`'s flag in call `k`'s slot.
    fn flag(&self, k: u64, i: usize) -> Result<u64> {
        let load = NativeAtomic::Accumulate {
            op: AccOp::NoOp,
            datatype: DataType::U64,
            operand: &[0; 8],
            fetch: true,
        };
        let mut word = [0u8; 8];
        self.ops.atomic_into(
            self.members[i],
            Self::slot(k) + FLAG as u64,
            load,
            &mut word,
        )?;
        Ok(u64::from_le_bytes(word))
    }

    /// Whether member `i` published call `k` (a later one counts too); of another kind
    /// than `code` (when given) it is a mismatch, and a member that left never will.
    fn published(&self, call: &'static str, k: u64, i: usize, code: Option<u8>) -> Result<bool> {
        let flag = self.flag(k, i)?;
        let rank = self.members[i];
        if flag >> 8 >= k {
            return match code {
                Some(code) if flag >> 8 == k && (flag & 0xff) as u8 != code => {
                    Err(PeerError::Mismatch {
                        rank,
                        call,
                        theirs: call_name((flag & 0xff) as u8),
                    }
                    .into())
                }
                _ => Ok(true),
            };
        }
        if self.engine.shared.has_departed(rank) {
            return Err(PeerError::Departed { rank, call }.into());
        }
        Ok(false)
    }

    /// Waits until every member published call `k`.
    fn wait_all(&self, call: &'static str, k: u64, code: Option<u8>) -> Result<()> {
        let mut next = 0;
        self.wait(call, || {
            while next < self.members.len() {
                if next != self.me && !self.published(call, k, next, code)? {
                    return Ok(Some(self.members[next]));
                }
                next += 1;
            }
            Ok(None)
        })
    }

    /// Waits until member `i` published call `k`.
    fn wait_one(&self, call: &'static str, k: u64, i: usize, code: u8) -> Result<()> {
        self.wait(call, || {
            Ok((!self.published(call, k, i, Some(code))?).then_some(self.members[i]))
        })
    }

    /// Runs `awaited` (the rank still waited for, or `None` when done) until done: a
    /// short spin on the flags first (a partner's store arrives within a fraction of a
    /// microsecond), then the engine's wait, which makes progress, sees deaths and has the
    /// deadline.
    fn wait(
        &self,
        call: &'static str,
        mut awaited: impl FnMut() -> Result<Option<Rank>>,
    ) -> Result<()> {
        if !self.crowded {
            for _ in 0..SPINS {
                if awaited()?.is_none() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        let mut last = None;
        self.engine
            .shared
            .wait_until(call, || {
                last = awaited()?;
                if last.is_some() && self.crowded {
                    // The member waited for may be the one this spin keeps off a core.
                    std::thread::yield_now();
                }
                Ok(last.is_none())
            })
            .map_err(|e| match e.peer() {
                Some(&PeerError::Timeout { call, rank: None }) => {
                    PeerError::Timeout { call, rank: last }.into()
                }
                _ => e,
            })
    }

    /// Member `i`'s whole length and `n` bytes of its data in call `k`'s slot.
    fn read(&mut self, k: u64, i: usize, n: usize) -> Result<(usize, &[u8])> {
        self.scratch.resize(8 + n, 0);
        let from = Self::slot(k) + LENGTH as u64;
        self.ops
            .get_into(self.members[i], from, &mut self.scratch)?;
        let total = u64::from_le_bytes(self.scratch[..8].try_into().expect("8 bytes"));
        Ok((total as usize, &self.scratch[8..]))
    }
}

/// Checks of the flags before the engine's wait takes over.
const SPINS: u32 = 200;
