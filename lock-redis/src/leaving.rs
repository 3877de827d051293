//! The object a Redis clean-up is counted under in
//! [`Leaving`](lock_core::backend::Leaving): a lock's key or its
//! semaphore's permits key.

use lock_core::backend::HoldKind;

use crate::keys::LockKeys;

/// The Redis key a clean-up of a `kind` hold of `keys` is counted under.
pub(crate) fn object_of(keys: &LockKeys, kind: HoldKind) -> &str {
    match kind {
        HoldKind::Permit { .. } => keys.permits(),
        _ => keys.lock(),
    }
}
