//! Lock URLs whose authority may list several hosts
//! (`redlock://h1:6379,h2:6379`, `etcd://a:2379,b:2379`,
//! `zk://h1:2181,h2:2181/chroot`), which the `url` crate alone rejects.

use std::fmt;

use percent_encoding::percent_decode_str;
use url::Url;

use crate::error::LockError;

/// One `host[:port]` of a lock URL's host list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// The port, if given.
    pub port: Option<u16>,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.host.contains(':'), self.port) {
            (true, Some(port)) => write!(f, "[{}]:{port}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(port)) => write!(f, "{}:{port}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

/// A parsed lock URL: the `url` crate's view with only the first host, and
/// the full host list.
#[derive(Clone, Debug)]
pub struct LockUrl {
    /// The URL with its host list cut down to the first host; user info,
    /// path and query are intact.
    pub url: Url,
    /// Every host of the authority, in order (empty for `file:///…`).
    pub hosts: Vec<HostPort>,
}

impl LockUrl {
    /// Parses `text`. Errors never contain the password.
    pub fn parse(text: &str) -> Result<Self, LockError> {
        let bad = |why: String| {
            LockError::invalid_config(format!(
                "`{}` is not a lock URL: {why}",
                mask_credentials(text)
            ))
        };
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(bad("expected SCHEME://…".to_owned()));
        };
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
            let host = single
                .host_str()
                .ok_or_else(|| bad(format!("host `{item}` has no host name")))?;
            hosts.push(HostPort {
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
    pub fn scheme(&self) -> &str {
        self.url.scheme()
    }
}

/// The URL for messages and logs: anything between `://` and the last `@`
/// (user info, which may hold a password) and the value of every
/// `password` option are replaced by `***`. Works on host-list URLs.
pub fn mask_credentials(url: &str) -> String {
    let (masked, _) = mask_password_options(url);
    match (masked.find("://"), masked.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            format!("{}://***@{}", &masked[..start], &masked[at + 1..])
        }
        _ => masked,
    }
}

/// `url` with the value of every `password` query option replaced by
/// `***`, and those values as written (still percent-encoded), so a
/// caller can also scrub them from messages that quote them.
pub fn mask_password_options(url: &str) -> (String, Vec<String>) {
    let Some(start) = url.find('?') else {
        return (url.to_owned(), Vec::new());
    };
    let (head, rest) = url.split_at(start + 1);
    let (query, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
    let mut passwords = Vec::new();
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if percent_decode_str(name).decode_utf8_lossy() == "password" => {
                passwords.push(value.to_owned());
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    (format!("{head}{}{fragment}", pairs.join("&")), passwords)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masking_hides_user_info_and_password_options() {
        assert_eq!(
            mask_credentials("redlock://u:s3cret@a:1,b:2/?ttl=1s"),
            "redlock://***@a:1,b:2/?ttl=1s"
        );
        assert_eq!(
            mask_credentials("etcd://a:1,b:2?user=root&password=s3cret&ttl=2s"),
            "etcd://a:1,b:2?user=root&password=***&ttl=2s"
        );
        let (shown, found) = mask_password_options("zk://h?pass%77ord=p%40w");
        assert_eq!(shown, "zk://h?pass%77ord=***");
        assert_eq!(found, ["p%40w"]);
    }

    fn hosts(text: &str) -> Vec<String> {
        LockUrl::parse(text)
            .unwrap()
            .hosts
            .iter()
            .map(ToString::to_string)
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
