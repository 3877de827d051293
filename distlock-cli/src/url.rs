//! Which store to talk to: `--url`, else `DISTLOCK_URL`, else local file
//! locks; and keeping the URL's password out of everything printed.

use std::path::Path;

use distlock::{LockError, Locker};
use lock_core::url::{redact, Redacted};

use crate::exit::Failure;

/// The store URL of this invocation.
#[derive(Clone)]
pub(crate) struct StoreUrl {
    text: String,
    redacted: Redacted,
}

impl StoreUrl {
    /// `--url` if given, else `$DISTLOCK_URL` if set and not blank, else
    /// `file://` locks in [`file::default_dir`](distlock::file::default_dir).
    pub(crate) fn resolve(flag: Option<String>) -> Result<Self, Failure> {
        let env = std::env::var(distlock::URL_ENV).ok();
        Self::resolve_from(flag, env, || file_url(&distlock::file::default_dir()))
    }

    fn resolve_from(
        flag: Option<String>,
        env: Option<String>,
        default: impl FnOnce() -> Result<String, Failure>,
    ) -> Result<Self, Failure> {
        let chosen = match (flag, env) {
            (Some(flag), _) => flag,
            (None, Some(env)) if !env.trim().is_empty() => env.trim().to_owned(),
            (None, _) => default()?,
        };
        Ok(Self::new(chosen))
    }

    /// Wraps a URL given by the user (it may not even parse, e.g. a host
    /// list).
    pub(crate) fn new(text: String) -> Self {
        Self {
            redacted: redact(&text),
            text,
        }
    }

    /// The URL as given, password included: only for connecting.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// The URL with any password replaced by `***`, for output.
    pub(crate) fn shown(&self) -> &str {
        self.redacted.as_str()
    }

    /// `message` with the URL's passwords (as written, and
    /// percent-decoded) replaced by `***`. A last line of defence: lock-core
    /// errors are already free of credentials, but the sources they carry
    /// come from client libraries.
    pub(crate) fn scrub(&self, message: &str) -> String {
        self.redacted.scrub(message)
    }

    /// Opens a locker on this store.
    pub(crate) async fn connect(&self) -> Result<Locker, Failure> {
        distlock::connect(&self.text)
            .await
            .map_err(|error| self.failure(error))
    }

    /// A lock error as a failure, its message scrubbed of the password.
    /// A failure of the store that names none of the URL's hosts gets
    /// them appended, so every store failure says where.
    pub(crate) fn failure(&self, error: LockError) -> Failure {
        let of_the_store = matches!(
            error,
            LockError::Unavailable { .. }
                | LockError::Backend { .. }
                | LockError::PermissionDenied { .. }
        );
        let mut failure = Failure::from(error);
        if of_the_store {
            failure.message = located(&failure.message, &hosts(&self.text));
        }
        failure.message = self.scrub(&failure.message);
        failure
    }
}

/// The hosts of a URL as written (`host[:port]`), without user info;
/// none for a URL without hosts (`file:///dir`, `mem://`).
fn hosts(url: &str) -> Vec<&str> {
    let Some((_, rest)) = url.split_once("://") else {
        return Vec::new();
    };
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    hosts.split(',').filter(|host| !host.is_empty()).collect()
}

/// `message`, with `hosts` appended if it names none of them.
fn located(message: &str, hosts: &[&str]) -> String {
    if hosts.is_empty() || hosts.iter().any(|host| message.contains(host)) {
        message.to_owned()
    } else {
        format!("{message} (at {})", hosts.join(","))
    }
}

