//! Uploading weights through pinned staging.
//!
//! A copy from pageable host memory runs at a fraction of the copy engine's
//! bandwidth (the driver stages it itself, in small pieces, synchronously).
//! [`StagedUpload`] copies the source into one of two page-locked chunks
//! (up to eight threads for large pieces) while the copy engine moves the other
//! one, so the source is read once at memory speed and the transfer runs from
//! pinned memory. Small pieces share a chunk. When [`StagedUpload::upload`]
//! returns, the source has been read: the caller may release it at once,
//! which is what lets weights stream from named data without the whole set
//! in host memory.

use super::copy_htod_async;
use crate::cuda::event::Event;
use crate::cuda::memory::PinnedBuffer;
use crate::cuda::DeviceState;
use crate::error::Result;
use cudarc::driver::sys;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Size of each of the two staging chunks.
const CHUNK: usize = 32 << 20;
/// Pieces from this size up are copied into the chunk by several threads.
const PARALLEL_FROM: usize = 4 << 20;
/// At most this many copy threads (fewer on a machine with fewer cores).
const MAX_THREADS: usize = 8;
/// Alignment of pieces inside a chunk.
const ALIGN: usize = 256;

struct Slot {
    buf: PinnedBuffer,
    /// Marks the end of the transfers out of this chunk (recorded when it was left).
    done: Event,
    /// `done` was recorded and not waited for yet.
    pending: bool,
}

/// Host-to-device uploads on one stream through two pinned chunks.
pub(crate) struct StagedUpload {
    stream: sys::CUstream,
    slots: Vec<Slot>,
    cur: usize,
    fill: usize,
    bytes: u64,
    started: Instant,
}

/// What an upload moved and how long it took (from creation to [`StagedUpload::finish`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UploadReport {
    pub(crate) bytes: u64,
    pub(crate) elapsed: Duration,
    /// Pinned host bytes the staging held.
    pub(crate) staging_bytes: u64,
}

impl StagedUpload {
    /// Staging for about `total` bytes (the chunks are no larger than needed) on `stream`.
    pub(crate) fn new(
        device: Arc<DeviceState>,
        stream: sys::CUstream,
        total: usize,
    ) -> Result<StagedUpload> {
        let size = total.clamp(ALIGN, CHUNK);
        let slots = (0..2)
            .map(|_| {
                Ok(Slot {
                    buf: PinnedBuffer::new(device.clone(), size)?,
                    done: Event::new(device.clone())?,
                    pending: false,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(StagedUpload {
            stream,
            slots,
            cur: 0,
            fill: 0,
            bytes: 0,
            started: Instant::now(),
        })
    }

    fn chunk(&self) -> usize {
        self.slots[0].buf.capacity()
    }

    /// Leave the current chunk (its transfers are queued) for the other one, once that
    /// one's transfers have run.
    fn next_chunk(&mut self) -> Result<()> {
        self.slots[self.cur].done.record(self.stream)?;
        self.slots[self.cur].pending = true;
        self.cur = 1 - self.cur;
        self.fill = 0;
        let s = &mut self.slots[self.cur];
        if s.pending {
            s.done.synchronize()?;
            s.pending = false;
        }
        Ok(())
    }

    /// Queue the upload of `src` to the device range at `dst`. On return `src` has been
    /// read (copied into staging); the transfers run on the stream.
    ///
    /// # Safety
    /// `dst` must be a device allocation of at least `src.len()` bytes that stays valid
    /// until the stream has run the queued transfers.
    pub(crate) unsafe fn upload(&mut self, dst: sys::CUdeviceptr, src: &[u8]) -> Result<()> {
        let chunk = self.chunk();
        let mut off = 0usize;
        while off < src.len() {
            let room = chunk.saturating_sub(self.fill);
            let rest = src.len() - off;
            if room == 0 || (self.fill > 0 && room < rest.min(chunk)) {
                // What is left (up to a chunk) goes whole into a fresh chunk.
                self.next_chunk()?;
                continue;
            }
            let n = rest.min(room);
            let slot = &self.slots[self.cur];
            // SAFETY: `fill + n <= capacity` of this pinned buffer, which this value owns; no
            // transfer reads this chunk now (its last transfers were waited for when it became
            // current, and the ones queued since read only below `fill`).
            let stage = unsafe { std::slice::from_raw_parts_mut(slot.buf.ptr().add(self.fill), n) };
            copy_parallel(stage, &src[off..off + n]);
            // SAFETY: the destination range is in `dst`'s allocation (the caller's contract);
            // the pinned source stays unchanged until this chunk's `done` event has passed.
            unsafe { copy_htod_async(dst + off as u64, stage.as_ptr().cast(), n, self.stream)? };
            off += n;
            self.fill = (self.fill + n).div_ceil(ALIGN) * ALIGN;
        }
        self.bytes += src.len() as u64;
        Ok(())
    }

    /// Wait for every queued transfer; what was moved.
    pub(crate) fn finish(mut self) -> Result<UploadReport> {
        self.slots[self.cur].done.record(self.stream)?;
        self.slots[self.cur].pending = true;
        for s in &mut self.slots {
            if s.pending {
                s.done.synchronize()?;
                s.pending = false;
            }
        }
        self.fill = 0;
        Ok(UploadReport {
            bytes: self.bytes,
            elapsed: self.started.elapsed(),
            staging_bytes: self.slots.iter().map(|s| s.buf.capacity() as u64).sum(),
        })
    }
}

impl Drop for StagedUpload {
    fn drop(&mut self) {
        // An upload abandoned on an error path: the chunks must not be freed under a
        // transfer that still reads them.
        for s in &self.slots {
            if s.pending {
                let _ = s.done.synchronize();
            }
        }
        if self.fill > 0 {
            let s = &self.slots[self.cur];
            if s.done.record(self.stream).is_ok() {
                let _ = s.done.synchronize();
            }
        }
    }
}

/// `dst.copy_from_slice(src)`, by several threads when large.
fn copy_parallel(dst: &mut [u8], src: &[u8]) {
    if src.len() < PARALLEL_FROM {
        dst.copy_from_slice(src);
        return;
    }
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    let part = src.len().div_ceil(threads);
    std::thread::scope(|scope| {
        for (d, s) in dst.chunks_mut(part).zip(src.chunks(part)) {
            scope.spawn(move || d.copy_from_slice(s));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_copy_copies_every_byte() {
        for n in [
            0usize,
            1,
            255,
            PARALLEL_FROM - 1,
            PARALLEL_FROM,
            PARALLEL_FROM + 4097,
        ] {
            let src: Vec<u8> = (0..n).map(|i| (i * 31 % 251) as u8).collect();
            let mut dst = vec![0u8; n];
            copy_parallel(&mut dst, &src);
            assert!(dst == src, "n = {n}");
        }
    }
}
