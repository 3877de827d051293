//! [`redact`]: the one way a lock URL is shown in messages and logs.

use std::fmt;

use percent_encoding::{percent_decode_str, utf8_percent_encode, NON_ALPHANUMERIC};

/// A lock URL fit for messages: its user info and the value of every
/// option whose name ends in `password` replaced by `***`, the
/// same done inside every option whose value is a URL (PostgreSQL's
/// `listen_url`), and the secrets it hid, so that
/// messages quoting them (a client library's error, say) can be
/// [scrubbed](Redacted::scrub) too.
///
/// `Display` and `Debug` show the masked URL only.
#[derive(Clone, PartialEq, Eq)]
pub struct Redacted {
    shown: String,
    secrets: Vec<String>,
}

/// Masks the credentials of `url`, which may be any text: a URL the `url`
/// crate rejects (a host list, a bad port) is masked just as well.
///
/// Everything between `://` and the last `@` is replaced by `***` (it may
/// be a password, or a token used as a user name), and so is the value of
/// every query option whose name ends in `password`. An option whose value,
/// percent-decoded, is itself a URL (`…://…`) is shown redacted the same
/// way, percent-encoded again.
///
/// ```
/// use lock_core::url::redact;
/// let shown = redact("redlock://u:s3cret@a:1,b:2/?ttl=1s&password=p");
/// assert_eq!(shown.to_string(), "redlock://***@a:1,b:2/?ttl=1s&password=***");
/// assert_eq!(shown.scrub("AUTH u s3cret failed"), "AUTH u *** failed");
/// let nested = redact("postgres://h/db?listen_url=postgres%3A%2F%2Fu%3Apw%40h2%2Fdb");
/// assert_eq!(nested.to_string(), "postgres://h/db?listen_url=postgres%3A%2F%2F%2A%2A%2A%40h2%2Fdb");
/// ```
pub fn redact(url: &str) -> Redacted {
    let (without_options, mut secrets) = mask_password_options(url);
    let shown = match (without_options.find("://"), without_options.rfind('@')) {
        (Some(start), Some(at)) if at > start => {
            let user_info = &without_options[start + 3..at];
            // `user:password` hides the password; a lone field may be a
            // password or token too.
            let secret = user_info.split_once(':').map_or(user_info, |(_, p)| p);
            secrets.push(secret.to_owned());
            format!(
                "{}://***@{}",
                &without_options[..start],
                &without_options[at + 1..]
            )
        }
        _ => without_options,
    };
    secrets.retain(|secret| !secret.is_empty());
    Redacted { shown, secrets }
}

impl Redacted {
    /// The masked URL.
    pub fn as_str(&self) -> &str {
        &self.shown
    }

    /// `message` with every secret of the URL, as written and
    /// percent-decoded, replaced by `***`.
    pub fn scrub(&self, message: &str) -> String {
        let mut clean = message.to_owned();
        for secret in &self.secrets {
            clean = clean.replace(secret.as_str(), "***");
            let decoded = decode_form(secret);
            if !decoded.is_empty() && decoded != *secret {
                clean = clean.replace(&decoded, "***");
            }
        }
        clean
    }
}

impl fmt::Display for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.shown)
    }
}

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.shown, f)
    }
}

/// `url` with the value of every `password` option replaced by `***`, and
/// those values as written.
fn mask_password_options(url: &str) -> (String, Vec<String>) {
    let Some(start) = url.find('?') else {
        return (url.to_owned(), Vec::new());
    };
    let (head, rest) = url.split_at(start + 1);
    let (query, fragment) = rest.split_at(rest.find('#').unwrap_or(rest.len()));
    let mut passwords = Vec::new();
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value))
                if is_password_option(&percent_decode_str(name).decode_utf8_lossy()) =>
            {
                passwords.push(value.to_owned());
                format!("{name}=***")
            }
            Some((name, value)) => match redact_nested(value) {
                Some(nested) => {
                    passwords.extend(nested.secrets);
                    let shown = utf8_percent_encode(&nested.shown, NON_ALPHANUMERIC);
                    format!("{name}={shown}")
                }
                None => pair.to_owned(),
            },
            None => pair.to_owned(),
        })
        .collect();
    (format!("{head}{}{fragment}", pairs.join("&")), passwords)
}

