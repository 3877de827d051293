//! `file:///dir?fsync=..&check_interval=..` → [`FileConfig`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use lock_core::url::StoreUrl;
use lock_core::LockError;

/// URL scheme of the file backend: `file:///path/to/dir`.
pub const FILE_SCHEME: &str = "file";

/// Settings of a [`FileBackend`](crate::FileBackend).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileConfig {
    /// The directory holding the lock files (one subdirectory per
    /// namespace). Created by [`FileBackend::open`](crate::FileBackend::open)
    /// if missing.
    pub dir: PathBuf,
    /// URL option `fsync` (default `false`): `fdatasync` each lock file
    /// after writing its new fencing token (and the directory after creating
    /// a lock file), so tokens survive a machine crash, not only a process
    /// crash. Costs a disk flush per acquisition.
    pub fsync: bool,
    /// URL option `check_interval`: how often a held lock is checked to
    /// still stand (its file not removed or replaced). `None` (the default)
    /// means `min(ttl / 3, 5 s)`.
    pub check_interval: Option<Duration>,
}

impl FileConfig {
    /// Lock files under `dir`, default options.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            fsync: false,
            check_interval: None,
        }
    }

    /// Reads a `file:///absolute/dir` URL (percent-decoded path; host empty
    /// or `localhost`) and takes this store's options (`fsync`,
    /// `check_interval`); called by [`FileStore`](crate::FileStore)
    /// through `lock_core::open::parse`.
    ///
    /// Fails with [`LockError::InvalidConfig`] naming the problem: another
    /// scheme, a host (as in the relative-looking `file://dir`), user info,
    /// a port, a fragment, no directory (`file://`, `file:///`), or a bad
    /// option value. The directory itself is checked by
    /// [`FileBackend::open`](crate::FileBackend::open).
    pub(crate) fn from_url(store_url: &mut StoreUrl) -> Result<Self, LockError> {
        let invalid = |problem: String| {
            LockError::invalid_config(format!("{problem}; expected file:///absolute/path/to/dir"))
        };
        let url = store_url.url();
        // Never echo user info: it may be a password.
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid("file:// URLs take no user name or password".into()));
        }
        if url.port().is_some() {
            return Err(invalid("file:// URLs take no port".into()));
        }
        match url.host_str() {
            None | Some("") | Some("localhost") => {}
            Some(host) => {
                return Err(invalid(format!(
                    "file:// URLs take no host, got `{host}` (a relative path? write three slashes and an absolute path)"
                )))
            }
        }
        if url.fragment().is_some() {
            return Err(invalid("file:// URLs take no #fragment".into()));
        }
        let dir = url
            .to_file_path()
            .map_err(|()| invalid(format!("`{}` is not a local path", url.path())))?;
        if !dir.is_absolute() || dir == Path::new("/") {
            return Err(invalid(
                "the file:// URL names no lock directory (the root directory is not accepted)"
                    .into(),
            ));
        }
        let options = store_url.options();
        Ok(Self {
            dir,
            fsync: options.take_bool("fsync")?.unwrap_or(false),
            check_interval: options.take_positive_duration("check_interval")?,
        })
    }

    /// The longest default check interval; see
    /// [`check_interval_for`](Self::check_interval_for).
    pub const MAX_DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(5);

    /// The interval at which a lock held for `ttl` is checked:
    /// [`check_interval`](Self::check_interval) if set, else
    /// `min(ttl / 3, 5 s)`.
    pub fn check_interval_for(&self, ttl: Duration) -> Duration {
        self.check_interval
            .unwrap_or_else(|| (ttl / 3).min(Self::MAX_DEFAULT_CHECK_INTERVAL))
    }
}

#[cfg(test)]
mod tests {
    use distlock_testkit::store_config::{url_config, url_refused};

    use super::*;
    use crate::FileStore;

    #[test]
    fn absolute_directory_with_defaults() {
        let config = url_config::<FileStore>("file:///var/lock/app");
        assert_eq!(config, FileConfig::new("/var/lock/app"));
        assert!(!config.fsync);
        assert_eq!(config.check_interval, None);
        assert_eq!(
            url_config::<FileStore>("file://localhost/var/lock/app").dir,
            Path::new("/var/lock/app")
        );
        assert_eq!(
            url_config::<FileStore>("file:///var/lock/app/").dir,
            Path::new("/var/lock/app")
        );
    }

    #[test]
    fn path_is_percent_decoded() {
        let config = url_config::<FileStore>("file:///tmp/my%20locks/%C3%BC");
        assert_eq!(config.dir, Path::new("/tmp/my locks/ü"));
    }

    #[test]
    fn backend_and_common_options_are_read() {
        let config = url_config::<FileStore>(
            "file:///l?fsync=true&check_interval=250ms&ttl=3s&namespace=ns",
        );
        assert!(config.fsync);
        assert_eq!(config.check_interval, Some(Duration::from_millis(250)));
        assert!(!url_config::<FileStore>("file:///l?fsync=0").fsync);
    }

    #[test]
    fn bad_option_values_name_the_option() {
        assert!(url_refused::<FileStore>("file:///l?fsync=maybe").contains("`fsync`"));
        assert!(
            url_refused::<FileStore>("file:///l?check_interval=soon").contains("`check_interval`")
        );
        assert!(
            url_refused::<FileStore>("file:///l?check_interval=0s").contains("greater than zero")
        );
    }

    #[test]
    fn unknown_options_are_rejected_by_finish_listing_ours() {
        let reason = url_refused::<FileStore>("file:///l?colour=blue");
        assert!(reason.contains("unknown option `colour`"), "{reason}");
        assert!(
            reason.contains("fsync") && reason.contains("check_interval"),
            "{reason}"
        );
    }

    #[test]
    fn a_host_is_rejected_as_a_likely_relative_path() {
        let reason = url_refused::<FileStore>("file://relative/dir");
        assert!(reason.contains("no host, got `relative`"), "{reason}");
        assert!(url_refused::<FileStore>("file://./dir").contains("no host"));
    }

    #[test]
    fn user_info_is_rejected_without_echoing_it() {
        for url in ["file://user:secret@host/dir", "file://user@localhost/dir"] {
            let reason = url_refused::<FileStore>(url);
            assert!(!reason.contains("secret"), "{reason}");
        }
    }

    #[test]
    fn port_and_fragment_are_rejected() {
        if url::Url::parse("file://localhost:99/dir").is_ok() {
            url_refused::<FileStore>("file://localhost:99/dir");
        }
        assert!(url_refused::<FileStore>("file:///dir#frag").contains("fragment"));
    }

    #[test]
    fn no_directory_is_an_error() {
        for url in ["file://", "file:///", "file://localhost"] {
            assert!(
                url_refused::<FileStore>(url).contains("names no lock directory"),
                "{url}"
            );
        }
    }

    #[test]
    fn other_schemes_are_rejected() {
        assert!(url_refused::<FileStore>("mem://x").contains("not a scheme of the file store"));
    }

    #[test]
    fn check_interval_defaults_to_a_third_of_the_ttl_up_to_five_seconds() {
        let config = FileConfig::new("/l");
        assert_eq!(
            config.check_interval_for(Duration::from_secs(3)),
            Duration::from_secs(1)
        );
        assert_eq!(
            config.check_interval_for(Duration::from_secs(30)),
            Duration::from_secs(5)
        );
        let fixed = FileConfig {
            check_interval: Some(Duration::from_millis(20)),
            ..config
        };
        assert_eq!(
            fixed.check_interval_for(Duration::from_secs(30)),
            Duration::from_millis(20)
        );
    }
}
