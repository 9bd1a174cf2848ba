//! Tokens chosen without a host wait (`et_cuda_sample_async` / `et_cuda_sample_wait`): each
//! call's kernel writes its token into the device's feed (8 bytes of the sampler's device
//! scratch, which the next execute reads for an input holding [`SAMPLED_TOKEN`]), and an
//! asynchronous copy brings it to one of `RING` page-locked host slots, marked by an event.
//! A call returns a ticket; waiting for the ticket reads its slot. The feed is read where an
//! input reaches the device: an execute's host input (`delegate::io`, by dtype) and the
//! ordered host-to-device copy of an input planned in device memory (`api::memory`, while
//! armed). So a token loop can queue
//! step n + 1 (fed on the device by step n's token) before it reads step n's token on the
//! host, and the device never idles while the host launches.

use super::{launch, on_slot, token_of, Greedy, Row, Sampling, Slot, FEED_AT, SLOTS};
use crate::cuda::event::Event;
use crate::cuda::memory::PinnedBuffer;
use crate::cuda::{copy, ContextGuard, DeviceState};
use crate::error::{invalid, Error, Result};
use cudarc::driver::sys;
use std::ffi::c_void;
use std::sync::Arc;

/// The value of an int64 host input of one element that asks an execute for the token of
/// the device's last asynchronous sampling call instead (copied device to device, in stream
/// order). No token id is negative.
pub const SAMPLED_TOKEN: i64 = i64::MIN;

/// Tokens whose host copies are kept: a ticket can be waited for until `RING` later calls.
pub(crate) const RING: usize = 8;

/// One device's asynchronous tokens.
pub(crate) struct Ring {
    /// `RING` i64 slots, the host copies.
    host: PinnedBuffer,
    /// Marks the end of each slot's copy.
    done: Vec<Event>,
    /// Which ticket each slot holds, and whether the feed was taken.
    book: Book,
}

/// A ring's tickets, without the device: what each slot holds and checks, the next ticket,
/// whether the last call's token may still be taken by a host-to-device copy (`armed`), and
/// whether an input took each ticket's token from the feed (`fed`).
pub(crate) struct Book {
    /// Per slot: the ticket it holds and what its token is checked against (the row's
    /// length, and whether -1, "no weight", is a possible answer).
    held: [(u64, i64, bool); RING],
    /// Per slot: whether an input took that ticket's token from the feed.
    fed: [bool; RING],
    /// The next ticket.
    next: u64,
    /// Set by each call, cleared by the first ordered host-to-device copy that takes the feed
    /// ([`copy_armed_feed`]): the only window where such a copy, which has no dtype, is read
    /// as asking for it.
    armed: bool,
}

/// The slot that holds `ticket` (tickets go round the `RING` slots).
fn slot_of(ticket: u64) -> usize {
    (ticket % RING as u64) as usize
}

impl Book {
    pub(crate) fn new() -> Book {
        Book {
            held: [(u64::MAX, 0, false); RING],
            fed: [false; RING],
            next: 0,
            armed: false,
        }
    }

    /// The slot the next ticket takes.
    fn next_slot(&self) -> usize {
        slot_of(self.next)
    }

    /// A new ticket (in [`Book::next_slot`]) for a token checked against `vocab` (and -1 when
    /// `sampled`).
    fn issue(&mut self, vocab: i64, sampled: bool) -> u64 {
        let (ticket, k) = (self.next, self.next_slot());
        self.held[k] = (ticket, vocab, sampled);
        self.fed[k] = false;
        self.next += 1;
        self.armed = true;
        ticket
    }

    /// An input took the feed: the token of the last ticket.
    fn mark_fed(&mut self) {
        if let Some(last) = self.next.checked_sub(1) {
            self.fed[slot_of(last)] = true;
        }
    }

    /// The slot of `ticket`, or why `who` cannot read it.
    fn slot(&self, who: &str, ticket: u64) -> Result<usize> {
        if ticket >= self.next {
            return invalid(format!(
                "{who}: ticket {ticket} was not issued (the next is {})",
                self.next
            ));
        }
        let k = slot_of(ticket);
        if self.held[k].0 != ticket {
            return invalid(format!(
                "{who}: ticket {ticket} is gone: only the last {RING} tokens are kept (the next ticket is {})",
                self.next
            ));
        }
        Ok(k)
    }

