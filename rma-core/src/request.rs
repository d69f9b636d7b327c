//! Requests: the only way to read what an operation fetched, and only once it completed.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::transport::{Fetched, LentBuf};
use crate::window::WindowShared;
use crate::Rank;

/// Completion state shared by the engine (which fills it) and a [`Request`].
#[derive(Debug, Default)]
pub(crate) struct RequestState {
    done: AtomicBool,
    result: Mutex<Option<Result<Fetched>>>,
}

impl RequestState {
    pub(crate) fn complete(&self, result: Result<Fetched>) {
        *self.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.done.store(true, Ordering::Release);
    }
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// A state for a new request: `old` (the one an op element kept from its last use)
    /// when nothing else holds it any more, else a new one. A loop of gets or fetching
    /// atomics then allocates none.
    pub(crate) fn reuse_or_new(old: Option<Arc<RequestState>>) -> Arc<RequestState> {
        if let Some(mut state) = old {
            // Unique: its request took the result or was dropped, no one sees the reset.
            if let Some(s) = Arc::get_mut(&mut state) {
                *s.done.get_mut() = false;
                *s.result.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
                return state;
            }
        }
        Arc::default()
    }
    fn take(&self) -> Result<Fetched> {
        self.result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or(Ok(Fetched::default()))
    }
}

/// How a completed request's bytes become its value.
pub(crate) type Convert<R> = fn(Fetched) -> R;

/// A caller's buffer that an op holds until its request's wait hands it back: a get's
/// that its replies by message land in as they arrive
/// ([`Window::get_owned`](crate::Window::get_owned); a reply copied there at once leaves
/// no packet to hold, and nothing to copy at the wait, after the last one is in), or a
/// put's source ([`Window::put_from_buffer`](crate::Window::put_from_buffer)). Either may
/// be lent to the backend for one native op ([`LentBuf`]).
pub(crate) struct Landing {
    buf: Mutex<Option<Held>>,
}

/// What a [`Landing`] holds.
pub(crate) enum Held {
    /// A get's destination.
    Get(Box<dyn GetBuffer>),
    /// A put's source.
    Put(Box<dyn PutBuffer>),
}

impl Held {
    fn len(&mut self) -> usize {
        match self {
            Held::Get(b) => b.bytes_mut().len(),
            Held::Put(b) => b.bytes().len(),
        }
    }

    /// Its bytes, to read (a put's source, or a get's buffer).
    pub(crate) fn bytes(&mut self) -> &[u8] {
        match self {
            Held::Get(b) => b.bytes_mut(),
            Held::Put(b) => b.bytes(),
        }
    }

    /// Its bytes, to write: a get's buffer (a put's source is never written).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Held::Get(b) => b.bytes_mut(),
            Held::Put(_) => &mut [],
        }
    }

    fn into_any(self) -> Box<dyn std::any::Any> {
        match self {
            Held::Get(b) => b,
            Held::Put(b) => b,
        }
    }
}

/// A buffer a get can own until its request's wait hands it back
/// ([`Window::get_into_buffer`](crate::Window::get_into_buffer)): a vector of elements
/// ([`Window::get_owned`](crate::Window::get_owned)), or memory outside Rust's ownership
/// that its implementor vouches for, such as an MPI origin buffer (librma-mpi's
/// MPI_Get). While a get holds it, the backend may write into its bytes (the loan of
/// [`Capabilities::lent_gets_from`](crate::transport::Capabilities::lent_gets_from)) until
/// the read completes.
pub trait GetBuffer: Send + std::any::Any {
    /// Its bytes, where the data lands: the same memory at every call, reached through
    /// this buffer alone while it exists.
    fn bytes_mut(&mut self) -> &mut [u8];
}

impl<T: crate::Element> GetBuffer for Vec<T> {
    fn bytes_mut(&mut self) -> &mut [u8] {
        bytemuck::cast_slice_mut(self.as_mut_slice())
    }
}

