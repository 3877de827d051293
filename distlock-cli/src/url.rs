//! Which store to talk to: `--url`, else `DISTLOCK_URL`, else local file
//! locks in the default directory; and keeping the URL's password out of
//! everything printed.

use std::path::Path;

use distlock::file::DefaultDir;
use distlock::{LockError, Locker};
use lock_core::url::{redact, Redacted};

use crate::exit::Failure;

/// The store this invocation talks to: its URL as chosen (`--url`,
/// `DISTLOCK_URL` or the default directory), kept with its password
/// masked for everything printed. (Not `lock_core::url::StoreUrl`, a
/// parsed URL a store reads its config from.)
#[derive(Clone)]
pub(crate) struct ChosenStore {
    text: String,
    redacted: Redacted,
    /// Set when the URL is the default directory's.
    default_dir: Option<DefaultDir>,
}

impl ChosenStore {
    /// `--url` if given, else `$DISTLOCK_URL` if set and not blank, else
    /// `file://` locks in the directory
    /// [`file::default_dir`](distlock::file::default_dir) resolves
    /// (created if missing): `/var/lib/distlock`, or its stated fallback.
    /// Fails (usage, naming both directories) when neither can be used.
    pub(crate) fn resolve(flag: Option<String>) -> Result<Self, Failure> {
        let env = std::env::var(distlock::URL_ENV).ok();
        Self::resolve_from(flag, env, || {
            distlock::file::default_dir().map_err(Failure::from)
        })
    }

    fn resolve_from(
        flag: Option<String>,
        env: Option<String>,
        default: impl FnOnce() -> Result<DefaultDir, Failure>,
    ) -> Result<Self, Failure> {
        let chosen = match (flag, env) {
            (Some(flag), _) => flag,
            (None, Some(env)) if !env.trim().is_empty() => env.trim().to_owned(),
            (None, _) => {
                let dir = default()?;
                if let Some(reason) = &dir.fallback_reason {
                    tracing::info!(dir = %dir.path.display(), %reason, "distlock: locks in the fallback directory");
                }
                let mut url = Self::new(file_url(&dir.path)?);
                url.default_dir = Some(dir);
                return Ok(url);
            }
        };
        Ok(Self::new(chosen))
    }

    /// Wraps a URL given by the user (it may not even parse, e.g. a host
    /// list).
    pub(crate) fn new(text: String) -> Self {
        Self {
            redacted: redact(&text),
            text,
            default_dir: None,
        }
    }

    /// The default directory and how it was chosen, when this URL is the
    /// default (no `--url`, no `DISTLOCK_URL`): its
    /// [`fallback_reason`](DefaultDir::fallback_reason) says why the locks
    /// are not in `/var/lib/distlock` (fallback directories are emptied at
    /// boot on many systems, and fencing tokens then start again), for
    /// `status`, `--verbose` and `--help` to show.
    pub(crate) fn default_dir(&self) -> Option<&DefaultDir> {
        self.default_dir.as_ref()
    }

