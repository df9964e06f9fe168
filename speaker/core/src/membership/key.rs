//! The membership key ring: parsing and validating the shared secret that seals every SWIM
//! datagram (DESIGN §5 S3). Pure: no I/O except [`KeyRing::from_file`], which only reads a file.
//!
//! # Key file format
//!
//! The file is normally mounted from a Kubernetes Secret. Two forms are accepted:
//!
//! * **Hex text** (recommended): one or more lines, each exactly 64 hexadecimal digits (32 bytes),
//!   upper or lower case. Blank lines and lines starting with `#` are ignored; surrounding
//!   whitespace (including a trailing newline) is ignored. The **first** key seals outgoing
//!   datagrams; every listed key is tried when opening incoming ones, which allows rotation
//!   without a flag day (add the new key second, roll out, move it first, roll out, drop the old
//!   one). At most [`MAX_KEYS`] keys. Generate one with `openssl rand -hex 32`.
//! * **Raw binary**: exactly 32 bytes, nothing else (a single key). A 32-byte file made only of
//!   printable ASCII is refused: that is a password typed by a person, not 256 random bits.
//!
//! Every key is checked for obvious weakness: all-zero keys and keys with fewer than
//! [`MIN_DISTINCT_BYTES`] distinct byte values (repeated patterns such as `aaaa…` or
//! `0102…0102`) are refused. 32 uniformly random bytes have about 30 distinct values; the chance
//! that a real random key has fewer than 12 is below 10⁻¹⁵.

use std::fmt;
use std::path::{Path, PathBuf};

/// Length of one key in bytes (256 bits, the XChaCha20-Poly1305 key size).
pub const KEY_LEN: usize = 32;

/// Upper bound on the number of keys in one key file. Opening tries each key in turn, so the
/// bound also bounds the work an unauthenticated datagram can cause.
pub const MAX_KEYS: usize = 4;

/// A key with fewer distinct byte values than this is refused as low-entropy.
pub const MIN_DISTINCT_BYTES: usize = 12;

/// One 256-bit symmetric key. `Debug` never prints the key material.
#[derive(Clone, PartialEq, Eq)]
pub struct Key([u8; KEY_LEN]);

impl Key {
    /// Wraps 32 bytes after the weakness checks described in the [module docs](self).
    ///
    /// # Errors
    /// [`KeyError::Weak`] (with `entry` 1) for an all-zero or low-entropy key.
    pub fn new(bytes: [u8; KEY_LEN]) -> Result<Self, KeyError> {
        check_strength(&bytes, 1)?;
        Ok(Self(bytes))
    }

    /// The raw key material, for the AEAD.
    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    /// A public name of the key: the first 8 bytes of HMAC-SHA256 under the key of the label
    /// `ferrolb membership key fingerprint v1`. It reveals nothing about the key (HMAC is a
    /// PRF), tells keys apart with a collision chance of 2⁻⁶⁴, and is what speakers exchange
    /// to find a peer whose ring lacks their primary key (issue #32 G5.4,
    /// [`super::hello`]); logs and Events print it in hex.
    pub fn fingerprint(&self) -> [u8; 8] {
        let mac = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.0);
        let tag = ring::hmac::sign(&mac, b"ferrolb membership key fingerprint v1");
        let mut out = [0; 8];
        out.copy_from_slice(&tag.as_ref()[..8]);
        out
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Key(<redacted>)")
    }
}

/// The keys of one speaker: the first seals, all of them open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRing {
    keys: Vec<Key>,
}

impl KeyRing {
    /// A ring with exactly one key (it both seals and opens).
    pub fn single(key: Key) -> Self {
        Self { keys: vec![key] }
    }

    /// Reads and parses a key file (format in the [module docs](self)).
    ///
    /// # Errors
    /// [`KeyError::Io`] when the file cannot be read; any parse error of [`KeyRing::parse`].
    pub fn from_file(path: &Path) -> Result<Self, KeyError> {
        let bytes = std::fs::read(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&bytes)
    }

