//! `distlock status KEY`: who holds a lock.

use std::time::Duration;

use distlock::LockInfo;
use serde::Serialize;

use crate::cli::StatusArgs;
use crate::exit::{Failure, SUCCESS};
use crate::output;
use crate::url::StoreUrl;

/// The JSON shape of `status --json`; absent facts are `null`.
#[derive(Debug, Serialize)]
struct StatusJson<'a> {
    key: &'a str,
    namespace: &'a str,
    held: bool,
    owner: Option<&'a str>,
    token: Option<u64>,
    value: Option<&'a str>,
    ttl_left_ms: Option<u64>,
}

/// Prints whether `KEY` is held and by whom. Exits 0 either way: a held
/// lock is an answer, not an error.
pub(crate) async fn status(store: &StoreUrl, args: StatusArgs) -> Result<i32, Failure> {
    let locker = store.connect().await?;
    let holder = locker
        .inspect(&args.key)
        .await
        .map_err(|error| store.failure(error))?;
    let text = if args.json {
        let json = StatusJson {
            key: &args.key,
            namespace: locker.namespace().as_str(),
            held: holder.is_some(),
            owner: holder.as_ref().map(|h| h.owner.as_str()),
            token: holder.as_ref().map(|h| h.token.get()),
            value: holder.as_ref().map(|h| h.value.as_str()),
            ttl_left_ms: holder
                .as_ref()
                .and_then(|h| h.ttl_left)
                .map(|ttl| u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
        };
        serde_json::to_string(&json).map_err(|e| Failure::other(e.to_string()))?
    } else {
        describe(&args.key, holder.as_ref())
    };
    output::line(&text)?;
    Ok(SUCCESS)
}

/// `KEY: free`, or `KEY: held by OWNER, token T, value "V", ttl left 2.3s`
/// (the value, if not empty, quoted with escapes so that it stays one
/// line).
fn describe(key: &str, holder: Option<&LockInfo>) -> String {
    let Some(holder) = holder else {
        return format!("{key}: free");
    };
    let mut text = format!("{key}: held by {}, token {}", holder.owner, holder.token);
    if !holder.value.is_empty() {
        text.push_str(&format!(", value {:?}", holder.value));
    }
    if let Some(ttl) = holder.ttl_left {
        text.push_str(&format!(", ttl left {}", seconds(ttl)));
    }
    text
}

fn seconds(duration: Duration) -> String {
    format!("{:.1}s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use distlock::FencingToken;

    #[test]
    fn free_and_held_read_as_documented() {
        assert_eq!(describe("jobs/a", None), "jobs/a: free");
        let with_ttl = LockInfo::new(
            "h/1/x",
            FencingToken::new(7),
            Some(Duration::from_millis(2345)),
        );
        assert_eq!(
            describe("jobs/a", Some(&with_ttl)),
            "jobs/a: held by h/1/x, token 7, ttl left 2.3s"
        );
        let without_ttl = LockInfo::new("h/1/x", FencingToken::new(7), None);
        assert_eq!(
            describe("k", Some(&without_ttl)),
            "k: held by h/1/x, token 7"
        );
        let with_value = with_ttl.with_value("10.0.0.7:80");
        assert_eq!(
            describe("k", Some(&with_value)),
            r#"k: held by h/1/x, token 7, value "10.0.0.7:80", ttl left 2.3s"#
        );
    }
}
