//! The `IPConflict` Event: the one piece of text the speaker writes and the controller reads
//! (issue #10 item 5). Pure.
//!
//! The owner of an IP writes a Warning Event with reason [`REASON_IP_CONFLICT`] on each Service of
//! the IP when another host claims it (after a conflict on an announced IP, or when that host
//! answered the probe before the first announcement). Its note starts with
//! [`note_head`]`(ip, mac)` — "`<ip>` is also claimed by `<mac>`" — and goes on in words for the
//! person reading `kubectl describe svc`. The controller finds these Events (a watch filtered by
//! reason) and folds them into the pool condition `AddressConflict` ([`parse_note`]); keeping the
//! head in one place keeps both sides in step.

use std::net::IpAddr;

/// `reason` of the Event.
pub const REASON_IP_CONFLICT: &str = "IPConflict";

/// The start of every `IPConflict` note: "`<ip>` is also claimed by `<mac>`", the MAC as
/// lowercase `aa:bb:cc:dd:ee:ff`.
pub fn note_head(ip: IpAddr, mac: &str) -> String {
    format!("{ip} is also claimed by {mac}")
}

/// The IP and the foreign MAC of an `IPConflict` note, or `None` when the note does not start
/// with [`note_head`] (another writer's Event with the same reason: ignored, never an error).
pub fn parse_note(note: &str) -> Option<(IpAddr, String)> {
    let mut words = note.split_whitespace();
    let ip: IpAddr = words.next()?.parse().ok()?;
    let glue = [words.next()?, words.next()?, words.next()?, words.next()?];
    if glue != ["is", "also", "claimed", "by"] {
        return None;
    }
    let mac = words.next()?;
    let hex_pairs = mac.split(':').collect::<Vec<_>>();
    let is_mac = hex_pairs.len() == 6
        && hex_pairs
            .iter()
            .all(|p| p.len() == 2 && p.chars().all(|c| c.is_ascii_hexdigit()));
    is_mac.then(|| (ip, mac.to_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_head_round_trips() {
        for ip in ["198.51.100.70", "2001:db8:1a::270"] {
            let ip: IpAddr = ip.parse().unwrap();
            let note = format!(
                "{} on eth0 of node-1 (3 conflicting frame(s)): remove it",
                note_head(ip, "02:00:00:00:00:66")
            );
            assert_eq!(parse_note(&note), Some((ip, "02:00:00:00:00:66".into())));
        }
    }

    #[test]
    fn other_notes_are_ignored() {
        for note in [
            "",
            "198.51.100.70",
            "198.51.100.70 is claimed by 02:00:00:00:00:66",
            "198.51.100.70 is also claimed by someone",
            "198.51.100.70 is also claimed by 02:00:00:00:00",
            "not-an-ip is also claimed by 02:00:00:00:00:66",
            "198.51.100.70 is also claimed by 02:00:00:00:00:zz",
        ] {
            assert_eq!(parse_note(note), None, "{note}");
        }
    }
}