    /// The URL (password masked) and, for the default directory, which
    /// one it is: `file:///var/lib/distlock (the default directory)`, or
    /// the fallback with the reason and what it costs.
    pub(crate) fn described(&self) -> String {
        match self.default_dir() {
            None => self.shown().to_owned(),
            Some(DefaultDir {
                fallback_reason: None,
                ..
            }) => format!("{} (the default directory)", self.shown()),
            Some(DefaultDir {
                fallback_reason: Some(reason),
                ..
            }) => format!(
                "{} (the fallback directory, because {reason}; it may be emptied at boot, \
                 and fencing tokens then start again)",
                self.shown()
            ),
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
        let url = ChosenStore::new("etcd://u:pw@10.0.0.1:2379,10.0.0.2/?namespace=a".into());
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

    fn default_dir(fallback_reason: Option<&str>) -> DefaultDir {
        DefaultDir {
            path: "/default".into(),
            fallback_reason: fallback_reason.map(str::to_owned),
        }
    }

    fn default_url() -> Result<DefaultDir, Failure> {
        Ok(default_dir(None))
    }

    #[test]
    fn flag_wins_over_environment_and_default() {
        let url =
            ChosenStore::resolve_from(Some("mem://a".into()), Some("mem://b".into()), default_url);
        assert_eq!(url.unwrap().as_str(), "mem://a");
    }

    #[test]
    fn environment_wins_over_default_unless_blank() {
        let url = ChosenStore::resolve_from(None, Some(" mem://b ".into()), default_url);
        assert_eq!(url.unwrap().as_str(), "mem://b");
        let url = ChosenStore::resolve_from(None, Some("  ".into()), default_url);
        assert_eq!(url.unwrap().as_str(), "file:///default");
        let url = ChosenStore::resolve_from(None, None, default_url);
        assert_eq!(url.unwrap().as_str(), "file:///default");
    }

    #[test]
    fn only_the_default_url_carries_the_default_directory_and_its_fallback() {
        let given = ChosenStore::resolve_from(Some("mem://a".into()), None, default_url).unwrap();
        assert!(given.default_dir().is_none());
        let from_env =
            ChosenStore::resolve_from(None, Some("mem://b".into()), default_url).unwrap();
        assert!(from_env.default_dir().is_none());
        let fallback = || Ok(default_dir(Some("/var/lib/distlock cannot be created")));
        let url = ChosenStore::resolve_from(None, None, fallback).unwrap();
        let dir = url.default_dir().expect("the default directory");
        assert_eq!(url.as_str(), "file:///default");
        assert_eq!(
            dir.fallback_reason.as_deref(),
            Some("/var/lib/distlock cannot be created")
        );
    }

    #[test]
    fn the_default_directory_and_its_fallback_are_described() {
        let given = ChosenStore::resolve_from(Some("mem://a".into()), None, default_url).unwrap();
        assert_eq!(given.described(), "mem://a");
        let default = ChosenStore::resolve_from(None, None, default_url).unwrap();
        assert_eq!(
            default.described(),
            "file:///default (the default directory)"
        );
        let fallback = || Ok(default_dir(Some("/var/lib/distlock is read-only")));
        let url = ChosenStore::resolve_from(None, None, fallback).unwrap();
        assert_eq!(
            url.described(),
            "file:///default (the fallback directory, because /var/lib/distlock is read-only; \
             it may be emptied at boot, and fencing tokens then start again)"
        );
    }

    #[test]
    fn no_usable_default_directory_is_a_usage_failure() {
        let refused = || {
            Err(Failure::from(LockError::invalid_config(
                "no default lock directory",
            )))
        };
        let failure = ChosenStore::resolve_from(None, None, refused)
            .err()
            .unwrap();
        assert_eq!(failure.code, crate::exit::USAGE);
        assert!(
            failure.message.contains("no default lock directory"),
            "{}",
            failure.message
        );
    }

    #[test]
    fn default_directory_becomes_a_file_url() {
        assert_eq!(
            file_url(Path::new("/var/lib/distlock")).unwrap(),
            "file:///var/lib/distlock"
        );
        assert_eq!(
            file_url(Path::new("/tmp/a b")).unwrap(),
            "file:///tmp/a%20b"
        );
        assert!(file_url(Path::new("relative")).is_err());
    }

    #[test]
    fn passwords_never_show() {
        let url = ChosenStore::new("redis://u:s%40cret@127.0.0.1:1".into());
        assert!(!url.shown().contains("cret"), "{}", url.shown());
        assert_eq!(
            url.scrub("auth s@cret failed for s%40cret"),
            "auth *** failed for ***"
        );

        let unparsed = ChosenStore::new("redis://u:secret@host:99999999".into());
        assert_eq!(unparsed.shown(), "redis://***@host:99999999");
        assert_eq!(
            unparsed.scrub("bad port in u:secret@host"),
            "bad port in u:***@host"
        );

        let plain = ChosenStore::new("mem://x".into());
        assert_eq!(plain.scrub("nothing to hide"), "nothing to hide");
        assert_eq!(plain.shown(), "mem://x");
    }

    #[test]
    fn password_options_never_show() {
        let url =
            ChosenStore::new("redis://127.0.0.1:1?ttl=2s&password=s%26cret&namespace=a".into());
        assert_eq!(
            url.shown(),
            "redis://127.0.0.1:1?ttl=2s&password=***&namespace=a"
        );
        assert_eq!(
            url.scrub("auth s&cret / s%26cret failed"),
            "auth *** / *** failed"
        );

        let hosts = ChosenStore::new("zk://a:1,b:2/app?user=u&password=pw#x".into());
        assert_eq!(hosts.shown(), "zk://a:1,b:2/app?user=u&password=***#x");
        assert_eq!(hosts.scrub("digest u:pw"), "digest u:***");

        let both = ChosenStore::new("redis://:one@h:1?password=two".into());
        assert!(!both.shown().contains("one"), "{}", both.shown());
        assert!(!both.shown().contains("two"), "{}", both.shown());
        assert_eq!(both.scrub("one two"), "*** ***");

        let ordinary = ChosenStore::new("etcd://h:2379?passwordless=yes&ttl=3s".into());
        assert_eq!(ordinary.shown(), "etcd://h:2379?passwordless=yes&ttl=3s");
    }
}
