//! The SWIM identity of one speaker: node name, UDP address and generation (DESIGN §5 S3). Pure.
//!
//! foca keeps at most one identity per [`foca::Identity::Addr`]; ours is the **UDP address**
//! (Node InternalIP and membership port), because peers are found by address: a speaker announces
//! to `InternalIP:7947` before it knows who answers there, and foca accepts an `Announce` whose
//! destination has our address. When two identities share an address, the one with the higher
//! `generation` wins ([`foca::Identity::win_addr_conflict`]): a restarted speaker starts with a
//! fresh generation (wall-clock microseconds) and therefore supersedes its previous incarnation
//! at once instead of waiting for it to be declared down. When the cluster wrongly declares a
//! live speaker down, foca calls [`foca::Identity::renew`], which bumps the generation by one,
//! and the speaker rejoins by itself.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest accepted node name: a Kubernetes object name is a DNS subdomain of at most 253
/// characters (Kubernetes API reference, "Object Names and IDs").
pub const MAX_NODE_NAME_LEN: usize = 253;

/// One speaker as seen by SWIM. Serialized with postcard inside sealed datagrams.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct SpeakerId {
    /// The Kubernetes Node name the speaker runs on (the member name reported to the election).
    pub name: String,
    /// The UDP address peers send to: the Node's InternalIP and the membership port.
    pub addr: SocketAddr,
    /// Start generation: wall-clock microseconds since the Unix epoch at start-up, plus one per
    /// automatic rejoin. Higher wins.
    pub generation: u64,
}

impl SpeakerId {
    /// An identity for a speaker starting now: generation = current wall-clock microseconds.
    ///
    /// # Errors
    /// [`IdentityError`] when `name` is empty or longer than [`MAX_NODE_NAME_LEN`].
    pub fn starting_now(name: &str, addr: SocketAddr) -> Result<Self, IdentityError> {
        Self::with_generation(name, addr, generation_now())
    }

    /// An identity with an explicit generation (tests, and restarts that persist a counter).
    ///
    /// # Errors
    /// [`IdentityError`] when `name` is empty or longer than [`MAX_NODE_NAME_LEN`].
    pub fn with_generation(
        name: &str,
        addr: SocketAddr,
        generation: u64,
    ) -> Result<Self, IdentityError> {
        if name.is_empty() {
            return Err(IdentityError::EmptyName);
        }
        if name.len() > MAX_NODE_NAME_LEN {
            return Err(IdentityError::NameTooLong { len: name.len() });
        }
        Ok(Self {
            name: name.to_owned(),
            addr,
            generation,
        })
    }

    /// The destination identity used to announce to a peer known only by its address (from the
    /// Node's InternalIP): empty name, generation 0. It only ever appears as the destination of
    /// an `Announce`, which foca accepts when the destination *address* is its own.
    pub fn placeholder(addr: SocketAddr) -> Self {
        Self {
            name: String::new(),
            addr,
            generation: 0,
        }
    }

    /// Whether a datagram whose UDP source is `from` may speak for this identity: the same port
    /// and the same IP, an IPv4-mapped IPv6 source (`::ffff:a.b.c.d`, as a socket bound to `[::]`
    /// reports IPv4 senders) counting as its IPv4 form. A member sends from the socket it
    /// advertises (the speaker binds it to its advertised address), so any other source is one
    /// key holder speaking for another member (issue #27 item 3, `docs/membership.md`). Pure.
    pub fn is_sent_from(&self, from: SocketAddr) -> bool {
        self.addr.port() == from.port() && self.addr.ip().to_canonical() == from.ip().to_canonical()
    }

    /// Whether this is an address-only [`SpeakerId::placeholder`].
    pub fn is_placeholder(&self) -> bool {
        self.name.is_empty()
    }
}

impl std::fmt::Debug for SpeakerId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}#{}", self.name, self.addr, self.generation)
    }
}

