//! The Kubernetes version floor and the parser of the API server's `/version`, shared by the
//! controller (which refuses to start below the floor) and `ferrolb status` (which reports it).
//! Pure: strings in, a verdict out.
//!
//! The floor is 1.32: the speakers' admission policy (`deploy/speaker-admission.yaml`; the floor
//! table under "Requirements" in docs/install.md) reads the node name from the claims of Pod-bound
//! service-account tokens, which the API server only gives it from 1.32 on.

use std::fmt;

/// The oldest Kubernetes version ferrolb supports, `(major, minor)`: 1.32 (see the module docs).
pub const MIN_KUBERNETES: (u32, u32) = (1, 32);

/// The floor as `major.minor`, for messages (`1.32`).
#[must_use]
pub fn min_kubernetes_text() -> String {
    format!("{}.{}", MIN_KUBERNETES.0, MIN_KUBERNETES.1)
}

/// The fields of the API server's `/version` that say which Kubernetes it is.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionInfo {
    /// `gitVersion`, e.g. `v1.34.1` or `v1.32.0-gke.1`.
    pub git_version: String,
    /// `major`, e.g. `1` (may be empty on some distributions).
    pub major: String,
    /// `minor`, e.g. `34`; providers append `+` (`32+`); may be empty.
    pub minor: String,
    /// `emulationMajor`/`emulationMinor` (Kubernetes ≥ 1.31 with `--emulated-version`): the
    /// version whose behaviour the server emulates, which is the one whose features count.
    pub emulation: Option<(String, String)>,
}

/// The leading decimal digits of `s` as a number (`"32+"` → 32); `None` when there are none.
fn leading_number(s: &str) -> Option<u32> {
    let d: String = s.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

/// `(major, minor)` of a git version: an optional `v`, then `major.minor`, anything after
/// (`v1.32.0-gke.1` → (1, 32), `1.31+` → (1, 31)); `None` when it has no such prefix.
#[must_use]
pub fn parse_git_version(git: &str) -> Option<(u32, u32)> {
    let rest = git.trim().strip_prefix('v').unwrap_or(git.trim());
    let mut parts = rest.splitn(2, '.');
    let major = parts
        .next()
        .filter(|m| m.chars().all(|c| c.is_ascii_digit()))?;
    Some((major.parse().ok()?, leading_number(parts.next()?)?))
}

/// `(major, minor)` of the server: the emulated version when the server reports one, else the
/// `major`/`minor` fields (a `+` or other suffix ignored), else the git version; `None` when none
/// of them parses.
#[must_use]
pub fn parse(v: &VersionInfo) -> Option<(u32, u32)> {
    let pair = |major: &str, minor: &str| Some((leading_number(major)?, leading_number(minor)?));
    v.emulation
        .as_ref()
        .and_then(|(major, minor)| pair(major, minor))
        .or_else(|| pair(&v.major, &v.minor))
        .or_else(|| parse_git_version(&v.git_version))
}

/// Why a server is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The server is older than [`MIN_KUBERNETES`]: the version found (its git version) and
    /// the parsed `(major, minor)`.
    TooOld {
        /// `gitVersion` as reported.
        found: String,
        /// The parsed `(major, minor)`.
        parsed: (u32, u32),
    },
    /// No version could be read from any field (the git version as reported).
    Unparsable {
        /// `gitVersion` as reported.
        found: String,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooOld { found, parsed } => write!(
                f,
                "Kubernetes {found} ({}.{}) is older than {}, the oldest version ferrolb supports \
                 (the speakers' admission policy needs it; docs/install.md, \"Requirements\")",
                parsed.0,
                parsed.1,
                min_kubernetes_text()
            ),
            Self::Unparsable { found } => write!(
                f,
                "cannot tell the Kubernetes version from the API server's /version \
                 (gitVersion {found:?}); ferrolb needs {} or newer",
                min_kubernetes_text()
            ),
        }
    }
}

impl std::error::Error for Refusal {}

/// Whether `v` is at least [`MIN_KUBERNETES`].
///
/// # Errors
/// [`Refusal::TooOld`] below the floor, [`Refusal::Unparsable`] when no field parses.
pub fn check(v: &VersionInfo) -> Result<(u32, u32), Refusal> {
    match parse(v) {
        Some(mm) if mm >= MIN_KUBERNETES => Ok(mm),
        Some(parsed) => Err(Refusal::TooOld {
            found: v.git_version.clone(),
            parsed,
        }),
        None => Err(Refusal::Unparsable {
            found: v.git_version.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(git: &str, major: &str, minor: &str) -> VersionInfo {
        VersionInfo {
            git_version: git.into(),
            major: major.into(),
            minor: minor.into(),
            emulation: None,
        }
    }

    #[test]
    fn git_versions_parse() {
        assert_eq!(parse_git_version("v1.32.0-gke.1"), Some((1, 32)));
        assert_eq!(parse_git_version("v1.34.1"), Some((1, 34)));
        assert_eq!(parse_git_version("1.31+"), Some((1, 31)));
        assert_eq!(parse_git_version("v1.30.4+k3s1"), Some((1, 30)));
        assert_eq!(parse_git_version("v1"), None);
        assert_eq!(parse_git_version("va.32"), None);
        assert_eq!(parse_git_version(""), None);
    }

    #[test]
    fn the_floor_is_1_32_and_suffixes_are_ignored() {
        assert_eq!(MIN_KUBERNETES, (1, 32));
        assert_eq!(check(&info("v1.32.0-gke.1", "1", "32+")), Ok((1, 32)));
        assert_eq!(check(&info("v1.37.0", "1", "37")), Ok((1, 37)));
        assert_eq!(check(&info("v2.0.0", "2", "0")), Ok((2, 0)));
        assert_eq!(
            check(&info("v1.31.9-eks-1", "1", "31+")),
            Err(Refusal::TooOld {
                found: "v1.31.9-eks-1".into(),
                parsed: (1, 31)
            })
        );
    }

    #[test]
    fn empty_major_minor_fall_back_to_the_git_version() {
        assert_eq!(check(&info("v1.33.2", "", "")), Ok((1, 33)));
        assert!(matches!(
            check(&info("1.31+", "", "")),
            Err(Refusal::TooOld {
                parsed: (1, 31),
                ..
            })
        ));
        assert_eq!(
            check(&info("unknown", "", "x")),
            Err(Refusal::Unparsable {
                found: "unknown".into()
            })
        );
    }

    #[test]
    fn an_emulated_version_counts() {
        let mut v = info("v1.37.0", "1", "37");
        v.emulation = Some(("1".into(), "31".into()));
        assert!(matches!(
            check(&v),
            Err(Refusal::TooOld {
                parsed: (1, 31),
                ..
            })
        ));
        v.emulation = Some(("1".into(), "34".into()));
        assert_eq!(check(&v), Ok((1, 34)));
    }

    #[test]
    fn the_message_names_found_and_required() {
        let e = check(&info("v1.31.0", "1", "31")).unwrap_err().to_string();
        assert!(e.contains("v1.31.0") && e.contains("1.32"), "{e}");
    }
}
