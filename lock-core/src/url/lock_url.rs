//! [`LockUrl`]: lock URLs whose authority may list several hosts
//! (`redlock://h1:6379,h2:6379`, `etcd://a:2379,b:2379`,
//! `zk://h1:2181,h2:2181/chroot`), which the `url` crate alone rejects.

use std::fmt;

use url::Url;

use super::redact::redact;
use crate::error::LockError;

/// One server of a store: `host:port`, the port defaulted by the store
/// where the URL gives none.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// The TCP port.
    pub port: u16,
}

impl HostPort {
    /// `host:port`.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for HostPort {
    /// `host:port`, or `[v6]:port` for an IPv6 address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// One `host[:port]` as the URL wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UrlHost {
    /// Host name or IP address (IPv6 without brackets).
    pub(crate) host: String,
    /// The port, if given.
    pub(crate) port: Option<u16>,
}

/// The scheme of a lock URL (the text before `://`), for picking the
/// store that reads the rest.
///
/// Errors: [`LockError::InvalidConfig`] when `text` has no `SCHEME://`,
/// with the text's credentials masked.
pub fn scheme_of(text: &str) -> Result<&str, LockError> {
    match text.split_once("://") {
        Some((scheme, _)) if !scheme.is_empty() => Ok(scheme),
        _ => Err(LockError::invalid_config(format!(
            "`{}` is not a lock URL: expected SCHEME://…",
            redact(text)
        ))),
    }
}

/// A parsed lock URL: the `url` crate's view with only the first host, and
/// the full host list.
#[derive(Clone, Debug)]
pub(crate) struct LockUrl {
    /// The URL with its host list cut down to the first host; user info,
    /// path and query are intact.
    pub(crate) url: Url,
    /// Every host of the authority, in order (empty for `file:///…`).
    pub(crate) hosts: Vec<UrlHost>,
}

impl LockUrl {
    /// Parses `text`. Errors never contain the password.
    pub(crate) fn parse(text: &str) -> Result<Self, LockError> {
        let bad = |why: String| {
            LockError::invalid_config(format!("`{}` is not a lock URL: {why}", redact(text)))
        };
        let scheme = scheme_of(text)?;
        let rest = &text[scheme.len() + 3..];
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, host_list) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let mut hosts = Vec::new();
        for item in host_list.split(',') {
            if item.is_empty() {
                if host_list.is_empty() {
                    break;
                }
                return Err(bad("empty entry in the host list".to_owned()));
            }
            let single = Url::parse(&format!("{scheme}://{item}"))
                .map_err(|e| bad(format!("host `{item}`: {e}")))?;
            let host = match single.host_str() {
                Some(host) if !host.is_empty() => host,
                // The url crate reads `file://localhost` as the local host
                // with no name: a file URL without a host.
                _ if scheme == "file" => continue,
                _ => return Err(bad(format!("host `{item}` has no host name"))),
            };
            hosts.push(UrlHost {
                host: host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
                port: single.port(),
            });
        }
        let first = host_list.split(',').next().unwrap_or("");
        let url = Url::parse(&format!("{scheme}://{userinfo}{first}{tail}"))
            .map_err(|e| bad(e.to_string()))?;
        Ok(Self { url, hosts })
    }

    /// The URL scheme.
    pub(crate) fn scheme(&self) -> &str {
        self.url.scheme()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(text: &str) -> Vec<String> {
        LockUrl::parse(text)
            .unwrap()
            .hosts
            .iter()
            .map(|h| match h.port {
                Some(port) => HostPort::new(h.host.as_str(), port).to_string(),
                None => h.host.clone(),
            })
            .collect()
    }

    #[test]
    fn host_lists_are_split() {
        assert_eq!(hosts("redlock://a:1,b:2,c:3"), ["a:1", "b:2", "c:3"]);
        assert_eq!(hosts("zk://h1:2181,h2/chroot/x?ttl=2s"), ["h1:2181", "h2"]);
        assert_eq!(
            hosts("etcd://[::1]:2379,127.0.0.1:2380"),
            ["[::1]:2379", "127.0.0.1:2380"]
        );
        assert!(hosts("file:///tmp/locks").is_empty());
    }

    #[test]
    fn the_url_keeps_user_path_and_query_with_the_first_host() {
        let parsed = LockUrl::parse("redis+cluster://u:p@a:1,b:2/0?ttl=2s").unwrap();
        assert_eq!(parsed.url.username(), "u");
        assert_eq!(parsed.url.password(), Some("p"));
        assert_eq!(parsed.url.host_str(), Some("a"));
        assert_eq!(parsed.url.path(), "/0");
        assert_eq!(parsed.url.query(), Some("ttl=2s"));
        assert_eq!(parsed.scheme(), "redis+cluster");
    }

    #[test]
    fn bad_urls_are_named_without_passwords() {
        for text in [
            "nothing",
            "redis://u:secret@a:1,,b:2",
            "redis://u:secret@a:99999999",
            "redis://u:secret@a:x",
        ] {
            let error = LockUrl::parse(text).unwrap_err().to_string();
            assert!(error.contains("not a lock URL"), "{error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
