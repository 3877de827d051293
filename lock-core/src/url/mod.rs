//! Lock URLs: parsing, option names, credentials, TLS files and the one
//! redaction function.
//!
//! A store reads its URL through [`parse`](crate::open::parse), which every
//! store shares:
//!
//! 1. the text is split (host lists, which the `url` crate rejects,
//!    included) and the scheme checked to be the store's;
//! 2. the common options (`ttl`, `namespace`, `wait`, `connect_timeout`)
//!    are taken into [`CommonOptions`];
//! 3. the store's [`config`](crate::backend::Store::config) reads hosts,
//!    path and its own options from a [`StoreUrl`], with shared readers for
//!    `response_timeout`, credentials (`user`, `password` or user info) and
//!    TLS files (`tls_ca_file`, `tls_cert_file`, `tls_key_file`);
//! 4. an option nobody took is an error naming it and the known ones.
//!
//! Messages never show credentials: they quote the URL through
//! [`redact()`], and passwords are kept in [`Secret`]s, which have no
//! `Display`.

mod credentials;
pub mod known_stores;
mod lock_url;
mod options;
mod redact;
mod store_url;
mod tls;

pub use credentials::{Secret, UrlCredentials};
pub use lock_url::{scheme_of, HostPort};
pub use options::{parse_duration, CommonOptions, UrlOptions};
pub use redact::{redact, Redacted};
pub use store_url::{Parsed, StoreUrl, RESPONSE_TIMEOUT};
pub use tls::{ClientIdentity, PemFile, TlsFiles, TLS_CA_FILE, TLS_CERT_FILE, TLS_KEY_FILE};
