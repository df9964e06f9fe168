//! The sealed datagram format of the membership protocol (DESIGN §5 S3). Pure.
//!
//! Every UDP datagram is one envelope around one message: a foca (SWIM) message or a lease
//! message ([`super::lease`]), told apart by the first plaintext byte (version 2; version 1 had
//! no kind byte and is refused as malformed):
//!
//! ```text
//! offset  size  field
//!      0     4  magic "FLBm"
//!      4     1  version (2)
//!      5     8  sent_at: sender's wall clock, milliseconds since the Unix epoch, big-endian
//!     13    24  nonce: random per datagram (XChaCha20 extended nonce)
//!     37     n  ciphertext of: kind (1 byte: 0 SWIM, 1 lease, 2 hello, 3 carrier, 4 carrier
//!               relay), then the postcard-encoded
//!                 foca message (SWIM header, updates) or lease message
//!   37+n    16  Poly1305 tag
//! ```
//!
//! The AEAD is XChaCha20-Poly1305 (RustCrypto `chacha20poly1305`); the associated data is bytes
//! 0..37 (magic, version, `sent_at`, nonce), so the timestamp cannot be altered without breaking
//! the tag. A 192-bit random nonce makes collisions negligible without any counter state, which
//! matters because speakers restart at will. Overhead is [`OVERHEAD`] = 53 bytes per datagram.

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{Tag, XChaCha20Poly1305, XNonce};
use rand::CryptoRng;

use super::key::{Key, KeyRing};

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"FLBm";
/// Envelope format version.
pub const VERSION: u8 = 2;
/// Length of the random nonce.
pub const NONCE_LEN: usize = 24;
/// Length of the Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Length of the cleartext, authenticated header (magic, version, `sent_at`, nonce).
pub const HEADER_LEN: usize = 4 + 1 + 8 + NONCE_LEN;
/// Bytes added to each foca message: header plus tag.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// The authenticated fields of an opened envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The sender's wall-clock timestamp, milliseconds since the Unix epoch.
    pub sent_at_ms: u64,
    /// The datagram's nonce (the replay-cache key).
    pub nonce: [u8; NONCE_LEN],
    /// The decrypted foca message.
    pub payload: Vec<u8>,
    /// Which key of the ring opened it (0 = the primary): the sender holds that key, so a
    /// reply sealed with it can be opened (issue #32 G1, out-of-order key rotation).
    pub key: usize,
}

/// Why a datagram could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Too short, wrong magic or unknown version: not one of our datagrams at all.
    #[error("malformed membership datagram (length, magic or version)")]
    Malformed,
    /// The tag does not verify under any configured key: forged, corrupted, or sealed with
    /// another key.
    #[error("membership datagram failed authentication")]
    AuthFailed,
}

/// Seals outgoing foca messages with the primary key.
pub struct Sealer {
    cipher: XChaCha20Poly1305,
}

impl Sealer {
    /// A sealer for `key`.
    pub fn new(key: &Key) -> Self {
        Self {
            cipher: cipher_for(key),
        }
    }

    /// Seals `payload` with a fresh nonce drawn from the CSPRNG `rng`.
    ///
    /// Returns `None` only if the AEAD refuses the length (beyond 256 GiB; unreachable for UDP).
    pub fn seal<R: CryptoRng + ?Sized>(
        &self,
        payload: &[u8],
        sent_at_ms: u64,
        rng: &mut R,
    ) -> Option<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        rng.fill_bytes(&mut nonce);
        let mut out = Vec::with_capacity(payload.len() + OVERHEAD);
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.extend_from_slice(&sent_at_ms.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(payload);
        let (aad, body) = out.split_at_mut(HEADER_LEN);
        let tag = self
            .cipher
            .encrypt_inout_detached(&XNonce::from(nonce), aad, body.into())
            .ok()?;
        out.extend_from_slice(tag.as_slice());
        Some(out)
    }
}

/// The framing check alone, without any cryptography: long enough for a header and a tag,
/// magic [`MAGIC`], version [`VERSION`]. A few byte comparisons; [`Opener::open`] runs it too.
///
/// # Errors
/// [`OpenError::Malformed`] when any of these is wrong.
pub fn check_framing(datagram: &[u8]) -> Result<(), OpenError> {
    if datagram.len() < OVERHEAD
        || datagram.get(..4) != Some(&MAGIC[..])
        || datagram.get(4) != Some(&VERSION)
    {
        return Err(OpenError::Malformed);
    }
    Ok(())
}

/// Opens incoming datagrams with every key of the ring.
pub struct Opener {
    ciphers: Vec<XChaCha20Poly1305>,
}

impl Opener {
    /// An opener that accepts datagrams sealed with any key of `ring`.
    pub fn new(ring: &KeyRing) -> Self {
        Self {
            ciphers: ring.keys().iter().map(cipher_for).collect(),
        }
    }

    /// Checks the framing, then verifies and decrypts. Never panics, whatever the input.
    ///
    /// # Errors
    /// [`OpenError::Malformed`] for bad framing, [`OpenError::AuthFailed`] when no key verifies.
    pub fn open(&self, datagram: &[u8]) -> Result<Opened, OpenError> {
        check_framing(datagram)?;
        let (aad, rest) = datagram.split_at(HEADER_LEN);
        let (ciphertext, tag_bytes) = rest.split_at(rest.len() - TAG_LEN);
        let tag = Tag::try_from(tag_bytes).map_err(|_| OpenError::Malformed)?;
        let mut sent_at = [0u8; 8];
        sent_at.copy_from_slice(&aad[5..13]);
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&aad[13..HEADER_LEN]);
        let xnonce = XNonce::from(nonce);
        for (key, cipher) in self.ciphers.iter().enumerate() {
            let mut buf = ciphertext.to_vec();
            if cipher
                .decrypt_inout_detached(&xnonce, aad, buf.as_mut_slice().into(), &tag)
                .is_ok()
            {
                return Ok(Opened {
                    sent_at_ms: u64::from_be_bytes(sent_at),
                    nonce,
                    payload: buf,
                    key,
                });
            }
        }
        Err(OpenError::AuthFailed)
    }
}

