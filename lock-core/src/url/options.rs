//! Reading options from a lock URL's query string.
//!
//! Every store accepts the common options (`ttl`, `namespace`, `wait`,
//! `connect_timeout`) plus its own. A store takes what it knows with the
//! `take_*` methods; [`StoreUrl::finish`](super::StoreUrl::finish) then rejects anything left
//! over, naming it and listing the options that are understood.

use std::collections::BTreeMap;
use std::time::Duration;

use url::Url;

use crate::error::LockError;
use crate::key::Namespace;
use crate::limits::MIN_TTL;
use crate::options::{LockerOptions, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TTL};

/// The query options of a lock URL, consumed one by one.
#[derive(Debug)]
pub struct UrlOptions {
    scheme: String,
    remaining: BTreeMap<String, String>,
    known: Vec<&'static str>,
}

/// The options every backend understands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommonOptions {
    /// `ttl`: lease length (default 30 s).
    pub ttl: Duration,
    /// `namespace` (default `default`).
    pub namespace: Namespace,
    /// `wait`: default wait of `lock()`; absent or `forever` waits forever.
    pub wait: Option<Duration>,
    /// `connect_timeout` (default 5 s).
    pub connect_timeout: Duration,
}

impl CommonOptions {
    /// The locker settings these options describe.
    pub fn locker_options(&self) -> LockerOptions {
        LockerOptions {
            ttl: self.ttl,
            namespace: self.namespace.clone(),
            wait: self.wait,
        }
    }
}

impl UrlOptions {
    /// Collects the query of `url`; a repeated option is an error.
    pub(crate) fn parse(url: &Url) -> Result<Self, LockError> {
        let mut remaining = BTreeMap::new();
        for (name, value) in url.query_pairs() {
            if remaining
                .insert(name.to_string(), value.to_string())
                .is_some()
            {
                return Err(LockError::invalid_config(format!(
                    "option `{name}` is given twice in the {}:// URL",
                    url.scheme()
                )));
            }
        }
        Ok(Self {
            scheme: url.scheme().to_owned(),
            remaining,
            known: Vec::new(),
        })
    }

    /// Removes and returns option `name`.
    pub fn take(&mut self, name: &'static str) -> Option<String> {
        self.known.push(name);
        self.remaining.remove(name)
    }

    /// Removes option `name`, also accepted under its older spelling
    /// `alias`; giving both is an error.
    pub fn take_with_alias(
        &mut self,
        name: &'static str,
        alias: &'static str,
    ) -> Result<Option<String>, LockError> {
        let value = self.take(name);
        // The alias is accepted, not advertised in the list of known options.
        let old = self.remaining.remove(alias);
        match (value, old) {
            (Some(_), Some(_)) => Err(LockError::invalid_config(format!(
                "options `{name}` and `{alias}` mean the same; give one"
            ))),
            (value, old) => Ok(value.or(old)),
        }
    }

    /// Removes option `name` and parses it as a duration such as `500ms`,
    /// `10s` or `2m`.
    pub fn take_duration(&mut self, name: &'static str) -> Result<Option<Duration>, LockError> {
        self.take(name)
            .map(|value| parse_duration(name, &value))
            .transpose()
    }

    /// Removes option `name` and parses it as a positive duration.
    pub fn take_positive_duration(
        &mut self,
        name: &'static str,
    ) -> Result<Option<Duration>, LockError> {
        match self.take_duration(name)? {
            Some(d) if d.is_zero() => Err(LockError::invalid_config(format!(
                "option `{name}` must be greater than zero"
            ))),
            other => Ok(other),
        }
    }