/// A buffer a put can hold until its request's wait hands it back
/// ([`Window::put_from_buffer`](crate::Window::put_from_buffer)): a vector of elements,
/// or memory its implementor vouches for, such as an MPI origin buffer (librma-mpi's
/// MPI_Put, which MPI gives the library until the put completes at the origin). While
/// a put holds it, the backend may read its bytes (the loan of
/// [`Capabilities::lent_puts_from`](crate::transport::Capabilities::lent_puts_from))
/// until the write completes; nothing writes them.
pub trait PutBuffer: Send + std::any::Any {
    /// Its bytes, the put's data: the same memory at every call, which nothing writes
    /// while this buffer exists.
    fn bytes(&self) -> &[u8];
}

impl<T: crate::Element> PutBuffer for Vec<T> {
    fn bytes(&self) -> &[u8] {
        bytemuck::cast_slice(self.as_slice())
    }
}

impl Landing {
    pub(crate) fn new(buf: Held) -> Self {
        Landing {
            buf: Mutex::new(Some(buf)),
        }
    }

    /// Copies `data` to byte `at` of the buffer: false if it does not fit there (or the
    /// buffer went back already, or is a put's).
    pub(crate) fn write(&self, at: usize, data: &[u8]) -> bool {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        let Some(bytes) = buf.as_mut().map(|b| b.bytes_mut()) else {
            return false;
        };
        match at
            .checked_add(data.len())
            .and_then(|end| bytes.get_mut(at..end))
        {
            Some(part) => {
                rma_sync::copy::copy_slice(part, data);
                true
            }
            None => false,
        }
    }

    /// `f` of the buffer's bytes from byte `at` on, if it is here (not lent out).
    pub(crate) fn with_bytes<R>(&self, at: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let mut buf = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        buf.as_mut().and_then(|b| b.bytes().get(at..)).map(f)
    }

    fn take(&self) -> Option<Held> {
        self.buf.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The buffer lent for one op of `len` bytes at byte `at` ([`LentBuf`]): only an op
    /// on the whole buffer borrows it (`None` otherwise, or when it is out).
    pub(crate) fn lend(self: &Arc<Self>, at: usize, len: usize) -> Option<LentBuf> {
        let mut slot = self.buf.lock().unwrap_or_else(|e| e.into_inner());
        if at != 0 || slot.as_mut().is_none_or(|b| b.len() != len) {
            return None;
        }
        let buf = slot.take()?;
        drop(slot);
        Some(LentBuf::new(buf, len, Arc::clone(self)))
    }

    /// A lent buffer back (`LentBuf`'s drop).
    pub(crate) fn restore(&self, buf: Held) {
        *self.buf.lock().unwrap_or_else(|e| e.into_inner()) = Some(buf);
    }
}

impl std::fmt::Debug for Landing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Landing").finish_non_exhaustive()
    }
}

/// An operation under way. Its value ([`wait`](Request::wait)) exists only once the
/// operation is complete, so a get result can never be read early.
///
/// ```
/// # rma_core::sim::run(2, rma_core::sim::Profile::ActiveMessages, 1, |engine| {
/// let win = engine.allocate::<u64>(4)?;
/// win.lock_all(rma_core::Assert::NONE)?;
/// let peer = (engine.rank() + 1) % 2;
/// let old = win.fetch_and_op(5, rma_core::AccOp::Sum, peer, 0)?;
/// assert_eq!(old.wait()?, 0);
/// win.unlock_all()?;
/// engine.barrier()?;
/// win.free()?;
/// # Ok(())
/// # }).unwrap();
/// ```
#[must_use = "a request must be waited on to learn its outcome"]
pub struct Request<R> {
    inner: Inner<R>,
    convert: Convert<R>,
    _value: PhantomData<fn() -> R>,
}

enum Inner<R> {
    /// Completed when posted, with its value already built.
    Value(R),
    /// Completed when posted (a native op that finished in the call).
    Ready(Fetched),
    /// Queued or under way: the engine completes `state`.
    Pending {
        state: Arc<RequestState>,
        window: Arc<WindowShared>,
        target: Rank,
    },
    /// An op that went in pieces (each one active message): complete when every piece
    /// is, its bytes the pieces' in order.
    Joined(Vec<Request<Fetched>>),
    /// A get into a buffer it owns ([`Landing`]): its parts (each with where its bytes
    /// go), complete when every part is. A part's reply by message is in the buffer
    /// already; any other's bytes go there at the wait.
    Landed {
        parts: Vec<(Request<Fetched>, usize)>,
        landing: Arc<Landing>,
    },
}