    /// Parses the contents of a key file (format in the [module docs](self)).
    ///
    /// # Errors
    /// A [`KeyError`] naming what is wrong and, for hex files, the 1-based line; the error never
    /// contains key material.
    pub fn parse(contents: &[u8]) -> Result<Self, KeyError> {
        if contents.len() == KEY_LEN && !looks_like_text_line(contents) {
            let mut raw = [0u8; KEY_LEN];
            raw.copy_from_slice(contents);
            check_strength(&raw, 1)?;
            return Ok(Self::single(Key(raw)));
        }
        if contents.len() == KEY_LEN && is_printable_ascii(contents) && !is_hex(contents) {
            return Err(KeyError::LooksLikePassword);
        }
        let text = std::str::from_utf8(contents).map_err(|_| KeyError::NotHexText {
            len: contents.len(),
        })?;
        let mut keys = Vec::new();
        for (index, raw_line) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = raw_line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bytes = parse_hex_key(line, line_no)?;
            check_strength(&bytes, line_no)?;
            if keys.iter().any(|k: &Key| k.0 == bytes) {
                return Err(KeyError::Duplicate { line: line_no });
            }
            keys.push(Key(bytes));
            if keys.len() > MAX_KEYS {
                return Err(KeyError::TooMany { max: MAX_KEYS });
            }
        }
        if keys.is_empty() {
            return Err(KeyError::Empty);
        }
        Ok(Self { keys })
    }

    /// The key that seals outgoing datagrams (the first in the file).
    pub fn primary(&self) -> &Key {
        // Invariant: construction never yields an empty ring.
        &self.keys[0]
    }

    /// All keys, primary first; each one is tried when opening a datagram.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }
}

/// Why a key file was refused. Messages say what to do and never include key material.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The file could not be read.
    #[error("cannot read membership key file {path}: {source}")]
    Io {
        /// The path that was read.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// No key at all (empty file, or only comments and blank lines).
    #[error(
        "membership key file holds no key: expected 64 hex digits (e.g. `openssl rand -hex 32`) or 32 raw bytes"
    )]
    Empty,
    /// A 32-byte file of printable, non-hex ASCII: a password, not a key.
    #[error(
        "membership key file holds 32 printable characters, which looks like a password; use 64 hex digits from `openssl rand -hex 32` instead"
    )]
    LooksLikePassword,
    /// Neither 32 raw bytes nor UTF-8 text.
    #[error(
        "membership key file is {len} bytes of binary data; expected exactly 32 raw bytes or lines of 64 hex digits"
    )]
    NotHexText {
        /// Length of the file in bytes.
        len: usize,
    },
    /// A line is not exactly 64 hex digits.
    #[error(
        "membership key file line {line}: {reason}; each key must be exactly 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`"
    )]
    BadHex {
        /// 1-based line number.
        line: usize,
        /// What is wrong (length or an invalid character), without the line's contents.
        reason: String,
    },
    /// A key is all zero or has too few distinct byte values.
    #[error(
        "membership key {entry} is too weak ({reason}); generate a random one with `openssl rand -hex 32`"
    )]
    Weak {
        /// 1-based line number (hex form) or 1 (raw form).
        entry: usize,
        /// Which check failed.
        reason: String,
    },
    /// The same key appears twice.
    #[error("membership key file line {line} repeats an earlier key")]
    Duplicate {
        /// 1-based line number of the repetition.
        line: usize,
    },
    /// More than [`MAX_KEYS`] keys.
    #[error(
        "membership key file holds more than {max} keys; keep only the current key and the one being rotated in or out"
    )]
    TooMany {
        /// The limit.
        max: usize,
    },
}

fn parse_hex_key(line: &str, line_no: usize) -> Result<[u8; KEY_LEN], KeyError> {
    let digits = line.as_bytes();
    if digits.len() != KEY_LEN * 2 {
        return Err(KeyError::BadHex {
            line: line_no,
            reason: format!("{} characters instead of {}", digits.len(), KEY_LEN * 2),
        });
    }
    let mut out = [0u8; KEY_LEN];
    for (i, pair) in digits.chunks_exact(2).enumerate() {
        let (Some(hi), Some(lo)) = (hex_value(pair[0]), hex_value(pair[1])) else {
            return Err(KeyError::BadHex {
                line: line_no,
                reason: format!("non-hex character near position {}", i * 2 + 1),
            });
        };
        out[i] = (hi << 4) | lo;
    }
    Ok(out)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn check_strength(bytes: &[u8; KEY_LEN], entry: usize) -> Result<(), KeyError> {
    if bytes.iter().all(|b| *b == 0) {
        return Err(KeyError::Weak {
            entry,
            reason: "all zero".to_owned(),
        });
    }
    let mut seen = [false; 256];
    for b in bytes {
        seen[usize::from(*b)] = true;
    }
    let distinct = seen.iter().filter(|s| **s).count();
    if distinct < MIN_DISTINCT_BYTES {
        return Err(KeyError::Weak {
            entry,
            reason: format!(
                "only {distinct} distinct byte values, at least {MIN_DISTINCT_BYTES} expected"
            ),
        });
    }
    Ok(())
}

fn is_printable_ascii(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| (0x20..0x7f).contains(b))
}