    /// Removes option `name` and parses `true`/`false` (also `1`/`0`).
    pub fn take_bool(&mut self, name: &'static str) -> Result<Option<bool>, LockError> {
        self.take(name)
            .map(|value| match value.as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                other => Err(LockError::invalid_config(format!(
                    "option `{name}`: expected true or false, got `{other}`"
                ))),
            })
            .transpose()
    }

    /// Removes and validates the options every backend shares.
    pub(crate) fn take_common(&mut self) -> Result<CommonOptions, LockError> {
        let ttl = self.take_positive_duration("ttl")?.unwrap_or(DEFAULT_TTL);
        if ttl < MIN_TTL {
            return Err(LockError::invalid_config(format!(
                "option `ttl` must be at least {}",
                humantime::format_duration(MIN_TTL)
            )));
        }
        let namespace = match self.take("namespace") {
            Some(ns) => Namespace::new(&ns).map_err(|e| {
                LockError::invalid_config(format!("option `namespace`: {}", strip_kind(&e)))
            })?,
            None => Namespace::default(),
        };
        let wait = match self.take("wait") {
            None => None,
            Some(v) if v == "forever" => None,
            Some(v) => Some(parse_duration("wait", &v)?),
        };
        let connect_timeout = self
            .take_positive_duration("connect_timeout")?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        Ok(CommonOptions {
            ttl,
            namespace,
            wait,
            connect_timeout,
        })
    }

    /// Fails if any option was not taken, naming it and listing the
    /// options this URL's store understands.
    pub(crate) fn finish(self) -> Result<(), LockError> {
        let Some(unknown) = self.remaining.keys().next() else {
            return Ok(());
        };
        let mut known = self.known;
        known.sort_unstable();
        known.dedup();
        Err(LockError::invalid_config(format!(
            "unknown option `{unknown}` for {}:// URLs (known: {})",
            self.scheme,
            known.join(", ")
        )))
    }
}

/// Parses a human duration (`250ms`, `3s`, `1m 30s`) for option `name`.
pub fn parse_duration(name: &str, value: &str) -> Result<Duration, LockError> {
    humantime::parse_duration(value).map_err(|_| {
        LockError::invalid_config(format!(
            "option `{name}`: `{value}` is not a duration (examples: 500ms, 10s, 2m)"
        ))
    })
}

fn strip_kind(error: &LockError) -> String {
    match error {
        LockError::InvalidKey { reason } | LockError::InvalidConfig { reason } => reason.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(url: &str) -> UrlOptions {
        UrlOptions::parse(&Url::parse(url).unwrap()).unwrap()
    }

    fn config_error(result: Result<impl std::fmt::Debug, LockError>) -> String {
        match result {
            Err(LockError::InvalidConfig { reason }) => reason,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn common_defaults() {
        let common = options("mem://").take_common().unwrap();
        assert_eq!(common.ttl, DEFAULT_TTL);
        assert_eq!(common.namespace.as_str(), "default");
        assert_eq!(common.wait, None);
        assert_eq!(common.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
    }

    #[test]
    fn common_values_are_read() {
        let mut opts = options("mem://?ttl=2s&namespace=billing&wait=500ms&connect_timeout=1s");
        let common = opts.take_common().unwrap();
        opts.finish().unwrap();
        assert_eq!(common.ttl, Duration::from_secs(2));
        assert_eq!(common.namespace.as_str(), "billing");
        assert_eq!(common.wait, Some(Duration::from_millis(500)));
        assert_eq!(common.connect_timeout, Duration::from_secs(1));
        assert_eq!(
            options("mem://?wait=forever").take_common().unwrap().wait,
            None
        );
    }

    #[test]
    fn bad_values_name_the_option() {
        assert!(config_error(options("mem://?ttl=abc").take_common()).contains("`ttl`"));
        assert!(config_error(options("mem://?ttl=0s").take_common()).contains("greater than zero"));
        assert!(config_error(options("mem://?ttl=1ms").take_common()).contains("at least"));
        assert!(config_error(options("mem://?namespace=a/b").take_common()).contains("namespace"));
        assert!(config_error(options("mem://?wait=soon").take_common()).contains("`wait`"));
    }

    #[test]
    fn unknown_and_repeated_options_are_rejected() {
        let mut opts = options("redis://h/?ttl=1s&colour=blue");
        opts.take_common().unwrap();
        let reason = config_error(opts.finish());
        assert!(
            reason.contains("`colour`") && reason.contains("ttl"),
            "{reason}"
        );
        let repeated = UrlOptions::parse(&Url::parse("mem://?ttl=1s&ttl=2s").unwrap());
        assert!(config_error(repeated).contains("twice"));
    }

    #[test]
    fn booleans() {
        let mut opts = options("mem://?a=true&b=0&c=maybe");
        assert_eq!(opts.take_bool("a").unwrap(), Some(true));
        assert_eq!(opts.take_bool("b").unwrap(), Some(false));
        assert!(opts.take_bool("c").is_err());
    }
}
