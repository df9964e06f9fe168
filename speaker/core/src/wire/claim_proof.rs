//! Claim proofs: a speaker's gratuitous ARP and unsolicited Neighbor Advertisement carry a tag,
//! keyed with the membership key, that says "a speaker of this cluster announced `ip` at `mac`
//! at wall-clock time `at`". Pure: no clock is read here; time comes in as milliseconds since
//! the Unix epoch.
//!
//! **Why (DESIGN S15, issue #32 G4).** An owner yields an IP to a peer that announces it (the
//! peer's view differs: it declared this speaker down, or sees it ineligible), which keeps the
//! two-answerer window of a handover to one frame. Before proofs, "a peer" meant "a frame whose
//! sender MAC is a peer Node's", and any host on the LAN could forge that MAC: one forged ARP
//! every 2.5 s kept an owned IP unanswered for as long as the attacker liked. Now an owner
//! yields only to a claim whose proof verifies under one of the membership keys and is fresh;
//! a frame without a valid proof is at most a foreign conflict (counted, rate-limited Event,
//! RFC 5227 defence), never a yield.
//!
//! **Format.** A proof is [`PROOF_LEN`] bytes: the magic `FLBp`, `at` (u64 big-endian,
//! milliseconds since the Unix epoch, the sender's wall clock when it sent the frame) and a
//! 16-byte tag. In an ARP frame it follows the 28-byte ARP payload (Ethernet frames are padded
//! to 60 bytes anyway; ARP receivers, Linux's included, ignore what follows the payload,
//! RFC 826 fixes the payload's length by its own fields). In an NA it is an NDP option of type
//! [`NDP_OPTION_TYPE`] (253, reserved for experiments by RFC 4727 §2): receivers ignore options
//! they do not recognise (RFC 4861 §4.6).
//!
//! **Tag.** HMAC-SHA256 (`ring`), truncated to 16 bytes, under a claim key derived from each
//! membership key as HMAC-SHA256(key, "ferrolb claim proof v1") (so the tag never reuses the
//! AEAD key of the membership envelope), over "ferrolb claim v1" ‖ family ‖ MAC ‖ IP ‖ `at`. Frames
//! are signed with the primary key and verified under every key of the ring, as the membership
//! does during a rotation.
//!
//! **Freshness.** A proof counts only while `|now − at| ≤` [`MAX_CLOCK_SKEW`]. A proof binds the
//! MAC and the IP, so nobody can re-point it; what a LAN host can do is replay a real
//! announcement while it is fresh, which repeats a claim a speaker really made within the last
//! [`MAX_CLOCK_SKEW`]. The owner yields only to a claim signed after its own ownership began
//! (`answer::iface`, issue #32 G4), so a replay of an earlier holder's announcement — the
//! interim owner's, after a failback — yields nothing. Speakers' wall clocks must agree within that (NTP); a speaker whose clock
//! is off by more sends proofs nobody accepts, and its peers fall back to the membership to hand
//! the IP over (the yield only shortens a handover, it is never needed for one).

use std::net::IpAddr;

use ring::hmac;

use super::MacAddr;
use crate::membership::key::KeyRing;

/// Bytes of a proof: magic, `at`, tag.
pub const PROOF_LEN: usize = 4 + 8 + TAG_LEN;
/// The first four bytes of a proof.
pub const MAGIC: [u8; 4] = *b"FLBp";
/// Bytes of the truncated HMAC-SHA256 tag (128 bits).
pub const TAG_LEN: usize = 16;
/// The NDP option type that carries a proof in a Neighbor Advertisement (RFC 4727: 253 is
/// one of the two types reserved for experiments).
pub const NDP_OPTION_TYPE: u8 = 253;
/// Largest difference, in milliseconds, between a proof's `at` and the receiver's wall clock
/// for the proof to count (in either direction).
pub const MAX_CLOCK_SKEW: u64 = 2_000;
/// Where an ARP frame's proof starts: the Ethernet header (14) and the ARP payload for IPv4
/// over Ethernet (28).
pub const ARP_PROOF_OFFSET: usize = 14 + 28;

const KEY_LABEL: &[u8] = b"ferrolb claim proof v1";
const DOMAIN: &[u8] = b"ferrolb claim v1";

/// A claim proof as carried in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof {
    /// The sender's wall clock when it sent the frame, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The truncated HMAC-SHA256 tag.
    pub tag: [u8; TAG_LEN],
}

