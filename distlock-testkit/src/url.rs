//! Small edits of lock URLs as text: host lists (`redlock://a:1,b:2`,
//! `zk://a:1,b:2/app`) are not URLs the `url` crate accepts, so these
//! helpers never parse more than they need.

use std::net::{SocketAddr, ToSocketAddrs};

/// `base` with the options `query` (`a=1&b=2`) appended, whether or not
/// it has a query already.
///
/// ```
/// use distlock_testkit::with_query;
/// assert_eq!(with_query("redis://h:1", "ttl=2s"), "redis://h:1?ttl=2s");
/// assert_eq!(with_query("redis://h:1?a=1", "ttl=2s"), "redis://h:1?a=1&ttl=2s");
/// ```
pub fn with_query(base: &str, query: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}{query}")
}

/// Where the host list of `url` is: the byte range after `scheme://` and
/// any `user:password@`, up to the path or the query.
fn host_span(url: &str) -> std::ops::Range<usize> {
    let start = url.find("://").map_or(0, |at| at + 3);
    let end = url[start..]
        .find(['/', '?'])
        .map_or(url.len(), |at| start + at);
    let start = url[start..end]
        .rfind('@')
        .map_or(start, |at| start + at + 1);
    start..end
}

/// The hosts of `url` as written (`host`, `host:port`, `[v6]:port`), in
/// order.
///
/// ```
/// use distlock_testkit::url_hosts;
/// let hosts = url_hosts("redlock://u:pw@10.0.0.1:7000,[::1]:7001/?ttl=2s");
/// assert_eq!(hosts, ["10.0.0.1:7000", "[::1]:7001"]);
/// ```
pub fn url_hosts(url: &str) -> Vec<&str> {
    url[host_span(url)]
        .split(',')
        .filter(|host| !host.is_empty())
        .collect()
}

/// `url` with its host list replaced by `addrs`; scheme, credentials, path
/// and options are kept. Used to send a locker through fault proxies.
///
/// ```
/// use distlock_testkit::replace_hosts;
/// let proxies = ["127.0.0.1:9001".parse().unwrap(), "127.0.0.1:9002".parse().unwrap()];
/// assert_eq!(
///     replace_hosts("zk://10.0.0.1:2181,10.0.0.2:2181/app?ttl=5s", &proxies),
///     "zk://127.0.0.1:9001,127.0.0.1:9002/app?ttl=5s"
/// );
/// ```
pub fn replace_hosts(url: &str, addrs: &[SocketAddr]) -> String {
    let span = host_span(url);
    let hosts = host_list(addrs.iter().copied());
    format!("{}{hosts}{}", &url[..span.start], &url[span.end..])
}

/// `a:1,b:2,...`: `addrs` joined as the host list of a URL.
pub fn host_list(addrs: impl IntoIterator<Item = SocketAddr>) -> String {
    let hosts: Vec<String> = addrs.into_iter().map(|a| a.to_string()).collect();
    hosts.join(",")
}

/// `host` with `default_port` added when it names none.
pub fn with_default_port(host: &str, default_port: u16) -> String {
    let has_port = match host.rsplit_once(':') {
        // `[v6]` alone ends in `]`; `[v6]:port` and `name:port` end in digits.
        Some((before, port)) => {
            !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!before.contains(':') || before.ends_with(']'))
        }
        None => false,
    };
    if has_port {
        host.to_owned()
    } else {
        format!("{host}:{default_port}")
    }
}

/// The socket addresses of every host of `url` (resolving names; hosts
/// without a port get `default_port`), in order.
pub fn resolve_hosts(url: &str, default_port: u16) -> Result<Vec<SocketAddr>, String> {
    url_hosts(url)
        .into_iter()
        .map(|host| {
            with_default_port(host, default_port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut addrs| addrs.next())
                .ok_or_else(|| format!("cannot resolve {host}"))
        })
        .collect()
}

/// The hosts of `url` as socket addresses if every one is a loopback IP
/// address with a port, which a [`FaultProxy`](crate::FaultProxy) can
/// stand in front of; empty otherwise.
pub fn loopback_hosts(url: &str) -> Vec<SocketAddr> {
    let addrs: Option<Vec<SocketAddr>> = url_hosts(url)
        .into_iter()
        .map(|host| host.parse::<SocketAddr>().ok())
        .map(|addr| addr.filter(|a| a.ip().to_canonical().is_loopback()))
        .collect();
    addrs.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_found_whatever_surrounds_them() {
        let cases: [(&str, &[&str]); 5] = [
            ("redis://127.0.0.1:6379", &["127.0.0.1:6379"]),
            ("redis://h:1/0?ttl=1s", &["h:1"]),
            ("etcds://root:p@ss@a:1,b:2?ca_file=/x", &["a:1", "b:2"]),
            ("zk://a,b/base/path", &["a", "b"]),
            ("mem://", &[]),
        ];
        for (url, hosts) in cases {
            assert_eq!(url_hosts(url), hosts, "{url}");
        }
    }

    #[test]
    fn default_ports_are_added_only_where_missing() {
        assert_eq!(with_default_port("h", 2181), "h:2181");
        assert_eq!(with_default_port("h:1", 2181), "h:1");
        assert_eq!(with_default_port("[::1]", 2181), "[::1]:2181");
        assert_eq!(with_default_port("[::1]:5", 2181), "[::1]:5");
    }

    #[test]
    fn only_loopback_addresses_can_be_proxied() {
        assert_eq!(loopback_hosts("redis://127.0.0.1:1,[::1]:2").len(), 2);
        assert!(loopback_hosts("redis://127.0.0.1:1,10.0.0.1:2").is_empty());
        assert!(loopback_hosts("redis://localhost:1").is_empty());
    }

    #[test]
    fn replacing_hosts_keeps_credentials_path_and_options() {
        let proxy: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert_eq!(
            replace_hosts("redlock://u:p@a:1,b:2/?ttl=1s", &[proxy, proxy]),
            "redlock://u:p@127.0.0.1:9,127.0.0.1:9/?ttl=1s"
        );
    }
}