impl<R> std::fmt::Debug for Request<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let done = match &self.inner {
            Inner::Value(_) | Inner::Ready(_) => true,
            Inner::Pending { state, .. } => state.is_done(),
            Inner::Joined(pieces) => pieces.iter().all(Request::is_done),
            Inner::Landed { parts, .. } => parts.iter().all(|(p, _)| p.is_done()),
        };
        f.debug_struct("Request").field("done", &done).finish()
    }
}

impl<R: 'static> Request<R> {
    pub(crate) fn new(
        state: Arc<RequestState>,
        window: Arc<WindowShared>,
        target: Rank,
        convert: Convert<R>,
    ) -> Self {
        Request {
            inner: Inner::Pending {
                state,
                window,
                target,
            },
            convert,
            _value: PhantomData,
        }
    }

    pub(crate) fn value(value: R) -> Self {
        fn never<R>(_: Fetched) -> R {
            unreachable!("a request holding its value converts nothing")
        }
        Request {
            inner: Inner::Value(value),
            convert: never::<R>,
            _value: PhantomData,
        }
    }

    /// The request of a get into `landing`'s buffer, of `parts` (each with the byte its
    /// bytes start at in the buffer).
    pub(crate) fn landed(parts: Vec<(Request<Fetched>, usize)>, landing: Arc<Landing>) -> Self {
        fn never<R>(_: Fetched) -> R {
            unreachable!("a landed request's value is its buffer")
        }
        Request {
            inner: Inner::Landed { parts, landing },
            convert: never::<R>,
            _value: PhantomData,
        }
    }

    /// Whether a piece's state says it is complete (without progress).
    fn is_done(&self) -> bool {
        match &self.inner {
            Inner::Pending { state, .. } => state.is_done(),
            _ => true,
        }
    }

    /// The request of an op that went in `pieces`.
    pub(crate) fn joined(pieces: Vec<Request<Fetched>>, convert: Convert<R>) -> Self {
        Request {
            inner: Inner::Joined(pieces),
            convert,
            _value: PhantomData,
        }
    }

    pub(crate) fn ready(data: Fetched, convert: Convert<R>) -> Self {
        Request {
            inner: Inner::Ready(data),
            convert,
            _value: PhantomData,
        }
    }

    /// Makes progress once and says whether the operation is complete.
    pub fn test(&self) -> Result<bool> {
        match &self.inner {
            Inner::Value(_) | Inner::Ready(_) => Ok(true),
            Inner::Pending {
                state,
                window,
                target,
            } => {
                if !state.is_done() {
                    // Someone waits on this op: it may not wait for piggybacking any longer.
                    window.lock_state().force_issue(window, *target)?;
                    window.engine.progress()?;
                }
                Ok(state.is_done())
            }
            Inner::Joined(pieces) => {
                let mut all = true;
                for p in pieces {
                    all &= p.test()?;
                }
                Ok(all)
            }
            Inner::Landed { parts, .. } => {
                let mut all = true;
                for (p, _) in parts {
                    all &= p.test()?;
                }
                Ok(all)
            }
        }
    }

    /// Blocks (making progress) until the operation completes, and returns its value.
    #[inline]
    pub fn wait(self) -> Result<R> {
        // A fetch_and_op or compare_and_swap done in its call (shared memory) holds its
        // value: inline, that is a move, where the whole match out of line cost 30
        // instructions of a 354-instruction fetch_and_op + flush.
        match self.inner {
            Inner::Value(v) => Ok(v),
            inner => Self::wait_for(inner, self.convert),
        }
    }

    /// [`wait`](Self::wait) of a request that does not hold its value yet.
    #[inline(never)]
    fn wait_for(inner: Inner<R>, convert: Convert<R>) -> Result<R> {
        match inner {
            Inner::Value(v) => Ok(v),
            Inner::Ready(data) => Ok(convert(data)),
            Inner::Pending {
                state,
                window,
                target,
            } => {
                if !state.is_done() {
                    window.lock_state().force_issue(&window, target)?;
                    window
                        .engine
                        .wait_until("request wait", || Ok(state.is_done()))?;
                }
                state.take().map(convert)
            }
            Inner::Joined(pieces) => {
                let mut bytes = Vec::new();
                for p in pieces {
                    rma_sync::copy::extend(&mut bytes, &p.wait()?);
                }
                Ok(convert(Fetched::from(bytes)))
            }
            Inner::Landed { parts, landing } => {
                for (p, at) in parts {
                    let transport = p.transport();
                    let bytes = p.wait()?;
                    // Landed already if it came by message; otherwise here, now.
                    if !bytes.is_empty() && !landing.write(at, &bytes) {
                        return Err(crate::error::TransportError::Failed(
                            "a get's reply longer than its buffer".into(),
                        )
                        .into());
                    }
                    if let Some(t) = transport {
                        bytes.give_back(&*t);
                    }
                }
                let buf = landing.take().map(Held::into_any);
                match buf.map(|b| b.downcast::<R>()) {
                    Some(Ok(value)) => Ok(*value),
                    _ => Err(crate::error::TransportError::Failed(
                        "a get's buffer was not there at its wait".into(),
                    )
                    .into()),
                }
            }
        }
    }

    /// The transport of a request under way (to give its bytes back to).
    fn transport(&self) -> Option<Arc<dyn crate::transport::Transport>> {
        match &self.inner {
            Inner::Pending { window, .. } => Some(Arc::clone(&window.engine.transport)),
            _ => None,
        }
    }
}