impl Proof {
    /// The [`PROOF_LEN`] bytes of the proof (magic, `at`, tag).
    pub fn to_bytes(&self) -> [u8; PROOF_LEN] {
        let mut out = [0u8; PROOF_LEN];
        out[..4].copy_from_slice(&MAGIC);
        out[4..12].copy_from_slice(&self.at_ms.to_be_bytes());
        out[12..].copy_from_slice(&self.tag);
        out
    }

    /// Reads a proof from the start of `bytes`; `None` when it is too short or the magic is not
    /// there (a frame of another implementation, or padding).
    pub fn from_bytes(bytes: &[u8]) -> Option<Proof> {
        let bytes = bytes.get(..PROOF_LEN)?;
        if bytes[..4] != MAGIC {
            return None;
        }
        let at_ms = u64::from_be_bytes(bytes[4..12].try_into().ok()?);
        let tag = bytes[12..].try_into().ok()?;
        Some(Proof { at_ms, tag })
    }
}

/// Why a proof does not count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    /// The tag verifies under no key of the ring: forged, altered (MAC, IP or time), or made
    /// with a key this speaker does not have.
    #[error("claim proof does not verify under any membership key")]
    BadTag,
    /// The tag verifies but `at` is more than [`MAX_CLOCK_SKEW`] from this speaker's clock: a
    /// replay of an old announcement, or clocks that disagree.
    #[error("claim proof is stale (or the clocks disagree by more than 2 s)")]
    Stale,
}

/// The claim keys derived from a membership [`KeyRing`]: the first signs, all verify.
#[derive(Clone)]
pub struct ClaimKeys {
    keys: Vec<hmac::Key>,
}

impl std::fmt::Debug for ClaimKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClaimKeys({} keys)", self.keys.len())
    }
}

impl ClaimKeys {
    /// The claim keys of every key in `ring`, primary first.
    pub fn from_ring(ring: &KeyRing) -> ClaimKeys {
        let keys = ring
            .keys()
            .iter()
            .map(|k| {
                let master = hmac::Key::new(hmac::HMAC_SHA256, k.as_bytes());
                let derived = hmac::sign(&master, KEY_LABEL);
                hmac::Key::new(hmac::HMAC_SHA256, derived.as_ref())
            })
            .collect();
        ClaimKeys { keys }
    }

    /// The proof for announcing `ip` at `mac`, sent at `at_ms` (wall clock, ms since the Unix
    /// epoch), under the primary key.
    pub fn sign(&self, mac: MacAddr, ip: IpAddr, at_ms: u64) -> Proof {
        // A ring is never empty (`KeyRing` refuses that); an empty one signs with zeros, which
        // verify nowhere.
        let tag = self
            .keys
            .first()
            .map(|k| tag_of(k, mac, ip, at_ms))
            .unwrap_or([0; TAG_LEN]);
        Proof { at_ms, tag }
    }

    /// Whether `proof` proves a claim of `ip` at `mac`, received at `now_ms` (wall clock).
    ///
    /// # Errors
    /// [`ProofError::BadTag`] when no key verifies it, [`ProofError::Stale`] when it does but
    /// `at` is more than [`MAX_CLOCK_SKEW`] away from `now_ms`.
    pub fn verify(
        &self,
        proof: &Proof,
        mac: MacAddr,
        ip: IpAddr,
        now_ms: u64,
    ) -> Result<(), ProofError> {
        let ok = self.keys.iter().any(|k| {
            let expected = tag_of(k, mac, ip, proof.at_ms);
            // Constant time (`subtle`): a timing side channel must not leak how many leading
            // bytes of a forged tag were right.
            bool::from(subtle::ConstantTimeEq::ct_eq(&expected[..], &proof.tag[..]))
        });
        if !ok {
            return Err(ProofError::BadTag);
        }
        if now_ms.abs_diff(proof.at_ms) > MAX_CLOCK_SKEW {
            return Err(ProofError::Stale);
        }
        Ok(())
    }
}

fn tag_of(key: &hmac::Key, mac: MacAddr, ip: IpAddr, at_ms: u64) -> [u8; TAG_LEN] {
    let mut ctx = hmac::Context::with_key(key);
    ctx.update(DOMAIN);
    ctx.update(&[mac.0, mac.1, mac.2, mac.3, mac.4, mac.5]);
    match ip {
        IpAddr::V4(v4) => {
            ctx.update(&[4]);
            ctx.update(&v4.octets());
        }
        IpAddr::V6(v6) => {
            ctx.update(&[6]);
            ctx.update(&v6.octets());
        }
    }
    ctx.update(&at_ms.to_be_bytes());
    let full = ctx.sign();
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&full.as_ref()[..TAG_LEN]);
    tag
}

