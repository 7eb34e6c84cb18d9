//! Reading an image back: the superblock, the journal, every inode's log, and the invariants
//! that tie them together. Mount and `fsck` share this scan; it never trusts a byte: every
//! offset is bounds-checked, every chain is bounded by the number of blocks, every entry's
//! checksum is verified, and it returns problems instead of panicking.

mod namespace;

use std::collections::BTreeMap;

use crate::error::Corruption;
use switchyard_engine::RecordImage;

use crate::format::{
    check_log_page, decode_checkpoint_page, decode_journal, is_special, Anchor, Entry, Seq,
    Superblock, BLOCK, LOG_ENTRIES_AT, RECORD, RECORD_CHANNELS, ROOT, S_IFDIR, S_IFLNK, S_IFMT,
    S_IFREG,
};
use crate::inode::{Content, Inode};
use namespace::check_namespace;

/// Everything a scan found.
#[derive(Debug)]
pub struct Scan {
    /// The superblock in effect.
    pub sb: Superblock,
    /// Which copy was valid: `true` if the primary was damaged and the replica used.
    pub used_replica: bool,
    /// Journal words to restore (an interrupted multi-inode operation).
    pub undo: Vec<(u64, u64)>,
    /// Live inodes by number.
    pub inodes: BTreeMap<u64, Inode>,
    /// Which blocks the logs and files use (one bit per block).
    pub used: BlockMap,
    /// Inodes with no links left (unlinked while open, then crashed): recovery frees them.
    pub orphans: Vec<u64>,
    /// Logs that end early because an orderless write's copy never completed: (region offset
    /// of the inode's tail word, the tail before that write). Mount stores them.
    pub cuts: Vec<(u64, u64)>,
    /// Violated invariants (empty for a healthy store).
    pub problems: Vec<Corruption>,
    /// Bytes of the image the scan read: the inode table where the image holds data, the
    /// logs, the superblocks, journal and completion records.
    pub read_bytes: u64,
}

/// One bit per block: which blocks are in use. 32 MiB for a 1 TiB store, where a map from
/// block to owner would take 2 GiB.
#[derive(Debug, Clone)]
pub struct BlockMap {
    bits: Vec<u64>,
    len: u64,
}

impl BlockMap {
    /// A map of `len` blocks, none in use.
    pub fn new(len: u64) -> BlockMap {
        BlockMap {
            bits: vec![0; len.div_ceil(64) as usize],
            len,
        }
    }

    /// Whether block `b` is in use (false past the end).
    pub fn get(&self, b: u64) -> bool {
        b < self.len && self.bits[(b / 64) as usize] & (1 << (b % 64)) != 0
    }

    /// Marks block `b` used; returns whether it already was. `b` must be below the length.
    pub fn set(&mut self, b: u64) -> bool {
        let w = &mut self.bits[(b / 64) as usize];
        let was = *w & (1 << (b % 64)) != 0;
        *w |= 1 << (b % 64);
        was
    }

    /// Blocks in use.
    pub fn count(&self) -> u64 {
        self.bits.iter().map(|w| u64::from(w.count_ones())).sum()
    }

    /// Marks `[start, start + len)` used (clipped to the map).
    pub fn set_range(&mut self, start: u64, len: u64) {
        let end = start.saturating_add(len).min(self.len);
        let mut b = start;
        while b < end {
            if b.is_multiple_of(64) && end - b >= 64 {
                self.bits[(b / 64) as usize] = u64::MAX;
                b += 64;
            } else {
                self.set(b);
                b += 1;
            }
        }
    }

    /// Blocks of `[from, to)` that this map and `other` (of the same length) mark the same
    /// way.
    pub fn count_same(&self, other: &BlockMap, from: u64, to: u64) -> u64 {
        let to = to.min(self.len);
        let mut n = 0;
        let mut b = from;
        while b < to {
            let w = (b / 64) as usize;
            let lo = b % 64;
            let hi = (to - (b - lo)).min(64);
            let mask = if hi - lo == 64 {
                u64::MAX
            } else {
                ((1u64 << (hi - lo)) - 1) << lo
            };
            n += u64::from((!(self.bits[w] ^ other.bits[w]) & mask).count_ones());
            b += hi - lo;
        }
        n
    }
}

