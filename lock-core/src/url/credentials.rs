//! Credentials of a lock URL: the [`Secret`] wrapper that keeps passwords
//! out of `Debug`, and [`UrlCredentials`], read once for every backend
//! from the URL's user info or from the `user`/`password` options.

use std::fmt;

use percent_encoding::percent_decode_str;

use super::lock_url::LockUrl;
use super::options::UrlOptions;
use crate::error::LockError;

/// A secret (a password or a private key). `Debug` prints `"***"`; there
/// is no `Display`, so a secret cannot end up in a message by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for handing to the client library only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"***\"")
    }
}

/// The user name and password a lock URL carries, either as user info
/// (`scheme://user:pass@host`, percent-decoded) or as the `user` and
/// `password` options — never both. Which combinations a store accepts
/// (Redis takes a password alone, etcd and ZooKeeper want both) is the
/// backend's rule to check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlCredentials {
    /// The user name, if one was given (never empty).
    pub user: Option<String>,
    /// The password, if one was given.
    pub password: Option<Secret>,
}

impl UrlCredentials {
    /// Takes the credentials out of `url` and `options` (consuming the
    /// `user` and `password` options).
    ///
    /// Errors ([`LockError::InvalidConfig`], never showing the password):
    /// credentials given both ways, or user info that is not UTF-8 once
    /// percent-decoded.
    pub(crate) fn take(url: &LockUrl, options: &mut UrlOptions) -> Result<Self, LockError> {
        let from_info = Self {
            user: Some(url.url.username())
                .filter(|user| !user.is_empty())
                .map(|user| decode(user, "user name"))
                .transpose()?,
            password: url
                .url
                .password()
                .map(|password| decode(password, "password").map(Secret))
                .transpose()?,
        };
        let from_options = Self {
            user: options.take("user").filter(|user| !user.is_empty()),
            password: options.take("password").map(Secret),
        };
        match (from_info.is_empty(), from_options.is_empty()) {
            (false, false) => Err(LockError::invalid_config(
                "credentials given twice: use either user:password@ in the URL or the \
                 `user`/`password` options, not both",
            )),
            (false, true) => Ok(from_info),
            (true, _) => Ok(from_options),
        }
    }

    /// True when neither a user nor a password was given.
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.password.is_none()
    }
}

fn decode(text: &str, what: &str) -> Result<String, LockError> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|decoded| decoded.into_owned())
        .map_err(|_| {
            LockError::invalid_config(format!(
                "the {what} in the URL is not UTF-8 after percent-decoding"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(text: &str) -> Result<UrlCredentials, LockError> {
        let url = LockUrl::parse(text)?;
        let mut options = UrlOptions::parse(&url.url)?;
        let credentials = UrlCredentials::take(&url, &mut options)?;
        options.finish()?;
        Ok(credentials)
    }

    #[test]
    fn user_info_is_percent_decoded() {
        let c = take("redis://al%40ice:p%3Ass@h:1").unwrap();
        assert_eq!(c.user.as_deref(), Some("al@ice"));
        assert_eq!(c.password.unwrap().expose(), "p:ss");
    }

    #[test]
    fn options_stand_in_for_user_info() {
        let c = take("etcd://h:1?user=root&password=s3cret").unwrap();
        assert_eq!(c.user.as_deref(), Some("root"));
        assert_eq!(c.password.unwrap().expose(), "s3cret");
    }

    #[test]
    fn a_password_alone_is_kept() {
        let c = take("redis://:only@h:1").unwrap();
        assert_eq!(c.user, None);
        assert_eq!(c.password.unwrap().expose(), "only");
        assert!(take("redis://h:1").unwrap().is_empty());
    }

    #[test]
    fn both_ways_at_once_is_refused_without_the_password() {
        let error = take("zk://u:s3cret@h:1?password=other").unwrap_err();
        let text = format!("{error} {error:?}");
        assert!(text.contains("credentials given twice"), "{text}");
        assert!(
            !text.contains("s3cret") && !text.contains("other"),
            "{text}"
        );
    }

    #[test]
    fn secrets_are_hidden_from_debug() {
        let c = take("redis://u:s3cret@h:1").unwrap();
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn user_info_that_is_not_utf8_is_refused() {
        let error = take("redis://u:%FF@h:1").unwrap_err().to_string();
        assert!(
            error.contains("password in the URL is not UTF-8"),
            "{error}"
        );
    }
}
