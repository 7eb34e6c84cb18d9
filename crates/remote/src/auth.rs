//! The server's secret and the proof of holding it.
//!
//! `serve` creates a key file on first start (32 random bytes, written as hex, readable by its
//! owner alone) and refuses to use one that others can read. A connecting client receives a
//! random challenge and answers with the key's keyed hash of it (BLAKE3 in keyed mode, a
//! MAC); only then does it receive anything else, memory keys included. The key never
//! crosses the network.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// A server's secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; 32]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(…)")
    }
}

/// Why a key file cannot be used.
#[derive(Debug)]
pub enum KeyError {
    /// Reading or creating it failed.
    Io(std::path::PathBuf, std::io::Error),
    /// It is not 64 hex digits.
    Malformed(std::path::PathBuf),
    /// Someone other than its owner may read it.
    Exposed(std::path::PathBuf, u32),
}

impl std::fmt::Display for KeyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyError::Io(p, e) => write!(f, "key file {}: {e}", p.display()),
            KeyError::Malformed(p) => {
                write!(
                    f,
                    "key file {}: not a Switchyard key (64 hex digits)",
                    p.display()
                )
            }
            KeyError::Exposed(p, mode) => write!(
                f,
                "key file {}: mode {mode:o} lets others read it; run `chmod 600 {}`",
                p.display(),
                p.display()
            ),
        }
    }
}

impl std::error::Error for KeyError {}

impl Key {
    /// A fresh random key.
    pub fn random() -> Key {
        Key(rand::random())
    }

    /// Reads the key at `path` (a client's copy need not be private; the server checks its
    /// own with [`Key::load_or_create`]).
    pub fn load(path: &Path) -> Result<Key, KeyError> {
        let mut text = String::new();
        File::open(path)
            .and_then(|mut f| f.read_to_string(&mut text))
            .map_err(|e| KeyError::Io(path.to_path_buf(), e))?;
        Key::parse(text.trim()).ok_or_else(|| KeyError::Malformed(path.to_path_buf()))
    }

    /// The server's key at `path`: created (mode 0600) if missing; refused if others may read
    /// it.
    pub fn load_or_create(path: &Path) -> Result<Key, KeyError> {
        let io = |e| KeyError::Io(path.to_path_buf(), e);
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                let key = Key::random();
                f.write_all(format!("{}\n", key.hex()).as_bytes())
                    .and_then(|_| f.sync_all())
                    .map_err(io)?;
                Ok(key)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let mode = std::fs::metadata(path).map_err(io)?.permissions().mode();
                if mode & 0o077 != 0 {
                    return Err(KeyError::Exposed(path.to_path_buf(), mode & 0o777));
                }
                Key::load(path)
            }
            Err(e) => Err(io(e)),
        }
    }

    fn parse(hex: &str) -> Option<Key> {
        if hex.len() != 64 {
            return None;
        }
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Key(k))
    }

    fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The proof of this key for `challenge`.
    pub fn prove(&self, challenge: &[u8; 32]) -> [u8; 32] {
        *blake3::keyed_hash(&self.0, challenge).as_bytes()
    }

    /// Whether `mac` proves this key for `challenge` (compared in constant time).
    pub fn verify(&self, challenge: &[u8; 32], mac: &[u8; 32]) -> bool {
        blake3::keyed_hash(&self.0, challenge) == blake3::Hash::from_bytes(*mac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_file_is_created_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.key");
        let k = Key::load_or_create(&p).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(Key::load_or_create(&p).unwrap(), k);
        assert_eq!(Key::load(&p).unwrap(), k);
        let c = [7u8; 32];
        assert!(k.verify(&c, &k.prove(&c)));
        assert!(!k.verify(&[8u8; 32], &k.prove(&c)));
        assert!(!Key::random().verify(&c, &k.prove(&c)));
    }

    #[test]
    fn an_exposed_or_malformed_key_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.key");
        Key::load_or_create(&p).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = Key::load_or_create(&p).unwrap_err();
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::write(dir.path().join("bad"), "xyz\n").unwrap();
        assert!(matches!(
            Key::load(&dir.path().join("bad")),
            Err(KeyError::Malformed(_))
        ));
    }
}