    /// Whether an input took `ticket`'s token from the feed.
    fn fed(&self, who: &str, ticket: u64) -> Result<bool> {
        Ok(self.fed[self.slot(who, ticket)?])
    }
}

impl Ring {
    pub(crate) fn new(device: &Arc<DeviceState>) -> Result<Ring> {
        let host = PinnedBuffer::new(device.clone(), RING * 8)?;
        let done = (0..RING)
            .map(|_| Event::new(device.clone()))
            .collect::<Result<Vec<_>>>()?;
        Ok(Ring {
            host,
            done,
            book: Book::new(),
        })
    }

    /// After the kernel that writes the token to `feed` was queued on the legacy default
    /// stream: queue its copy to the next host slot, mark it; the ticket.
    ///
    /// # Safety
    /// `feed` is 8 bytes of device memory of the ring's device, written by the queued kernel.
    pub(crate) unsafe fn issue(&mut self, feed: u64, vocab: i64, sampled: bool) -> Result<u64> {
        let k = self.book.next_slot();
        // SAFETY: slot k is within the buffer (RING i64s); its previous copy was waited for
        // by whoever read it, or is older than the copy queued now in the same stream order.
        let dst = unsafe { self.host.ptr().add(8 * k) };
        // SAFETY: `feed` has 8 device bytes (caller's contract), `dst` 8 pinned bytes.
        unsafe { copy::copy_dtoh_async(dst.cast(), feed, 8, std::ptr::null_mut())? };
        self.done[k].record(std::ptr::null_mut())?;
        Ok(self.book.issue(vocab, sampled))
    }

    /// Wait for `ticket`'s token (a host wait, unless it already arrived): `None` when
    /// sampling found no weight.
    pub(crate) fn wait(&self, ticket: u64) -> Result<Option<i64>> {
        let k = self.book.slot("sample_wait", ticket)?;
        self.done[k].synchronize()?;
        // SAFETY: slot k is within the buffer; its copy finished (the event passed).
        let token = unsafe { self.host.ptr().add(8 * k).cast::<i64>().read() };
        let (_, vocab, sampled) = self.book.held[k];
        token_of(token, vocab, sampled)
    }
}

/// Queue the choice [`super::sample`] makes, without a host wait: after all work queued before on
/// the device's blocking streams, the token goes to the device's feed (read by the next
/// execute whose int64 input of one element holds [`SAMPLED_TOKEN`]) and, asynchronously, to
/// a page-locked host slot. The ticket, for [`wait`].
///
/// # Safety
/// As [`super::sample`].
pub unsafe fn sample_async(
    logits: *const c_void,
    dtype: i32,
    vocab: i64,
    ordinal: i32,
    how: &Sampling,
) -> Result<u64> {
    on_slot(logits, dtype, vocab, ordinal, how, |m, device, slot| {
        let ring = match &mut slot.ring {
            Some(ring) => ring,
            empty => empty.insert(Ring::new(device)?),
        };
        let feed = slot.scratch.ptr() + FEED_AT;
        let row = Row {
            logits,
            dtype,
            vocab,
            out: feed as *mut u8,
        };
        // SAFETY: the row is readable (caller's contract); the scratch (feed included) is this
        // device's, its launches and copies ordered on the legacy stream.
        unsafe { launch(m, &row, how, Greedy::Blocks, slot.scratch.ptr())? };
        // SAFETY: the feed is 8 bytes of the device's scratch, written by the kernel just queued.
        unsafe { ring.issue(feed, vocab, how.temperature > 0.0) }
    })
}

/// The token of `ticket` (from [`sample_async`] on device `ordinal`), once it has reached
/// the host: a host wait unless it already has. `None` when sampling found no weight. Only
/// the last `RING` tickets of a device can be waited for.
pub fn wait(ordinal: i32, ticket: u64) -> Result<Option<i64>> {
    on_ring(ordinal, "sample_wait", |ring| ring.wait(ticket))
}

