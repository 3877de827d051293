//! Connecting with or without TLS (`zks://`, cargo feature `tls`).

use lock_core::LockError;
use zookeeper_client::{Client, Connector, Error as ZkError};

use crate::config::ZkConfig;

/// Checks that `config`'s TLS settings can be used: the feature is
/// compiled in and the PEM files are readable and valid.
pub(crate) fn check(config: &ZkConfig) -> Result<(), LockError> {
    match &config.tls {
        None => Ok(()),
        #[cfg(feature = "tls")]
        Some(files) => enabled::options(files).map(drop),
        #[cfg(not(feature = "tls"))]
        Some(_) => Err(LockError::invalid_config(
            "zks:// (TLS) needs the `tls` cargo feature of lock-zookeeper",
        )),
    }
}

/// Opens a session on `hosts` with `connector`, over TLS if `config` asks.
pub(crate) async fn connect(
    connector: Connector,
    config: &ZkConfig,
    hosts: &str,
) -> Result<Client, ZkError> {
    match &config.tls {
        None => connector.connect(hosts).await,
        #[cfg(feature = "tls")]
        Some(files) => {
            let options = enabled::options(files)
                .map_err(|_| ZkError::BadArguments(&"unusable TLS files"))?;
            connector.with_tls(options).secure_connect(hosts).await
        }
        #[cfg(not(feature = "tls"))]
        Some(_) => Err(ZkError::BadArguments(&"TLS is not compiled in")),
    }
}

#[cfg(feature = "tls")]
mod enabled {
    use lock_core::url::TlsFiles;
    use lock_core::LockError;
    use zookeeper_client::TlsOptions;

    /// Client TLS options from the PEM files read with the URL. A CA file
    /// is required (checked with the URL): the client has no built-in
    /// roots, and ZooKeeper servers use private CAs.
    pub(super) fn options(files: &TlsFiles) -> Result<TlsOptions, LockError> {
        // rustls needs one process-wide crypto provider when several are
        // compiled in; ring is the workspace's choice.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let bad = |what: &str, e: zookeeper_client::Error| {
            LockError::invalid_config(format!("TLS option {what}: {e}"))
        };
        let ca = files.required_ca("zks")?;
        let mut options = TlsOptions::new()
            .with_pem_ca(ca.contents.expose())
            .map_err(|e| bad("tls_ca_file", e))?;
        if let Some(identity) = &files.identity {
            options = options
                .with_pem_identity(
                    identity.cert.contents.expose(),
                    identity.key.contents.expose(),
                )
                .map_err(|e| bad("tls_cert_file/tls_key_file", e))?;
        }
        Ok(options)
    }
}