/// Where an image may hold bytes other than zero: byte ranges, ascending (for a sparse
/// region file, its data extents; everything for any other region). A scan skips the inode
/// table's pages outside them, which are free slots, without reading them.
///
/// It may also carry a way to drop the image's pages from the resident set (for a mapped
/// region file, whose pages stay in the page cache and are mapped again when read): a scan
/// calls it after each [`RELEASE_EVERY`] bytes of log pages it reads. Each page read may map
/// up to 16 of its neighbours (the kernel's fault-around), so a pass over a large store keeps
/// at most about 16 × that mapped, whatever the store holds.
pub struct Present<'a> {
    ranges: Vec<(u64, u64)>,
    release: Option<&'a dyn Fn()>,
}

/// Bytes of log pages a scan reads between two calls of [`Present::releasing`]'s function.
pub const RELEASE_EVERY: u64 = 4 << 20;

impl<'a> Present<'a> {
    /// All of an image of `len` bytes.
    pub fn all(len: u64) -> Present<'a> {
        Present::ranges(vec![(0, len)])
    }

    /// The given ranges (start, length), ascending and disjoint.
    pub fn ranges(ranges: Vec<(u64, u64)>) -> Present<'a> {
        Present {
            ranges,
            release: None,
        }
    }

    /// The same, with `release` to call now and then during a scan: it must leave the
    /// image's contents as they are (it may only drop pages that will be read back).
    pub fn releasing(self, release: &'a dyn Fn()) -> Present<'a> {
        Present {
            release: Some(release),
            ..self
        }
    }

    /// Whether `[off, off + len)` overlaps a range.
    pub fn overlaps(&self, off: u64, len: u64) -> bool {
        let i = self.ranges.partition_point(|&(s, l)| s + l <= off);
        self.ranges.get(i).is_some_and(|&(s, _)| s < off + len)
    }
}