/// The redacted form of an option value that is a URL once
/// percent-decoded, if it hides anything; `None` for any other value.
fn redact_nested(value: &str) -> Option<Redacted> {
    let decoded = decode_form(value);
    if !decoded.contains("://") {
        return None;
    }
    let nested = redact(&decoded);
    (!nested.secrets.is_empty()).then_some(nested)
}

/// Whether an option's name names a password: any name ending in
/// `password` (in any case), so that the Redis store's
/// `sentinel_password`, and a name a stray
/// `?` ran into (`/?password` in `file://?/?password=…`), are masked too.
fn is_password_option(name: &str) -> bool {
    name.to_ascii_lowercase().ends_with("password")
}

/// Percent-decoding as a query value is decoded (`+` kept as is).
fn decode_form(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_option_behind_a_stray_question_mark_is_masked() {
        let shown = redact("file://?/?password=Zq7secret&DB_PASSWORD=x9");
        assert_eq!(shown.to_string(), "file://?/?password=***&DB_PASSWORD=***");
        assert_eq!(shown.scrub("saw Zq7secret and x9"), "saw *** and ***");
    }

    #[test]
    fn user_info_and_password_options_are_masked() {
        for (url, shown) in [
            (
                "redlock://u:s3cret@a:1,b:2/?ttl=1s",
                "redlock://***@a:1,b:2/?ttl=1s",
            ),
            (
                "etcd://a:1,b:2?user=root&password=s3cret&ttl=2s",
                "etcd://a:1,b:2?user=root&password=***&ttl=2s",
            ),
            ("zk://h?pass%77ord=p%40w", "zk://h?pass%77ord=***"),
            (
                "redis+sentinel://s/m?sentinel_password=s3cret",
                "redis+sentinel://s/m?sentinel_password=***",
            ),
            ("redis://user:s3cret@host:6379/0", "redis://***@host:6379/0"),
            (
                "etcd://h:2379?passwordless=yes&ttl=3s",
                "etcd://h:2379?passwordless=yes&ttl=3s",
            ),
        ] {
            assert_eq!(redact(url).as_str(), shown, "{url}");
        }
    }

    #[test]
    fn urls_in_option_values_are_masked_too() {
        let url = redact(
            "postgres://h/db?listen_url=postgres%3A%2F%2Fu%3As3cret%40h2%2Fdb%3Fpassword%3Dt%2526wo&ttl=1s",
        );
        let shown = url.to_string();
        assert!(
            !shown.contains("s3cret") && !shown.contains("t%2526wo"),
            "{shown}"
        );
        assert!(shown.ends_with("&ttl=1s"), "{shown}");
        let decoded = decode_form(&shown);
        assert!(
            decoded.contains("listen_url=postgres://***@h2/db?password=***&ttl=1s"),
            "{decoded}"
        );
        assert_eq!(url.scrub("s3cret t&wo t%26wo"), "*** *** ***");
        // Written without percent-encoding, its options are split at `&`
        // but its own `password=` is still found.
        let raw = redact("postgres://u:s3cret@h/db?listen_url=postgres://h2/db?password=two");
        assert_eq!(
            raw.as_str(),
            "postgres://***@h/db?listen_url=postgres%3A%2F%2Fh2%2Fdb%3Fpassword%3D%2A%2A%2A"
        );
        assert_eq!(raw.scrub("s3cret two"), "*** ***");
        // A URL value without credentials is left as written.
        let plain = "postgres://h/db?listen_url=postgres%3A%2F%2Fh2%2Fdb";
        assert_eq!(redact(plain).as_str(), plain);
    }

    #[test]
    fn scrubbing_covers_written_and_decoded_secrets() {
        let url = redact("redis://u:s%40cret@127.0.0.1:1?password=t%26wo");
        assert_eq!(
            url.scrub("auth s@cret, s%40cret, t&wo, t%26wo"),
            "auth ***, ***, ***, ***"
        );
        assert_eq!(
            redact("mem://x").scrub("nothing to hide"),
            "nothing to hide"
        );
        let lone = redact("redis://token@h:1");
        assert_eq!(lone.scrub("bad token"), "bad ***");
    }

    #[test]
    fn display_and_debug_never_show_secrets() {
        let url = redact("redis://u:s3cret@h:1?password=other");
        let text = format!("{url} {url:?}");
        assert!(
            !text.contains("s3cret") && !text.contains("other"),
            "{text}"
        );
    }
}
