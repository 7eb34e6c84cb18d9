//! grep: count the lines of each log file that match a regular expression, reading the file
//! in 2 MiB chunks (EasyIO's Grep: 2 MB reads, no writes). The scan is the regex crate's
//! searcher over the whole chunk, as ripgrep does (a literal prefilter, then the automaton),
//! not a call per line.

use regex::bytes::Regex;
use switchyard_store::{Fs, OpenFlags};

use super::corpus;
use super::harness::{App, Io, Scratch};

/// Error and fatal lines with a server-side status.
pub const PATTERN: &str = r"status=5[0-9][0-9]";
/// Bytes per read.
pub const CHUNK: usize = 2 << 20;
/// Bytes per file.
pub const FILE_LEN: usize = 8 << 20;

/// The prepared files and what each must count.
pub struct Grep {
    re: Regex,
    paths: Vec<String>,
    expected: Vec<u64>,
}

impl Grep {
    /// Writes `data` bytes of log files (untimed) and counts the lines matching `pattern` in
    /// memory.
    pub fn prepare(fs: &Fs, pattern: &str, data: u64) -> anyhow::Result<Grep> {
        let re = Regex::new(pattern)?;
        let mut expected = Vec::new();
        let paths = corpus::write_logs(fs, "/grep", 0, data, FILE_LEN, |text| {
            expected.push(count_lines(&re, text))
        })?;
        Ok(Grep {
            re,
            paths,
            expected,
        })
    }
}

/// Lines of `text` (whole lines) with at least one match.
pub fn count_lines(re: &Regex, text: &[u8]) -> u64 {
    let mut n = 0;
    let mut at = 0;
    while let Some(m) = re.find_at(text, at) {
        n += 1;
        match text[m.end()..].iter().position(|&b| b == b'\n') {
            Some(i) => at = m.end() + i + 1,
            None => break,
        }
    }
    n
}

/// Counts the matching lines that end in `chunk`; `carry` holds the start of a line the
/// previous chunk ended inside, and is left holding this chunk's unfinished last line.
fn scan_chunk(re: &Regex, chunk: &[u8], carry: &mut Vec<u8>) -> u64 {
    let Some(first) = chunk.iter().position(|&b| b == b'\n') else {
        carry.extend_from_slice(chunk);
        return 0;
    };
    let last = chunk.iter().rposition(|&b| b == b'\n').unwrap_or(first);
    carry.extend_from_slice(&chunk[..=first]);
    let mut n = count_lines(re, carry);
    carry.clear();
    n += count_lines(re, &chunk[first + 1..=last]);
    carry.extend_from_slice(&chunk[last + 1..]);
    n
}

impl App for Grep {
    fn items(&self) -> usize {
        self.paths.len()
    }

    fn scratch(&self) -> Scratch {
        Scratch::with_bufs(&[CHUNK, 4096])
    }

    async fn op(&self, io: &Io, _: usize, item: usize, s: &mut Scratch) -> anyhow::Result<u64> {
        let fd = io.meta(|fs| fs.open(&self.paths[item], OpenFlags::READ, 0))?;
        let mut buf = std::mem::take(&mut s.bufs[0]);
        let mut carry = std::mem::take(&mut s.bufs[1]);
        carry.clear();
        let (mut off, mut count) = (0u64, 0u64);
        loop {
            let (n, b) = io.pread(fd, buf, off).await?;
            buf = b;
            if n == 0 {
                break;
            }
            count += scan_chunk(&self.re, &buf[..n], &mut carry);
            off += n as u64;
        }
        count += count_lines(&self.re, &carry);
        s.bufs[0] = buf;
        s.bufs[1] = carry;
        io.meta(|fs| fs.close(fd))?;
        anyhow::ensure!(
            count == self.expected[item],
            "grep counted {count} matching lines in {}, expected {}",
            self.paths[item],
            self.expected[item]
        );
        Ok(off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_scan_counts_what_a_whole_scan_counts() {
        let re = Regex::new(PATTERN).unwrap();
        let text = corpus::log_text(7, 300_000);
        let whole = count_lines(&re, &text);
        assert!(whole > 10, "the corpus has matches ({whole})");
        for chunk in [1, 97, 4096, 65_536, 300_000] {
            let mut carry = Vec::new();
            let mut n: u64 = text
                .chunks(chunk)
                .map(|c| scan_chunk(&re, c, &mut carry))
                .sum();
            n += count_lines(&re, &carry);
            assert_eq!(n, whole, "chunk {chunk}");
        }
    }
}