fn le64(b: &[u8], off: u64) -> Option<u64> {
    let o = usize::try_from(off).ok()?;
    Some(u64::from_le_bytes(
        b.get(o..o.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// Reads the superblock: the primary, else the replica.
pub fn superblock(image: &[u8]) -> Result<(Superblock, bool), Corruption> {
    let len = image.len() as u64;
    if len < 2 * BLOCK {
        return Err(Corruption::NotFormatted);
    }
    match Superblock::decode(&image[..BLOCK as usize], len) {
        Ok(sb) => Ok((sb, false)),
        Err(primary) => match Superblock::decode(&image[BLOCK as usize..2 * BLOCK as usize], len) {
            Ok(sb) => Ok((sb, true)),
            Err(_) => Err(primary),
        },
    }
}

/// Scans `image` (the whole region), reading the inode table only where `present` says the
/// image may hold data (elsewhere it reads as zeros: free slots). Fails only when there is no
/// usable superblock; every other problem is listed in [`Scan::problems`].
pub fn scan_present(image: &[u8], present: &Present<'_>) -> Result<Scan, Corruption> {
    scan_present_as(image, present, None)
}

/// [`scan_present`] of an image whose page cache is `identity`
/// (`Region::cache_identity`): a page-media commit ring written through another page cache
/// is read as a power cut leaves it (its durable records only), one written through this
/// one (or `None`: the bytes as a page cache holds them) with every whole commit.
pub fn scan_present_as(
    image: &[u8],
    present: &Present<'_>,
    identity: Option<u64>,
) -> Result<Scan, Corruption> {
    let (sb, used_replica) = superblock(image)?;
    let mut problems = Vec::new();
    let undo = match ring_redo(image, &sb, identity) {
        Some(Ok(redo)) => redo,
        Some(Err(e)) => {
            problems.push(e);
            Vec::new()
        }
        None => journal_undo(image, &sb, &mut problems),
    };
    let mut used = BlockMap::new(sb.total_blocks);
    let logs = scan_logs(image, &sb, &undo, present, &mut used, &mut problems);
    claim_data_blocks(&logs.inodes, &sb, &mut used, &mut problems);
    let mut orphans = Vec::new();
    check_namespace(&logs.inodes, &mut problems, &mut orphans);
    Ok(Scan {
        sb,
        used_replica,
        undo,
        inodes: logs.inodes,
        used,
        orphans,
        cuts: logs.cuts,
        problems,
        read_bytes: logs.read_bytes,
    })
}

/// The words a page-media mount's commit ring (the journal block holds its anchor) sets, in
/// order: every whole commit the ring holds when the image is seen through the page cache
/// its owner wrote through (`identity` the anchor's, or unknown), the durable ones only
/// otherwise (a power cut's image). `None` when the journal block holds no anchor.
fn ring_redo(
    image: &[u8],
    sb: &Superblock,
    identity: Option<u64>,
) -> Option<Result<Vec<(u64, u64)>, Corruption>> {
    let jb = (sb.journal_block * BLOCK) as usize;
    let block = &image[jb..jb + BLOCK as usize];
    if !Anchor::present(block) {
        return None;
    }
    let Some(anchor) = Anchor::decode(block, sb) else {
        return Some(Err(Corruption::BadChecksum("page-media ring anchor")));
    };
    let record = |s: u64| {
        let at = anchor.record_offset(s) as usize;
        &image[at..at + RECORD as usize]
    };
    let table = (sb.inode_table_block * BLOCK, sb.data_block * BLOCK);
    let everything = identity.is_none_or(|id| id == anchor.identity);
    Some(anchor.replay(record, everything).and_then(|words| {
        if words
            .iter()
            .any(|&(o, _)| o < table.0 || o + 8 > table.1 || o % 8 != 0)
        {
            return Err(Corruption::Invalid(
                "page-media ring names a word outside the inode table".into(),
            ));
        }
        Ok(words)
    }))
}

/// The undo journal's (offset, old value) words, if it holds an interrupted operation; none
/// (with a problem noted) if it names a word outside the inode table.
fn journal_undo(image: &[u8], sb: &Superblock, problems: &mut Vec<Corruption>) -> Vec<(u64, u64)> {
    let jb = sb.journal_block * BLOCK;
    let table = (sb.inode_table_block * BLOCK, sb.data_block * BLOCK);
    let undo = decode_journal(&image[jb as usize..(jb + BLOCK) as usize]);
    if undo
        .iter()
        .any(|&(off, _)| off < table.0 || off + 8 > table.1 || off % 8 != 0)
    {
        problems.push(Corruption::Invalid(
            "journal names a word outside the inode table".into(),
        ));
        return Vec::new();
    }
    undo
}

/// What reading every inode's log gave.
struct Logs {
    inodes: BTreeMap<u64, Inode>,
    /// (slot tail word, where recovery cuts the log) for logs whose last write is discarded.
    cuts: Vec<(u64, u64)>,
    /// Bytes read, the superblocks, journal and completion records included.
    read_bytes: u64,
}

/// Reads the log of every allocated slot, with the journal's old words in force, claiming
/// each log page in `used`; table pages `present` says the image does not hold are free
/// slots (unless the journal restores words in them). Mapped pages are released every
/// [`RELEASE_EVERY`] bytes read.
fn scan_logs(
    image: &[u8],
    sb: &Superblock,
    undo: &[(u64, u64)],
    present: &Present<'_>,
    used: &mut BlockMap,
    problems: &mut Vec<Corruption>,
) -> Logs {
    let word = |off: u64| -> u64 {
        undo.iter()
            .rev()
            .find(|w| w.0 == off)
            .map(|w| w.1)
            .or_else(|| le64(image, off))
            .unwrap_or(0)
    };
    let records = records_in(image, sb);
    let settled = |s: &Seq| settled(sb, &records, s);
    let slots_per_page = BLOCK / crate::format::SLOT;
    let mut logs = Logs {
        inodes: BTreeMap::new(),
        cuts: Vec::new(),
        read_bytes: 4 * BLOCK,
    };
    let (mut page_held, mut released_at) = (false, 0u64);
    for ino in ROOT..sb.inode_slots {
        let slot = sb.slot_offset(ino);
        if ino == ROOT || ino.is_multiple_of(slots_per_page) {
            let page = slot - slot % BLOCK;
            let in_journal = undo.iter().any(|&(o, _)| o / BLOCK == page / BLOCK);
            page_held = in_journal || present.overlaps(page, BLOCK);
            logs.read_bytes += if page_held { BLOCK } else { 0 };
        }
        if !page_held {
            continue;
        }
        let (head, tail) = (word(slot), word(slot + 8));
        if head == 0 {
            if tail != 0 {
                problems.push(Corruption::Invalid(format!(
                    "free inode {ino} has a log tail"
                )));
            }
            continue;
        }
        let page = |b: u64| &image[(b * BLOCK) as usize..((b + 1) * BLOCK) as usize];
        let read_bytes = &mut logs.read_bytes;
        let mut claim = |b: u64| {
            *read_bytes += BLOCK;
            if used.set(b) {
                Err(Corruption::Invalid(format!(
                    "log page {b} is used twice (again by inode {ino})"
                )))
            } else {
                Ok(())
            }
        };
        let read = read_log(&page, sb, ino, head, tail, &mut claim, &settled);
        if let Some(release) = present
            .release
            .filter(|_| logs.read_bytes - released_at >= RELEASE_EVERY)
        {
            // What the scan keeps of the logs read so far is owned, not borrowed.
            release();
            released_at = logs.read_bytes;
        }
        match read {
            Ok(inode) if inode.tail != tail => {
                logs.cuts.push((slot + 8, inode.tail));
                logs.inodes.insert(ino, inode);
            }
            Ok(inode) => {
                logs.inodes.insert(ino, inode);
            }
            Err(e) => problems.push(Corruption::Invalid(format!("inode {ino}: {e}"))),
        }
    }
    logs
}

/// Claims every data block the inodes map: each once, inside the data zone, not a log page.
fn claim_data_blocks(
    inodes: &BTreeMap<u64, Inode>,
    sb: &Superblock,
    used: &mut BlockMap,
    problems: &mut Vec<Corruption>,
) {
    for inode in inodes.values() {
        let Content::File(pages) = &inode.content else {
            continue;
        };
        for &b in pages.values() {
            if !sb.is_data(b) {
                problems.push(Corruption::Invalid(format!(
                    "inode {} maps block {b} outside the data zone",
                    inode.ino
                )));
            } else if used.set(b) {
                problems.push(Corruption::Invalid(format!(
                    "block {b} of inode {} is used twice",
                    inode.ino
                )));
            }
        }
    }
}

/// The durable completion records of an image (zeros where the image is too short).
pub(crate) fn records_in(image: &[u8], sb: &Superblock) -> Vec<RecordImage> {
    let at = (sb.completion_block * BLOCK) as usize;
    (0..RECORD_CHANNELS)
        .map(|c| {
            image
                .get(at + c * 64..at + c * 64 + 64)
                .map_or_else(RecordImage::default, RecordImage::decode)
        })
        .collect()
}

/// Whether an orderless write's copy is known complete: it was written by an earlier mount
/// (whose recovery settled it), or its channel's completion record covers it.
pub(crate) fn settled(sb: &Superblock, records: &[RecordImage], s: &Seq) -> bool {
    s.generation < sb.mount_count
        || (s.generation == sb.mount_count
            && records
                .get(s.channel as usize)
                .is_some_and(|r| r.covers(s.position)))
}

/// Reads one inode's log on its own (a lazy load after a clean mount): every check of the
/// full scan that concerns this log alone.
pub(crate) fn load_inode<'a>(
    page: &dyn Fn(u64) -> &'a [u8],
    sb: &Superblock,
    ino: u64,
    head: u64,
    tail: u64,
    settled: &dyn Fn(&Seq) -> bool,
) -> Result<Inode, Corruption> {
    let mut seen = std::collections::BTreeSet::new();
    let mut claim = |b: u64| {
        if seen.insert(b) {
            Ok(())
        } else {
            Err(Corruption::Invalid(format!("log page {b} appears twice")))
        }
    };
    read_log(page, sb, ino, head, tail, &mut claim, settled)
}

/// The free extents a clean unmount recorded, checked: every page in the data zone, the
/// chain bounded, the extents ascending, disjoint, non-empty and inside the data zone, and
/// the checkpoint's own pages among them.
pub(crate) fn read_checkpoint<'a>(
    page: &dyn Fn(u64) -> &'a [u8],
    sb: &Superblock,
) -> Result<Vec<(u64, u64)>, Corruption> {
    let mut extents: Vec<(u64, u64)> = Vec::new();
    let mut pages = Vec::new();
    let mut block = sb.checkpoint;
    while block != 0 {
        if !sb.is_data(block) || pages.len() as u64 >= sb.total_blocks {
            return Err(Corruption::Invalid(format!(
                "free-space checkpoint page {block} outside the data zone"
            )));
        }
        pages.push(block);
        let (ext, next) = decode_checkpoint_page(page(block), sb.mount_count)?;
        extents.extend(ext);
        block = next;
    }
    let mut end = sb.data_block;
    for &(start, len) in &extents {
        if start < end || len == 0 || start.checked_add(len).is_none_or(|e| e > sb.total_blocks) {
            return Err(Corruption::Invalid(
                "free-space checkpoint extents overlap or leave the data zone".into(),
            ));
        }
        end = start + len;
    }
    for p in pages {
        let i = extents.partition_point(|&(s, _)| s <= p);
        if i == 0 || p >= extents[i - 1].0 + extents[i - 1].1 {
            return Err(Corruption::Invalid(format!(
                "free-space checkpoint page {p} is not in its own free list"
            )));
        }
    }
    Ok(extents)
}

/// Applies one log entry to the inode the log builds: the first must be its attributes,
/// every later one must fit its type and name only valid blocks.
fn apply_entry(
    inode: &mut Option<Inode>,
    ino: u64,
    sb: &Superblock,
    entry: Entry,
    freed: &mut Vec<u64>,
) -> Result<(), Corruption> {
    match inode {
        None => match entry {
            Entry::Attr(a) => *inode = Some(Inode::new(ino, a)),
            _ => {
                return Err(Corruption::Invalid(
                    "log does not start with attributes".into(),
                ))
            }
        },
        Some(i) => {
            if !i.accepts(&entry) {
                return Err(Corruption::Invalid(
                    "entry does not fit the inode's type".into(),
                ));
            }
            check_entry(sb, &entry)?;
            i.apply(&entry, freed);
        }
    }
    Ok(())
}

/// Checks that a log built an inode of a known type, and a special file without data.
fn check_kind(inode: &Inode) -> Result<(), Corruption> {
    let kind = inode.attr.kind();
    if !matches!(kind, S_IFREG | S_IFDIR | S_IFLNK) && !is_special(kind) {
        return Err(Corruption::Invalid(format!(
            "unknown file type {:o}",
            inode.attr.mode & S_IFMT
        )));
    }
    if is_special(kind)
        && (inode.attr.size != 0 || matches!(&inode.content, Content::File(p) if !p.is_empty()))
    {
        return Err(Corruption::Invalid(format!(
            "special file (type {kind:o}) with data"
        )));
    }
    Ok(())
}

fn read_log<'a>(
    page: &dyn Fn(u64) -> &'a [u8],
    sb: &Superblock,
    ino: u64,
    head: u64,
    tail: u64,
    claim: &mut dyn FnMut(u64) -> Result<(), Corruption>,
    settled: &dyn Fn(&Seq) -> bool,
) -> Result<Inode, Corruption> {
    // A tail at the very end of a page belongs to that page.
    let tail_block = tail.saturating_sub(1) / BLOCK;
    let tail_off = tail - tail_block * BLOCK;
    if tail_off < LOG_ENTRIES_AT || !tail_off.is_multiple_of(8) {
        return Err(Corruption::Invalid(format!(
            "log tail {tail} is not an entry boundary"
        )));
    }
    let mut inode: Option<Inode> = None;
    let mut pages = Vec::new();
    let mut log_bytes = 0;
    let mut block = head;
    let mut freed = Vec::new();
    // Where the log really ends if an orderless write's copy never completed.
    let mut cut = None;
    'pages: loop {
        if !sb.is_data(block) {
            return Err(Corruption::Invalid(format!(
                "log page {block} outside the data zone"
            )));
        }
        claim(block)?;
        pages.push(block);
        let page = page(block);
        let next = check_log_page(page, ino)?;
        let last = block == tail_block;
        let end = if last { tail_off } else { BLOCK };
        let mut off = LOG_ENTRIES_AT;
        while off < end {
            let Some((entry, len)) = Entry::decode(&page[off as usize..end as usize])? else {
                if last {
                    return Err(Corruption::Invalid("log ends before its tail".into()));
                }
                break;
            };
            if let Entry::Write { seq: Some(s), .. } = &entry {
                if !settled(s) {
                    cut = Some(block * BLOCK + off);
                    break 'pages;
                }
            }
            off += len as u64;
            log_bytes += len as u64;
            apply_entry(&mut inode, ino, sb, entry, &mut freed)?;
        }
        if last {
            if off != tail_off {
                return Err(Corruption::Invalid("log tail is inside an entry".into()));
            }
            break;
        }
        if next == 0 || pages.len() >= sb.total_blocks as usize {
            return Err(Corruption::Invalid("log chain ends before its tail".into()));
        }
        block = next;
    }
    let mut inode = inode.ok_or_else(|| Corruption::Invalid("empty log".into()))?;
    check_kind(&inode)?;
    inode.pages = pages;
    inode.tail = cut.unwrap_or(tail);
    inode.log_bytes = log_bytes;
    Ok(inode)
}

