//! Little-endian writing and bounds-checked reading of message fields.

use switchyard_store::{Attr, Falloc, RecordLock, Rename, Seek, Stat, XattrMode};

use super::{Malformed, MAX_BYTES};

pub(super) struct W(pub(super) Vec<u8>);

impl W {
    pub(super) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(super) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub(super) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    pub(super) fn opt_u64(&mut self, v: Option<u64>) -> &mut Self {
        match v {
            Some(x) => self.u8(1).u64(x),
            None => self.u8(0),
        }
    }
    pub(super) fn attr(&mut self, a: &Attr) -> &mut Self {
        self.u32(a.mode)
            .u32(a.uid)
            .u32(a.gid)
            .u32(a.nlink)
            .u64(a.size);
        self.i64(a.atime).i64(a.mtime).i64(a.ctime).u64(a.parent)
    }
    pub(super) fn lock(&mut self, l: &RecordLock) -> &mut Self {
        self.u64(l.start).u64(l.end).u32(l.kind as u32).u32(l.pid)
    }
    pub(super) fn stat(&mut self, s: &Stat) -> &mut Self {
        self.attr(&s.attr).u64(s.blocks).u64(s.generation)
    }
    pub(super) fn rename(&mut self, how: Rename) -> &mut Self {
        self.u8(match how {
            Rename::Replace => 0,
            Rename::NoReplace => 1,
            Rename::Exchange => 2,
        })
    }
    pub(super) fn falloc(&mut self, how: Falloc) -> &mut Self {
        self.u8(match how {
            Falloc::Allocate { keep_size: false } => 0,
            Falloc::Allocate { keep_size: true } => 1,
            Falloc::ZeroRange { keep_size: false } => 2,
            Falloc::ZeroRange { keep_size: true } => 3,
            Falloc::PunchHole => 4,
        })
    }
    pub(super) fn seek(&mut self, to: Seek) -> &mut Self {
        self.u8(match to {
            Seek::Data => 0,
            Seek::Hole => 1,
        })
    }
    pub(super) fn xattr_mode(&mut self, mode: XattrMode) -> &mut Self {
        self.u8(match mode {
            XattrMode::Set => 0,
            XattrMode::Create => 1,
            XattrMode::Replace => 2,
        })
    }
}

pub(super) struct R<'a> {
    pub(super) b: &'a [u8],
}

impl<'a> R<'a> {
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.b.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    pub(super) fn u8(&mut self) -> Result<u8, Malformed> {
        Ok(self.take(1)?[0])
    }
    pub(super) fn bool(&mut self) -> Result<bool, Malformed> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(Malformed),
        }
    }
    pub(super) fn u32(&mut self) -> Result<u32, Malformed> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().map_err(|_| Malformed)?,
        ))
    }
    pub(super) fn u64(&mut self) -> Result<u64, Malformed> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| Malformed)?,
        ))
    }
    pub(super) fn i64(&mut self) -> Result<i64, Malformed> {
        Ok(i64::from_le_bytes(
            self.take(8)?.try_into().map_err(|_| Malformed)?,
        ))
    }
    pub(super) fn bytes(&mut self) -> Result<Vec<u8>, Malformed> {
        let n = self.u32()? as usize;
        if n > MAX_BYTES {
            return Err(Malformed);
        }
        Ok(self.take(n)?.to_vec())
    }
    pub(super) fn array16(&mut self) -> Result<[u8; 16], Malformed> {
        self.take(16)?.try_into().map_err(|_| Malformed)
    }
    pub(super) fn array32(&mut self) -> Result<[u8; 32], Malformed> {
        self.take(32)?.try_into().map_err(|_| Malformed)
    }
    pub(super) fn opt_u64(&mut self) -> Result<Option<u64>, Malformed> {
        Ok(if self.bool()? {
            Some(self.u64()?)
        } else {
            None
        })
    }
    /// A count of items at least `min` bytes each: never more than the bytes left allow.
    pub(super) fn count(&mut self, min: usize) -> Result<usize, Malformed> {
        let n = self.u32()? as usize;
        if n > self.b.len() / min {
            return Err(Malformed);
        }
        Ok(n)
    }
    pub(super) fn attr(&mut self) -> Result<Attr, Malformed> {
        Ok(Attr {
            mode: self.u32()?,
            uid: self.u32()?,
            gid: self.u32()?,
            nlink: self.u32()?,
            size: self.u64()?,
            atime: self.i64()?,
            mtime: self.i64()?,
            ctime: self.i64()?,
            parent: self.u64()?,
        })
    }
    pub(super) fn lock(&mut self) -> Result<RecordLock, Malformed> {
        let (start, end) = (self.u64()?, self.u64()?);
        let kind = self.u32()? as i32;
        if ![libc::F_RDLCK, libc::F_WRLCK, libc::F_UNLCK].contains(&kind) || end < start {
            return Err(Malformed);
        }
        Ok(RecordLock {
            start,
            end,
            kind,
            pid: self.u32()?,
        })
    }
    pub(super) fn stat(&mut self) -> Result<Stat, Malformed> {
        Ok(Stat {
            attr: self.attr()?,
            blocks: self.u64()?,
            generation: self.u64()?,
        })
    }
    pub(super) fn rename(&mut self) -> Result<Rename, Malformed> {
        Ok(match self.u8()? {
            0 => Rename::Replace,
            1 => Rename::NoReplace,
            2 => Rename::Exchange,
            _ => return Err(Malformed),
        })
    }
    pub(super) fn falloc(&mut self) -> Result<Falloc, Malformed> {
        Ok(match self.u8()? {
            0 => Falloc::Allocate { keep_size: false },
            1 => Falloc::Allocate { keep_size: true },
            2 => Falloc::ZeroRange { keep_size: false },
            3 => Falloc::ZeroRange { keep_size: true },
            4 => Falloc::PunchHole,
            _ => return Err(Malformed),
        })
    }
    pub(super) fn seek(&mut self) -> Result<Seek, Malformed> {
        Ok(match self.u8()? {
            0 => Seek::Data,
            1 => Seek::Hole,
            _ => return Err(Malformed),
        })
    }
    pub(super) fn xattr_mode(&mut self) -> Result<XattrMode, Malformed> {
        Ok(match self.u8()? {
            0 => XattrMode::Set,
            1 => XattrMode::Create,
            2 => XattrMode::Replace,
            _ => return Err(Malformed),
        })
    }
    pub(super) fn end<T>(self, v: T) -> Result<T, Malformed> {
        if self.b.is_empty() {
            Ok(v)
        } else {
            Err(Malformed)
        }
    }
}