fn cipher_for(key: &Key) -> XChaCha20Poly1305 {
    XChaCha20Poly1305::new(&(*key.as_bytes()).into())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn key(seed: u8) -> Key {
        let mut k = [0u8; 32];
        for (i, b) in k.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(29).wrapping_add(seed);
        }
        Key::new(k).unwrap()
    }

    #[test]
    fn seal_open_round_trip() {
        let mut rng = StdRng::seed_from_u64(1);
        let sealer = Sealer::new(&key(1));
        let sealed = sealer.seal(b"hello swim", 1234, &mut rng).unwrap();
        assert_eq!(sealed.len(), 10 + OVERHEAD);
        assert_eq!(&sealed[..4], b"FLBm");
        assert!(!sealed.windows(10).any(|w| w == b"hello swim"), "encrypted");
        let opened = Opener::new(&KeyRing::single(key(1))).open(&sealed).unwrap();
        assert_eq!(opened.payload, b"hello swim");
        assert_eq!(opened.sent_at_ms, 1234);
        assert_eq!(&opened.nonce[..], &sealed[13..37]);
    }

    #[test]
    fn nonces_differ_per_datagram() {
        let mut rng = StdRng::seed_from_u64(2);
        let sealer = Sealer::new(&key(1));
        let a = sealer.seal(b"x", 1, &mut rng).unwrap();
        let b = sealer.seal(b"x", 1, &mut rng).unwrap();
        assert_ne!(a[13..37], b[13..37]);
        assert_ne!(a, b);
    }

    #[test]
    fn wrong_key_fails_and_rotation_ring_opens_both() {
        let mut rng = StdRng::seed_from_u64(3);
        let old = Sealer::new(&key(1)).seal(b"m", 5, &mut rng).unwrap();
        let new = Sealer::new(&key(2)).seal(b"m", 5, &mut rng).unwrap();
        let only_new = Opener::new(&KeyRing::single(key(2)));
        assert_eq!(only_new.open(&old), Err(OpenError::AuthFailed));
        assert!(only_new.open(&new).is_ok());
        let hex = |k: &Key| {
            k.as_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let both =
            KeyRing::parse(format!("{}\n{}\n", hex(&key(2)), hex(&key(1))).as_bytes()).unwrap();
        let opener = Opener::new(&both);
        assert!(opener.open(&old).is_ok());
        assert!(opener.open(&new).is_ok());
    }

    #[test]
    fn tampered_timestamp_fails() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut sealed = Sealer::new(&key(1)).seal(b"m", 5, &mut rng).unwrap();
        sealed[12] ^= 1;
        assert_eq!(
            Opener::new(&KeyRing::single(key(1))).open(&sealed),
            Err(OpenError::AuthFailed)
        );
    }

    #[test]
    fn framing_errors_are_malformed() {
        let opener = Opener::new(&KeyRing::single(key(1)));
        assert_eq!(opener.open(b""), Err(OpenError::Malformed));
        assert_eq!(opener.open(&[0u8; 100]), Err(OpenError::Malformed));
        let mut rng = StdRng::seed_from_u64(5);
        let mut sealed = Sealer::new(&key(1)).seal(b"", 5, &mut rng).unwrap();
        assert_eq!(sealed.len(), OVERHEAD);
        assert!(opener.open(&sealed).is_ok(), "empty payload is well-formed");
        sealed[4] = 1;
        assert_eq!(
            opener.open(&sealed),
            Err(OpenError::Malformed),
            "version 1 (no kind byte) is refused"
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_open(bytes in proptest::collection::vec(any::<u8>(), 0..1600)) {
            let opener = Opener::new(&KeyRing::single(key(1)));
            prop_assert!(opener.open(&bytes).is_err());
        }

        #[test]
        fn arbitrary_bytes_behind_valid_framing_never_open(
            body in proptest::collection::vec(any::<u8>(), 0..1600),
        ) {
            let mut datagram = Vec::from(MAGIC);
            datagram.push(VERSION);
            datagram.extend_from_slice(&body);
            let opener = Opener::new(&KeyRing::single(key(1)));
            prop_assert!(opener.open(&datagram).is_err());
        }

        #[test]
        fn any_bit_flip_or_truncation_fails(
            payload in proptest::collection::vec(any::<u8>(), 0..300),
            pos in any::<prop::sample::Index>(),
            bit in 0u8..8,
            cut in any::<prop::sample::Index>(),
        ) {
            let mut rng = StdRng::seed_from_u64(6);
            let sealed = Sealer::new(&key(1)).seal(&payload, 99, &mut rng).unwrap();
            let opener = Opener::new(&KeyRing::single(key(1)));
            prop_assert_eq!(&opener.open(&sealed).unwrap().payload, &payload);
            let mut flipped = sealed.clone();
            let i = pos.index(flipped.len());
            flipped[i] ^= 1 << bit;
            prop_assert!(opener.open(&flipped).is_err());
            let truncated = &sealed[..cut.index(sealed.len())];
            prop_assert!(opener.open(truncated).is_err());
        }
    }
}