fn check_entry(sb: &Superblock, e: &Entry) -> Result<(), Corruption> {
    match e {
        Entry::Write {
            pgoff,
            block,
            count,
            ..
        } => {
            let ok = *count > 0
                && pgoff
                    .checked_add(*count)
                    .is_some_and(|e| e <= (i64::MAX as u64) / BLOCK + 1)
                && sb.is_data(*block)
                && block
                    .checked_add(*count)
                    .is_some_and(|e| e <= sb.total_blocks);
            if !ok {
                return Err(Corruption::Invalid(format!(
                    "write entry maps pages {pgoff}+{count} to blocks {block}+{count}"
                )));
            }
        }
        Entry::Punch { pgoff, count } => {
            let ok = *count > 0
                && pgoff
                    .checked_add(*count)
                    .is_some_and(|e| e <= (i64::MAX as u64) / BLOCK + 1);
            if !ok {
                return Err(Corruption::Invalid(format!(
                    "punch entry over pages {pgoff}+{count}"
                )));
            }
        }
        Entry::DirAdd { name, ino, .. } => {
            if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
                return Err(Corruption::Invalid(
                    "directory entry with an invalid name".into(),
                ));
            }
            if *ino < ROOT || *ino >= sb.inode_slots {
                return Err(Corruption::Invalid(format!(
                    "directory entry names inode {ino}"
                )));
            }
        }
        _ => {}
    }
    Ok(())
}
