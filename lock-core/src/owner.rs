//! Owner ids: who holds a lock, readable by an operator.

use std::sync::{Arc, OnceLock};

/// Identifies one acquisition of a lock: `hostname/pid/uuid`.
///
/// Every successful acquisition gets a fresh id, so a compare-owner release
/// or renewal can never touch a later acquisition of the same key, even by
/// the same process. The host and pid tell an operator (`distlock status`)
/// where the holder runs.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct OwnerId(Arc<str>);

impl OwnerId {
    /// A new id for this process: `hostname/pid/<128 random bits in hex>`.
    ///
    /// The random part comes from a per-thread generator seeded once from
    /// the OS, not from a syscall per id: ids only need to be unique, and
    /// this path runs on every acquisition.
    pub fn generate() -> Self {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let prefix = host_and_pid();
        let bits = fastrand::u128(..);
        let mut id = String::with_capacity(prefix.len() + 33);
        id.push_str(prefix);
        id.push('/');
        // Written by hand: the formatting machinery costs more than the
        // rest of the id together.
        for nibble in (0..32).rev() {
            id.push(char::from(HEX[((bits >> (nibble * 4)) & 0xf) as usize]));
        }
        Self(Arc::from(id))
    }

    /// Wraps an owner string read back from a store.
    pub fn from_stored(owner: impl Into<Arc<str>>) -> Self {
        Self(owner.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `hostname/pid`, computed once per process. (A tokio application cannot
/// fork without exec and keep using its runtime, so the pid is stable.)
fn host_and_pid() -> &'static str {
    static CACHED: OnceLock<String> = OnceLock::new();
    CACHED.get_or_init(|| format!("{}/{}", hostname(), std::process::id()))
}

/// This machine's host name, read once; `unknown-host` if it cannot be read.
fn hostname() -> &'static str {
    static HOSTNAME: OnceLock<String> = OnceLock::new();
    HOSTNAME.get_or_init(|| {
        let mut buf = [0u8; 256];
        // SAFETY: the buffer is valid for its whole length; gethostname
        // writes at most that many bytes.
        let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
        let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        match std::str::from_utf8(&buf[..len]) {
            Ok(name) if rc == 0 && !name.is_empty() => name.replace('/', "_"),
            _ => "unknown-host".to_owned(),
        }
    })
}

crate::key::shown_as_text!(OwnerId);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_names_host_pid_and_a_unique_id() {
        let a = OwnerId::generate();
        let b = OwnerId::generate();
        assert_ne!(a, b);
        let parts: Vec<_> = a.as_str().split('/').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[1], std::process::id().to_string());
        assert_eq!(parts[2].len(), 32);
        assert!(parts[2]
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }
}
