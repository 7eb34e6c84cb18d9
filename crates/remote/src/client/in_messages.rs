//! The in-message data path ([`DataPath::InMessages`](super::DataPath::InMessages), and the
//! small writes and appends of the others): the bytes travel inside requests and replies,
//! and the server copies them.

use switchyard_store::{Errno, MAX_FILE_SIZE};

use super::Inner;
use crate::proto::{map_window, Reply, Request, MAX_BYTES};

impl Inner {
    /// Appends `data` at the end of `ino` atomically (inside messages, one piece each
    /// [`MAX_BYTES`]); where the first byte went.
    pub(super) fn append(&mut self, ino: u64, data: &[u8]) -> Result<u64, Errno> {
        self.maps.remove(&ino);
        self.attrs.remove(&ino);
        let mut first = None;
        for piece in data.chunks(MAX_BYTES) {
            let at = match self.call(&Request::Append {
                ino,
                data: piece.to_vec(),
            })? {
                Reply::Written(at) => at,
                _ => return Err(Errno::EIO),
            };
            self.stats.message_bytes += piece.len() as u64;
            first.get_or_insert(at);
        }
        match first {
            Some(at) => Ok(at),
            None => Ok(self.stat(ino)?.attr.size),
        }
    }

    pub(super) fn read_in_messages(
        &mut self,
        ino: u64,
        off: u64,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        let mut done = 0;
        while done < buf.len() {
            let want = (buf.len() - done).min(MAX_BYTES);
            let to = &mut buf[done..done + want];
            // The data is copied once, from the message (where UCX received it) into `buf`.
            let n = self.read_message(ino, off + done as u64, want, |b| {
                to[..b.len()].copy_from_slice(b);
                b.len()
            })?;
            done += n;
            if n < want {
                break;
            }
        }
        Ok(done)
    }

    /// [`Inodes::read_lent`](switchyard_store::Inodes::read_lent): on the in-message path, a
    /// read of at most [`MAX_BYTES`] is one reply, lent to `give` where UCX received it.
    pub(super) fn read_lent(
        &mut self,
        ino: u64,
        off: u64,
        len: usize,
        give: &mut dyn FnMut(&[u8]),
    ) -> Result<bool, Errno> {
        if self.one_sided() || len > MAX_BYTES {
            return Ok(false);
        }
        if off > MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        self.read_message(ino, off, len, give)?;
        Ok(true)
    }

    /// One in-message read of `len` (at most [`MAX_BYTES`]) bytes at `off` of `ino`: its
    /// bytes, lent to `take` where UCX received them; what `take` returns.
    fn read_message<R>(
        &mut self,
        ino: u64,
        off: u64,
        len: usize,
        mut take: impl FnMut(&[u8]) -> R,
    ) -> Result<R, Errno> {
        self.live(ino)?;
        self.seq += 1;
        let req = Request::Read {
            ino,
            off,
            len: len as u64,
        };
        let (n, r) =
            self.send_with(&req.encode(self.seq), |body| match Reply::bytes_of(body) {
                Some((_, b)) if b.len() <= len => Ok((b.len(), take(b))),
                Some(_) => Err(Errno::EIO),
                None => match Reply::decode(body) {
                    Ok((_, Reply::Error(e))) => Err(Errno(e)),
                    _ => Err(Errno::EIO),
                },
            })??;
        self.stats.message_bytes += n as u64;
        Ok(r)
    }

    /// Writes `data` at `off` inside one message; the bytes the server wrote (fewer where
    /// the store had no room for all of them).
    pub(super) fn write_in_message(
        &mut self,
        ino: u64,
        off: u64,
        data: &[u8],
    ) -> Result<usize, Errno> {
        self.live(ino)?;
        self.seq += 1;
        let msg = Request::encode_write(self.seq, ino, off, data);
        let (reply, bytes) =
            self.send_with(&msg, |b| (Reply::decode(b).map(|(_, r)| r), b.len()))?;
        let n = match reply {
            Ok(Reply::Written(n)) => (n as usize).min(data.len()),
            Ok(Reply::WrittenMap { n, stat, map }) => {
                if self.one_sided() {
                    // The map was read under the file's lock after the write, with its word,
                    // and the stat after that word: both checked by it when used.
                    self.attrs.insert(ino, (stat, map.change));
                    self.keep_map(ino, map_window(off, n), map, bytes);
                }
                (n as usize).min(data.len())
            }
            Ok(Reply::Error(e)) => return Err(Errno(e)),
            _ => return Err(Errno::EIO),
        };
        self.stats.message_bytes += n as u64;
        Ok(n)
    }
}