/// Whether an input took the token of `ticket` (from [`sample_async`] on device `ordinal`)
/// from the feed: an execute's host input holding [`SAMPLED_TOKEN`] ([`copy_feed`]) or an
/// ordered host-to-device copy ([`copy_armed_feed`]) since that call and before the next. A
/// token loop that queued a step fed with it can tell that the step's token ids reached the
/// device through the library. Only the last `RING` tickets of a device can be asked about.
pub fn fed(ordinal: i32, ticket: u64) -> Result<bool> {
    on_ring(ordinal, "sample_fed", |ring| {
        ring.book.fed("sample_fed", ticket)
    })
}

/// `f` on device `ordinal`'s ring, under the samplers' lock; `who` names the call in errors.
fn on_ring<R>(ordinal: i32, who: &str, f: impl FnOnce(&Ring) -> Result<R>) -> Result<R> {
    if ordinal < 0 {
        return invalid(format!("device index {ordinal} is negative"));
    }
    let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    match ring_slot(&mut slots, ordinal).and_then(|s| s.ring.as_ref()) {
        Some(ring) => f(ring),
        None => invalid(format!(
            "{who}: no token was chosen on cuda:{ordinal} by et_cuda_sample_async (or the sampler was released since)"
        )),
    }
}

/// Queue the copy of device `ordinal`'s fed token (the last [`sample_async`]'s) to `dst` on
/// `stream` (a blocking stream of the device: ordered after the sampler's kernel); an
/// error naming the input when no asynchronous call has chosen one there.
///
/// # Safety
/// `dst` is 8 writable bytes of device memory of `ordinal`; the device's context is current.
pub(crate) unsafe fn copy_feed(ordinal: i32, dst: u64, stream: sys::CUstream) -> Result<()> {
    let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    let slot = ring_slot(&mut slots, ordinal).ok_or_else(|| no_feed(ordinal))?;
    // The lock is held while queueing: a release cannot free the scratch before this copy
    // is ordered before its free.
    // SAFETY: the feed is 8 bytes of the device's live scratch; `dst` per the contract.
    unsafe { copy::copy_dtod_async(dst, slot.scratch.ptr() + FEED_AT, 8, stream)? };
    if let Some(ring) = slot.ring.as_mut() {
        ring.book.mark_fed();
    }
    Ok(())
}

/// An ordered host-to-device copy of `n` bytes from `src` to `dst` on device `ordinal` (what
/// ExecuTorch's `_h2d_copy` of an input planned in device memory calls, through the adapter's
/// device allocator): when its 8 bytes hold [`SAMPLED_TOKEN`] and the device's last
/// asynchronous call is armed (no such copy took its token yet), queue the feed's copy to
/// `dst` instead, on the legacy default stream where the sampler's kernel was queued, and
/// disarm. Whether it did (false: copy the bytes as they are).
///
/// # Safety
/// `src` readable for `n` bytes; `dst` device memory of `ordinal`, `n` bytes.
pub(crate) unsafe fn copy_armed_feed(
    ordinal: i32,
    dst: u64,
    src: *const c_void,
    n: usize,
) -> Result<bool> {
    // SAFETY: forwarded contract.
    if !unsafe { asks_for_feed(crate::dtype::codes::INT64, n, src.cast()) } {
        return Ok(false);
    }
    let mut slots = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    let Some(slot) = ring_slot(&mut slots, ordinal) else {
        return Ok(false);
    };
    let Some(ring) = slot.ring.as_mut().filter(|r| r.book.armed) else {
        return Ok(false);
    };
    ring.book.armed = false;
    // The check the plain copy makes of its destination.
    copy::check_device_pointer(dst as *const c_void, ordinal, "dst")?;
    let _legacy = slot.device.legacy_use();
    let _g = ContextGuard::device(&slot.device)?;
    // SAFETY: the feed is 8 bytes of the device's live scratch (the lock is held); `dst` has
    // n = 8 bytes of the device (the contract).
    unsafe { copy::copy_dtod_async(dst, slot.scratch.ptr() + FEED_AT, 8, std::ptr::null_mut())? };
    ring.book.mark_fed();
    Ok(true)
}

