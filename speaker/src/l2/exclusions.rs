//! The interface names the automatic default set leaves out (DESIGN S8), configurable with
//! `--exclude-interfaces` / `FERROLB_EXCLUDE_INTERFACES` (issue #28 item 4). Pure.
//!
//! The setting is a comma-separated list of entries:
//! - `default`: the built-in list, [`DEFAULT_EXCLUDED`] (`veth*`, `docker*`, `cni*`, `cali*`,
//!   `flannel*`, `cilium*`, `kube-ipvs*`, `lxc*`, `virbr*`, `dummy*`, `tunl*`, `nodelocaldns*`);
//! - `none` (alone): exclude nothing;
//! - a pattern: an interface name in which `*` stands for any run of characters (`br-*`,
//!   `*.100`, `wg0`); without a `*` it is the exact name.
//!
//! So `default` (the setting's default) keeps the built-in list, `default,br-*` extends it and
//! `veth*,docker*` replaces it. The list only shapes the automatic set: `--interfaces` and an
//! L2Advertisement's `spec.interfaces` name their interfaces as given, excluded or not.

use std::fmt;

/// The built-in exclusions (DESIGN S8): container veths and bridges, CNI devices, kube-proxy's
/// IPVS dummy, libvirt, tunnels and node-local DNS.
pub const DEFAULT_EXCLUDED: &[&str] = &[
    "veth*",
    "docker*",
    "cni*",
    "cali*",
    "flannel*",
    "cilium*",
    "kube-ipvs*",
    "lxc*",
    "virbr*",
    "dummy*",
    "tunl*",
    "nodelocaldns*",
];

/// Longest interface name the kernel accepts (`IFNAMSIZ` − 1).
const MAX_NAME: usize = 15;

/// The parsed exclusion list: name patterns, in the order given, duplicates dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NameExclusions {
    patterns: Vec<String>,
}

impl Default for NameExclusions {
    /// The built-in list, [`DEFAULT_EXCLUDED`].
    fn default() -> Self {
        NameExclusions {
            patterns: DEFAULT_EXCLUDED.iter().map(|p| (*p).to_owned()).collect(),
        }
    }
}

impl fmt::Display for NameExclusions {
    /// The patterns, comma-separated (`none` when empty), as `parse` reads them back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.patterns.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.patterns.join(","))
    }
}

/// Why an entry is refused (the whole message names the entry and the rule).
fn check_pattern(p: &str) -> Result<(), String> {
    let literal = p.chars().filter(|c| *c != '*').count();
    if let Some(c) = p
        .chars()
        .find(|c| *c == '/' || *c == ':' || c.is_whitespace())
    {
        return Err(format!(
            "{p:?} is not an interface name pattern: {c:?} cannot be in an interface name"
        ));
    }
    if literal > MAX_NAME {
        return Err(format!(
            "{p:?} is not an interface name pattern: interface names have at most {MAX_NAME} characters"
        ));
    }
    if literal == 0 {
        return Err(format!(
            "{p:?} would exclude every interface; to announce on chosen interfaces only, name \
             them with --interfaces (or an L2Advertisement's spec.interfaces)"
        ));
    }
    if p == "." || p == ".." {
        return Err(format!("{p:?} is not an interface name"));
    }
    Ok(())
}

impl NameExclusions {
    /// Reads the setting (module docs). An empty string is `none`.
    ///
    /// # Errors
    /// An empty entry (`eth*,,br*`), `none` beside other entries, a pattern with `/`, `:` or
    /// whitespace, more than 15 characters besides the `*`s, or only `*`s (which would leave no
    /// interface); the message names the entry.
    pub fn parse(s: &str) -> Result<NameExclusions, String> {
        let s = s.trim();
        if s.is_empty() || s == "none" {
            return Ok(NameExclusions {
                patterns: Vec::new(),
            });
        }
        let mut patterns: Vec<String> = Vec::new();
        for entry in s.split(',').map(str::trim) {
            let add: Vec<String> = match entry {
                "" => return Err(format!("{s:?}: an empty entry (two commas in a row?)")),
                "none" => {
                    return Err(format!(
                        "{s:?}: `none` excludes nothing and must stand alone"
                    ));
                }
                "default" => DEFAULT_EXCLUDED.iter().map(|p| (*p).to_owned()).collect(),
                p => {
                    check_pattern(p)?;
                    vec![p.to_owned()]
                }
            };
            for p in add {
                if !patterns.contains(&p) {
                    patterns.push(p);
                }
            }
        }
        Ok(NameExclusions { patterns })
    }

    /// The patterns, in order.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Whether interface `name` matches one of the patterns.
    pub fn matches(&self, name: &str) -> bool {
        self.patterns.iter().any(|p| glob(p, name))
    }
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters (also empty).
fn glob(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the exact name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_default_is_the_design_list() {
        let d = NameExclusions::default();
        assert_eq!(NameExclusions::parse("default").unwrap(), d);
        for name in [
            "veth0",
            "docker0",
            "cni0",
            "cali123",
            "flannel.1",
            "cilium_host",
            "kube-ipvs0",
            "lxc1",
            "virbr0",
            "dummy0",
            "tunl0",
            "nodelocaldns",
        ] {
            assert!(d.matches(name), "{name}");
        }
        for name in ["eth0", "ens3", "bond0", "br0", "enp0s31f6", "br-1a2b"] {
            assert!(!d.matches(name), "{name}");
        }
        assert_eq!(d.to_string(), DEFAULT_EXCLUDED.join(","));
    }

    #[test]
    fn default_extends_and_patterns_replace() {
        let extended = NameExclusions::parse("default, br-*").unwrap();
        assert!(extended.matches("br-1a2b") && extended.matches("veth9"));
        assert_eq!(extended.patterns().len(), DEFAULT_EXCLUDED.len() + 1);
        let replaced = NameExclusions::parse("veth*,wg0").unwrap();
        assert!(replaced.matches("veth9") && replaced.matches("wg0"));
        assert!(!replaced.matches("wg01") && !replaced.matches("docker0"));
        let none = NameExclusions::parse("none").unwrap();
        assert!(!none.matches("veth0"));
        assert_eq!(none, NameExclusions::parse("").unwrap());
        assert_eq!(none.to_string(), "none");
        // Duplicates are dropped, the order kept.
        assert_eq!(
            NameExclusions::parse("wg0,default,wg0").unwrap().patterns()[0],
            "wg0"
        );
    }

    #[test]
    fn stars_match_any_run() {
        for (p, name, want) in [
            ("*.100", "bond0.100", true),
            ("*.100", "bond0.1000", false),
            ("en*s*", "enp0s3", true),
            ("en*s*", "eno1", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("eth0", "eth0", true),
            ("eth0", "eth00", false),
        ] {
            assert_eq!(glob(p, name), want, "{p} {name}");
        }
    }

    #[test]
    fn bad_entries_are_refused_with_a_clear_message() {
        for (bad, says) in [
            ("eth/0", "cannot be in an interface name"),
            ("eth0:1", "cannot be in an interface name"),
            ("default,a-very-long-name-x*", "at most 15 characters"),
            ("*", "would exclude every interface"),
            ("veth*,,docker*", "empty entry"),
            ("none,veth*", "must stand alone"),
            ("..", "not an interface name"),
        ] {
            let e = NameExclusions::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