impl foca::Identity for SpeakerId {
    type Addr = SocketAddr;

    fn renew(&self) -> Option<Self> {
        Some(Self {
            name: self.name.clone(),
            addr: self.addr,
            generation: self.generation.saturating_add(1),
        })
    }

    fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn win_addr_conflict(&self, adversary: &Self) -> bool {
        // Higher generation wins; on a tie (two processes started in the same microsecond, or a
        // clock that went backwards) the name breaks it so that every member picks the same.
        (self.generation, &self.name) > (adversary.generation, &adversary.name)
    }
}

/// Why an identity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    /// The node name is empty.
    #[error("speaker node name is empty; set it from the Pod's spec.nodeName")]
    EmptyName,
    /// The node name is longer than a Kubernetes object name may be.
    #[error("speaker node name is {len} bytes long; Kubernetes names are at most 253")]
    NameTooLong {
        /// Its length in bytes.
        len: usize,
    },
}

/// Microseconds since the Unix epoch, or 1 if the clock is before 1970 (never 0, which is the
/// placeholder generation).
pub fn generation_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(1)
        .max(1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use foca::Identity;

    fn addr(port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, 10], port))
    }

    #[test]
    fn higher_generation_wins_and_renew_bumps() {
        let old = SpeakerId::with_generation("node-1", addr(7947), 10).unwrap();
        let new = old.renew().unwrap();
        assert_eq!(new.generation, 11);
        assert_eq!(new.addr(), old.addr());
        assert!(new.win_addr_conflict(&old));
        assert!(!old.win_addr_conflict(&new));
    }

    #[test]
    fn tie_is_broken_the_same_way_by_both_sides() {
        let a = SpeakerId::with_generation("node-1", addr(1), 5).unwrap();
        let b = SpeakerId::with_generation("node-2", addr(1), 5).unwrap();
        assert!(a.win_addr_conflict(&b) != b.win_addr_conflict(&a));
    }

    #[test]
    fn names_are_validated() {
        assert_eq!(
            SpeakerId::starting_now("", addr(1)),
            Err(IdentityError::EmptyName)
        );
        let long = "n".repeat(254);
        assert_eq!(
            SpeakerId::starting_now(&long, addr(1)),
            Err(IdentityError::NameTooLong { len: 254 })
        );
        assert!(SpeakerId::starting_now(&"n".repeat(253), addr(1)).is_ok());
    }

    /// Issue #27 item 3: an identity speaks only from its own IP and port; the IPv4-mapped form
    /// of its IP is the same IP; another IP, another port or another family is not.
    #[test]
    fn an_identity_is_sent_only_from_its_own_address() {
        let id = SpeakerId::with_generation("node-1", addr(7947), 1).unwrap();
        assert!(id.is_sent_from(addr(7947)));
        let mapped: SocketAddr = "[::ffff:192.0.2.10]:7947".parse().unwrap();
        assert!(id.is_sent_from(mapped));
        assert!(!id.is_sent_from(addr(7948)));
        assert!(!id.is_sent_from("192.0.2.11:7947".parse().unwrap()));
        let v6 =
            SpeakerId::with_generation("node-6", "[2001:db8::6]:7947".parse().unwrap(), 1).unwrap();
        assert!(v6.is_sent_from("[2001:db8::6]:7947".parse().unwrap()));
        assert!(!v6.is_sent_from("[2001:db8::7]:7947".parse().unwrap()));
        assert!(!v6.is_sent_from(addr(7947)));
    }

    #[test]
    fn restart_generation_supersedes() {
        let first = SpeakerId::starting_now("node-1", addr(7947)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = SpeakerId::starting_now("node-1", addr(7947)).unwrap();
        assert!(second.win_addr_conflict(&first));
        assert!(!SpeakerId::placeholder(addr(1)).name.contains('n'));
        assert!(SpeakerId::placeholder(addr(1)).is_placeholder());
    }
}