/// Device `ordinal`'s slot when an asynchronous call made its ring (and no release took it).
fn ring_slot(slots: &mut [Option<Slot>], ordinal: i32) -> Option<&mut Slot> {
    usize::try_from(ordinal)
        .ok()
        .and_then(|i| slots.get_mut(i))
        .and_then(Option::as_mut)
        .filter(|s| s.ring.is_some())
}

/// Where the feed of an input holding [`SAMPLED_TOKEN`] is refused: no asynchronous call
/// has chosen a token on the device (or the sampler was released since).
pub(crate) fn no_feed(ordinal: i32) -> Error {
    Error::invalid_argument(format!(
        "holds ET_CUDA_SAMPLED_TOKEN ({SAMPLED_TOKEN}), the token of the last et_cuda_sample_async on cuda:{ordinal}, \
         but none was chosen there (or the sampler was released since)"
    ))
}

/// Whether an input of `dtype` and `n` bytes at host memory `data` asks for the fed token.
///
/// # Safety
/// `data` readable for `n` bytes.
pub(crate) unsafe fn asks_for_feed(dtype: i32, n: usize, data: *const u8) -> bool {
    if dtype != crate::dtype::codes::INT64 || n != 8 || data.is_null() {
        return false;
    }
    // SAFETY: 8 readable bytes (caller's contract); unaligned read of a host buffer.
    unsafe { data.cast::<i64>().read_unaligned() == SAMPLED_TOKEN }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::codes;

    #[test]
    fn only_one_int64_holding_the_value_asks_for_the_feed() {
        let asks = |dtype: i32, bytes: &[u8]| {
            // SAFETY: `bytes` is readable for its length.
            unsafe { asks_for_feed(dtype, bytes.len(), bytes.as_ptr()) }
        };
        let token = SAMPLED_TOKEN.to_le_bytes();
        assert!(asks(codes::INT64, &token));
        // The same bytes as another dtype (float64 -0.0), two elements, or another value.
        assert!(!asks(codes::FLOAT64, &token));
        assert!(!asks(codes::INT64, &[token, token].concat()));
        assert!(!asks(codes::INT64, &(SAMPLED_TOKEN + 1).to_le_bytes()));
        assert!(!asks(codes::INT64, &7i64.to_le_bytes()));
        // SAFETY: a null pointer is refused before any read.
        assert!(!unsafe { asks_for_feed(codes::INT64, 8, std::ptr::null()) });
    }

    #[test]
    fn a_ticket_is_fed_only_when_an_input_took_its_token() {
        let mut book = Book::new();
        // Nothing issued: nothing to mark, nothing to ask about.
        book.mark_fed();
        assert!(book.fed("t", 0).is_err());
        let t0 = book.issue(10, false);
        assert!(book.armed);
        assert_eq!(book.fed("t", t0).ok(), Some(false));
        book.mark_fed();
        assert_eq!(book.fed("t", t0).ok(), Some(true));
        // The next call's token is not fed until an input takes it; the earlier one stays fed.
        let t1 = book.issue(10, false);
        assert_eq!(book.fed("t", t1).ok(), Some(false));
        assert_eq!(book.fed("t", t0).ok(), Some(true));
        book.mark_fed();
        assert_eq!(book.fed("t", t1).ok(), Some(true));
        // A slot reused by a later ticket starts unfed; the ticket it replaced is gone.
        for _ in 0..RING {
            book.issue(10, false);
        }
        let reused = book.next - 1;
        assert_eq!(slot_of(reused), slot_of(t1));
        assert_eq!(book.fed("t", reused).ok(), Some(false));
        let gone = book.fed("t", t1).expect_err("an overwritten ticket");
        assert!(gone.to_string().contains("is gone"), "{gone}");
        let unissued = book.fed("t", book.next).expect_err("a ticket not issued");
        assert!(
            unissued.to_string().contains("was not issued"),
            "{unissued}"
        );
    }
}