fn is_hex(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| hex_value(*b).is_some())
}

/// A 32-byte file that is entirely printable ASCII (possibly with a final newline) is text.
fn looks_like_text_line(bytes: &[u8]) -> bool {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    is_printable_ascii(body)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const HEX_A: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const HEX_B: &str = "F0E1D2C3B4A5968778695A4B3C2D1E0FF0E1D2C3B4A5968778695A4B3C2D1E0F";

    #[test]
    fn hex_with_newline_and_comments() {
        let text = format!("# current\n{HEX_A}\n\n  {HEX_B}  \n");
        let ring = KeyRing::parse(text.as_bytes()).unwrap();
        assert_eq!(ring.keys().len(), 2);
        assert_eq!(ring.primary().as_bytes()[1], 1);
        assert_eq!(ring.keys()[1].as_bytes()[0], 0xf0);
    }

    #[test]
    fn raw_binary_key() {
        let mut raw = [0u8; 32];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37).wrapping_add(200);
        }
        let ring = KeyRing::parse(&raw).unwrap();
        assert_eq!(ring.primary().as_bytes(), &raw);
    }

    #[test]
    fn refuses_short_long_and_bad_chars() {
        let short = &HEX_A[..62];
        assert!(matches!(
            KeyRing::parse(short.as_bytes()),
            Err(KeyError::BadHex { line: 1, .. })
        ));
        let long = format!("{HEX_A}00");
        assert!(matches!(
            KeyRing::parse(long.as_bytes()),
            Err(KeyError::BadHex { line: 1, .. })
        ));
        let bad = format!("{}zz", &HEX_A[..62]);
        let err = KeyRing::parse(bad.as_bytes()).unwrap_err();
        assert!(err.to_string().contains("non-hex"), "{err}");
        assert!(
            !err.to_string().contains(&HEX_A[..10]),
            "no key material in errors"
        );
    }

    #[test]
    fn refuses_empty_and_comment_only() {
        assert!(matches!(KeyRing::parse(b""), Err(KeyError::Empty)));
        assert!(matches!(
            KeyRing::parse(b"# nothing\n\n"),
            Err(KeyError::Empty)
        ));
    }

    #[test]
    fn refuses_weak_keys() {
        let zero = "0".repeat(64);
        assert!(matches!(
            KeyRing::parse(zero.as_bytes()),
            Err(KeyError::Weak { entry: 1, .. })
        ));
        let pattern = "0102".repeat(16);
        assert!(matches!(
            KeyRing::parse(pattern.as_bytes()),
            Err(KeyError::Weak { .. })
        ));
        assert!(matches!(
            KeyRing::parse(&[0u8; 32]),
            Err(KeyError::Weak { .. })
        ));
        assert!(Key::new([7u8; 32]).is_err());
    }

    #[test]
    fn refuses_password_like_32_bytes() {
        assert!(matches!(
            KeyRing::parse(b"correct horse battery staple 123"),
            Err(KeyError::LooksLikePassword)
        ));
    }

    #[test]
    fn refuses_duplicates_and_too_many() {
        let dup = format!("{HEX_A}\n{HEX_A}\n");
        assert!(matches!(
            KeyRing::parse(dup.as_bytes()),
            Err(KeyError::Duplicate { line: 2 })
        ));
        let many: Vec<String> = (0..5u8)
            .map(|n| {
                let mut k: Vec<u8> = (0..32u8).collect();
                k[0] = 100 + n;
                k.iter().map(|b| format!("{b:02x}")).collect()
            })
            .collect();
        assert!(matches!(
            KeyRing::parse(many.join("\n").as_bytes()),
            Err(KeyError::TooMany { max: MAX_KEYS })
        ));
    }

    #[test]
    fn debug_redacts() {
        let ring = KeyRing::parse(HEX_A.as_bytes()).unwrap();
        let shown = format!("{ring:?}");
        assert!(shown.contains("redacted"));
        assert!(!shown.contains("15"));
    }

    proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = KeyRing::parse(&bytes);
        }

        #[test]
        fn random_keys_round_trip_through_hex(key in any::<[u8; 32]>()) {
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            match KeyRing::parse(hex.as_bytes()) {
                Ok(ring) => prop_assert_eq!(ring.primary().as_bytes(), &key),
                Err(KeyError::Weak { .. }) => {}
                Err(other) => prop_assert!(false, "unexpected {other}"),
            }
        }
    }
}