/// Appends `proof` to an ARP frame built by [`super::arp::build_arp`] (its length is
/// [`ARP_PROOF_OFFSET`]; a longer frame is cut back to it first).
pub fn append_to_arp(frame: &mut Vec<u8>, proof: &Proof) {
    frame.truncate(ARP_PROOF_OFFSET);
    frame.extend_from_slice(&proof.to_bytes());
}

/// The proof an ARP frame carries after its payload, if any (see the module docs).
pub fn from_arp(frame: &[u8]) -> Option<Proof> {
    Proof::from_bytes(frame.get(ARP_PROOF_OFFSET..)?)
}

/// The NDP option carrying `proof`: type [`NDP_OPTION_TYPE`], length 4 (32 bytes: type, length,
/// the proof, two bytes of zero padding).
pub fn ndp_option(proof: &Proof) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[0] = NDP_OPTION_TYPE;
    out[1] = 4;
    out[2..2 + PROOF_LEN].copy_from_slice(&proof.to_bytes());
    out
}

/// The proof in the options of a Neighbor Advertisement frame (Ethernet + IPv6 + ICMPv6), if
/// any: the first option of type [`NDP_OPTION_TYPE`] whose content starts with [`MAGIC`].
/// Malformed option lists end the search (nothing is trusted from them).
pub fn from_na(frame: &[u8]) -> Option<Proof> {
    // Ethernet 14 + IPv6 40 + NA header (type, code, checksum, flags, target) 24.
    let mut options = frame.get(14 + 40 + 24..)?;
    while options.len() >= 8 {
        let len = usize::from(options[1]) * 8;
        if len == 0 || len > options.len() {
            return None;
        }
        if options[0] == NDP_OPTION_TYPE
            && let Some(p) = Proof::from_bytes(&options[2..len])
        {
            return Some(p);
        }
        options = &options[len..];
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::membership::key::Key;
    use crate::wire::arp::{GratuitousForm, build_gratuitous_arp, parse_arp};
    use std::net::{Ipv4Addr, Ipv6Addr};

    const MAC: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x0b);
    const OTHER: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x0c);
    const NOW: u64 = 1_790_000_000_000;

    fn ring(bytes: &[u8]) -> KeyRing {
        let keys: Vec<Key> = bytes
            .iter()
            .map(|b| Key::new(std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ b)).unwrap())
            .collect();
        let text: String = keys
            .iter()
            .map(|k| {
                k.as_bytes()
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>()
                    + "\n"
            })
            .collect();
        KeyRing::parse(text.as_bytes()).unwrap()
    }

    fn v4() -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(198, 51, 100, 10))
    }

    #[test]
    fn a_signed_claim_verifies_and_any_change_breaks_it() {
        let keys = ClaimKeys::from_ring(&ring(&[0x11]));
        let p = keys.sign(MAC, v4(), NOW);
        assert_eq!(keys.verify(&p, MAC, v4(), NOW), Ok(()));
        assert_eq!(
            keys.verify(&p, OTHER, v4(), NOW),
            Err(ProofError::BadTag),
            "another MAC"
        );
        let other_ip = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 11));
        assert_eq!(keys.verify(&p, MAC, other_ip, NOW), Err(ProofError::BadTag));
        let mut later = p;
        later.at_ms += 1;
        assert_eq!(keys.verify(&later, MAC, v4(), NOW), Err(ProofError::BadTag));
        let mut flipped = p;
        flipped.tag[15] ^= 1;
        assert_eq!(
            keys.verify(&flipped, MAC, v4(), NOW),
            Err(ProofError::BadTag)
        );
    }

    #[test]
    fn only_a_key_of_the_ring_verifies_and_rotation_orders_agree() {
        let old = ClaimKeys::from_ring(&ring(&[0x11]));
        let new_first = ClaimKeys::from_ring(&ring(&[0x22, 0x11]));
        let stranger = ClaimKeys::from_ring(&ring(&[0x33]));
        let p = old.sign(MAC, v4(), NOW);
        assert_eq!(new_first.verify(&p, MAC, v4(), NOW), Ok(()));
        assert_eq!(stranger.verify(&p, MAC, v4(), NOW), Err(ProofError::BadTag));
        let q = new_first.sign(MAC, v4(), NOW);
        assert_eq!(old.verify(&q, MAC, v4(), NOW), Err(ProofError::BadTag));
    }

    #[test]
    fn proofs_go_stale_beyond_the_skew_both_ways() {
        let keys = ClaimKeys::from_ring(&ring(&[0x11]));
        let p = keys.sign(MAC, v4(), NOW);
        assert_eq!(keys.verify(&p, MAC, v4(), NOW + MAX_CLOCK_SKEW), Ok(()));
        assert_eq!(keys.verify(&p, MAC, v4(), NOW - MAX_CLOCK_SKEW), Ok(()));
        assert_eq!(
            keys.verify(&p, MAC, v4(), NOW + MAX_CLOCK_SKEW + 1),
            Err(ProofError::Stale)
        );
        assert_eq!(
            keys.verify(&p, MAC, v4(), NOW - MAX_CLOCK_SKEW - 1),
            Err(ProofError::Stale)
        );
    }

    #[test]
    fn an_arp_frame_carries_its_proof_and_still_parses() {
        let keys = ClaimKeys::from_ring(&ring(&[0x11]));
        let Some(IpAddr::V4(ip)) = Some(v4()) else {
            unreachable!()
        };
        let mut frame = build_gratuitous_arp(MAC, ip, GratuitousForm::Request);
        assert_eq!(
            from_arp(&frame),
            None,
            "a plain frame (maybe padded) has none"
        );
        let p = keys.sign(MAC, v4(), NOW);
        append_to_arp(&mut frame, &p);
        assert_eq!(frame.len(), ARP_PROOF_OFFSET + PROOF_LEN);
        assert_eq!(from_arp(&frame), Some(p));
        let parsed = parse_arp(&frame).unwrap();
        assert_eq!(parsed.sender_ip, ip);
        assert_eq!(parsed.sender_mac, MAC);
        // Zero padding (what a NIC adds to a 42-byte frame) is not a proof.
        let mut padded = build_gratuitous_arp(MAC, ip, GratuitousForm::Request);
        padded.resize(60, 0);
        assert_eq!(from_arp(&padded), None);
    }

    #[test]
    fn na_options_are_searched_and_malformed_lists_trust_nothing() {
        let keys = ClaimKeys::from_ring(&ring(&[0x11]));
        let ip = IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10));
        let p = keys.sign(MAC, ip, NOW);
        let mut frame = vec![0u8; 14 + 40 + 24];
        frame.extend_from_slice(&[2, 1, 2, 0, 0, 0, 0, 0x0b]); // Target Link-Layer Address
        frame.extend_from_slice(&ndp_option(&p));
        assert_eq!(from_na(&frame), Some(p));
        let mut broken = frame.clone();
        broken[14 + 40 + 24 + 1] = 0; // zero-length option
        assert_eq!(from_na(&broken), None);
        let mut short = frame.clone();
        short.truncate(short.len() - 8);
        assert_eq!(from_na(&short), None);
    }

    #[test]
    fn an_na_carries_its_proof_as_an_option_and_still_validates() {
        use crate::wire::ndp::{
            NdpMessage, append_option, build_unsolicited_advertisement, parse_ndp,
        };
        let keys = ClaimKeys::from_ring(&ring(&[0x11]));
        let target = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x10);
        let link_local = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0x0b);
        let mut frame = build_unsolicited_advertisement(MAC, link_local, target);
        assert_eq!(from_na(&frame), None);
        let p = keys.sign(MAC, IpAddr::V6(target), NOW);
        assert!(append_option(&mut frame, &ndp_option(&p)));
        assert_eq!(from_na(&frame), Some(p));
        // Length and checksum were fixed: the RFC 4861 §7.1.2 validation still passes.
        let Ok(NdpMessage::Advertisement(na)) = parse_ndp(&frame) else {
            panic!("not a valid NA: {:?}", parse_ndp(&frame))
        };
        assert_eq!((na.target, na.target_link_layer), (target, Some(MAC)));
        assert!(
            !append_option(&mut frame, &[1, 2, 3]),
            "not a multiple of 8"
        );
    }

    proptest::proptest! {
        /// Whatever follows an ARP payload or sits in NA options, reading a proof never panics.
        #[test]
        fn reading_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..200)) {
            let _ = from_arp(&bytes);
            let _ = from_na(&bytes);
            let _ = Proof::from_bytes(&bytes);
        }
    }
}