/// `file://` URL of a local directory.
fn file_url(dir: &Path) -> Result<String, Failure> {
    ::url::Url::from_file_path(dir)
        .map(|url| url.to_string())
        .map_err(|()| {
            Failure::usage(format!(
                "the default lock directory {} is not an absolute path; pass --url",
                dir.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_failures_say_where_once() {
        let url = StoreUrl::new("etcd://u:pw@10.0.0.1:2379,10.0.0.2/?namespace=a".into());
        let vague =
            LockError::permission_denied("cannot read: denied", std::io::Error::other("denied"));
        assert_eq!(
            url.failure(vague).message,
            "permission denied: cannot read: denied (at 10.0.0.1:2379,10.0.0.2)"
        );
        let named = LockError::unavailable("cannot connect to etcd at 10.0.0.2:2379: refused", "x");
        assert!(!url.failure(named).message.contains("(at "));
        let usage = LockError::invalid_key("key is empty");
        assert_eq!(url.failure(usage).message, "invalid key: key is empty");
        assert!(hosts("file:///var/locks").is_empty());
        assert!(hosts("mem://").is_empty());
    }

    fn default_url() -> Result<String, Failure> {
        Ok("file:///default".to_owned())
    }

    #[test]
    fn flag_wins_over_environment_and_default() {
        let url =
            StoreUrl::resolve_from(Some("mem://a".into()), Some("mem://b".into()), default_url);
        assert_eq!(url.unwrap().as_str(), "mem://a");
    }

    #[test]
    fn environment_wins_over_default_unless_blank() {
        let url = StoreUrl::resolve_from(None, Some(" mem://b ".into()), default_url);
        assert_eq!(url.unwrap().as_str(), "mem://b");
        let url = StoreUrl::resolve_from(None, Some("  ".into()), default_url);
        assert_eq!(url.unwrap().as_str(), "file:///default");
        let url = StoreUrl::resolve_from(None, None, default_url);
        assert_eq!(url.unwrap().as_str(), "file:///default");
    }

    #[test]
    fn default_directory_becomes_a_file_url() {
        assert_eq!(
            file_url(Path::new("/run/user/1000/distlock")).unwrap(),
            "file:///run/user/1000/distlock"
        );
        assert_eq!(
            file_url(Path::new("/tmp/a b")).unwrap(),
            "file:///tmp/a%20b"
        );
        assert!(file_url(Path::new("relative")).is_err());
    }

    #[test]
    fn passwords_never_show() {
        let url = StoreUrl::new("redis://u:s%40cret@127.0.0.1:1".into());
        assert!(!url.shown().contains("cret"), "{}", url.shown());
        assert_eq!(
            url.scrub("auth s@cret failed for s%40cret"),
            "auth *** failed for ***"
        );

        let unparsed = StoreUrl::new("redis://u:secret@host:99999999".into());
        assert_eq!(unparsed.shown(), "redis://***@host:99999999");
        assert_eq!(
            unparsed.scrub("bad port in u:secret@host"),
            "bad port in u:***@host"
        );

        let plain = StoreUrl::new("mem://x".into());
        assert_eq!(plain.scrub("nothing to hide"), "nothing to hide");
        assert_eq!(plain.shown(), "mem://x");
    }

    #[test]
    fn password_options_never_show() {
        let url = StoreUrl::new("redis://127.0.0.1:1?ttl=2s&password=s%26cret&namespace=a".into());
        assert_eq!(
            url.shown(),
            "redis://127.0.0.1:1?ttl=2s&password=***&namespace=a"
        );
        assert_eq!(
            url.scrub("auth s&cret / s%26cret failed"),
            "auth *** / *** failed"
        );

        let hosts = StoreUrl::new("zk://a:1,b:2/app?user=u&password=pw#x".into());
        assert_eq!(hosts.shown(), "zk://a:1,b:2/app?user=u&password=***#x");
        assert_eq!(hosts.scrub("digest u:pw"), "digest u:***");

        let both = StoreUrl::new("redis://:one@h:1?password=two".into());
        assert!(!both.shown().contains("one"), "{}", both.shown());
        assert!(!both.shown().contains("two"), "{}", both.shown());
        assert_eq!(both.scrub("one two"), "*** ***");

        let ordinary = StoreUrl::new("etcd://h:2379?passwordless=yes&ttl=3s".into());
        assert_eq!(ordinary.shown(), "etcd://h:2379?passwordless=yes&ttl=3s");
    }
}