impl Request<Fetched> {
    /// Blocks (making progress) until the operation completes, and copies its bytes into
    /// `dst`, which must be as long as they are. A result the backend handed over on the
    /// heap goes back to it ([`Transport::recycle_fetched`]) for the next get.
    ///
    /// [`Transport::recycle_fetched`]: crate::transport::Transport::recycle_fetched
    pub(crate) fn wait_into(self, dst: &mut [u8]) -> Result<()> {
        let short = || {
            Err(crate::error::TransportError::Failed("get returned a short reply".into()).into())
        };
        match self.inner {
            Inner::Joined(pieces) => {
                // Each piece straight into its part: no concatenation first.
                let mut at = 0;
                for p in pieces {
                    let transport = p.transport();
                    let bytes = p.wait()?;
                    let Some(part) = dst.get_mut(at..at + bytes.len()) else {
                        return short();
                    };
                    rma_sync::copy::copy_slice(part, &bytes);
                    at += bytes.len();
                    if let Some(t) = transport {
                        bytes.give_back(&*t);
                    }
                }
                if at != dst.len() {
                    return short();
                }
                Ok(())
            }
            Inner::Pending { ref window, .. } => {
                let transport = Arc::clone(&window.engine.transport);
                let bytes = self.wait()?;
                if bytes.len() != dst.len() {
                    return short();
                }
                rma_sync::copy::copy_slice(dst, &bytes);
                bytes.give_back(&*transport);
                Ok(())
            }
            _ => {
                let bytes = self.wait()?;
                if bytes.len() != dst.len() {
                    return short();
                }
                rma_sync::copy::copy_slice(dst, &bytes);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_state_is_reused_only_once_nothing_else_holds_it() {
        let first = RequestState::reuse_or_new(None);
        first.complete(Ok(Fetched::copy_of(&[1, 2, 3])));
        let held_by_request = first.clone();

        // Its request still holds it: a new state, the old one untouched.
        let second = RequestState::reuse_or_new(Some(first));
        assert!(!Arc::ptr_eq(&second, &held_by_request));
        assert!(!second.is_done());
        assert!(held_by_request.is_done());
        assert_eq!(held_by_request.take().unwrap().as_slice(), &[1, 2, 3]);

        // Once the request is gone, the same allocation comes back, reset.
        let address = Arc::as_ptr(&held_by_request);
        let third = RequestState::reuse_or_new(Some(held_by_request));
        assert_eq!(Arc::as_ptr(&third), address);
        assert!(!third.is_done());
        assert!(third.take().unwrap().is_empty(), "no result left over");
    }
}
